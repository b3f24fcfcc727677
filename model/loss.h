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

// Keras's name of a loss ("sparse_categorical_crossentropy", ...).
const char* LossName(LossKind loss);

// Target values per example: 1 (a class index) for sparse categorical
// cross-entropy, else the outputs' count.
inline int TargetsPerExample(LossKind loss, int outputs) {
  return loss == LossKind::kSparseCategoricalCrossentropy ? 1 : outputs;
}

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_LOSS_H_
