// Runs a whole model (model/model_spec.h) forward and backward on the CPU
// kernels (compute/kernels/), producing the flat gradient the worker pushes
// to the parameter servers. The CPU's one entry point: it runs the fused
// engine itself (compute/fused_plan.h's layers: fused kernels, micro-batches)
// and hands every other model to the graph engine
// (compute/graph_cpu_engine.h).
//
// Not thread-safe: one caller at a time. A CpuNetwork owns all of its buffers
// (allocated once in Create, reused every step) and, with num_threads > 1,
// num_threads - 1 persistent threads; the caller's thread is the first of
// them. Pointers passed to TrainStep/Evaluate are borrowed for the call.
//
// Create makes OpenBLAS single-threaded for the whole process (the batch is
// split across this class's threads instead); see compute/kernels/blas_env.h
// for the environment a binary should run under.
#ifndef PSCLUSTER_COMPUTE_CPU_NETWORK_H_
#define PSCLUSTER_COMPUTE_CPU_NETWORK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compute/gradient_layout.h"
#include "compute/graph_cpu_engine.h"
#include "model/model_spec.h"

namespace pscluster {

struct CpuNetworkOptions {
  int max_batch = 128;  // largest batch TrainStep/Evaluate accept
  int num_threads = 1;  // threads a step runs on, the caller's included
  uint64_t seed = 0;    // the run's seed: Dropout's masks derive from it
};

class CpuNetwork {
 public:
  // InvalidArgument when the options are out of range or the spec does not
  // describe a runnable model. The fused engine's layers (Conv2D with square
  // kernels, stride 1, "valid"; MaxPooling2D with stride = window; Flatten;
  // Dense; relu or linear) run on fused kernels, in micro-batches while
  // the weights fit in cache and in one pass per thread beyond; any
  // other model runs on the graph engine (compute/graph_cpu_engine.h).
  static absl::StatusOr<std::unique_ptr<CpuNetwork>> Create(
      const ModelSpec& spec, const CpuNetworkOptions& options);

  CpuNetwork(const CpuNetwork&) = delete;
  CpuNetwork& operator=(const CpuNetwork&) = delete;
  ~CpuNetwork();

  // One training step on `batch` examples:
  //   params: spec.num_parameters floats, the flat model layout;
  //   images: batch * H * W * C floats in [0, 1], NHWC;
  //   targets: batch * TargetsPerExample(spec.loss, spec.num_classes)
  //     floats: class indices, or the outputs' targets (model/loss.h).
  // Writes d(mean loss over the batch)/d(params) into `grads`
  // (spec.num_parameters floats), the mean loss into *loss and the number of
  // right answers into *correct (compute/kernels/loss_head.h: arg-max
  // predictions, or binary outputs on the right side of 0.5).
  // InvalidArgument, with nothing written, when batch is not in
  // [1, max_batch] or a target does not fit the loss (model/dataset.h
  // CheckTarget), or naming the layer when an Embedding's id is outside
  // [0, input_dim). Deterministic for a given num_threads.
  // `step_key` names the step for Dropout's masks (the trainer passes the
  // chunk's number): the same step key and seed give the same masks.
  // BatchNormalization layers write their batch mean and biased variance
  // into `grads` at their moving statistics (model/model_spec.h).
  absl::Status TrainStep(const float* params, const float* images,
                         const float* targets, int batch, float* grads,
                         float* loss, int* correct, uint64_t step_key = 0);

  // Forward only: writes the sum (not the mean) of the per-example losses
  // and the number correct, for accumulating over many batches. Same
  // argument contract as TrainStep. `outputs`, when not null: batch *
  // num_classes floats, ComputeBackend::Evaluate's (the graph engine only).
  absl::Status Evaluate(const float* params, const float* images,
                        const float* targets, int batch, double* loss_sum,
                        int* correct, float* outputs = nullptr);

  // Gradients leave while backprop runs (model/gradient_watermark.h):
  // TrainStep calls listener(from) whenever [from, spec.num_parameters)
  // of `grads` has become final, with `from` falling from call to call,
  // from the last layer down, the last call with 0. It runs on one of the
  // step's threads, one call at a time, and must be quick. Empty: none.
  void set_gradient_listener(std::function<void(int64_t)> listener);

  // Weights that arrive while the step runs (model/params_watermark.h):
  // before the forward pass first reads an op's weights, TrainStep calls
  // wait(to), which returns once [0, to) of `params` holds the step's
  // weights; `to` rises from op to op. It is called on every one of the
  // step's threads, so must be thread-safe. Evaluate never calls it.
  // Empty: `params` is whole when TrainStep starts.
  void set_params_wait(std::function<void(int64_t)> wait);

  const ModelSpec& spec() const { return spec_; }
  // Whether the model runs on the graph engine rather than the fused one.
  bool on_graph_engine() const { return graph_ != nullptr; }
  const CpuNetworkOptions& options() const { return options_; }
  // Examples per pass on the fused engine (each thread runs its share of a
  // batch in passes of this many); 0 on the graph engine.
  int micro_batch() const { return micro_batch_; }

 private:
  struct Op;
  struct Progress;
  class SliceRunner;
  class ThreadGang;

  CpuNetwork(const ModelSpec& spec, const CpuNetworkOptions& options,
          std::vector<Op> ops);

  // The ops for `spec`, or InvalidArgument naming the offending layer.
  static absl::StatusOr<std::vector<Op>> Plan(const ModelSpec& spec);

  absl::Status CheckArguments(const void* params, const void* images,
                              const float* targets, int batch,
                              const void* out1, const void* out2) const;

  // Runs the batch split across the replicas: the gradient of the mean loss
  // into `grads` when it is not null, else forward only.
  void Run(const float* params, const float* images, const float* targets,
           int batch, float* grads, double* loss_sum, int* correct);

  // Const after construction.
  const ModelSpec spec_;
  const CpuNetworkOptions options_;
  const std::vector<Op> ops_;  // the layers to run; Flatten is implicit
  std::vector<std::unique_ptr<SliceRunner>> runners_;  // one per thread
  std::unique_ptr<ThreadGang> gang_;
  std::unique_ptr<GraphCpuEngine> graph_;  // set for the graph engine
  std::unique_ptr<Progress> progress_;     // the fused engine's
  GradientLayout layout_;                  // the fused engine's, per op
  std::function<void(int64_t)> listener_;
  std::function<void(int64_t)> params_wait_;
  int micro_batch_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_CPU_NETWORK_H_
