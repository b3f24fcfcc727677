#include "compute/kernels/softmax_xent.h"

#include <cmath>
#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::NumericalGradient;
using testing::RandomFloats;

TEST(SoftmaxCrossEntropyTest, LossAndAccuracyByHand) {
  // Row 0: uniform over 2 classes -> log 2, argmax 0 (first on ties).
  // Row 1: logits (0, log 3) with label 1 -> -log(3/4), correct.
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, std::log(3.0f)};
  const std::vector<float> labels = {0, 1};
  double loss = -1;
  int correct = -1;
  std::vector<float> dlogits(4);
  SoftmaxCrossEntropy<CpuDevice>()(CpuDevice(), 2, 2, logits.data(),
                                   labels.data(), 0.5f, dlogits.data(), &loss,
                                   &correct);
  EXPECT_NEAR(loss, std::log(2.0) - std::log(0.75), 1e-6);
  EXPECT_EQ(correct, 2);
  EXPECT_NEAR(dlogits[0], 0.5 * (0.5 - 1), 1e-6);
  EXPECT_NEAR(dlogits[1], 0.5 * 0.5, 1e-6);
  EXPECT_NEAR(dlogits[2], 0.5 * 0.25, 1e-6);
  EXPECT_NEAR(dlogits[3], 0.5 * (0.75 - 1), 1e-6);
}

TEST(SoftmaxCrossEntropyTest, HugeLogitsDoNotOverflow) {
  const std::vector<float> logits = {1000.0f, -1000.0f, 999.0f};
  const std::vector<float> labels = {2};
  double loss = 0;
  int correct = 0;
  SoftmaxCrossEntropy<CpuDevice>()(CpuDevice(), 1, 3, logits.data(),
                                   labels.data(), 1.0f, nullptr, &loss,
                                   &correct);
  EXPECT_NEAR(loss, std::log1p(std::exp(-1.0)) + 1.0, 1e-6);
  EXPECT_EQ(correct, 0);
}

// dlogits with grad_scale = 1 / batch is the gradient of the mean loss.
TEST(SoftmaxCrossEntropyTest, GradientMatchesFiniteDifferences) {
  const int batch = 4, classes = 10;
  auto logits = RandomFloats(batch * classes, 21, -3.0f, 3.0f);
  const std::vector<float> labels = {3, 0, 9, 3};
  auto mean_loss = [&] {
    double loss = 0;
    int correct = 0;
    SoftmaxCrossEntropy<CpuDevice>()(CpuDevice(), batch, classes, logits.data(),
                                     labels.data(), 1.0f, nullptr, &loss,
                                     &correct);
    return loss / batch;
  };
  std::vector<float> dlogits(batch * classes);
  double loss = 0;
  int correct = 0;
  SoftmaxCrossEntropy<CpuDevice>()(CpuDevice(), batch, classes, logits.data(),
                                   labels.data(), 1.0f / batch, dlogits.data(),
                                   &loss, &correct);
  EXPECT_TRUE(GradientsNear(dlogits.data(),
                            NumericalGradient(mean_loss, &logits, 1e-3f), 1e-4,
                            1e-3));
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
