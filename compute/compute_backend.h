// ComputeBackend: where a worker's forward and backward passes run. The
// trainer and the evaluator see only this interface; the CPU kernels
// (compute/cpu_backend.h) and a CUDA GPU (compute/cuda_backend.h) implement
// it, and compute/backend_factory.h picks one for a --device value.
//
// Not thread-safe: one call at a time (the evaluator serialises its calls;
// they may come from different threads). Every pointer argument is host
// memory, borrowed for the call.
#ifndef PSCLUSTER_COMPUTE_COMPUTE_BACKEND_H_
#define PSCLUSTER_COMPUTE_COMPUTE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace pscluster {

// `size` examples: images NHWC floats in [0, 1], labels < num_classes.
struct Batch {
  const float* images = nullptr;
  // size * TargetsPerExample(spec.loss, spec.num_classes) floats: class
  // indices, or the outputs' targets (model/idx_dataset.h Dataset).
  const float* targets = nullptr;
  int size = 0;
  // Names the step for Dropout's masks (with the run's seed,
  // BackendOptions.seed): the trainer passes the chunk's number.
  uint64_t key = 0;
  // Int64 ids (Dataset::ids), size * ids_per_example, or nullptr: for the
  // sparse tables' row window (wire/sparse_batch.h), not the backend.
  const int64_t* ids = nullptr;
};

// Where the time of one TrainStep went, in seconds. A CPU backend reports
// it all as compute.
struct StepTimes {
  double h2d_s = 0;  // weights and (unless prefetched) the batch to the device
  double compute_s = 0;  // forward, loss, backward
  double d2h_s = 0;      // gradients and metrics back to the host
};

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;

  // One training step: params (spec.num_parameters floats, the flat model
  // layout) in; grads = d(mean loss over the batch)/d(params), *loss = that
  // mean loss and *correct = the number of correct arg-max predictions out.
  // InvalidArgument with nothing written when batch.size is not in
  // [1, max_batch] or a label is out of range; a device failure is an error
  // naming the failed call, after which the backend is unusable.
  //
  // `next` (optional, size 0 when unknown) is the batch the following
  // TrainStep will receive: a GPU backend copies it to the device while this
  // step computes, and the following call uses that copy when its `batch`
  // has the same pointers and size, so their contents must not change in
  // between.
  virtual absl::Status TrainStep(const float* params, const Batch& batch,
                                 const Batch& next, float* grads, float* loss,
                                 int* correct) = 0;

  // Forward only: *loss_sum = the sum (not the mean) of the examples'
  // losses, *correct as above. Same argument contract as TrainStep. With
  // `outputs` (host memory, batch.size * spec.num_classes floats): each
  // example's predicted probabilities (softmax or sigmoid) or, for
  // regression, outputs (compute/kernels/loss_head.h), for metrics such as
  // AUC; models on the fused engine (sparse categorical cross-entropy
  // only) do not give them (InvalidArgument).
  virtual absl::Status Evaluate(const float* params, const Batch& batch,
                                double* loss_sum, int* correct,
                                float* outputs = nullptr) = 0;

  // Lets the gradient leave while backprop runs: a backend that produces
  // it layer by layer calls listener(from) during TrainStep whenever
  // [from, num_parameters) of `grads` is final, as CpuNetwork does
  // (compute/cpu_network.h); one that cannot (the GPU's, whose gradient comes
  // back in one copy) ignores it, and the gradient is final when TrainStep
  // returns. Empty: none.
  virtual void SetGradientListener(std::function<void(int64_t)> listener) {}

  // Lets the forward pass start before the step's weights have all
  // arrived: a backend that reads them layer by layer calls wait(to)
  // before a layer first reads its weights, and goes on once [0, to) of
  // `params` is in (CpuNetwork::set_params_wait), and returns true. One that
  // reads them whole (the GPU's one copy) returns false: the caller then
  // waits for all of them before TrainStep.
  virtual bool SetParamsWait(std::function<void(int64_t)> wait) { return false; }

  // Offers host memory the caller will pass batches, weights or gradients
  // in: a backend with a device page-locks [p, p + bytes) and copies to and
  // from it directly, skipping its own staging copy (the GPU's pageable
  // copies are several times slower); others ignore it. The memory must
  // stay allocated while the backend lives. Best effort: where the
  // operating system refuses, the backend stages as before (and logs it).
  virtual void PinHostMemory(void* p, size_t bytes) {}

  // Whether TrainStep computes on a device while the host's cores wait (the
  // GPU): host work can then overlap the step, as gathering the next batch.
  virtual bool computes_on_device() const { return false; }

  // The split of the last successful TrainStep.
  virtual StepTimes last_step_times() const = 0;

  // For logs: "cpu (2 threads)", "cuda:0 (NVIDIA H200, ...)".
  virtual std::string name() const = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_COMPUTE_BACKEND_H_
