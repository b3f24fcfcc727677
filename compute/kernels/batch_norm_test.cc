// batch_norm.h's CPU passes against float64 definitions written here, and
// its fused ReLU passes against the separate layers, bit for bit.
#include "compute/kernels/batch_norm.h"

#include <cmath>
#include <vector>

#include "compute/kernels/activation.h"
#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

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
