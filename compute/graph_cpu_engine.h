// The graph engine on the CPU: runs any model model/model_spec.h describes
// as a graph of ops (compute/graph_plan.h: strided and "same" convolutions,
// max/average/global pooling, BatchNormalization, Dropout, merges, shared
// layers, several inputs...) forward and backward, for the models whose
// layers the fused engine (compute/fused_plan.h, run by CpuNetwork itself)
// does not cover. compute/cpu_network.h picks it; callers see only
// CpuNetwork.
//
// The batch is split into one contiguous slice per thread; each layer runs
// over every slice, then the next layer. BatchNormalization needs the whole
// batch's statistics: its partial sums are combined in thread order (so a
// result depends on the thread count only through float rounding), and
// TrainStep writes each BN layer's batch mean and biased variance into the
// gradient at its moving_mean / moving_variance (the ps averages them in:
// model/model_spec.h VariableRole). Evaluate normalises with the moving
// values and skips Dropout. Dropout masks come from compute/kernels/
// dropout.h keyed by (seed, step key, layer), indexed by position in the
// whole batch: the same for any thread count.
//
// Not thread-safe: one call at a time. Buffers are allocated once.
#ifndef PSCLUSTER_COMPUTE_GRAPH_CPU_ENGINE_H_
#define PSCLUSTER_COMPUTE_GRAPH_CPU_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compute/gradient_layout.h"
#include "compute/kernels/attention.h"
#include "model/model_spec.h"

namespace pscluster {

class GraphCpuEngine {
 public:
  // InvalidArgument naming the layer when the spec does not describe a
  // runnable model (shapes, variables, the last layer's width).
  // `run_on_threads(n, task)` calls task(i) for i in [0, n) and returns
  // when all have returned (CpuNetwork's thread gang).
  static absl::StatusOr<std::unique_ptr<GraphCpuEngine>> Create(
      const ModelSpec& spec, int max_batch, int num_threads, uint64_t seed,
      std::function<void(int, const std::function<void(int)>&)> run_on_threads);
  ~GraphCpuEngine();

  // As CpuNetwork::TrainStep; `step_key` names the step for Dropout's masks.
  // DataLoss naming the layer, the id and input_dim when an
  // Embedding's id is outside [0, input_dim) (then nothing is computed).
  absl::Status TrainStep(const float* params, const float* images, const float* targets,
                         int batch, uint64_t step_key, float* grads, double* loss_sum,
                         int* correct);
  // `outputs`: null, or CpuNetwork::Evaluate's. Errors as TrainStep's.
  absl::Status Evaluate(const float* params, const float* images, const float* targets,
                        int batch, double* loss_sum, int* correct, float* outputs = nullptr);
  // As CpuNetwork::set_gradient_listener.
  void set_gradient_listener(std::function<void(int64_t)> listener) {
    listener_ = std::move(listener);
  }
  // As CpuNetwork::set_params_wait (called on the caller's thread only).
  void set_params_wait(std::function<void(int64_t)> wait) { params_wait_ = std::move(wait); }

 private:
  struct Op;
  struct Slice;
  GraphCpuEngine() = default;
  // Gives the first `threads` slices their contiguous shares of `batch`.
  void SplitBatch(int batch, int threads);
  // Op i's input k in slice `s`: its share of `images` or the output of
  // the op it reads.
  const float* OpInput(int i, const Slice& s, const float* images, size_t k = 0) const;
  // The mask that Embedding op `op` (mask_zero; -1: none) gives in slice
  // `s`: its ids and its padding id.
  kernels::StepMask StepMaskOf(int op, const Slice& s, const float* images) const;
  // Stops at an Embedding's out-of-range id (CheckIds).
  absl::Status Forward(const float* params, const float* images, int batch, bool training,
                       uint64_t step_key, float* grads);
  // After Embedding op i's forward: DataLoss for the first id out of
  // range that a slice found.
  absl::Status CheckIds(int i, const float* images, int threads) const;
  // BatchNormalization op i forward. In training it normalises with the
  // batch's statistics, written into `grads` at the moving statistics' slots
  // unless `grads` is null.
  void ForwardBatchNorm(int i, const float* params, const float* images, int batch, int threads,
                        bool training, float* grads);
  // Any other op i forward, then its activation.
  void ForwardOp(int i, const float* params, const float* images, int threads, bool training,
                 uint64_t step_key);
  // ForwardOp's convolutions and pooling on slice s, from its input x.
  void ForwardWindowed(int i, const float* params, bool training, const float* x, Slice& s);
  // The loss head on every slice; *loss_sum gains batch times the
  // regularizers' sum at `params` (Keras adds them to the mean loss).
  void Loss(const float* params, const float* targets, int batch, bool want_grad,
            double* loss_sum, int* correct, float* outputs = nullptr);
  void Backward(const float* params, const float* images, int batch, uint64_t step_key,
                float* grads);
  // Op i backward on every slice: from its gradient slot (the gradient at
  // its output, which it may overwrite) to the slots of the inputs that
  // want a gradient: written there by the first op to reach an input
  // (`written`, updated), added by the others through the slice's scratch.
  // BatchNormalization keeps its parameters' gradients in the op for
  // FinishOp; the others write theirs into slice t's own (`grads` for
  // t = 0), added to what an op of the same layer wrote when shared.
  void BackwardBatchNorm(int i, const float* params, const float* images, int batch, int threads,
                         std::vector<bool>* written);
  void BackwardOp(int i, const float* params, const float* images, int threads,
                  uint64_t step_key, float* grads, std::vector<bool>* written);
  // BackwardOp of merge i on slice s from gy, its gradient there.
  void BackwardMergeOp(int i, const float* images, Slice& s, const float* gy,
                       const std::vector<bool>& written);
  // Op i's gradient slot in slice s.
  float* GradOf(int i, Slice& s);
  // Where op i writes the gradient at its input k in slice s (null when
  // not wanted): the input's slot, or the scratch when it was written.
  float* InputGradTarget(int i, size_t k, Slice& s, const std::vector<bool>& written);
  // Adds the scratch to input k's slot when InputGradTarget gave the scratch.
  void AddInputGrad(int i, size_t k, Slice& s, const std::vector<bool>& written);
  void MarkInputsWritten(int i, std::vector<bool>* written) const;
  // Op i's backward is done on every slice: sums its parameters' partial
  // gradients into `grads` in slice order (deterministic), writes its
  // whole-batch quantities and its regularizers' gradients, and tells the
  // listener what is final.
  void FinishOp(int i, const float* params, int threads, float* grads);

  ModelSpec spec_;
  int max_batch_ = 0;
  int threads_ = 1;
  uint64_t seed_ = 0;
  std::function<void(int, const std::function<void(int)>&)> run_;
  std::vector<Op> ops_;
  std::vector<std::unique_ptr<Slice>> slices_;
  GradientLayout layout_;  // per op, for the gradient listener
  std::function<void(int64_t)> listener_;
  std::function<void(int64_t)> params_wait_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_GRAPH_CPU_ENGINE_H_
