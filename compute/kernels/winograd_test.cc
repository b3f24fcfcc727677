// WinogradConv3x3 against a float64 convolution written here: "same" and
// "valid" padding, odd output sizes (the last 2x2 tile half outside),
// rounds of tiles that end inside an image, 32 to 64 channels each way,
// with and without a bias; and where it does not apply. On a CPU without
// AVX-512F it applies nowhere, and each shape checks that ConvForward, which
// then takes another path, matches the same float64 convolution (no case
// skips: CI's machines differ in this).
#include "compute/kernels/winograd.h"

#include <cmath>
#include <string>
#include <vector>

#include "compute/kernels/convolution.h"
#include "compute/kernels/small_gemm.h"
#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

WindowShape Conv3x3(int batch, int h, int w, int c, bool same, int filters) {
  WindowShape s;
  s.batch = batch;
  s.in_h = h;
  s.in_w = w;
  s.in_c = c;
  s.window_h = s.window_w = 3;
  KerasWindow(h, 3, 1, same, &s.out_h, &s.pad_top);
  KerasWindow(w, 3, 1, same, &s.out_w, &s.pad_left);
  s.out_c = filters;
  return s;
}

struct Case {
  const char* name;
  WindowShape shape;
  bool bias;
};

class WinogradTest : public ::testing::TestWithParam<Case> {};

TEST_P(WinogradTest, MatchesFloat64) {
  const WindowShape s = GetParam().shape;
  ASSERT_EQ(WinogradApplies(s), SmallGemmAvailable());
  const std::vector<float> x = RandomFloats(int64_t{s.batch} * s.in_h * s.in_w * s.in_c, 31);
  const std::vector<float> w = RandomFloats(9 * int64_t{s.in_c} * s.out_c, 32);
  const std::vector<float> b = RandomFloats(s.out_c, 33);
  const float* bias = GetParam().bias ? b.data() : nullptr;
  std::vector<double> want(s.out_pixels() * s.out_c);
  for (int n = 0; n < s.batch; ++n)
    for (int oh = 0; oh < s.out_h; ++oh)
      for (int ow = 0; ow < s.out_w; ++ow)
        for (int o = 0; o < s.out_c; ++o) {
          double v = bias != nullptr ? b[o] : 0.0;
          for (int kh = 0; kh < 3; ++kh)
            for (int kw = 0; kw < 3; ++kw) {
              const int ih = oh - s.pad_top + kh, iw = ow - s.pad_left + kw;
              if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) continue;
              for (int c = 0; c < s.in_c; ++c) {
                v += double{x[((int64_t{n} * s.in_h + ih) * s.in_w + iw) * s.in_c + c]} *
                     w[((kh * 3 + kw) * int64_t{s.in_c} + c) * s.out_c + o];
              }
            }
          want[((int64_t{n} * s.out_h + oh) * s.out_w + ow) * s.out_c + o] = v;
        }
  std::vector<float> y(s.out_pixels() * s.out_c, NAN);
  std::vector<double> sums(2 * s.out_c, 0.0);
  if (SmallGemmAvailable()) {
    std::vector<float> scratch(WinogradScratchFloats(s), NAN);
    WinogradConv3x3(s, x.data(), w.data(), bias, scratch.data(), y.data(), sums.data());
  } else {
    EXPECT_EQ(WinogradScratchFloats(s), 0);
    std::vector<float> scratch(ConvScratchFloats(s), NAN);
    ConvForward(s, x.data(), w.data(), bias, scratch.data(), y.data(), sums.data());
  }
  // Sums of 9 * in_c products of size ~1 through transforms whose
  // intermediate values grow by at most 4x: float rounding of ~1e-6 each.
  EXPECT_TRUE(GradientsNear(y.data(), want, 1e-4, 1e-5));
  // The per-channel sums of y, every image counted once.
  std::vector<double> sums_ref(2 * s.out_c, 0.0);
  for (int64_t p = 0; p < s.out_pixels(); ++p)
    for (int o = 0; o < s.out_c; ++o) {
      const double v = y[p * s.out_c + o];
      sums_ref[o] += v;
      sums_ref[s.out_c + o] += v * v;
    }
  for (int i = 0; i < 2 * s.out_c; ++i) {
    EXPECT_NEAR(sums[i], sums_ref[i], 1e-9 * (1 + std::abs(sums_ref[i]))) << "sums " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WinogradTest,
    ::testing::Values(
        // 2 x 14 x 14 = 392 tiles: rounds of 128 end inside the images.
        Case{"same_28x28", Conv3x3(2, 28, 28, 32, true, 32), true},
        Case{"same_odd_7x7", Conv3x3(3, 7, 7, 64, true, 64), false},
        Case{"valid_odd_out", Conv3x3(2, 9, 8, 32, false, 32), true},
        Case{"same_rectangular", Conv3x3(1, 5, 6, 32, true, 48), false},
        Case{"valid_even_out", Conv3x3(2, 10, 6, 48, false, 32), true},
        Case{"single_pixel", Conv3x3(2, 1, 1, 32, true, 32), true}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(WinogradAppliesTest, OnlyThreeByThreeStrideOneOverSixteenChannels) {
  // Only with AVX-512F; the rest never.
  EXPECT_EQ(WinogradApplies(Conv3x3(1, 8, 8, 32, true, 32)), SmallGemmAvailable());
  EXPECT_FALSE(WinogradApplies(Conv3x3(1, 8, 8, 16, true, 32)));  // in_c under 32
  EXPECT_FALSE(WinogradApplies(Conv3x3(1, 8, 8, 32, true, 16)));  // out_c under 32
  EXPECT_FALSE(WinogradApplies(Conv3x3(1, 8, 8, 40, true, 32)));  // in_c not by 16
  EXPECT_FALSE(WinogradApplies(Conv3x3(1, 8, 8, 32, true, 40)));  // out_c not by 16
  WindowShape strided = Conv3x3(1, 8, 8, 32, true, 32);
  strided.stride_h = 2;
  EXPECT_FALSE(WinogradApplies(strided));
  WindowShape dilated = Conv3x3(1, 8, 8, 32, true, 32);
  dilated.dilation_w = 2;
  EXPECT_FALSE(WinogradApplies(dilated));
  EXPECT_FALSE(WinogradApplies(Conv3x3(1, 2, 2, 32, false, 32)));  // no output
  EXPECT_EQ(WinogradScratchFloats(Conv3x3(1, 2, 2, 32, false, 32)), 0);
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
