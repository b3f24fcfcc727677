// convolution.h's convolution (im2col, GEMM and col2im in tiles, the
// pointwise case without them) against float64 definitions written here:
// every output and gradient to float rounding, on shapes that cross the
// kernels' tiles mid-row, with strides, dilation, "same" and "valid"
// padding and 1x1 windows.
#include "compute/kernels/convolution.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/kernels/testing/conv_reference.h"
#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

WindowShape Conv(int batch, int h, int w, int c, int kh, int kw, int stride, int dilation,
                 bool same, int filters) {
  return testing::DilatedWindowShape(batch, h, w, c, kh, kw, stride, stride, dilation, dilation,
                                     same, filters);
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

// ---- Dilation unequal along rows and columns, against conv_reference.h --

struct DilatedConvCase {
  int batch, h, w, c, kh, kw, stride, dilation;
  bool same;
  int out_c;
};

class DilatedConvTest : public ::testing::TestWithParam<DilatedConvCase> {};

TEST_P(DilatedConvTest, ForwardAndGradientsMatchFloat64) {
  const DilatedConvCase& p = GetParam();
  const WindowShape s =
      testing::ConvShape(p.batch, p.h, p.w, p.c, p.kh, p.kw, p.stride, p.dilation, p.same, p.out_c);
  ASSERT_GT(s.out_h, 0);
  ASSERT_GT(s.out_w, 0);
  std::vector<std::vector<float>> in = {RandomFloats(int64_t{p.batch} * p.h * p.w * p.c, 21),
                                        RandomFloats(s.patch_size() * p.out_c, 22),
                                        RandomFloats(p.out_c, 23)};
  const testing::Reference ref = [&](const testing::Tensors& t) {
    return testing::ConvRef(s, false, t);
  };
  std::vector<float> columns(s.out_pixels() * s.patch_size()), y(s.out_pixels() * s.out_c);
  ConvGeneralForward(s, in[0].data(), in[1].data(), in[2].data(), columns.data(), y.data());
  EXPECT_TRUE(testing::OutputNear(y, ref(testing::ToDouble(in)), 1e-5, 1e-5));

  const std::vector<float> dy = RandomFloats(y.size(), 24);
  std::vector<float> dx(in[0].size(), -7.0f), dw(in[1].size()), db(p.out_c),
      dcolumns(columns.size());
  ConvGeneralBackward(s, columns.data(), in[1].data(), dy.data(), false, dw.data(), db.data(),
                      dcolumns.data(), dx.data());
  EXPECT_TRUE(GradientsNear(
      dx.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 0, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(
      dw.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 1, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(
      db.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 2, dy), 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Shapes, DilatedConvTest,
                         ::testing::Values(DilatedConvCase{2, 7, 6, 3, 3, 3, 1, 2, true, 4},
                                           DilatedConvCase{1, 9, 8, 2, 2, 3, 1, 3, false, 2},
                                           DilatedConvCase{2, 8, 9, 2, 3, 2, 2, 2, true, 3}));

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

}  // namespace
}  // namespace kernels
}  // namespace pscluster
