// The losses a model trains on (model/model_spec.h ModelSpec::loss). No
// dependencies: the device kernels (compute/kernels/loss_head.h, compiled
// by nvcc too) include it.
#ifndef PSCLUSTER_MODEL_LOSS_H_
#define PSCLUSTER_MODEL_LOSS_H_

namespace pscluster {

// The loss a model trains on, as Keras computes it (mean over the batch).
// The output layer's softmax (categorical) or sigmoid (binary) is fused
// into the loss, which then reads logits, as Keras's TensorFlow backend
// does; a linear output is read as logits (from_logits). Regression losses
// read the output after its activation. Per example, over K outputs:
//   kSparseCategoricalCrossentropy  one class index t: logsumexp(z) - z_t
//   kCategoricalCrossentropy        K target weights (one-hot or soft):
//                                   -sum_k t_k log softmax(z)_k
//   kBinaryCrossentropy             K targets in [0, 1]: the mean over k of
//                                   max(z,0) - z t + log(1 + e^-|z|)
//   kMeanSquaredError               K targets: the mean of (y - t)^2
//   kMeanAbsoluteError              K targets: the mean of |y - t|
enum class LossKind {
  kSparseCategoricalCrossentropy,
  kCategoricalCrossentropy,
  kBinaryCrossentropy,
  kMeanSquaredError,
  kMeanAbsoluteError,
};

// A model with several outputs (ModelSpec::outputs) trains on the sum of
// each output's loss times its weight (Keras's loss_weights). Its outputs
// are its heads' columns side by side, and so are its targets: each head's
// TargetsPerExample, in the heads' order. A head reads logits as above,
// or, with `probabilities`, binary cross-entropy reads its outputs as
// probabilities, clipped to [1e-7, 1 - 1e-7] as Keras clips them (a
// product of two sigmoids, as ESMM's conversion head).
struct LossGroup {
  LossKind loss = LossKind::kBinaryCrossentropy;
  int first = 0;       // its first column of the model's outputs
  int width = 0;       // its columns
  int targets_at = 0;  // its first target value in an example's targets
  float weight = 1.0f;
  bool probabilities = false;
};

// At most this many outputs (the loss head carries its groups by value,
// to the device too).
inline constexpr int kMaxOutputs = 8;

// The loss a batch trains on: `kind` for a model with one output, else
// `groups` (num_groups >= 1; `kind` then unused). A plain value.
struct LossSpec {
  LossKind kind = LossKind::kSparseCategoricalCrossentropy;
  int num_groups = 0;
  LossGroup groups[kMaxOutputs];
};

// Keras's name of a loss ("sparse_categorical_crossentropy", ...).
const char* LossName(LossKind loss);

// Target values per example: 1 (a class index) for sparse categorical
// cross-entropy, else the outputs' count.
inline int TargetsPerExample(LossKind loss, int outputs) {
  return loss == LossKind::kSparseCategoricalCrossentropy ? 1 : outputs;
}

// Target values per example of a batch trained on `loss` over `outputs`
// columns: the groups' total, or TargetsPerExample(loss.kind, outputs).
inline int TargetsPerExample(const LossSpec& loss, int outputs) {
  if (loss.num_groups == 0) return TargetsPerExample(loss.kind, outputs);
  int n = 0;
  for (int g = 0; g < loss.num_groups; ++g) {
    n += TargetsPerExample(loss.groups[g].loss, loss.groups[g].width);
  }
  return n;
}

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_LOSS_H_
