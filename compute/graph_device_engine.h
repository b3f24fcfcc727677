// GraphDeviceEngine: the graph engine on a data-parallel device. It runs
// the models the CPU's graph engine runs (compute/graph_cpu_engine.h:
// strided and "same" convolutions, max, average and global pooling,
// BatchNormalization, Dropout, merges, Embedding...) through
// compute/kernels/graph_kernels.h: the CUDA backend on a GPU, tests on the
// emulated device. The same ops (compute/graph_plan.h), the same results to
// rounding, and the same Dropout masks as the CPU's, since both key them
// alike.
//
// The whole batch runs at once, so BatchNormalization's statistics need no
// combining: in training they are computed straight into the gradient's
// moving_mean / moving_variance slots (the ps averages them in, as from the
// CPU engine; model/model_spec.h VariableRole) and the backward pass reads
// them there. Inference (no gradient wanted) normalises with the moving
// values and skips Dropout. Every activation, index and workspace lives in
// one arena of device memory the owner allocates (arena_bytes()) and binds.
//
// Not thread-safe: one Run at a time (they share the arena). The arena and
// every pointer passed to Run are borrowed.
#ifndef PSCLUSTER_COMPUTE_GRAPH_DEVICE_ENGINE_H_
#define PSCLUSTER_COMPUTE_GRAPH_DEVICE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compute/graph_plan.h"
#include "compute/kernels/embedding.h"
#include "compute/kernels/graph_kernels.h"
#include "model/model_spec.h"

namespace pscluster {

class GraphDeviceEngine {
 public:
  // InvalidArgument naming the layer when PlanGraphOps refuses the spec.
  // `seed`: the run's seed, for Dropout's masks.
  static absl::StatusOr<std::unique_ptr<GraphDeviceEngine>> Create(
      const ModelSpec& spec, int max_batch, uint64_t seed);

  int max_batch() const { return max_batch_; }
  int num_classes() const { return num_classes_; }
  // Bytes Bind() needs, a multiple of 256.
  int64_t arena_bytes() const { return arena_bytes_; }
  // `arena`: arena_bytes() bytes of the device's memory, 256-byte aligned.
  void Bind(void* arena) { arena_ = static_cast<char*>(arena); }

  // Embedding: the host's part of a step. The ids of each Embedding are
  // checked and indexed on the host (kernels::IndexEmbeddingIds), so the
  // device's backward sums each row's gradients in the CPU's order without
  // atomics: the same table gradient bit for bit.
  struct IdIndex {
    std::vector<int32_t> ints;     // each Embedding's EmbeddingIdIndex::ints in turn
    std::vector<int64_t> at;       // where each one's starts in `ints`
    std::vector<int64_t> uniques;  // and its rows
    // IndexIds's scratch, reused from batch to batch: one table's ids, and
    // its index before it joins `ints`.
    std::vector<float> ids;
    kernels::EmbeddingIdIndex one;
  };
  bool has_embeddings() const { return !embeddings_.empty(); }
  // The most ints IndexIds writes (any batch up to max_batch).
  int64_t max_index_ints() const { return max_index_ints_; }
  // Checks and indexes the ids of `batch` examples in `images` (host
  // memory, laid out as Run's): DataLoss naming the layer, the id, its
  // position and example when one is outside [0, input_dim), as the CPU's
  // engine says. Run's `ids_d` is a device copy of index->ints.
  absl::Status IndexIds(const float* images, int batch, IdIndex* index) const;

  // Forward and loss for `batch` (in [1, max_batch]) examples. With `grads`
  // (training): batch statistics and Dropout, then backward: grads =
  // d(mean loss)/d(params) for the trainable variables and the batch
  // statistics for the moving ones, every parameter written. Without:
  // inference. Writes *loss_sum (the sum of the examples' losses) and
  // *correct (right answers, loss_head.h). `targets`: batch *
  // TargetsPerExample floats. Pointers are device memory; `step_key` names the step for
  // Dropout. Precondition: Bind() was called.
  // `outputs` (device memory, batch * num_classes floats, or null): the
  // examples' probabilities or outputs (loss_head.h). `penalty` (device
  // memory, one float, or null): the regularizers' sum at `params`, which
  // Keras adds to the mean loss; written only when has_penalties().
  // A model with Embeddings needs the batch's IdIndex (`ids`, host memory)
  // and its ints on the device (`ids_d`) when training; its ids are
  // checked by IndexIds before any Run.
  void Run(const kernels::GraphKernels& k, const float* params, const float* images,
           const float* targets, int batch, uint64_t step_key, float* grads, double* loss_sum,
           int* correct, float* outputs = nullptr, float* penalty = nullptr,
           const IdIndex* ids = nullptr, const int32_t* ids_d = nullptr) const;

  // Whether the model has regularizers (VariableSpec::l1, l2).
  bool has_penalties() const { return has_penalties_; }

 private:
  static constexpr int64_t kAlign = 256;

  // Byte offsets into the arena; -1 where an op has none.
  struct Slots {
    int64_t act = -1;
    int64_t columns = -1;  // conv: im2col of the input
    int64_t argmax = -1;   // max pooling
    int64_t count = -1;    // global max pooling: ties per channel
    int64_t norms = -1;    // LayerNormalization: rows' means, then 1/std
  };

  GraphDeviceEngine() = default;
  kernels::WindowShape Window(const GraphOp& op, int n) const;
  // Op i's input k: the images or the output of the op it reads.
  const float* Input(size_t i, size_t k, const float* images) const {
    const int j = ops_[i].inputs[k];
    return j == kModelInput ? images : At(slots_[j].act);
  }
  float* GradOf(size_t i) const { return At(grad_slots_[ops_[i].grad_slot]); }
  // Run's parts. Op i forward, then its activation (training: `grads` is
  // not null, and BatchNormalization's statistics go there).
  void ForwardOp(const kernels::GraphKernels& k, size_t i, const float* params,
                 const float* images, int n, uint64_t step_key, float* grads) const;
  // *penalty = the regularizers' sum at `params`.
  void SumPenalties(const kernels::GraphKernels& k, const float* params, float* penalty) const;
  // Every op backward from the loss's gradient, then the regularizers'.
  void Backward(const kernels::GraphKernels& k, const float* params, const float* images, int n,
                uint64_t step_key, float* grads, const IdIndex* ids, const int32_t* ids_d) const;
  void ForwardMerge(const kernels::GraphKernels& k, size_t i, const float* images, int n,
                    float* y) const;
  // The gradient at merge i's input `in` (gx) from gy at its output.
  void BackwardMerge(const kernels::GraphKernels& k, size_t i, size_t in, const float* images,
                     int n, const float* gy, float* gx) const;
  // Op i (not a merge) backward from gy, its gradient slot: its
  // parameters' gradients (added to a shared layer's through the
  // parameter scratch) and, unless dx is null, the gradient at its input.
  void BackwardOp(const kernels::GraphKernels& k, size_t i, const float* params,
                  const float* images, int n, uint64_t step_key, float* gy, float* dx, float* grads,
                  const IdIndex* ids, const int32_t* ids_d) const;
  float* At(int64_t offset) const {
    return reinterpret_cast<float*>(arena_ + offset);
  }

  // Const after Create.
  std::vector<GraphOp> ops_;
  std::vector<Slots> slots_;
  int max_batch_ = 0;
  int num_classes_ = 0;
  LossKind loss_ = LossKind::kSparseCategoricalCrossentropy;
  uint64_t seed_ = 0;
  int64_t workspace_ = 0;  // shared by every op, one at a time
  std::vector<int64_t> grad_slots_;  // GraphOp::grad_slot's buffers
  int64_t scratch_ = 0;        // an input gradient to add to its slot
  int64_t param_scratch_ = 0;  // a shared layer's gradient to add
  bool has_penalties_ = false;
  int64_t penalty_scratch_ = 0;  // one regularizer's loss, to add
  // The Embedding ops in plan order, and each op's place among them (-1).
  std::vector<size_t> embeddings_;
  std::vector<int> embedding_of_;
  int64_t max_index_ints_ = 0;
  int64_t softmax_ = 0;
  int64_t arena_bytes_ = 0;

  char* arena_ = nullptr;  // borrowed, set by Bind
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_GRAPH_DEVICE_ENGINE_H_
