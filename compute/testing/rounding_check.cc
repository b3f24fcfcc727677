#include "compute/testing/rounding_check.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace reference {
namespace {

constexpr double kEps32 = 1.0 / (1 << 23);

}  // namespace

// Measured, Nov 2026, as the ratio |got - ref| / (sqrt(n) eps32 M) less the
// half ulp: its largest value over every element of every step the tests
// judge (cnn, mlp, vgg_fashion, long_sum and the graph engine's test models,
// batches 1 to 1024) on the CPU backend, the emulated device and an H100,
// for the tests' seeds and 12 more: 0.0105 (every_layer, batch 1,
// bn_a/moving_mean on the emulated device); with the tests' own seeds 0.0025
// (CPU and emulated) and 0.0019 (H100). Most elements lie far below (1e-8 to
// 1e-4: M propagated in absolute value through several layers is loose), the
// largest ratios are at sums over few layers. C is 1.4x the largest.
const double kRoundingC = 0.015;

StepJudgement JudgeStep(const ModelSpec& spec, const ReferenceStep& ref, const float* grads,
                        double mean_loss, int correct, double c) {
  StepJudgement j;
  auto judge = [&](double got, double want, double scale, double terms, const std::string& where) {
    const double unit = std::sqrt(std::max(terms, 1.0)) * kEps32 * scale;
    // Storing the result as a float alone may cost half an ulp.
    const double diff = std::fabs(got - want) - 0.5 * kEps32 * std::fabs(want);
    const double ratio = std::isnan(diff) ? INFINITY : diff <= kTiny ? 0 : diff / unit;
    if (ratio > j.worst_ratio || (std::isnan(diff) && j.worst_where.empty())) {
      j.worst_ratio = ratio;
      j.worst_where = where;
    }
    if (!(diff <= c * unit + kTiny)) {
      if (++j.failed <= 8) {
        absl::StrAppend(&j.failures, where, ": got ", got, " want ", want, " |diff| ",
                        std::fabs(got - want), " > bound ",
                        c * unit + kTiny + 0.5 * kEps32 * std::fabs(want), " (n ", terms, ", M ",
                        scale, ")\n");
      }
    }
  };
  for (const VariableSpec& v : spec.variables) {
    if (grads == nullptr) break;
    for (int64_t i = 0; i < v.size; ++i) {
      const int64_t at = v.offset + i;
      judge(grads[at], ref.grads[at], ref.grad_scale[at], ref.grad_terms[at],
            absl::StrCat(v.name, "[", i, "]"));
    }
  }
  judge(mean_loss, ref.loss, ref.loss_scale, ref.loss_terms, "loss");
  // An example whose top two logits are within twice the bound may be
  // ranked either way by a float engine.
  int ambiguous = 0;
  for (double gap : ref.top_gap_in_roundings) ambiguous += gap <= 2 * c ? 1 : 0;
  if (std::abs(correct - ref.correct) > ambiguous) {
    ++j.failed;
    absl::StrAppend(&j.failures, "correct ", correct, " want ", ref.correct, " (", ambiguous,
                    " examples ambiguous)\n");
  }
  return j;
}

::testing::AssertionResult WithinRounding(const ModelSpec& spec, const ReferenceStep& ref,
                                          const float* grads, double mean_loss, int correct,
                                          const std::string& what) {
  const StepJudgement j = JudgeStep(spec, ref, grads, mean_loss, correct);
  std::printf("rounding: %s: worst |diff|/(sqrt(n) eps32 M) %.4g at %s\n", what.c_str(),
              j.worst_ratio, j.worst_where.c_str());
  if (j.failed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << j.failed << " out of bounds (C = " << kRoundingC << "; worst ratio "
         << j.worst_ratio << " at " << j.worst_where << "):\n"
         << j.failures;
}

}  // namespace reference
}  // namespace pscluster
