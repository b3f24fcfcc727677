// Judges a float32 training step (a backend's or an engine's) against the
// float64 reference of the same step (compute/testing/float64_reference.h):
// each gradient element and the loss within what float32 summation in any
// order can produce,
//   |got - ref| <= kRoundingC * sqrt(n) * eps32 * M + eps32 / 2 * |ref| + kTiny,
// with M the element's magnitude and n its term count from the reference,
// (the second term: rounding the result to a float), and the correct count
// equal up to examples whose two largest logits lie
// within rounding of each other. Tests only; plain functions.
#ifndef PSCLUSTER_COMPUTE_TESTING_ROUNDING_CHECK_H_
#define PSCLUSTER_COMPUTE_TESTING_ROUNDING_CHECK_H_

#include <string>

#include "compute/testing/float64_reference.h"
#include "gtest/gtest.h"
#include "model/model_spec.h"

namespace pscluster {
namespace reference {

// Measured (compute/testing/rounding_check.cc says how): the largest ratio
// |got - ref| / (sqrt(n) * eps32 * M) seen over the test models and batches,
// CPU and device, with a small margin.
extern const double kRoundingC;
// Below every magnitude that matters; allows a flushed denormal.
inline constexpr double kTiny = 1e-30;

struct StepJudgement {
  double worst_ratio = 0;   // max |got - ref| / (sqrt(n) eps32 M) over everything
  std::string worst_where;  // "conv1/kernel[17]" or "loss"
  std::string failures;     // the first few elements out of bounds, one a line
  int failed = 0;
};

// `mean_loss` is the step's mean loss; `grads` the whole parameter vector
// (gradients, and the batch's statistics in the moving slots), or null to
// judge the loss and the correct count alone (an evaluation of a model
// without BatchNormalization or Dropout).
StepJudgement JudgeStep(const ModelSpec& spec, const ReferenceStep& ref, const float* grads,
                        double mean_loss, int correct, double c = kRoundingC);

// Success when JudgeStep finds nothing out of bounds; prints the worst
// ratio either way (the measurement behind kRoundingC), prefixed by `what`.
::testing::AssertionResult WithinRounding(const ModelSpec& spec, const ReferenceStep& ref,
                                          const float* grads, double mean_loss, int correct,
                                          const std::string& what);

}  // namespace reference
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_TESTING_ROUNDING_CHECK_H_
