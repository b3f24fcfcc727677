// general_layers.h's convolution (im2col, GEMM and col2im in tiles, the
// pointwise case without them) and batch_norm.h's CPU passes, against
// float64 definitions written here: every output and gradient to float
// rounding, on shapes that cross the kernels' tiles mid-row, with strides,
// dilation, "same" and "valid" padding and 1x1 windows.
#include "compute/kernels/general_layers.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/kernels/activation.h"
#include "compute/kernels/batch_norm.h"
#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

WindowShape Conv(int batch, int h, int w, int c, int kh, int kw, int stride, int dilation,
                 bool same, int filters) {
  WindowShape s;
  s.batch = batch;
  s.in_h = h;
  s.in_w = w;
  s.in_c = c;
  s.window_h = kh;
  s.window_w = kw;
  s.stride_h = s.stride_w = stride;
  s.dilation_h = s.dilation_w = dilation;
  KerasDilatedWindow(h, kh, stride, dilation, same, &s.out_h, &s.pad_top);
  KerasDilatedWindow(w, kw, stride, dilation, same, &s.out_w, &s.pad_left);
  s.out_c = filters;
  return s;
}

// Calls f(output pixel, input offset, window cell) for every cell of every
// output pixel that falls inside the input.
template <typename F>
void ForEachTap(const WindowShape& s, F f) {
  for (int n = 0; n < s.batch; ++n)
    for (int oh = 0; oh < s.out_h; ++oh)
      for (int ow = 0; ow < s.out_w; ++ow)
        for (int kh = 0; kh < s.window_h; ++kh)
          for (int kw = 0; kw < s.window_w; ++kw) {
            const int ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
            const int iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
            if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) continue;
            const int64_t p = (int64_t{n} * s.out_h + oh) * s.out_w + ow;
            const int64_t in = ((int64_t{n} * s.in_h + ih) * s.in_w + iw) * s.in_c;
            f(p, in, kh * s.window_w + kw);
          }
}

// Conv with the dilation along rows only (the implicit convolution reads
// window rows dilation_h rows apart).
WindowShape RowDilated(int batch, int h, int w, int c, int k, int dilation_h, int filters) {
  WindowShape s = Conv(batch, h, w, c, k, k, 1, 1, true, filters);
  s.dilation_h = dilation_h;
  KerasDilatedWindow(h, k, 1, dilation_h, true, &s.out_h, &s.pad_top);
  return s;
}

struct ConvCase {
  const char* name;
  WindowShape shape;
};

class ConvGeneralTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvGeneralTest, ForwardAndBackwardMatchFloat64) {
  const WindowShape s = GetParam().shape;
  const int64_t in_size = int64_t{s.batch} * s.in_h * s.in_w * s.in_c;
  const int64_t m = s.out_pixels();
  const int64_t k = s.patch_size();
  const std::vector<float> x = RandomFloats(in_size, 1);
  const std::vector<float> w = RandomFloats(k * s.out_c, 2);
  const std::vector<float> b = RandomFloats(s.out_c, 3);
  const std::vector<float> dy = RandomFloats(m * s.out_c, 4);

  // float64 definitions: y = conv(x, w) + b; dw, db, dx its adjoints.
  std::vector<double> y_ref(m * s.out_c), dw_ref(k * s.out_c, 0.0), db_ref(s.out_c, 0.0),
      dx_ref(in_size, 0.0);
  for (int64_t p = 0; p < m; ++p)
    for (int o = 0; o < s.out_c; ++o) {
      y_ref[p * s.out_c + o] = b[o];
      db_ref[o] += dy[p * s.out_c + o];
    }
  ForEachTap(s, [&](int64_t p, int64_t in, int cell) {
    for (int ci = 0; ci < s.in_c; ++ci)
      for (int o = 0; o < s.out_c; ++o) {
        const int64_t wi = (int64_t{cell} * s.in_c + ci) * s.out_c + o;
        y_ref[p * s.out_c + o] += double{x[in + ci]} * w[wi];
        dw_ref[wi] += double{x[in + ci]} * dy[p * s.out_c + o];
        dx_ref[in + ci] += double{w[wi]} * dy[p * s.out_c + o];
      }
  });

  std::vector<float> columns(m * k, NAN), y(m * s.out_c, NAN);
  ConvGeneralForward(s, x.data(), w.data(), b.data(), columns.data(), y.data());
  // Float sums of up to 576 terms of size ~1, in the kernels' order.
  EXPECT_TRUE(GradientsNear(y.data(), y_ref, 1e-4, 1e-5)) << "y";

  std::vector<float> dw(k * s.out_c, NAN), db(s.out_c, NAN), dcolumns(m * k, NAN),
      dx(in_size, NAN);
  ConvGeneralBackward(s, columns.data(), w.data(), dy.data(), false, dw.data(), db.data(),
                      dcolumns.data(), dx.data());
  EXPECT_TRUE(GradientsNear(dw.data(), dw_ref, 1e-4, 1e-5)) << "dw";
  EXPECT_TRUE(GradientsNear(db.data(), db_ref, 1e-4, 1e-5)) << "db";
  EXPECT_TRUE(GradientsNear(dx.data(), dx_ref, 1e-4, 1e-5)) << "dx";

  // accumulate adds to dw and db; dx may be null.
  ConvGeneralBackward(s, columns.data(), w.data(), dy.data(), true, dw.data(), db.data(),
                      dcolumns.data(), nullptr);
  for (double& v : dw_ref) v *= 2;
  for (double& v : db_ref) v *= 2;
  EXPECT_TRUE(GradientsNear(dw.data(), dw_ref, 2e-4, 1e-5)) << "dw accumulated";
  EXPECT_TRUE(GradientsNear(db.data(), db_ref, 2e-4, 1e-5)) << "db accumulated";

  // The private-columns pair, its scratch poisoned, against float64 (it
  // reads the input in place or by Winograd's transforms, and dx may take
  // the flipped-window path where ConvGeneralBackward's dcolumns did not
  // hold a tile of it).
  std::vector<float> scratch(ConvScratchFloats(s), NAN), y2(m * s.out_c, NAN);
  // With the sums a BatchNormalization reads, added to what is there.
  std::vector<double> sums(2 * s.out_c, 1.0), sums_ref(2 * s.out_c, 1.0);
  ConvForward(s, x.data(), w.data(), b.data(), scratch.data(), y2.data(), sums.data());
  EXPECT_TRUE(GradientsNear(y2.data(), y_ref, 1e-4, 1e-5)) << "y, private columns";
  for (int64_t p = 0; p < m; ++p)
    for (int o = 0; o < s.out_c; ++o) {
      sums_ref[o] += y2[p * s.out_c + o];
      sums_ref[s.out_c + o] += double{y2[p * s.out_c + o]} * y2[p * s.out_c + o];
    }
  for (int i = 0; i < 2 * s.out_c; ++i) {
    EXPECT_NEAR(sums[i], sums_ref[i], 1e-9 * (1 + std::abs(sums_ref[i]))) << "sums " << i;
  }
  std::vector<float> dw2(k * s.out_c, NAN), db2(s.out_c, NAN), dx2(in_size, NAN);
  std::fill(scratch.begin(), scratch.end(), NAN);
  ConvBackward(s, x.data(), w.data(), dy.data(), false, dw2.data(), db2.data(), scratch.data(),
               dx2.data());
  for (double& v : dw_ref) v /= 2;
  for (double& v : db_ref) v /= 2;
  EXPECT_TRUE(GradientsNear(dw2.data(), dw_ref, 1e-4, 1e-5)) << "dw, private columns";
  EXPECT_TRUE(GradientsNear(db2.data(), db_ref, 1e-4, 1e-5)) << "db, private columns";
  EXPECT_TRUE(GradientsNear(dx2.data(), dx_ref, 1e-4, 1e-5)) << "dx, private columns";
  ConvBackward(s, x.data(), w.data(), dy.data(), true, dw2.data(), db2.data(), scratch.data(),
               nullptr);
  for (double& v : dw_ref) v *= 2;
  for (double& v : db_ref) v *= 2;
  EXPECT_TRUE(GradientsNear(dw2.data(), dw_ref, 2e-4, 1e-5)) << "dw accumulated, private";
  EXPECT_TRUE(GradientsNear(db2.data(), db_ref, 2e-4, 1e-5)) << "db accumulated, private";
}

// 64 channels in a 3x3 window make 576-float rows, so the 512 KiB tiles
// hold 227 rows: 2 x 16 x 16 output pixels cross tiles inside image rows.
INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvGeneralTest,
    ::testing::Values(ConvCase{"same3x3_tiles", Conv(2, 16, 16, 64, 3, 3, 1, 1, true, 16)},
                      ConvCase{"same3x3_small", Conv(3, 7, 5, 3, 3, 3, 1, 1, true, 4)},
                      ConvCase{"valid3x3", Conv(2, 9, 8, 5, 3, 3, 1, 1, false, 6)},
                      ConvCase{"strided_same", Conv(2, 17, 16, 64, 3, 3, 2, 1, true, 32)},
                      ConvCase{"strided_valid", Conv(2, 9, 10, 4, 3, 2, 2, 1, false, 3)},
                      ConvCase{"dilated_same", Conv(2, 12, 11, 64, 3, 3, 1, 2, true, 8)},
                      ConvCase{"dilated_valid", Conv(1, 10, 9, 3, 2, 3, 1, 3, false, 5)},
                      ConvCase{"pointwise", Conv(3, 30, 30, 8, 1, 1, 1, 1, true, 16)},
                      ConvCase{"pointwise_strided", Conv(2, 14, 13, 16, 1, 1, 2, 1, false, 32)},
                      ConvCase{"wide5x5", Conv(2, 6, 7, 2, 5, 5, 1, 1, true, 3)},
                      // Stride 1 with in_c a multiple of 16: dx as the
                      // convolution of dy with the flipped window.
                      ConvCase{"flipped_same", Conv(3, 9, 7, 16, 3, 3, 1, 1, true, 16)},
                      ConvCase{"flipped_valid_wider", Conv(2, 8, 9, 16, 3, 3, 1, 1, false, 48)},
                      ConvCase{"flipped_even_window", Conv(2, 7, 8, 32, 2, 4, 1, 1, true, 16)},
                      ConvCase{"flipped_dilated_valid", Conv(2, 11, 10, 16, 3, 2, 1, 2, false, 8)},
                      ConvCase{"flipped_narrow_out", Conv(2, 12, 12, 32, 3, 3, 1, 1, true, 4)},
                      ConvCase{"row_dilated", RowDilated(2, 11, 9, 16, 3, 2, 32)},
                      // The ResNet's stage-2 entry: stride 2, "same" padding
                      // only at the bottom and right.
                      ConvCase{"strided_even", Conv(2, 14, 14, 16, 3, 3, 2, 1, true, 32)},
                      // Windows that cross both borders of a row, or hold
                      // a single input pixel.
                      ConvCase{"window_wider_than_input", Conv(2, 3, 2, 16, 5, 5, 1, 1, true, 32)},
                      ConvCase{"one_pixel_same", Conv(2, 1, 1, 16, 3, 3, 1, 1, true, 16)},
                      // A valid window larger than the input: no output
                      // pixels, dw and db zero, dx zero.
                      ConvCase{"no_output", Conv(2, 2, 2, 16, 3, 3, 1, 1, false, 16)}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return std::string(info.param.name); });

TEST(Im2ColGeneralTest, Col2ImIsItsAdjoint) {
  // <im2col(x), c> == <x, col2im(c)> in double, for a padded, strided,
  // dilated shape.
  const WindowShape s = Conv(2, 9, 8, 5, 3, 3, 2, 2, true, 1);
  const int64_t in_size = int64_t{s.batch} * s.in_h * s.in_w * s.in_c;
  const int64_t cols = s.out_pixels() * s.patch_size();
  const std::vector<float> x = RandomFloats(in_size, 5);
  const std::vector<float> c = RandomFloats(cols, 6);
  std::vector<float> columns(cols), dx(in_size, 0.0f);
  Im2ColGeneral(s, x.data(), columns.data());
  Col2ImGeneral(s, c.data(), dx.data());
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < cols; ++i) lhs += double{columns[i]} * c[i];
  for (int64_t i = 0; i < in_size; ++i) rhs += double{x[i]} * dx[i];
  EXPECT_NEAR(lhs, rhs, 1e-4 * std::abs(lhs) + 1e-4);
}

TEST(Im2ColGeneralTest, NoOutputPixelsIsNothingToDo) {
  const WindowShape s = Conv(2, 2, 2, 4, 3, 3, 1, 1, false, 1);
  ASSERT_EQ(s.out_pixels(), 0);
  std::vector<float> x(2 * 2 * 2 * 4, 1.0f), dx(x.size(), 5.0f);
  Im2ColGeneral(s, x.data(), nullptr);
  Col2ImGeneral(s, nullptr, dx.data());
  for (float v : dx) EXPECT_EQ(v, 5.0f);
}

TEST(BatchNormCpuTest, PassesMatchFloat64) {
  const CpuDevice d;
  const BatchNormShape s{1000, 19};
  const float eps = 1e-3f;
  const std::vector<float> x = RandomFloats(s.rows * s.channels, 7, -2.0f, 3.0f);
  const std::vector<float> dy = RandomFloats(s.rows * s.channels, 8);
  const std::vector<float> gamma = RandomFloats(s.channels, 9, 0.5f, 1.5f);
  const std::vector<float> beta = RandomFloats(s.channels, 10);

  std::vector<double> sum(s.channels, 0.0), sum_sq(s.channels, 0.0);
  BatchNormSums<CpuDevice>()(d, s, x.data(), sum.data(), sum_sq.data());
  std::vector<float> mean(s.channels), var(s.channels);
  std::vector<double> mean_ref(s.channels, 0.0), var_ref(s.channels, 0.0);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int c = 0; c < s.channels; ++c) mean_ref[c] += x[r * s.channels + c] / double(s.rows);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int c = 0; c < s.channels; ++c) {
      const double dev = x[r * s.channels + c] - mean_ref[c];
      var_ref[c] += dev * dev / double(s.rows);
    }
  for (int c = 0; c < s.channels; ++c) {
    mean[c] = static_cast<float>(sum[c] / s.rows);
    var[c] = static_cast<float>(sum_sq[c] / s.rows - double{mean[c]} * mean[c]);
    EXPECT_NEAR(mean[c], mean_ref[c], 1e-6);
    EXPECT_NEAR(var[c], var_ref[c], 1e-5);
  }

  std::vector<double> y_ref(x.size()), sdy(s.channels, 0.0), sdyx(s.channels, 0.0);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int c = 0; c < s.channels; ++c) {
      const int64_t i = r * s.channels + c;
      const double xhat = (x[i] - double{mean[c]}) / std::sqrt(double{var[c]} + eps);
      y_ref[i] = gamma[c] * xhat + beta[c];
      sdy[c] += dy[i];
      sdyx[c] += dy[i] * xhat;
    }
  std::vector<float> y(x.size(), NAN);
  BatchNormForward<CpuDevice>()(d, s, x.data(), mean.data(), var.data(), gamma.data(),
                                beta.data(), eps, y.data());
  EXPECT_TRUE(GradientsNear(y.data(), y_ref, 1e-5, 1e-5)) << "y";

  std::vector<double> sum_dy(s.channels, 0.0), sum_dy_xhat(s.channels, 0.0);
  BatchNormGradSums<CpuDevice>()(d, s, x.data(), dy.data(), mean.data(), var.data(), eps,
                                 sum_dy.data(), sum_dy_xhat.data());
  for (int c = 0; c < s.channels; ++c) {
    EXPECT_NEAR(sum_dy[c], sdy[c], 1e-4);
    EXPECT_NEAR(sum_dy_xhat[c], sdyx[c], 1e-4);
  }

  std::vector<double> dx_ref(x.size());
  for (int64_t r = 0; r < s.rows; ++r)
    for (int c = 0; c < s.channels; ++c) {
      const int64_t i = r * s.channels + c;
      const double inv = 1.0 / std::sqrt(double{var[c]} + eps);
      const double xhat = (x[i] - double{mean[c]}) * inv;
      dx_ref[i] = gamma[c] * inv * (dy[i] - sdy[c] / s.rows - xhat * sdyx[c] / s.rows);
    }
  std::vector<float> dx(x.size(), NAN);
  BatchNormBackwardInput<CpuDevice>()(d, s, x.data(), dy.data(), mean.data(), var.data(),
                                      gamma.data(), eps, sum_dy.data(), sum_dy_xhat.data(),
                                      s.rows, dx.data());
  EXPECT_TRUE(GradientsNear(dx.data(), dx_ref, 1e-4, 1e-5)) << "dx";

  // Without gamma and beta: 1 and 0.
  BatchNormForward<CpuDevice>()(d, s, x.data(), mean.data(), var.data(), nullptr, nullptr, eps,
                                y.data());
  for (int64_t r = 0; r < s.rows; ++r)
    for (int c = 0; c < s.channels; ++c) {
      const int64_t i = r * s.channels + c;
      y_ref[i] = (y_ref[i] - beta[c]) / gamma[c];
    }
  EXPECT_TRUE(GradientsNear(y.data(), y_ref, 1e-5, 1e-5)) << "y, no gamma or beta";
}

// The fused BatchNormalization + ReLU passes give the separate layers'
// results to the bit (BatchNormForward then ActivationForward's ReLU;
// ActivationGrad's ReLU gradient then BatchNormGradSums and
// BatchNormBackwardInput), and ActivationForwardX / ActivationGradXY's ReLU
// (out of place) those of ActivationForward / ActivationGrad (in place).
TEST(BatchNormCpuTest, FusedReluIsTheSeparateLayersBitForBit) {
  const CpuDevice d;
  const BatchNormShape s{777, 16};
  const float eps = 1e-3f;
  const std::vector<float> x = RandomFloats(s.rows * s.channels, 21, -2.0f, 2.0f);
  const std::vector<float> dr = RandomFloats(s.rows * s.channels, 22);
  const std::vector<float> mean = RandomFloats(s.channels, 23, -0.5f, 0.5f);
  const std::vector<float> var = RandomFloats(s.channels, 24, 0.5f, 2.0f);
  const std::vector<float> gamma = RandomFloats(s.channels, 25, 0.5f, 1.5f);
  const std::vector<float> beta = RandomFloats(s.channels, 26);
  const int64_t n = s.rows * s.channels;

  std::vector<float> y(n), r_separate(n), r_fused(n);
  BatchNormForward<CpuDevice>()(d, s, x.data(), mean.data(), var.data(), gamma.data(),
                                beta.data(), eps, y.data());
  r_separate = y;
  ActivationForward<CpuDevice>()(d, n, ActivationFn::kRelu, r_separate.data());
  BatchNormReluForward(s, x.data(), mean.data(), var.data(), gamma.data(), beta.data(), eps,
                       r_fused.data());
  EXPECT_EQ(r_fused, r_separate);
  std::vector<float> r_x(n);
  ActivationForwardX(n, ActivationFn::kRelu, 0.0f, y.data(), r_x.data());
  EXPECT_EQ(r_x, r_separate);

  std::vector<float> dy = dr;
  ActivationGrad<CpuDevice>()(d, n, ActivationFn::kRelu, r_separate.data(), dy.data());
  std::vector<float> dy_xy(n);
  ActivationGradXY(n, ActivationFn::kRelu, 0.0f, y.data(), r_separate.data(), dr.data(),
                   dy_xy.data());
  EXPECT_EQ(dy_xy, dy);

  std::vector<double> sum_dy(s.channels, 0.0), sum_dy_xhat(s.channels, 0.0),
      fused_dy(s.channels, 0.0), fused_dy_xhat(s.channels, 0.0);
  BatchNormGradSums<CpuDevice>()(d, s, x.data(), dy.data(), mean.data(), var.data(), eps,
                                 sum_dy.data(), sum_dy_xhat.data());
  BatchNormReluGradSums(s, x.data(), r_fused.data(), dr.data(), mean.data(), var.data(), eps,
                        fused_dy.data(), fused_dy_xhat.data());
  EXPECT_EQ(fused_dy, sum_dy);
  EXPECT_EQ(fused_dy_xhat, sum_dy_xhat);

  std::vector<float> dx(n), dx_fused(n);
  BatchNormBackwardInput<CpuDevice>()(d, s, x.data(), dy.data(), mean.data(), var.data(),
                                      gamma.data(), eps, sum_dy.data(), sum_dy_xhat.data(),
                                      s.rows, dx.data());
  BatchNormReluBackwardInput(s, x.data(), r_fused.data(), dr.data(), mean.data(), var.data(),
                             gamma.data(), eps, sum_dy.data(), sum_dy_xhat.data(), s.rows,
                             dx_fused.data());
  EXPECT_EQ(dx_fused, dx);
  // In place: dx over dr.
  std::vector<float> in_place = dr;
  BatchNormReluBackwardInput(s, x.data(), r_fused.data(), in_place.data(), mean.data(),
                             var.data(), gamma.data(), eps, sum_dy.data(), sum_dy_xhat.data(),
                             s.rows, in_place.data());
  EXPECT_EQ(in_place, dx);
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
