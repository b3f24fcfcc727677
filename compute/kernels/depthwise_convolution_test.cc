// depthwise_convolution.h's DepthwiseConv2D and SeparableConv2D's two steps
// on the CPU, against the float64 definition (testing/conv_reference.h):
// the forward to float rounding, every gradient against central
// differences.
#include "compute/kernels/depthwise_convolution.h"

#include <vector>

#include "compute/kernels/convolution.h"
#include "compute/kernels/testing/conv_reference.h"
#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

struct DepthwiseCase {
  int batch, h, w, c, kh, kw, stride, dilation;
  bool same, bias;
  int dm;
};

class DepthwiseConvTest : public ::testing::TestWithParam<DepthwiseCase> {};

TEST_P(DepthwiseConvTest, ForwardAndGradientsMatchFloat64) {
  const DepthwiseCase& p = GetParam();
  const WindowShape s = testing::ConvShape(p.batch, p.h, p.w, p.c, p.kh, p.kw, p.stride, p.dilation,
                                           p.same, p.c * p.dm);
  ASSERT_GT(s.out_h, 0);
  ASSERT_GT(s.out_w, 0);
  std::vector<std::vector<float>> in = {RandomFloats(int64_t{p.batch} * p.h * p.w * p.c, 11),
                                        RandomFloats(int64_t{p.kh} * p.kw * s.out_c, 12)};
  if (p.bias) in.push_back(RandomFloats(s.out_c, 13));
  const testing::Reference ref = [&](const testing::Tensors& t) {
    return testing::ConvRef(s, true, t);
  };
  std::vector<float> y(s.out_pixels() * s.out_c);
  DepthwiseConvForward(s, in[0].data(), in[1].data(), p.bias ? in[2].data() : nullptr, y.data());
  EXPECT_TRUE(testing::OutputNear(y, ref(testing::ToDouble(in)), 1e-6, 1e-6));

  const std::vector<float> dy = RandomFloats(y.size(), 14);
  std::vector<float> dx(in[0].size(), -7.0f), dw(in[1].size(), -7.0f), db(s.out_c, -7.0f);
  DepthwiseConvBackward(s, in[0].data(), in[1].data(), dy.data(), dw.data(),
                        p.bias ? db.data() : nullptr, dx.data());
  EXPECT_TRUE(GradientsNear(
      dx.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 0, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(
      dw.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 1, dy), 1e-5, 1e-5));
  if (p.bias) {
    EXPECT_TRUE(GradientsNear(
        db.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 2, dy), 1e-5, 1e-5));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DepthwiseConvTest,
                         ::testing::Values(DepthwiseCase{2, 5, 6, 3, 3, 3, 1, 1, true, true, 1},
                                           DepthwiseCase{2, 7, 6, 2, 3, 2, 2, 1, true, true, 2},
                                           DepthwiseCase{1, 8, 7, 2, 3, 3, 1, 2, false, false, 3},
                                           DepthwiseCase{2, 6, 7, 3, 2, 3, 1, 3, true, true, 2},
                                           DepthwiseCase{1, 9, 8, 2, 3, 3, 2, 2, true, false, 1}));

// SeparableConv2D = DepthwiseConv2D (no bias) then PointwiseShape's 1x1
// convolution with the bias: against the two-step float64 definition.
TEST(SeparableConvTest, DepthwiseThenPointwiseMatchesFloat64) {
  const WindowShape d = testing::ConvShape(2, 6, 5, 3, 3, 3, 1, 1, true, 6);
  const WindowShape p = PointwiseShape(d, 4);
  EXPECT_EQ(p.patch_size(), 6);
  EXPECT_EQ(p.out_pixels(), d.out_pixels());
  const std::vector<float> x = RandomFloats(2 * 6 * 5 * 3, 31), dw = RandomFloats(3 * 3 * 6, 32),
                           pw = RandomFloats(6 * 4, 33), b = RandomFloats(4, 34);
  std::vector<float> mid(d.out_pixels() * 6), columns(p.out_pixels() * 6), y(p.out_pixels() * 4);
  DepthwiseConvForward(d, x.data(), dw.data(), nullptr, mid.data());
  ConvGeneralForward(p, mid.data(), pw.data(), b.data(), columns.data(), y.data());
  const std::vector<double> ref_mid = testing::ConvRef(d, true, testing::ToDouble({x, dw}));
  const std::vector<double> ref = testing::ConvRef(p, false,
                                          {ref_mid, std::vector<double>(pw.begin(), pw.end()),
                                           std::vector<double>(b.begin(), b.end())});
  EXPECT_TRUE(testing::OutputNear(y, ref, 1e-5, 1e-5));
}

// Its backward: the pointwise step's (kernel, bias, and the gradient at the
// depthwise output), then the depthwise step's (its kernel, the input),
// against central differences of the two-step float64 definition.
TEST(SeparableConvTest, BackwardThroughBothStepsMatchesFloat64) {
  const WindowShape d = testing::ConvShape(2, 7, 6, 2, 3, 2, 2, 1, true, 4);
  const WindowShape p = PointwiseShape(d, 3);
  const std::vector<std::vector<float>> in = {RandomFloats(2 * 7 * 6 * 2, 35),
                                              RandomFloats(3 * 2 * 4, 36), RandomFloats(4 * 3, 37),
                                              RandomFloats(3, 38)};
  const testing::Reference ref = [&](const testing::Tensors& t) {
    return testing::ConvRef(p, false, {testing::ConvRef(d, true, {t[0], t[1]}), t[2], t[3]});
  };
  std::vector<float> mid(d.out_pixels() * 4), columns(p.out_pixels() * 4), y(p.out_pixels() * 3);
  DepthwiseConvForward(d, in[0].data(), in[1].data(), nullptr, mid.data());
  ConvGeneralForward(p, mid.data(), in[2].data(), in[3].data(), columns.data(), y.data());
  EXPECT_TRUE(testing::OutputNear(y, ref(testing::ToDouble(in)), 1e-5, 1e-5));
  const std::vector<float> dy = RandomFloats(y.size(), 39);
  std::vector<float> dpw(in[2].size()), db(3), dcolumns(columns.size()), dmid(mid.size());
  ConvGeneralBackward(p, columns.data(), in[2].data(), dy.data(), false, dpw.data(), db.data(),
                      dcolumns.data(), dmid.data());
  std::vector<float> ddw(in[1].size()), dx(in[0].size());
  DepthwiseConvBackward(d, in[0].data(), in[1].data(), dmid.data(), ddw.data(), nullptr,
                        dx.data());
  EXPECT_TRUE(GradientsNear(
      dx.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 0, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(
      ddw.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 1, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(
      dpw.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 2, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(
      db.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 3, dy), 1e-5, 1e-5));
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
