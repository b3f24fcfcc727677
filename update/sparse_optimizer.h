// Per-row ("lazy") optimizers for sparse embedding tables: a step updates
// only the rows it touches, values and optimizer state both, as
// TensorFlow's sparse applies do (ResourceSparseApplyAdagradV2,
// ResourceSparseApplyFtrlV2, LazyAdam). The rules are Keras 3's, in
// float32 (docs/sparse_optimizers.md has the formulas and the checks).
//
// A row keeps its optimizer state beside its values, so that a hash-table
// store allocates one block per row:
//   [ values: width | slot 0: width | slot 1: width ]    floats_per_row()
// with slot_names() in order: none for sgd, {"accumulator"} for adagrad,
// {"m", "v"} for adam, {"accumulator", "linear"} for ftrl. No per-row
// counter: adam's bias correction uses the table's update count.
//
// A SparseOptimizer is immutable after Create, so every call is
// thread-safe; Apply writes only the rows it is given, so concurrent
// Applys (async) must be given disjoint rows, which the caller arranges.
// Rows are borrowed for the duration of a call.
#ifndef PSCLUSTER_UPDATE_SPARSE_OPTIMIZER_H_
#define PSCLUSTER_UPDATE_SPARSE_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pscluster {

// Keras's defaults; learning_rate has none (it must be set).
struct SparseOptimizerOptions {
  std::string name;  // "sgd", "adagrad", "adam" or "ftrl"
  float learning_rate = 0.0f;
  float epsilon = 1e-7f;                              // adagrad, adam
  float initial_accumulator_value = 0.1f;             // adagrad, ftrl
  float beta1 = 0.9f;                                 // adam
  float beta2 = 0.999f;                               // adam
  float learning_rate_power = -0.5f;                  // ftrl
  float l1_regularization_strength = 0.0f;            // ftrl
  float l2_regularization_strength = 0.0f;            // ftrl
  float l2_shrinkage_regularization_strength = 0.0f;  // ftrl
  float beta = 0.0f;                                  // ftrl
  // Every rule's rate at update `iterations` is learning_rate *
  // decay_rate^(iterations / decay_steps) (Keras's ExponentialDecay, not
  // staircase); decay_steps 0: constant.
  float decay_rate = 1.0f;
  int64_t decay_steps = 0;
};

class SparseOptimizer {
 public:
  // Validates the options that apply to `options.name`: learning_rate
  // finite and > 0; decay_rate in (0, 1], decay_steps >= 0; epsilon
  // finite and > 0; beta1, beta2 in [0, 1); initial_accumulator_value, the
  // ftrl strengths and beta finite and >= 0; learning_rate_power finite
  // and <= 0; width > 0.
  // InvalidArgument naming the bad value.
  static absl::StatusOr<std::unique_ptr<SparseOptimizer>> Create(
      const SparseOptimizerOptions& options, int width);

  virtual ~SparseOptimizer() = default;
  SparseOptimizer(const SparseOptimizer&) = delete;
  SparseOptimizer& operator=(const SparseOptimizer&) = delete;

  // Floats a row of `width` takes under the optimizer `name` (an unknown
  // name counts as sgd): width * (1 + number of slots).
  static int64_t FloatsPerRow(const std::string& name, int width);
  int64_t floats_per_row() const { return FloatsPerRow(options_.name, width_); }
  int width() const { return width_; }
  const SparseOptimizerOptions& options() const { return options_; }
  const std::vector<std::string>& slot_names() const { return slot_names_; }

  // The rate of the update after `iterations` updates: DecayedLearningRate
  // (update/optimizer.h) of the options.
  float LearningRate(int64_t iterations) const;

  // A new row's state: the slots after its `width` values are set as
  // Keras starts them (accumulator: initial_accumulator_value; m, v,
  // linear: 0). The values are the caller's (its initializer).
  void InitRow(float* row) const;

  // One update of the rows rows[i] (each floats_per_row() floats, laid out
  // as above) with the gradient rows grads[i * width, (i + 1) * width).
  // `iterations` is the table's update count before this step (Keras's
  // optimizer.iterations, as the dense Optimizer counts): every rule's rate
  // is LearningRate(iterations), and adam's bias correction uses t =
  // iterations + 1 for every row it touches, as TensorFlow's LazyAdam does.
  // The rows must be distinct: TensorFlow sums a step's duplicate ids first, which
  // SumDuplicateRows does; a row given twice is updated twice, in order.
  // The caller checks gradients (e.g. for non-finite values) beforehand.
  virtual void Apply(absl::Span<float* const> rows, const float* grads,
                     int64_t iterations) const = 0;

 protected:
  SparseOptimizer(const SparseOptimizerOptions& options, int width);

 private:
  const SparseOptimizerOptions options_;
  const int width_;
  const std::vector<std::string> slot_names_;
};

// TensorFlow's deduplication of a sparse gradient: the distinct ids of
// `ids` in order of first appearance, and for each the sum of its gradient
// rows (grads: ids.size() x width), added in the order given, so that the
// result is the same bits for the same input.
struct DeduplicatedRows {
  std::vector<int64_t> ids;
  std::vector<float> grads;  // ids.size() x width
};
DeduplicatedRows SumDuplicateRows(absl::Span<const int64_t> ids, const float* grads, int width);

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_SPARSE_OPTIMIZER_H_
