// A training step of a model computed in double by plain loops, independent
// of compute/kernels: the oracle the GPU and CPU backends' float32 results
// are judged against (compute/testing/rounding_check.h). Next to every value
// it carries the value's magnitude M and term count n: the same computation
// run on |x|, |w|, |dy| (a product's magnitude is the product of its
// factors' magnitudes, a sum's the sum of theirs), and the number of terms
// summed along the longest chain of sums that led to it. A float32 engine's
// result then lies within about sqrt(n) * eps32 * M of the value whatever
// order it adds in, which judges a gradient that is zero in exact arithmetic
// (a bias below BatchNormalization) and a sum of 700,000 products alike.
//
// Layers: Conv2D and MaxPool2D/AvgPool2D (any stride, "valid" or "same"),
// GlobalAvgPool2D, Flatten, Dense, Activation/fused activations (ReLU, tanh,
// sigmoid; softmax only last, fused with the loss), BatchNormalization in
// training mode (batch mean and biased variance, Keras), Dropout (the
// engines' masks: dropout.h's DropoutKeeps under graph_plan.h's
// DropoutKey, the op index counting every layer but Flatten), and the mean
// softmax cross-entropy. Tests only; not thread-safe across calls on one
// result, plain values otherwise.
#ifndef PSCLUSTER_COMPUTE_TESTING_FLOAT64_REFERENCE_H_
#define PSCLUSTER_COMPUTE_TESTING_FLOAT64_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_spec.h"

namespace pscluster {
namespace reference {

struct ReferenceStep {
  // Per parameter: d(mean loss)/d(param) for trainable variables; the
  // batch's mean and biased variance in BatchNormalization's moving slots
  // (what a worker pushes there). With each its magnitude and term count.
  std::vector<double> grads, grad_scale, grad_terms;
  double loss = 0, loss_scale = 0, loss_terms = 0;  // the mean loss
  int correct = 0;                                  // examples whose largest logit is the label's
  // Per example: the gap between its two largest logits over
  // sqrt(n) * eps32 * (their magnitude): a float engine may rank an example
  // whose gap is within a few of these differently.
  std::vector<double> top_gap_in_roundings;
};

// One training step of `spec` on `batch` examples (images NHWC, labels <
// num_classes) at `params`; Dropout keyed by the run's `seed` and the
// step's `step_key` as the engines key it. InvalidArgument naming the layer
// for a layer this reference does not compute.
absl::StatusOr<ReferenceStep> TrainStep(const ModelSpec& spec, const float* params,
                                        const float* images, const float* labels, int batch,
                                        uint64_t seed = 0, uint64_t step_key = 0);

}  // namespace reference
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_TESTING_FLOAT64_REFERENCE_H_
