// regularizer.h's L1/L2 loss and gradient on the CPU, against a float64
// definition and its central differences.
#include "compute/kernels/regularizer.h"

#include <cmath>
#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

TEST(RegularizerTest, LossAndGradientMatchFloat64) {
  std::vector<float> w = RandomFloats(50, 61);
  w[7] = 0.0f;  // sign(0) = 0
  const float l1 = 0.003f, l2 = 0.02f;
  const testing::Reference ref = [&](const testing::Tensors& t) {
    double s = 0;
    for (double v : t[0]) s += double{l1} * std::fabs(v) + double{l2} * v * v;
    return std::vector<double>{s};
  };
  EXPECT_NEAR(RegularizerLoss(w.size(), l1, l2, w.data()), ref(testing::ToDouble({w}))[0], 1e-9);
  std::vector<float> dw(w.size(), 1.0f);  // added to
  RegularizerGrad(w.size(), l1, l2, w.data(), dw.data());
  for (float& v : dw) v -= 1.0f;
  std::vector<double> numeric = testing::ReferenceGradient(ref, testing::ToDouble({w}), 0, {1.0f});
  numeric[7] = 0.0;  // the subgradient TensorFlow takes at 0
  EXPECT_TRUE(GradientsNear(dw.data(), numeric, 1e-7, 1e-6));
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
