// A typed gtest suite that checks a device's GraphKernels (graph_kernels.h)
// for the layers of modern CNNs (parameterised activations, ZeroPadding2D,
// DepthwiseConv2D, dilated Conv2D, GlobalMaxPooling2D, LayerNormalization,
// Rescaling, regularizers) against the CPU functions (activation.h,
// reshaping.h, depthwise_convolution.h, convolution.h, pooling.h,
// layer_norm.h, rescaling.h, regularizer.h), with
// kernel_conformance.h's harness and comparison: outputs and workspaces
// poisoned, floats within a relative 1e-5 of the largest |want| (the orders
// of the sums differ), element moves exactly. Shapes are large enough for
// the multi-group and multi-level reductions.
//
// Besides kernel_conformance.h's harness a test file provides, in namespace
// pscluster::kernels (found at instantiation),
//   std::unique_ptr<GraphKernels> MakeGraphKernelsFor(const H::Device&);
// and says
//   INSTANTIATE_TYPED_TEST_SUITE_P(Name, GraphKernelsConformanceTest, ::testing::Types<H>);
#ifndef PSCLUSTER_COMPUTE_KERNELS_TESTING_GRAPH_KERNELS_CONFORMANCE_H_
#define PSCLUSTER_COMPUTE_KERNELS_TESTING_GRAPH_KERNELS_CONFORMANCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compute/kernels/activation.h"
#include "compute/kernels/convolution.h"
#include "compute/kernels/depthwise_convolution.h"
#include "compute/kernels/graph_kernels.h"
#include "compute/kernels/layer_norm.h"
#include "compute/kernels/parallel_convolution.h"
#include "compute/kernels/parallel_elementwise.h"
#include "compute/kernels/parallel_normalization.h"
#include "compute/kernels/pooling.h"
#include "compute/kernels/regularizer.h"
#include "compute/kernels/rescaling.h"
#include "compute/kernels/reshaping.h"
#include "compute/kernels/testing/conv_reference.h"
#include "compute/kernels/testing/kernel_conformance.h"
#include "compute/kernels/window.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace conformance {

constexpr double kGraphKernelsTolerance = 1e-5;

template <typename H>
class GraphKernelsConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = H::SkipReason();
    if (!why.empty()) GTEST_SKIP() << "[gpu] " << why;
    kernels_ = MakeGraphKernelsFor(h_.device());
  }
  H h_;
  std::unique_ptr<GraphKernels> kernels_;
};

TYPED_TEST_SUITE_P(GraphKernelsConformanceTest);

// stride_w < 0: stride along both axes.
inline WindowShape DilatedShape(int batch, int h, int w, int c, int kh, int kw, int stride,
                                int dil_h, int dil_w, bool same, int out_c, int stride_w = -1) {
  return testing::DilatedWindowShape(batch, h, w, c, kh, kw, stride,
                                     stride_w < 0 ? stride : stride_w, dil_h, dil_w, same, out_c);
}

TYPED_TEST_P(GraphKernelsConformanceTest, ActivationsMatchCpu) {
  auto& h = this->h_;
  const std::vector<float> x = Random(3000, 1, -6.0f, 6.0f), dy = Random(3000, 2);
  const struct {
    ActivationFn f;
    float alpha;
  } cases[] = {{ActivationFn::kGelu, 0.0f},        {ActivationFn::kGeluTanh, 0.0f},
               {ActivationFn::kSwish, 0.0f},       {ActivationFn::kElu, 0.7f},
               {ActivationFn::kLeakyRelu, 0.3f},   {ActivationFn::kHardSigmoid, 1.0f / 6.0f},
               {ActivationFn::kHardSigmoid, 0.2f}, {ActivationFn::kRelu, 0.0f},
               {ActivationFn::kSigmoid, 0.0f},     {ActivationFn::kTanh, 0.0f}};
  const float* dx_in = h.Upload(x);
  const float* ddy = h.Upload(dy);
  for (const auto& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.f));
    std::vector<float> y(x.size()), dx(x.size());
    ActivationForwardX(x.size(), c.f, c.alpha, x.data(), y.data());
    ActivationGradXY(x.size(), c.f, c.alpha, x.data(), y.data(), dy.data(), dx.data());
    float* d_y = h.template Poisoned<float>(x.size());
    float* d_dx = h.template Poisoned<float>(x.size());
    this->kernels_->ActivationForwardX(x.size(), c.f, c.alpha, dx_in, d_y);
    this->kernels_->ActivationGradXY(x.size(), c.f, c.alpha, dx_in, d_y, ddy, d_dx);
    EXPECT_TRUE(Close(h.Download(d_y, x.size()), y, "y", kGraphKernelsTolerance));
    EXPECT_TRUE(Close(h.Download(d_dx, x.size()), dx, "dx", kGraphKernelsTolerance));
  }
  EXPECT_EQ(h.Errors(), "");
}

TYPED_TEST_P(GraphKernelsConformanceTest, ZeroPad2DMatchesCpu) {
  auto& h = this->h_;
  const PaddingShape s{3, 5, 4, 6, 2, 1, 3, 0};
  const int64_t in = int64_t{3} * 5 * 4 * 6, out = int64_t{3} * s.out_h() * s.out_w() * 6;
  const std::vector<float> x = Random(in, 3), dy = Random(out, 4);
  std::vector<float> y(out), dx(in);
  ZeroPad2DForward(s, x.data(), y.data());
  ZeroPad2DBackward(s, dy.data(), dx.data());
  float* d_y = h.template Poisoned<float>(out);
  float* d_dx = h.template Poisoned<float>(in);
  this->kernels_->ZeroPad2DForward(s, h.Upload(x), d_y);
  this->kernels_->ZeroPad2DBackward(s, h.Upload(dy), d_dx);
  EXPECT_EQ(h.Download(d_y, out), y);
  EXPECT_EQ(h.Download(d_dx, in), dx);
  EXPECT_EQ(h.Errors(), "");
}

TYPED_TEST_P(GraphKernelsConformanceTest, DepthwiseConvMatchesCpu) {
  auto& h = this->h_;
  const WindowShape shapes[] = {
      // 1020 output pixels: four groups of the filter gradient's sums.
      DilatedShape(4, 17, 15, 3, 3, 3, 1, 2, 2, true, 6),
      DilatedShape(3, 13, 12, 4, 3, 2, 2, 1, 1, true, 4, 3),
      DilatedShape(2, 11, 12, 2, 2, 3, 1, 3, 2, false, 6),
  };
  for (const WindowShape& s : shapes) {
    SCOPED_TRACE(s.out_h * 1000 + s.out_w);
    const int64_t in = int64_t{s.batch} * s.in_h * s.in_w * s.in_c;
    const int64_t out = s.out_pixels() * s.out_c;
    const int64_t kernel = int64_t{s.window_h} * s.window_w * s.out_c;
    const std::vector<float> x = Random(in, 5), w = Random(kernel, 6), b = Random(s.out_c, 7),
                             dy = Random(out, 8);
    std::vector<float> y(out), dw(kernel), db(s.out_c), dx(in);
    DepthwiseConvForward(s, x.data(), w.data(), b.data(), y.data());
    DepthwiseConvBackward(s, x.data(), w.data(), dy.data(), dw.data(), db.data(), dx.data());
    const float* d_x = h.Upload(x);
    const float* d_w = h.Upload(w);
    float* d_y = h.template Poisoned<float>(out);
    float* d_dw = h.template Poisoned<float>(kernel);
    float* d_db = h.template Poisoned<float>(s.out_c);
    float* d_dx = h.template Poisoned<float>(in);
    float* ws = h.template Poisoned<float>(parallel::DepthwiseBackwardWorkspace(s));
    this->kernels_->DepthwiseConvForward(s, d_x, d_w, h.Upload(b), d_y);
    this->kernels_->DepthwiseConvBackward(s, d_x, d_w, h.Upload(dy), d_dw, d_db, d_dx, ws);
    EXPECT_TRUE(Close(h.Download(d_y, out), y, "y", kGraphKernelsTolerance));
    EXPECT_TRUE(Close(h.Download(d_dw, kernel), dw, "dw", kGraphKernelsTolerance));
    EXPECT_TRUE(Close(h.Download(d_db, s.out_c), db, "db", kGraphKernelsTolerance));
    EXPECT_TRUE(Close(h.Download(d_dx, in), dx, "dx", kGraphKernelsTolerance));
  }
  EXPECT_EQ(h.Errors(), "");
}

TYPED_TEST_P(GraphKernelsConformanceTest, DilatedConvMatchesCpu) {
  auto& h = this->h_;
  const WindowShape shapes[] = {
      DilatedShape(2, 9, 8, 3, 3, 3, 1, 2, 3, true, 5),
      DilatedShape(2, 10, 11, 2, 2, 3, 1, 3, 2, false, 4),
      DilatedShape(3, 12, 9, 2, 3, 3, 2, 2, 2, true, 3),
      DilatedShape(2, 11, 13, 3, 3, 2, 3, 2, 1, false, 4, 2),
  };
  for (const WindowShape& s : shapes) {
    SCOPED_TRACE(s.out_h * 1000 + s.out_w);
    const int64_t in = int64_t{s.batch} * s.in_h * s.in_w * s.in_c;
    const int64_t out = s.out_pixels() * s.out_c;
    const int64_t kernel = s.patch_size() * s.out_c;
    const int64_t cols = s.out_pixels() * s.patch_size();
    const std::vector<float> x = Random(in, 9), w = Random(kernel, 10), b = Random(s.out_c, 11),
                             dy = Random(out, 12);
    std::vector<float> columns(cols), y(out), dw(kernel), db(s.out_c), dcolumns(cols), dx(in);
    ConvGeneralForward(s, x.data(), w.data(), b.data(), columns.data(), y.data());
    ConvGeneralBackward(s, columns.data(), w.data(), dy.data(), false, dw.data(), db.data(),
                        dcolumns.data(), dx.data());
    const float* d_w = h.Upload(w);
    float* d_cols = h.template Poisoned<float>(cols);
    float* d_y = h.template Poisoned<float>(out);
    float* d_dw = h.template Poisoned<float>(kernel);
    float* d_db = h.template Poisoned<float>(s.out_c);
    float* d_dx = h.template Poisoned<float>(in);
    float* ws = h.template Poisoned<float>(parallel::ConvGeneralBackwardWorkspace(s));
    this->kernels_->ConvForward(s, h.Upload(x), d_w, h.Upload(b), d_cols, d_y);
    this->kernels_->ConvBackward(s, d_cols, d_w, h.Upload(dy), d_dw, d_db, d_dx, ws);
    EXPECT_TRUE(Close(h.Download(d_cols, cols), columns, "columns", 0.0));
    EXPECT_TRUE(Close(h.Download(d_y, out), y, "y", kGraphKernelsTolerance));
    EXPECT_TRUE(Close(h.Download(d_dw, kernel), dw, "dw", kGraphKernelsTolerance));
    EXPECT_TRUE(Close(h.Download(d_db, s.out_c), db, "db", kGraphKernelsTolerance));
    EXPECT_TRUE(Close(h.Download(d_dx, in), dx, "dx", kGraphKernelsTolerance));
  }
  EXPECT_EQ(h.Errors(), "");
}

TYPED_TEST_P(GraphKernelsConformanceTest, GlobalMaxPoolMatchesCpu) {
  auto& h = this->h_;
  const int batch = 5, pixels = 49, c = 7;
  const int64_t in = int64_t{batch} * pixels * c;
  for (bool ties : {false, true}) {
    SCOPED_TRACE(ties);
    const std::vector<float> x = ties ? Quantized(in, 13) : Random(in, 13);
    const std::vector<float> dy = Random(batch * c, 14);
    std::vector<float> y(batch * c), count(batch * c), dx(in);
    GlobalMaxPoolForward(batch, pixels, c, x.data(), y.data(), count.data());
    GlobalMaxPoolBackward(batch, pixels, c, x.data(), y.data(), count.data(), dy.data(), dx.data());
    const float* d_x = h.Upload(x);
    float* d_y = h.template Poisoned<float>(batch * c);
    float* d_count = h.template Poisoned<float>(batch * c);
    float* d_dx = h.template Poisoned<float>(in);
    this->kernels_->GlobalMaxPoolForward(batch, pixels, c, d_x, d_y, d_count);
    this->kernels_->GlobalMaxPoolBackward(batch, pixels, c, d_x, d_y, d_count, h.Upload(dy), d_dx);
    EXPECT_EQ(h.Download(d_y, batch * c), y);
    EXPECT_EQ(h.Download(d_count, batch * c), count);
    EXPECT_TRUE(Close(h.Download(d_dx, in), dx, "dx", kGraphKernelsTolerance));
  }
  EXPECT_EQ(h.Errors(), "");
}

TYPED_TEST_P(GraphKernelsConformanceTest, LayerNormMatchesCpu) {
  auto& h = this->h_;
  const int64_t rows = 300;
  const int c = 24;
  const float eps = 1e-3f;
  const std::vector<float> x = Random(rows * c, 15, -2.0f, 3.0f), gamma = Random(c, 16),
                           beta = Random(c, 17), dy = Random(rows * c, 18);
  for (bool affine : {true, false}) {
    SCOPED_TRACE(affine);
    const float* g = affine ? gamma.data() : nullptr;
    std::vector<float> y(rows * c), mean(rows), rstd(rows), dx(rows * c), dgamma(c), dbeta(c);
    LayerNormForward(rows, c, x.data(), g, affine ? beta.data() : nullptr, eps, mean.data(),
                     rstd.data(), y.data());
    LayerNormBackward(rows, c, x.data(), dy.data(), mean.data(), rstd.data(), g,
                      affine ? dgamma.data() : nullptr, affine ? dbeta.data() : nullptr, dx.data());
    const float* d_x = h.Upload(x);
    const float* d_gamma = affine ? h.Upload(gamma) : nullptr;
    float* d_y = h.template Poisoned<float>(rows * c);
    float* d_mean = h.template Poisoned<float>(rows);
    float* d_rstd = h.template Poisoned<float>(rows);
    float* d_dx = h.template Poisoned<float>(rows * c);
    float* d_dgamma = affine ? h.template Poisoned<float>(c) : nullptr;
    float* d_dbeta = affine ? h.template Poisoned<float>(c) : nullptr;
    float* ws = h.template Poisoned<float>(parallel::LayerNormBackwardWorkspace(rows, c));
    this->kernels_->LayerNormForward(rows, c, d_x, d_gamma, affine ? h.Upload(beta) : nullptr, eps,
                                     d_mean, d_rstd, d_y);
    this->kernels_->LayerNormBackward(rows, c, d_x, h.Upload(dy), d_mean, d_rstd, d_gamma, d_dgamma,
                                      d_dbeta, d_dx, ws);
    EXPECT_TRUE(Close(h.Download(d_y, rows * c), y, "y", kGraphKernelsTolerance));
    EXPECT_TRUE(Close(h.Download(d_mean, rows), mean, "mean", kGraphKernelsTolerance));
    EXPECT_TRUE(Close(h.Download(d_rstd, rows), rstd, "rstd", kGraphKernelsTolerance));
    EXPECT_TRUE(Close(h.Download(d_dx, rows * c), dx, "dx", kGraphKernelsTolerance));
    if (affine) {
      EXPECT_TRUE(Close(h.Download(d_dgamma, c), dgamma, "dgamma", kGraphKernelsTolerance));
      EXPECT_TRUE(Close(h.Download(d_dbeta, c), dbeta, "dbeta", kGraphKernelsTolerance));
    }
  }
  EXPECT_EQ(h.Errors(), "");
}

TYPED_TEST_P(GraphKernelsConformanceTest, RescaleAndRegularizerMatchCpu) {
  auto& h = this->h_;
  const int64_t n = 5000;  // three levels of the loss's sums
  std::vector<float> w = Random(n, 19);
  w[10] = 0.0f;
  const float l1 = 0.003f, l2 = 0.02f;
  std::vector<float> y(n), dw = Random(n, 20);
  const std::vector<float> dw_in = dw;
  RescaleForward(n, 0.25f, -1.5f, w.data(), y.data());
  RegularizerGrad(n, l1, l2, w.data(), dw.data());
  const double loss = RegularizerLoss(n, l1, l2, w.data());
  const float* d_w = h.Upload(w);
  float* d_y = h.template Poisoned<float>(n);
  float* d_dw = h.Upload(dw_in);
  float* d_loss = h.template Poisoned<float>(1);
  float* ws = h.template Poisoned<float>(parallel::RegularizerLossWorkspace(n));
  this->kernels_->Rescale(n, 0.25f, -1.5f, d_w, d_y);
  this->kernels_->RegularizerGrad(n, l1, l2, d_w, d_dw);
  this->kernels_->RegularizerLoss(n, l1, l2, d_w, d_loss, ws);
  EXPECT_EQ(h.Download(d_y, n), y);
  EXPECT_TRUE(Close(h.Download(d_dw, n), dw, "dw", kGraphKernelsTolerance));
  EXPECT_NEAR(h.Download(d_loss, 1)[0], loss, loss * kGraphKernelsTolerance);
  EXPECT_EQ(h.Errors(), "");
}

REGISTER_TYPED_TEST_SUITE_P(GraphKernelsConformanceTest, ActivationsMatchCpu, ZeroPad2DMatchesCpu,
                            DepthwiseConvMatchesCpu, DilatedConvMatchesCpu, GlobalMaxPoolMatchesCpu,
                            LayerNormMatchesCpu, RescaleAndRegularizerMatchCpu);

}  // namespace conformance
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_TESTING_GRAPH_KERNELS_CONFORMANCE_H_
