#include "compute/kernels/bias_activation.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

// 13 columns: one 8-wide vector and a scalar tail.
constexpr int kRows = 5, kCols = 13;

std::vector<float> Ramp(int n, float start, float step) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + step * i;
  return v;
}

TEST(BiasActivationForwardTest, AddsBiasWithAndWithoutRelu) {
  const std::vector<float> y0 = Ramp(kRows * kCols, -3.0f, 0.1f);
  const std::vector<float> bias = Ramp(kCols, -0.5f, 0.07f);
  for (bool relu : {false, true}) {
    std::vector<float> y = y0;
    BiasActivationForward<CpuDevice>()(CpuDevice(), kRows, kCols, bias.data(),
                                       relu, y.data());
    for (int i = 0; i < kRows * kCols; ++i) {
      const float want = y0[i] + bias[i % kCols];
      EXPECT_FLOAT_EQ(y[i], relu ? std::max(want, 0.0f) : want) << i;
    }
  }
}

TEST(BiasGradTest, SumsRowsAndAccumulates) {
  const std::vector<float> dy = Ramp(kRows * kCols, -1.0f, 0.03f);
  std::vector<float> db(kCols, 100.0f);  // overwritten
  BiasGrad<CpuDevice>()(CpuDevice(), kRows, kCols, dy.data(), false, db.data());
  for (int c = 0; c < kCols; ++c) {
    float want = 0;
    for (int r = 0; r < kRows; ++r) want += dy[r * kCols + c];
    EXPECT_NEAR(db[c], want, 1e-5) << c;
  }
  const std::vector<float> once = db;
  BiasGrad<CpuDevice>()(CpuDevice(), kRows, kCols, dy.data(), true, db.data());
  for (int c = 0; c < kCols; ++c) EXPECT_NEAR(db[c], 2 * once[c], 1e-5) << c;
}

TEST(ReluGradTest, ZeroesWhereOutputIsNotPositive) {
  const int n = 19;                               // vector body and scalar tail
  std::vector<float> y = Ramp(n, -1.0f, 0.125f);  // includes exactly 0
  y[3] = 0.0f;
  std::vector<float> dy = Ramp(n, 1.0f, 1.0f);
  const std::vector<float> dy0 = dy;
  ReluGrad<CpuDevice>()(CpuDevice(), n, y.data(), dy.data());
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(dy[i], y[i] > 0 ? dy0[i] : 0.0f) << i;
  }
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
