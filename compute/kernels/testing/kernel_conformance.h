// A typed gtest suite that checks a device's layer kernels against the CPU
// kernels (the oracle) on random inputs: every forward and backward kernel
// of every layer, several shapes each. Outputs and workspaces are poisoned
// (every byte 0xFF: NaN floats, -1 ints) before each run, so an element a
// kernel fails to write shows up. Floats must agree to a relative error of
// 1e-4 (max |got - want| over max |want|); integers exactly.
//
// A harness type H instantiates the suite:
//   using Device = ...;                      // the kernels' device tag
//   static std::string SkipReason();         // non-empty: skip, saying why
//   const Device& device() const;
//   T* Upload<T>(const std::vector<T>&);     // device copy, owned by H
//   T* Poisoned<T>(int64_t n);               // n elements of 0xFF bytes
//   std::vector<T> Download<T>(const T*, int64_t n);  // waits for the work
//   std::string Errors();  // waits; the first failed call, or ""
// and a test file says
//   INSTANTIATE_TYPED_TEST_SUITE_P(Name, KernelConformanceTest,
//                                  ::testing::Types<H>);
#ifndef PSCLUSTER_COMPUTE_KERNELS_TESTING_KERNEL_CONFORMANCE_H_
#define PSCLUSTER_COMPUTE_KERNELS_TESTING_KERNEL_CONFORMANCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "compute/kernels/bias_activation.h"
#include "compute/kernels/conv2d.h"
#include "compute/kernels/dense.h"
#include "compute/kernels/device.h"
#include "compute/kernels/maxpool2d.h"
#include "compute/kernels/softmax_xent.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace conformance {

constexpr double kTolerance = 1e-4;

inline std::vector<float> Random(int64_t n, uint32_t seed, float lo = -1.0f,
                                 float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Values on a coarse grid, so that max pooling windows hold ties.
inline std::vector<float> Quantized(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 5) - 2);
  return v;
}

// Max |got - want| / max |want| within tolerance, and nothing left unwritten
// (NaN) in `got`.
inline ::testing::AssertionResult Close(const std::vector<float>& got,
                                        const std::vector<float>& want,
                                        const std::string& what,
                                        double tolerance = kTolerance) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " elements, want " << want.size();
  }
  double scale = 0.0, worst = 0.0;
  int64_t worst_at = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(double{want[i]}));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && !std::isnan(want[i])) {
      return ::testing::AssertionFailure()
             << what << "[" << i << "] is NaN (not written?), want " << want[i];
    }
    const double diff = std::fabs(double{got[i]} - want[i]);
    if (diff > worst) {
      worst = diff;
      worst_at = static_cast<int64_t>(i);
    }
  }
  if (worst > tolerance * std::max(scale, 1e-30)) {
    return ::testing::AssertionFailure()
           << what << ": relative error " << worst / scale << " at ["
           << worst_at << "]: got " << got[worst_at] << ", want "
           << want[worst_at] << " (largest |want| " << scale << ")";
  }
  return ::testing::AssertionSuccess();
}

template <typename H>
class KernelConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = H::SkipReason();
    if (!why.empty()) GTEST_SKIP() << "[gpu] " << why;
  }
};

TYPED_TEST_SUITE_P(KernelConformanceTest);

TYPED_TEST_P(KernelConformanceTest, BiasActivationForwardMatchesCpu) {
  using D = typename TypeParam::Device;
  for (bool relu : {false, true}) {
    const int64_t rows = 37;
    const int cols = 19;
    const std::vector<float> bias = Random(cols, 1);
    std::vector<float> want = Random(rows * cols, 2);
    TypeParam h;
    float* y = h.Upload(want);
    BiasActivationForward<D>()(h.device(), rows, cols, h.Upload(bias), relu, y);
    BiasActivationForward<CpuDevice>()(CpuDevice(), rows, cols, bias.data(),
                                       relu, want.data());
    EXPECT_TRUE(Close(h.Download(y, rows * cols), want, "y"));
    EXPECT_EQ(h.Errors(), "");
  }
}

TYPED_TEST_P(KernelConformanceTest, BiasGradMatchesCpu) {
  using D = typename TypeParam::Device;
  // One level of partial sums (64 rows), two, and three (> 64 * 64 rows).
  for (const int64_t rows : {int64_t{64}, int64_t{1000}, int64_t{70000}})
  for (bool accumulate : {false, true}) {
    const int cols = 24;
    const std::vector<float> dy = Random(rows * cols, 3);
    std::vector<float> want = Random(cols, 4);
    TypeParam h;
    float* db = accumulate ? h.Upload(want) : h.template Poisoned<float>(cols);
    BiasGrad<D>()(h.device(), rows, cols, h.Upload(dy), accumulate, db,
                  h.template Poisoned<float>(BiasGrad<D>::WorkspaceSize(rows, cols)));
    BiasGrad<CpuDevice>()(CpuDevice(), rows, cols, dy.data(), accumulate,
                          want.data());
    EXPECT_TRUE(Close(h.Download(db, cols), want, "db"))
        << rows << " rows, accumulate " << accumulate;
    EXPECT_EQ(h.Errors(), "");
  }
}

TYPED_TEST_P(KernelConformanceTest, ReluGradMatchesCpu) {
  using D = typename TypeParam::Device;
  const int64_t n = 1001;
  std::vector<float> y = Random(n, 5);
  for (int64_t i = 0; i < n; i += 7) y[i] = 0.0f;  // the kink: gradient 0
  std::vector<float> want = Random(n, 6);
  TypeParam h;
  float* dy = h.Upload(want);
  ReluGrad<D>()(h.device(), n, h.Upload(y), dy);
  ReluGrad<CpuDevice>()(CpuDevice(), n, y.data(), want.data());
  EXPECT_TRUE(Close(h.Download(dy, n), want, "dy"));
  EXPECT_EQ(h.Errors(), "");
}

TYPED_TEST_P(KernelConformanceTest, DenseForwardMatchesCpu) {
  using D = typename TypeParam::Device;
  for (const DenseShape& s : {DenseShape{7, 50, 13}, DenseShape{1, 1600, 64},
                              DenseShape{128, 64, 10}}) {
    for (bool relu : {false, true}) {
      const std::vector<float> x = Random(int64_t{s.batch} * s.in, 7);
      const std::vector<float> w = Random(int64_t{s.in} * s.out, 8);
      const std::vector<float> b = Random(s.out, 9);
      std::vector<float> want(int64_t{s.batch} * s.out);
      DenseForward<CpuDevice>()(CpuDevice(), s, x.data(), w.data(), b.data(),
                                relu, want.data());
      TypeParam h;
      float* y = h.template Poisoned<float>(want.size());
      DenseForward<D>()(h.device(), s, h.Upload(x), h.Upload(w), h.Upload(b),
                        relu, y);
      EXPECT_TRUE(Close(h.Download(y, want.size()), want, "y"))
          << s.batch << "x" << s.in << "->" << s.out << " relu " << relu;
      EXPECT_EQ(h.Errors(), "");
    }
  }
}

TYPED_TEST_P(KernelConformanceTest, DenseBackwardMatchesCpu) {
  using D = typename TypeParam::Device;
  for (const DenseShape& s :
       {DenseShape{7, 50, 13}, DenseShape{128, 1600, 64}}) {
    for (int mode = 0; mode < 3; ++mode) {  // plain, accumulate, no dx
      const bool accumulate = mode == 1;
      const bool with_dx = mode != 2;
      const std::vector<float> x = Random(int64_t{s.batch} * s.in, 10);
      const std::vector<float> w = Random(int64_t{s.in} * s.out, 11);
      const std::vector<float> dy = Random(int64_t{s.batch} * s.out, 12);
      std::vector<float> want_dw = Random(int64_t{s.in} * s.out, 13);
      std::vector<float> want_db = Random(s.out, 14);
      std::vector<float> want_dx(int64_t{s.batch} * s.in);
      TypeParam h;
      float* dw = accumulate ? h.Upload(want_dw)
                             : h.template Poisoned<float>(want_dw.size());
      float* db = accumulate ? h.Upload(want_db)
                             : h.template Poisoned<float>(want_db.size());
      float* dx =
          with_dx ? h.template Poisoned<float>(want_dx.size()) : nullptr;
      DenseBackward<D>()(
          h.device(), s, h.Upload(x), h.Upload(w), h.Upload(dy), accumulate, dw,
          db, dx,
          h.template Poisoned<float>(DenseBackward<D>::WorkspaceSize(s)));
      DenseBackward<CpuDevice>()(CpuDevice(), s, x.data(), w.data(), dy.data(),
                                 accumulate, want_dw.data(), want_db.data(),
                                 with_dx ? want_dx.data() : nullptr);
      const std::string what =
          "batch " + std::to_string(s.batch) + " mode " + std::to_string(mode);
      EXPECT_TRUE(Close(h.Download(dw, want_dw.size()), want_dw, "dw")) << what;
      EXPECT_TRUE(Close(h.Download(db, want_db.size()), want_db, "db")) << what;
      if (with_dx) {
        EXPECT_TRUE(Close(h.Download(dx, want_dx.size()), want_dx, "dx"))
            << what;
      }
      EXPECT_EQ(h.Errors(), "");
    }
  }
}

// Single-channel (the CPU's direct path), few channels, the CNN's second
// layer at a small batch, and other kernel sizes.
inline std::vector<Conv2DShape> ConvShapes() {
  return {Conv2DShape{3, 12, 10, 1, 3, 8}, Conv2DShape{2, 28, 28, 1, 3, 32},
          Conv2DShape{2, 9, 9, 5, 3, 7},   Conv2DShape{2, 13, 13, 32, 3, 64},
          Conv2DShape{3, 6, 7, 4, 1, 5},   Conv2DShape{1, 9, 8, 3, 5, 6}};
}

inline std::string Describe(const Conv2DShape& s) {
  return std::to_string(s.batch) + "x" + std::to_string(s.in_h) + "x" +
         std::to_string(s.in_w) + "x" + std::to_string(s.in_c) + " k" +
         std::to_string(s.kernel) + " -> " + std::to_string(s.out_c);
}

TYPED_TEST_P(KernelConformanceTest, Conv2DForwardMatchesCpu) {
  using D = typename TypeParam::Device;
  for (const Conv2DShape& s : ConvShapes()) {
    for (bool relu : {false, true}) {
      const std::vector<float> x =
          Random(int64_t{s.batch} * s.in_h * s.in_w * s.in_c, 15, 0.0f, 1.0f);
      const std::vector<float> w =
          Random(int64_t{s.patch_size()} * s.out_c, 16);
      const std::vector<float> b = Random(s.out_c, 17);
      std::vector<float> want(s.out_pixels() * s.out_c);
      std::vector<float> cpu_ws(
          std::max<int64_t>(1, Conv2DForward<CpuDevice>::WorkspaceSize(s)));
      Conv2DForward<CpuDevice>()(CpuDevice(), s, x.data(), w.data(), b.data(),
                                 relu, want.data(), cpu_ws.data());
      TypeParam h;
      float* y = h.template Poisoned<float>(want.size());
      Conv2DForward<D>()(
          h.device(), s, h.Upload(x), h.Upload(w), h.Upload(b), relu, y,
          h.template Poisoned<float>(Conv2DForward<D>::WorkspaceSize(s)));
      EXPECT_TRUE(Close(h.Download(y, want.size()), want, "y"))
          << Describe(s) << " relu " << relu;
      EXPECT_EQ(h.Errors(), "");
    }
  }
}

TYPED_TEST_P(KernelConformanceTest, Conv2DBackwardFilterMatchesCpu) {
  using D = typename TypeParam::Device;
  for (const Conv2DShape& s : ConvShapes()) {
    // 0: columns built here; 1: columns left by a forward; 2: 1 + accumulate.
    for (int mode = 0; mode < 3; ++mode) {
      const bool columns_ready = mode > 0;
      const bool accumulate = mode == 2;
      const std::vector<float> x =
          Random(int64_t{s.batch} * s.in_h * s.in_w * s.in_c, 18, 0.0f, 1.0f);
      const std::vector<float> w =
          Random(int64_t{s.patch_size()} * s.out_c, 19);
      const std::vector<float> b = Random(s.out_c, 20);
      const std::vector<float> dy = Random(s.out_pixels() * s.out_c, 21);
      const std::vector<float> prior_dw =
          Random(int64_t{s.patch_size()} * s.out_c, 22);
      const std::vector<float> prior_db = Random(s.out_c, 23);
      TypeParam h;
      const int64_t ws_size =
          std::max(Conv2DForward<D>::WorkspaceSize(s),
                   Conv2DBackwardFilter<D>::WorkspaceSize(s));
      float* ws = h.template Poisoned<float>(ws_size);
      const float* dev_x = h.Upload(x);
      if (columns_ready) {
        Conv2DForward<D>()(h.device(), s, dev_x, h.Upload(w), h.Upload(b), true,
                           h.template Poisoned<float>(dy.size()), ws);
      }
      float* dw = accumulate ? h.Upload(prior_dw)
                             : h.template Poisoned<float>(prior_dw.size());
      float* db = accumulate ? h.Upload(prior_db)
                             : h.template Poisoned<float>(prior_db.size());
      Conv2DBackwardFilter<D>()(h.device(), s, dev_x, h.Upload(dy), accumulate,
                                columns_ready, dw, db, ws);
      std::vector<float> want_dw = prior_dw, want_db = prior_db;
      std::vector<float> cpu_ws(std::max<int64_t>(
          1, Conv2DBackwardFilter<CpuDevice>::WorkspaceSize(s)));
      Conv2DBackwardFilter<CpuDevice>()(CpuDevice(), s, x.data(), dy.data(),
                                        accumulate, /*columns_ready=*/false,
                                        want_dw.data(), want_db.data(),
                                        cpu_ws.data());
      const std::string what = Describe(s) + " mode " + std::to_string(mode);
      EXPECT_TRUE(Close(h.Download(dw, want_dw.size()), want_dw, "dw")) << what;
      EXPECT_TRUE(Close(h.Download(db, want_db.size()), want_db, "db")) << what;
      EXPECT_EQ(h.Errors(), "");
    }
  }
}

TYPED_TEST_P(KernelConformanceTest, Conv2DBackwardInputMatchesCpu) {
  using D = typename TypeParam::Device;
  for (const Conv2DShape& s : ConvShapes()) {
    const std::vector<float> w = Random(int64_t{s.patch_size()} * s.out_c, 24);
    const std::vector<float> dy = Random(s.out_pixels() * s.out_c, 25);
    std::vector<float> want(int64_t{s.batch} * s.in_h * s.in_w * s.in_c);
    std::vector<float> cpu_ws(
        std::max<int64_t>(1, Conv2DBackwardInput<CpuDevice>::WorkspaceSize(s)));
    Conv2DBackwardInput<CpuDevice>()(CpuDevice(), s, w.data(), dy.data(),
                                     want.data(), cpu_ws.data());
    TypeParam h;
    float* dx = h.template Poisoned<float>(want.size());
    Conv2DBackwardInput<D>()(
        h.device(), s, h.Upload(w), h.Upload(dy), dx,
        h.template Poisoned<float>(Conv2DBackwardInput<D>::WorkspaceSize(s)));
    EXPECT_TRUE(Close(h.Download(dx, want.size()), want, "dx")) << Describe(s);
    EXPECT_EQ(h.Errors(), "");
  }
}

// Even and odd sides (odd ones drop an edge), pool 2 and 3.
inline std::vector<MaxPool2DShape> PoolShapes() {
  return {MaxPool2DShape{3, 26, 26, 32, 2}, MaxPool2DShape{2, 11, 11, 64, 2},
          MaxPool2DShape{2, 7, 9, 5, 3}, MaxPool2DShape{1, 5, 4, 3, 2}};
}

TYPED_TEST_P(KernelConformanceTest, MaxPool2DForwardMatchesCpu) {
  using D = typename TypeParam::Device;
  for (const MaxPool2DShape& s : PoolShapes()) {
    for (bool ties : {false, true}) {
      const int64_t in = int64_t{s.batch} * s.in_h * s.in_w * s.channels;
      const std::vector<float> x = ties ? Quantized(in, 26) : Random(in, 27);
      std::vector<float> want(s.out_size());
      std::vector<int32_t> want_at(s.out_size());
      MaxPool2DForward<CpuDevice>()(CpuDevice(), s, x.data(), want.data(),
                                    want_at.data());
      TypeParam h;
      float* y = h.template Poisoned<float>(want.size());
      int32_t* at = h.template Poisoned<int32_t>(want.size());
      MaxPool2DForward<D>()(h.device(), s, h.Upload(x), y, at);
      EXPECT_TRUE(Close(h.Download(y, want.size()), want, "y"))
          << s.in_h << "x" << s.in_w << " pool " << s.pool;
      EXPECT_EQ(h.Download(at, want.size()), want_at)
          << s.in_h << "x" << s.in_w << " pool " << s.pool << " ties " << ties;
      EXPECT_EQ(h.Errors(), "");
    }
  }
}

TYPED_TEST_P(KernelConformanceTest, MaxPool2DBackwardMatchesCpu) {
  using D = typename TypeParam::Device;
  for (const MaxPool2DShape& s : PoolShapes()) {
    const int64_t in = int64_t{s.batch} * s.in_h * s.in_w * s.channels;
    const std::vector<float> x = Random(in, 28);
    std::vector<float> y(s.out_size());
    std::vector<int32_t> at(s.out_size());
    MaxPool2DForward<CpuDevice>()(CpuDevice(), s, x.data(), y.data(),
                                  at.data());
    const std::vector<float> dy = Random(s.out_size(), 29);
    std::vector<float> want(in);
    MaxPool2DBackward<CpuDevice>()(CpuDevice(), s, dy.data(), at.data(),
                                   want.data());
    TypeParam h;
    float* dx = h.template Poisoned<float>(in);
    MaxPool2DBackward<D>()(h.device(), s, h.Upload(dy), h.Upload(at), dx);
    EXPECT_TRUE(Close(h.Download(dx, in), want, "dx"))
        << s.in_h << "x" << s.in_w << " pool " << s.pool;
    EXPECT_EQ(h.Errors(), "");
  }
}

// The pooling gradient with the ReLU below it fused in (relu_y) equals the
// CPU's two passes: pooling gradient, then ReluGrad on the pool's input.
TYPED_TEST_P(KernelConformanceTest, MaxPool2DBackwardWithReluMatchesCpu) {
  using D = typename TypeParam::Device;
  for (const MaxPool2DShape& s : PoolShapes()) {
    const int64_t in = int64_t{s.batch} * s.in_h * s.in_w * s.channels;
    // A ReLU's output: about half the cells 0, some windows all 0.
    std::vector<float> x = Random(in, 30);
    for (float& v : x) v = v > 0.0f ? v : 0.0f;
    std::vector<float> y(s.out_size());
    std::vector<int32_t> at(s.out_size());
    MaxPool2DForward<CpuDevice>()(CpuDevice(), s, x.data(), y.data(),
                                  at.data());
    const std::vector<float> dy = Random(s.out_size(), 31);
    std::vector<float> want(in);
    MaxPool2DBackward<CpuDevice>()(CpuDevice(), s, dy.data(), at.data(),
                                   want.data());
    ReluGrad<CpuDevice>()(CpuDevice(), in, x.data(), want.data());
    TypeParam h;
    float* dx = h.template Poisoned<float>(in);
    MaxPool2DBackward<D>()(h.device(), s, h.Upload(dy), h.Upload(at), dx,
                           h.Upload(y));
    EXPECT_TRUE(Close(h.Download(dx, in), want, "dx"))
        << s.in_h << "x" << s.in_w << " pool " << s.pool;
    EXPECT_EQ(h.Errors(), "");
  }
}

TYPED_TEST_P(KernelConformanceTest, SoftmaxCrossEntropyMatchesCpu) {
  using D = typename TypeParam::Device;
  struct Case {
    int batch, classes;
    bool with_grad;
  };
  for (const Case& c :
       {Case{1, 10, true}, Case{33, 10, true}, Case{100, 3, true},
        Case{500, 10, false}, Case{1024, 10, true}}) {
    const int64_t n = int64_t{c.batch} * c.classes;
    const std::vector<float> logits = Random(n, 30, -4.0f, 4.0f);
    std::mt19937 rng(31);
    std::vector<float> labels(c.batch);
    for (float& l : labels) l = static_cast<float>(rng() % c.classes);
    const float scale = 1.0f / c.batch;
    std::vector<float> want(n);
    double want_loss = 0;
    int want_correct = 0;
    SoftmaxCrossEntropy<CpuDevice>()(
        CpuDevice(), c.batch, c.classes, logits.data(), labels.data(), scale,
        c.with_grad ? want.data() : nullptr, &want_loss, &want_correct);
    TypeParam h;
    float* dlogits = c.with_grad ? h.template Poisoned<float>(n) : nullptr;
    double* loss = h.template Poisoned<double>(1);
    int* correct = h.template Poisoned<int>(1);
    SoftmaxCrossEntropy<D>()(
        h.device(), c.batch, c.classes, h.Upload(logits), h.Upload(labels),
        scale, dlogits, loss, correct,
        h.template Poisoned<char>(
            SoftmaxCrossEntropy<D>::WorkspaceBytes(c.batch)));
    const std::string what = "batch " + std::to_string(c.batch);
    if (c.with_grad) {
      EXPECT_TRUE(Close(h.Download(dlogits, n), want, "dlogits")) << what;
    }
    EXPECT_NEAR(h.Download(loss, 1)[0], want_loss, 1e-9 * want_loss) << what;
    EXPECT_EQ(h.Download(correct, 1)[0], want_correct) << what;
    EXPECT_EQ(h.Errors(), "");
  }
}

REGISTER_TYPED_TEST_SUITE_P(
    KernelConformanceTest, BiasActivationForwardMatchesCpu, BiasGradMatchesCpu,
    ReluGradMatchesCpu, DenseForwardMatchesCpu, DenseBackwardMatchesCpu,
    Conv2DForwardMatchesCpu, Conv2DBackwardFilterMatchesCpu,
    Conv2DBackwardInputMatchesCpu, MaxPool2DForwardMatchesCpu,
    MaxPool2DBackwardMatchesCpu, MaxPool2DBackwardWithReluMatchesCpu,
    SoftmaxCrossEntropyMatchesCpu);

}  // namespace conformance
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_TESTING_KERNEL_CONFORMANCE_H_
