#include "compute/kernels/maxpool2d.h"

#include <algorithm>
#include <numeric>
#include <ostream>
#include <random>
#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
// Readable test names for the shape parameter.
void PrintTo(const MaxPool2DShape& s, std::ostream* os) {
  *os << "{batch " << s.batch << ", " << s.in_h << "x" << s.in_w << "x"
      << s.channels << ", pool " << s.pool << "}";
}

namespace {

using testing::Dot;
using testing::GradientsNear;
using testing::NumericalGradient;
using testing::RandomFloats;

int64_t InSize(const MaxPool2DShape& s) {
  return int64_t{s.batch} * s.in_h * s.in_w * s.channels;
}

// Distinct values 0.01 apart in random order: no ties, and a perturbation
// below 0.005 never changes a window's winner.
std::vector<float> DistinctValues(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>(i - n / 2);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}

class MaxPool2DTest : public ::testing::TestWithParam<MaxPool2DShape> {};

TEST_P(MaxPool2DTest, ForwardMatchesNaive) {
  const MaxPool2DShape s = GetParam();
  const auto x = DistinctValues(InSize(s), 1);
  std::vector<float> y(s.out_size());
  std::vector<int32_t> argmax(s.out_size());
  MaxPool2DForward<CpuDevice>()(CpuDevice(), s, x.data(), y.data(),
                                argmax.data());
  for (int n = 0; n < s.batch; ++n)
    for (int i = 0; i < s.out_h(); ++i)
      for (int j = 0; j < s.out_w(); ++j)
        for (int c = 0; c < s.channels; ++c) {
          float best = -1e30f;
          int best_at = -1;
          for (int dh = 0; dh < s.pool; ++dh)
            for (int dw = 0; dw < s.pool; ++dw) {
              const float v = x[((n * s.in_h + i * s.pool + dh) * s.in_w +
                                 j * s.pool + dw) *
                                    s.channels +
                                c];
              if (v > best) best = v, best_at = dh * s.pool + dw;
            }
          const int64_t o =
              ((n * s.out_h() + i) * s.out_w() + j) * s.channels + c;
          EXPECT_EQ(y[o], best) << o;
          EXPECT_EQ(argmax[o], best_at) << o;
        }
}

// Max pooling is linear away from ties, which DistinctValues avoids. The
// check covers the dropped edge rows/columns too (gradient 0).
TEST_P(MaxPool2DTest, BackwardMatchesFiniteDifferences) {
  const MaxPool2DShape s = GetParam();
  auto x = DistinctValues(InSize(s), 2);
  const auto r = RandomFloats(s.out_size(), 3);
  std::vector<float> y(s.out_size());
  std::vector<int32_t> argmax(s.out_size());
  auto loss = [&] {
    MaxPool2DForward<CpuDevice>()(CpuDevice(), s, x.data(), y.data(),
                                  argmax.data());
    return Dot(r, y.data());
  };
  loss();
  std::vector<float> dx(x.size(), 99.0f);  // every element must be written
  MaxPool2DBackward<CpuDevice>()(CpuDevice(), s, r.data(), argmax.data(),
                                 dx.data());
  EXPECT_TRUE(
      GradientsNear(dx.data(), NumericalGradient(loss, &x, 1e-3f), 1e-3, 1e-3));
}

// {batch, in_h, in_w, channels, pool}: 11x11 drops an edge; 11 channels is
// one 8-wide vector and a scalar tail.
INSTANTIATE_TEST_SUITE_P(Shapes, MaxPool2DTest,
                         ::testing::Values(MaxPool2DShape{2, 4, 6, 8, 2},
                                           MaxPool2DShape{1, 11, 11, 16, 2},
                                           MaxPool2DShape{2, 5, 7, 11, 2},
                                           MaxPool2DShape{1, 7, 8, 3, 3}));

TEST(MaxPool2DTieTest, FirstMaximumWins) {
  const MaxPool2DShape s{1, 2, 2, 9, 2};  // one window, 9 channels
  std::vector<float> x(4 * 9, 1.0f);      // all equal
  std::vector<float> y(9);
  std::vector<int32_t> argmax(9, -1);
  MaxPool2DForward<CpuDevice>()(CpuDevice(), s, x.data(), y.data(),
                                argmax.data());
  for (int c = 0; c < 9; ++c) EXPECT_EQ(argmax[c], 0) << c;
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
