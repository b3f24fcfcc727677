// activation.h's parameterised activations (from the input x with alpha, and
// the output-only entry points) on the CPU, against float64 definitions
// written here from Keras's: the forward to float rounding, the gradient
// against central differences of the float64 forward.
#include "compute/kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

double ActivationRef(ActivationFn f, double alpha, double x) {
  switch (f) {
    case ActivationFn::kRelu:
      return x > 0 ? x : 0;
    case ActivationFn::kSigmoid:
      return 1 / (1 + std::exp(-x));
    case ActivationFn::kTanh:
      return std::tanh(x);
    case ActivationFn::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case ActivationFn::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case ActivationFn::kSwish:
      return x / (1 + std::exp(-x));
    case ActivationFn::kElu:
      return x > 0 ? x : alpha * (std::exp(x) - 1);
    case ActivationFn::kLeakyRelu:
      return x > 0 ? x : alpha * x;
    case ActivationFn::kHardSigmoid:
      return std::min(1.0, std::max(0.0, alpha * x + 0.5));
  }
  return 0;
}

struct ActivationCase {
  ActivationFn f;
  float alpha;
};

TEST(ActivationTest, ForwardAndGradientMatchFloat64Definitions) {
  const ActivationCase cases[] = {
      {ActivationFn::kGelu, 0.0f},        {ActivationFn::kGeluTanh, 0.0f},
      {ActivationFn::kSwish, 0.0f},       {ActivationFn::kElu, 1.0f},
      {ActivationFn::kElu, 0.3f},         {ActivationFn::kLeakyRelu, 0.3f},
      {ActivationFn::kLeakyRelu, 0.2f},   {ActivationFn::kHardSigmoid, 1.0f / 6.0f},
      {ActivationFn::kHardSigmoid, 0.2f}, {ActivationFn::kRelu, 0.0f},
      {ActivationFn::kSigmoid, 0.0f},     {ActivationFn::kTanh, 0.0f},
  };
  std::vector<float> x = RandomFloats(400, 7, -6.0f, 6.0f);
  // Keep central differences off the kinks (0 and hard_sigmoid's ends).
  for (float& v : x) {
    if (std::fabs(v) < 1e-3f) v += 0.01f;
    if (std::fabs(std::fabs(v) - 2.5f) < 1e-3f || std::fabs(std::fabs(v) - 3.0f) < 1e-3f) {
      v += 0.01f;
    }
  }
  const std::vector<float> dy = RandomFloats(x.size(), 8);
  for (const ActivationCase& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.f));
    SCOPED_TRACE(c.alpha);
    const testing::Reference ref = [&](const testing::Tensors& in) {
      std::vector<double> y(in[0].size());
      for (size_t i = 0; i < y.size(); ++i) y[i] = ActivationRef(c.f, c.alpha, in[0][i]);
      return y;
    };
    std::vector<float> y(x.size()), dx(x.size());
    ActivationForwardX(x.size(), c.f, c.alpha, x.data(), y.data());
    EXPECT_TRUE(testing::OutputNear(y, ref({std::vector<double>(x.begin(), x.end())}), 1e-6, 1e-6));
    ActivationGradXY(x.size(), c.f, c.alpha, x.data(), y.data(), dy.data(), dx.data());
    EXPECT_TRUE(GradientsNear(
        dx.data(), testing::ReferenceGradient(ref, testing::ToDouble({x}), 0, dy), 2e-6, 2e-6));
    if (ActivationGradFromOutput(c.f)) {
      // The output-only entry points agree with the new ones.
      std::vector<float> y_old = x, dx_old = dy;
      ActivationForward<CpuDevice>()(CpuDevice{}, x.size(), c.f, y_old.data());
      ActivationGrad<CpuDevice>()(CpuDevice{}, x.size(), c.f, y_old.data(), dx_old.data());
      EXPECT_EQ(y_old, y);
      EXPECT_TRUE(GradientsNear(dx_old.data(), std::vector<double>(dx.begin(), dx.end()), 0, 0));
    }
  }
}

// Keras 3's hard_sigmoid is relu6(x + 3) / 6; Keras 2's and tfjs's clip(0.2 x
// + 0.5, 0, 1): the same kernel with alpha 1/6 and 0.2.
TEST(ActivationTest, HardSigmoidSlopes) {
  const std::vector<float> x = {-4.0f, -2.6f, -1.0f, 0.0f, 2.0f, 2.6f, 3.5f};
  std::vector<float> y3(x.size()), y2(x.size());
  ActivationForwardX(x.size(), ActivationFn::kHardSigmoid, 1.0f / 6.0f, x.data(), y3.data());
  ActivationForwardX(x.size(), ActivationFn::kHardSigmoid, 0.2f, x.data(), y2.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(y3[i], std::min(6.0f, std::max(0.0f, x[i] + 3.0f)) / 6.0f, 1e-7f) << x[i];
    EXPECT_NEAR(y2[i], std::min(1.0f, std::max(0.0f, 0.2f * x[i] + 0.5f)), 1e-7f) << x[i];
  }
}

// The output-only entry points refuse the functions whose gradient they
// cannot compute: NaN, not a silently wrong number.
TEST(ActivationTest, OutputOnlyEntryPointsWriteNaNForTheNewFunctions) {
  std::vector<float> y = {0.5f, -0.5f}, dy = {1.0f, 1.0f};
  ActivationForward<CpuDevice>()(CpuDevice{}, 2, ActivationFn::kGelu, y.data());
  ActivationGrad<CpuDevice>()(CpuDevice{}, 2, ActivationFn::kSwish, y.data(), dy.data());
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(dy[1]));
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
