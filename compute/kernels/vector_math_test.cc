#include "compute/kernels/vector_math.h"

#include <cmath>
#include <limits>
#include <vector>

#include "compute/kernels/activation_math.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

// Every 0.000731 from -100 to 100 and every 1e-7 from -1e-3 to 1e-3.
std::vector<float> Sweep() {
  std::vector<float> x;
  for (int i = -136800; i <= 136800; ++i) x.push_back(i * 0.000731f);
  for (int i = -10000; i <= 10000; ++i) x.push_back(i * 1e-7f);
  return x;
}

// Against double precision: within libm's float error (measured: libm's
// expf 6.0e-8 relative, 1 / (1 + expf) 8.8e-8 absolute, tanhf 1.0e-7
// absolute and 1.5e-7 relative; these functions 8.0e-8, 8.8e-8, 7.0e-8 and
// 1.2e-7). A bound twice as tight fails.
TEST(VectorMathTest, WithinFloatRoundingOfDoublePrecision) {
  const std::vector<float> x = Sweep();
  std::vector<float> e(x.size()), s(x.size()), t(x.size());
  ExpArray(x.data(), e.data(), static_cast<int64_t>(x.size()));
  SigmoidArray(x.data(), s.data(), static_cast<int64_t>(x.size()));
  TanhArray(x.data(), t.data(), static_cast<int64_t>(x.size()));
  double exp_rel = 0, sig_abs = 0, tanh_abs = 0, tanh_rel = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    if (v > -87 && v < 88) exp_rel = std::max(exp_rel, std::fabs(e[i] - std::exp(v)) / std::exp(v));
    sig_abs = std::max(sig_abs, std::fabs(s[i] - 1 / (1 + std::exp(-v))));
    const double th = std::tanh(v);
    tanh_abs = std::max(tanh_abs, std::fabs(t[i] - th));
    if (th != 0) tanh_rel = std::max(tanh_rel, std::fabs(t[i] - th) / std::fabs(th));
  }
  EXPECT_LT(exp_rel, 1.2e-7);
  EXPECT_LT(sig_abs, 1.2e-7);
  EXPECT_LT(tanh_abs, 1.2e-7);
  EXPECT_LT(tanh_rel, 1.8e-7);
}

TEST(VectorMathTest, NaNStaysNaNAndInfinitiesSaturate) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {std::nanf(""), inf, -inf, 1e30f, -1e30f};
  std::vector<float> s(x.size()), t(x.size()), e(x.size());
  SigmoidArray(x.data(), s.data(), 5);
  TanhArray(x.data(), t.data(), 5);
  ExpArray(x.data(), e.data(), 5);
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_TRUE(std::isnan(t[0]));
  EXPECT_TRUE(std::isnan(e[0]));
  EXPECT_EQ(s[1], 1.0f);
  EXPECT_LT(s[2], 1e-37f);
  EXPECT_EQ(t[1], 1.0f);
  EXPECT_EQ(t[2], -1.0f);
  EXPECT_EQ(t[3], 1.0f);
  EXPECT_EQ(t[4], -1.0f);
  EXPECT_GT(e[3], 1e38f);
  EXPECT_LT(e[4], 2e-38f);
}

// The other activations are ActivationValue's, bit for bit; in place too.
TEST(VectorMathTest, OtherActivationsAreActivationValues) {
  std::vector<float> x = {-2.5f, -0.1f, 0.0f, 0.3f, 4.0f};
  for (ActivationFn f : {ActivationFn::kRelu, ActivationFn::kHardSigmoid, ActivationFn::kElu}) {
    std::vector<float> y = x;
    ActivationArray(f, 0.2f, y.data(), y.data(), static_cast<int64_t>(y.size()));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], ActivationValue(f, 0.2f, x[i]));
  }
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
