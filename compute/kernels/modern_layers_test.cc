// modern_layers.h, activation.h's parameterised activations and
// general_layers.h's dilated convolution on the CPU, against naive float64
// implementations written here from Keras's definitions: the forward to
// float rounding, and every gradient (input and parameters) against central
// differences of the float64 forward.
#include "compute/kernels/modern_layers.h"

#include <cmath>
#include <functional>
#include <vector>

#include "compute/kernels/activation.h"
#include "compute/kernels/general_layers.h"
#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

using Tensors = std::vector<std::vector<double>>;
using Reference = std::function<std::vector<double>(const Tensors&)>;

Tensors ToDouble(const std::vector<std::vector<float>>& in) {
  Tensors out;
  for (const auto& v : in) out.emplace_back(v.begin(), v.end());
  return out;
}

// Success when |y[i] - ref[i]| <= atol + rtol |ref[i]| everywhere.
::testing::AssertionResult OutputNear(const std::vector<float>& y, const std::vector<double>& ref,
                                      double atol, double rtol) {
  if (y.size() != ref.size()) {
    return ::testing::AssertionFailure() << "size " << y.size() << " vs " << ref.size();
  }
  return GradientsNear(y.data(), ref, atol, rtol);
}

// d (sum r . reference(inputs)) / d inputs[which], central differences in
// double with step 1e-6 (truncation ~1e-12, cancellation ~1e-10 here).
std::vector<double> NumericGrad(const Reference& f, Tensors inputs, int which,
                                const std::vector<float>& r) {
  const double eps = 1e-6;
  auto loss = [&]() {
    const std::vector<double> y = f(inputs);
    double s = 0.0;
    for (size_t i = 0; i < y.size(); ++i) s += r[i] * y[i];
    return s;
  };
  std::vector<double> grad(inputs[which].size());
  for (size_t i = 0; i < grad.size(); ++i) {
    const double saved = inputs[which][i];
    inputs[which][i] = saved + eps;
    const double up = loss();
    inputs[which][i] = saved - eps;
    const double down = loss();
    inputs[which][i] = saved;
    grad[i] = (up - down) / (2 * eps);
  }
  return grad;
}

// ---- float64 references ----------------------------------------------------

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

// A convolution (groups = 1) or depthwise convolution (out_c = in_c * dm)
// over WindowShape s with dilation, straight from the definition.
std::vector<double> ConvRef(const WindowShape& s, bool depthwise, const Tensors& in) {
  const std::vector<double>& x = in[0];
  const std::vector<double>& w = in[1];
  const bool bias = in.size() > 2;
  const int dm = s.out_c / s.in_c;
  std::vector<double> y(s.out_pixels() * s.out_c);
  for (int n = 0; n < s.batch; ++n)
    for (int oh = 0; oh < s.out_h; ++oh)
      for (int ow = 0; ow < s.out_w; ++ow)
        for (int o = 0; o < s.out_c; ++o) {
          double sum = bias ? in[2][o] : 0.0;
          for (int kh = 0; kh < s.window_h; ++kh)
            for (int kw = 0; kw < s.window_w; ++kw) {
              const int ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
              const int iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
              if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) continue;
              const double* px = &x[((int64_t{n} * s.in_h + ih) * s.in_w + iw) * s.in_c];
              if (depthwise) {
                const int ci = o / dm, m = o % dm;
                sum += px[ci] * w[((kh * s.window_w + kw) * s.in_c + ci) * dm + m];
              } else {
                for (int ci = 0; ci < s.in_c; ++ci) {
                  sum += px[ci] * w[((kh * s.window_w + kw) * s.in_c + ci) * s.out_c + o];
                }
              }
            }
          y[((int64_t{n} * s.out_h + oh) * s.out_w + ow) * s.out_c + o] = sum;
        }
  return y;
}

std::vector<double> LayerNormRef(int64_t rows, int c, double eps, const Tensors& in) {
  std::vector<double> y(rows * c);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int k = 0; k < c; ++k) mean += in[0][r * c + k] / c;
    for (int k = 0; k < c; ++k) var += (in[0][r * c + k] - mean) * (in[0][r * c + k] - mean) / c;
    for (int k = 0; k < c; ++k) {
      double v = (in[0][r * c + k] - mean) / std::sqrt(var + eps);
      if (in.size() > 1 && !in[1].empty()) v *= in[1][k];
      if (in.size() > 2 && !in[2].empty()) v += in[2][k];
      y[r * c + k] = v;
    }
  }
  return y;
}

WindowShape ConvShape(int batch, int h, int w, int c, int kh, int kw, int stride, int dilation,
                      bool same, int out_c) {
  WindowShape s;
  s.batch = batch;
  s.in_h = h;
  s.in_w = w;
  s.in_c = c;
  s.window_h = kh;
  s.window_w = kw;
  s.stride_h = s.stride_w = stride;
  s.dilation_h = dilation;
  s.dilation_w = dilation == 1 ? 1 : dilation - 1;  // unequal when dilated
  KerasDilatedWindow(h, kh, stride, s.dilation_h, same, &s.out_h, &s.pad_top);
  KerasDilatedWindow(w, kw, stride, s.dilation_w, same, &s.out_w, &s.pad_left);
  s.out_c = out_c;
  return s;
}

// ---- Activations -----------------------------------------------------------

struct ActivationCase {
  ActivationFn f;
  float alpha;
};

TEST(ModernActivationTest, ForwardAndGradientMatchFloat64Definitions) {
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
    const Reference ref = [&](const Tensors& in) {
      std::vector<double> y(in[0].size());
      for (size_t i = 0; i < y.size(); ++i) y[i] = ActivationRef(c.f, c.alpha, in[0][i]);
      return y;
    };
    std::vector<float> y(x.size()), dx(x.size());
    ActivationForwardX(x.size(), c.f, c.alpha, x.data(), y.data());
    EXPECT_TRUE(OutputNear(y, ref({std::vector<double>(x.begin(), x.end())}), 1e-6, 1e-6));
    ActivationGradXY(x.size(), c.f, c.alpha, x.data(), y.data(), dy.data(), dx.data());
    EXPECT_TRUE(GradientsNear(dx.data(), NumericGrad(ref, ToDouble({x}), 0, dy), 2e-6, 2e-6));
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
TEST(ModernActivationTest, HardSigmoidSlopes) {
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
TEST(ModernActivationTest, OutputOnlyEntryPointsWriteNaNForTheNewFunctions) {
  std::vector<float> y = {0.5f, -0.5f}, dy = {1.0f, 1.0f};
  ActivationForward<CpuDevice>()(CpuDevice{}, 2, ActivationFn::kGelu, y.data());
  ActivationGrad<CpuDevice>()(CpuDevice{}, 2, ActivationFn::kSwish, y.data(), dy.data());
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(dy[1]));
}

// ---- ZeroPadding2D ---------------------------------------------------------

TEST(ZeroPad2DTest, ForwardAndBackward) {
  const PaddingShape s{2, 3, 4, 3, 1, 2, 0, 3};
  const std::vector<float> x = RandomFloats(2 * 3 * 4 * 3, 1);
  const Reference ref = [&](const Tensors& in) {
    std::vector<double> y(int64_t{2} * s.out_h() * s.out_w() * 3, 0.0);
    for (int n = 0; n < 2; ++n)
      for (int h = 0; h < 3; ++h)
        for (int w = 0; w < 4; ++w)
          for (int c = 0; c < 3; ++c)
            y[((n * s.out_h() + h + 1) * s.out_w() + w) * 3 + c] =
                in[0][((n * 3 + h) * 4 + w) * 3 + c];
    return y;
  };
  std::vector<float> y(int64_t{2} * s.out_h() * s.out_w() * 3, -7.0f), dx(x.size(), -7.0f);
  ZeroPad2DForward(s, x.data(), y.data());
  EXPECT_TRUE(OutputNear(y, ref(ToDouble({x})), 0, 0));
  const std::vector<float> dy = RandomFloats(y.size(), 2);
  ZeroPad2DBackward(s, dy.data(), dx.data());
  EXPECT_TRUE(GradientsNear(dx.data(), NumericGrad(ref, ToDouble({x}), 0, dy), 1e-9, 1e-9));
}

// ---- Convolutions: depthwise, dilated, separable ---------------------------

struct DepthwiseCase {
  int batch, h, w, c, kh, kw, stride, dilation;
  bool same, bias;
  int dm;
};

class DepthwiseConvTest : public ::testing::TestWithParam<DepthwiseCase> {};

TEST_P(DepthwiseConvTest, ForwardAndGradientsMatchFloat64) {
  const DepthwiseCase& p = GetParam();
  const WindowShape s =
      ConvShape(p.batch, p.h, p.w, p.c, p.kh, p.kw, p.stride, p.dilation, p.same, p.c * p.dm);
  ASSERT_GT(s.out_h, 0);
  ASSERT_GT(s.out_w, 0);
  std::vector<std::vector<float>> in = {RandomFloats(int64_t{p.batch} * p.h * p.w * p.c, 11),
                                        RandomFloats(int64_t{p.kh} * p.kw * s.out_c, 12)};
  if (p.bias) in.push_back(RandomFloats(s.out_c, 13));
  const Reference ref = [&](const Tensors& t) { return ConvRef(s, true, t); };
  std::vector<float> y(s.out_pixels() * s.out_c);
  DepthwiseConvForward(s, in[0].data(), in[1].data(), p.bias ? in[2].data() : nullptr, y.data());
  EXPECT_TRUE(OutputNear(y, ref(ToDouble(in)), 1e-6, 1e-6));

  const std::vector<float> dy = RandomFloats(y.size(), 14);
  std::vector<float> dx(in[0].size(), -7.0f), dw(in[1].size(), -7.0f), db(s.out_c, -7.0f);
  DepthwiseConvBackward(s, in[0].data(), in[1].data(), dy.data(), dw.data(),
                        p.bias ? db.data() : nullptr, dx.data());
  EXPECT_TRUE(GradientsNear(dx.data(), NumericGrad(ref, ToDouble(in), 0, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(dw.data(), NumericGrad(ref, ToDouble(in), 1, dy), 1e-5, 1e-5));
  if (p.bias) {
    EXPECT_TRUE(GradientsNear(db.data(), NumericGrad(ref, ToDouble(in), 2, dy), 1e-5, 1e-5));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DepthwiseConvTest,
                         ::testing::Values(DepthwiseCase{2, 5, 6, 3, 3, 3, 1, 1, true, true, 1},
                                           DepthwiseCase{2, 7, 6, 2, 3, 2, 2, 1, true, true, 2},
                                           DepthwiseCase{1, 8, 7, 2, 3, 3, 1, 2, false, false, 3},
                                           DepthwiseCase{2, 6, 7, 3, 2, 3, 1, 3, true, true, 2},
                                           DepthwiseCase{1, 9, 8, 2, 3, 3, 2, 2, true, false, 1}));

struct DilatedConvCase {
  int batch, h, w, c, kh, kw, stride, dilation;
  bool same;
  int out_c;
};

class DilatedConvTest : public ::testing::TestWithParam<DilatedConvCase> {};

TEST_P(DilatedConvTest, ForwardAndGradientsMatchFloat64) {
  const DilatedConvCase& p = GetParam();
  const WindowShape s =
      ConvShape(p.batch, p.h, p.w, p.c, p.kh, p.kw, p.stride, p.dilation, p.same, p.out_c);
  ASSERT_GT(s.out_h, 0);
  ASSERT_GT(s.out_w, 0);
  std::vector<std::vector<float>> in = {RandomFloats(int64_t{p.batch} * p.h * p.w * p.c, 21),
                                        RandomFloats(s.patch_size() * p.out_c, 22),
                                        RandomFloats(p.out_c, 23)};
  const Reference ref = [&](const Tensors& t) { return ConvRef(s, false, t); };
  std::vector<float> columns(s.out_pixels() * s.patch_size()), y(s.out_pixels() * s.out_c);
  ConvGeneralForward(s, in[0].data(), in[1].data(), in[2].data(), columns.data(), y.data());
  EXPECT_TRUE(OutputNear(y, ref(ToDouble(in)), 1e-5, 1e-5));

  const std::vector<float> dy = RandomFloats(y.size(), 24);
  std::vector<float> dx(in[0].size(), -7.0f), dw(in[1].size()), db(p.out_c),
      dcolumns(columns.size());
  ConvGeneralBackward(s, columns.data(), in[1].data(), dy.data(), false, dw.data(), db.data(),
                      dcolumns.data(), dx.data());
  EXPECT_TRUE(GradientsNear(dx.data(), NumericGrad(ref, ToDouble(in), 0, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(dw.data(), NumericGrad(ref, ToDouble(in), 1, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(db.data(), NumericGrad(ref, ToDouble(in), 2, dy), 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Shapes, DilatedConvTest,
                         ::testing::Values(DilatedConvCase{2, 7, 6, 3, 3, 3, 1, 2, true, 4},
                                           DilatedConvCase{1, 9, 8, 2, 2, 3, 1, 3, false, 2},
                                           DilatedConvCase{2, 8, 9, 2, 3, 2, 2, 2, true, 3}));

// SeparableConv2D = DepthwiseConv2D (no bias) then PointwiseShape's 1x1
// convolution with the bias: against the two-step float64 definition.
TEST(SeparableConvTest, DepthwiseThenPointwiseMatchesFloat64) {
  const WindowShape d = ConvShape(2, 6, 5, 3, 3, 3, 1, 1, true, 6);
  const WindowShape p = PointwiseShape(d, 4);
  EXPECT_EQ(p.patch_size(), 6);
  EXPECT_EQ(p.out_pixels(), d.out_pixels());
  const std::vector<float> x = RandomFloats(2 * 6 * 5 * 3, 31), dw = RandomFloats(3 * 3 * 6, 32),
                           pw = RandomFloats(6 * 4, 33), b = RandomFloats(4, 34);
  std::vector<float> mid(d.out_pixels() * 6), columns(p.out_pixels() * 6), y(p.out_pixels() * 4);
  DepthwiseConvForward(d, x.data(), dw.data(), nullptr, mid.data());
  ConvGeneralForward(p, mid.data(), pw.data(), b.data(), columns.data(), y.data());
  const std::vector<double> ref_mid = ConvRef(d, true, ToDouble({x, dw}));
  const std::vector<double> ref = ConvRef(p, false,
                                          {ref_mid, std::vector<double>(pw.begin(), pw.end()),
                                           std::vector<double>(b.begin(), b.end())});
  EXPECT_TRUE(OutputNear(y, ref, 1e-5, 1e-5));
}

// Its backward: the pointwise step's (kernel, bias, and the gradient at the
// depthwise output), then the depthwise step's (its kernel, the input),
// against central differences of the two-step float64 definition.
TEST(SeparableConvTest, BackwardThroughBothStepsMatchesFloat64) {
  const WindowShape d = ConvShape(2, 7, 6, 2, 3, 2, 2, 1, true, 4);
  const WindowShape p = PointwiseShape(d, 3);
  const std::vector<std::vector<float>> in = {RandomFloats(2 * 7 * 6 * 2, 35),
                                              RandomFloats(3 * 2 * 4, 36), RandomFloats(4 * 3, 37),
                                              RandomFloats(3, 38)};
  const Reference ref = [&](const Tensors& t) {
    return ConvRef(p, false, {ConvRef(d, true, {t[0], t[1]}), t[2], t[3]});
  };
  std::vector<float> mid(d.out_pixels() * 4), columns(p.out_pixels() * 4), y(p.out_pixels() * 3);
  DepthwiseConvForward(d, in[0].data(), in[1].data(), nullptr, mid.data());
  ConvGeneralForward(p, mid.data(), in[2].data(), in[3].data(), columns.data(), y.data());
  EXPECT_TRUE(OutputNear(y, ref(ToDouble(in)), 1e-5, 1e-5));
  const std::vector<float> dy = RandomFloats(y.size(), 39);
  std::vector<float> dpw(in[2].size()), db(3), dcolumns(columns.size()), dmid(mid.size());
  ConvGeneralBackward(p, columns.data(), in[2].data(), dy.data(), false, dpw.data(), db.data(),
                      dcolumns.data(), dmid.data());
  std::vector<float> ddw(in[1].size()), dx(in[0].size());
  DepthwiseConvBackward(d, in[0].data(), in[1].data(), dmid.data(), ddw.data(), nullptr,
                        dx.data());
  EXPECT_TRUE(GradientsNear(dx.data(), NumericGrad(ref, ToDouble(in), 0, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(ddw.data(), NumericGrad(ref, ToDouble(in), 1, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(dpw.data(), NumericGrad(ref, ToDouble(in), 2, dy), 1e-5, 1e-5));
  EXPECT_TRUE(GradientsNear(db.data(), NumericGrad(ref, ToDouble(in), 3, dy), 1e-5, 1e-5));
}

// ---- GlobalMaxPooling2D ----------------------------------------------------

TEST(GlobalMaxPoolTest, ForwardAndGradientMatchFloat64) {
  const int batch = 3, pixels = 20, c = 4;
  const std::vector<float> x = RandomFloats(batch * pixels * c, 41);
  const Reference ref = [&](const Tensors& in) {
    std::vector<double> y(batch * c, -1e300);
    for (int n = 0; n < batch; ++n)
      for (int p = 0; p < pixels; ++p)
        for (int k = 0; k < c; ++k)
          y[n * c + k] = std::max(y[n * c + k], in[0][(n * pixels + p) * c + k]);
    return y;
  };
  std::vector<float> y(batch * c), count(batch * c), dx(x.size());
  GlobalMaxPoolForward(batch, pixels, c, x.data(), y.data(), count.data());
  EXPECT_TRUE(OutputNear(y, ref(ToDouble({x})), 0, 0));
  EXPECT_EQ(count, std::vector<float>(batch * c, 1.0f));
  const std::vector<float> dy = RandomFloats(y.size(), 42);
  GlobalMaxPoolBackward(batch, pixels, c, x.data(), y.data(), count.data(), dy.data(), dx.data());
  EXPECT_TRUE(GradientsNear(dx.data(), NumericGrad(ref, ToDouble({x}), 0, dy), 1e-8, 1e-8));
}

// Ties share the gradient, as TensorFlow's reduce_max gradient does.
TEST(GlobalMaxPoolTest, TiesSplitTheGradient) {
  const std::vector<float> x = {0.0f, 2.0f, 2.0f, -1.0f, 2.0f, 0.5f};  // [1, 6 pixels, 1]
  std::vector<float> y(1), count(1), dx(6);
  const std::vector<float> dy = {3.0f};
  GlobalMaxPoolForward(1, 6, 1, x.data(), y.data(), count.data());
  EXPECT_EQ(y[0], 2.0f);
  EXPECT_EQ(count[0], 3.0f);
  GlobalMaxPoolBackward(1, 6, 1, x.data(), y.data(), count.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0.0f, 1.0f, 1.0f, 0.0f, 1.0f, 0.0f}));
}

// ---- LayerNormalization ----------------------------------------------------

TEST(LayerNormTest, ForwardAndGradientsMatchFloat64) {
  const int64_t rows = 12;
  const int c = 7;
  const float eps = 1e-3f;
  for (bool affine : {true, false}) {
    SCOPED_TRACE(affine);
    std::vector<std::vector<float>> in = {RandomFloats(rows * c, 51, -2.0f, 3.0f)};
    if (affine) {
      in.push_back(RandomFloats(c, 52));
      in.push_back(RandomFloats(c, 53));
    }
    const Reference ref = [&](const Tensors& t) { return LayerNormRef(rows, c, eps, t); };
    std::vector<float> y(rows * c), mean(rows), rstd(rows);
    LayerNormForward(rows, c, in[0].data(), affine ? in[1].data() : nullptr,
                     affine ? in[2].data() : nullptr, eps, mean.data(), rstd.data(), y.data());
    EXPECT_TRUE(OutputNear(y, ref(ToDouble(in)), 2e-6, 2e-6));
    const std::vector<float> dy = RandomFloats(y.size(), 54);
    std::vector<float> dx(y.size()), dgamma(c), dbeta(c);
    LayerNormBackward(rows, c, in[0].data(), dy.data(), mean.data(), rstd.data(),
                      affine ? in[1].data() : nullptr, affine ? dgamma.data() : nullptr,
                      affine ? dbeta.data() : nullptr, dx.data());
    EXPECT_TRUE(GradientsNear(dx.data(), NumericGrad(ref, ToDouble(in), 0, dy), 1e-5, 1e-5));
    if (affine) {
      EXPECT_TRUE(GradientsNear(dgamma.data(), NumericGrad(ref, ToDouble(in), 1, dy), 1e-5, 1e-5));
      EXPECT_TRUE(GradientsNear(dbeta.data(), NumericGrad(ref, ToDouble(in), 2, dy), 1e-5, 1e-5));
    }
  }
}

// ---- Rescaling and regularizers --------------------------------------------

TEST(RescaleTest, ForwardAndBackward) {
  const std::vector<float> x = {0.0f, 127.5f, 255.0f};
  std::vector<float> y(3), dx(3);
  RescaleForward(3, 1.0f / 127.5f, -1.0f, x.data(), y.data());
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_NEAR(y[1], 0.0f, 1e-7f);  // 127.5 * fl(1 / 127.5) - 1
  EXPECT_NEAR(y[2], 1.0f, 2e-7f);
  const std::vector<float> dy = {1.0f, 2.0f, -4.0f};
  RescaleBackward(3, 0.5f, dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0.5f, 1.0f, -2.0f}));
}

TEST(RegularizerTest, LossAndGradientMatchFloat64) {
  std::vector<float> w = RandomFloats(50, 61);
  w[7] = 0.0f;  // sign(0) = 0
  const float l1 = 0.003f, l2 = 0.02f;
  const Reference ref = [&](const Tensors& t) {
    double s = 0;
    for (double v : t[0]) s += double{l1} * std::fabs(v) + double{l2} * v * v;
    return std::vector<double>{s};
  };
  EXPECT_NEAR(RegularizerLoss(w.size(), l1, l2, w.data()), ref(ToDouble({w}))[0], 1e-9);
  std::vector<float> dw(w.size(), 1.0f);  // added to
  RegularizerGrad(w.size(), l1, l2, w.data(), dw.data());
  for (float& v : dw) v -= 1.0f;
  std::vector<double> numeric = NumericGrad(ref, ToDouble({w}), 0, {1.0f});
  numeric[7] = 0.0;  // the subgradient TensorFlow takes at 0
  EXPECT_TRUE(GradientsNear(dw.data(), numeric, 1e-7, 1e-6));
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
