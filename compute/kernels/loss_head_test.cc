// The loss head: each loss against its Keras formula written out naively in
// double, its gradient against central differences, sparse categorical
// cross-entropy against the softmax kernel the fused engine uses, one-hot
// categorical against sparse, and the right-answer counts.
#include "compute/kernels/loss_head.h"

#include <cmath>
#include <vector>

#include "compute/kernels/softmax_xent.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

// A deterministic stream in [-1, 1).
struct Stream {
  uint32_t s = 12345;
  float Next() {
    s = s * 1103515245u + 12345u;
    return static_cast<float>((s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
  }
};

double Loss(LossKind loss, int batch, int outputs, const std::vector<float>& out,
            const std::vector<float>& targets, std::vector<float>* grad = nullptr,
            int* right = nullptr, std::vector<float>* prob = nullptr) {
  double sum = 0;
  int r = 0;
  CpuLossHead(loss, batch, outputs, out.data(), targets.data(), 1.0f,
              grad ? grad->data() : nullptr, prob ? prob->data() : nullptr, &sum, &r);
  if (right) *right = r;
  return sum;
}

// d(summed loss)/d(out) by central differences.
void ExpectGradientMatchesDifferences(LossKind loss, int batch, int outputs,
                                      std::vector<float> out, const std::vector<float>& t) {
  std::vector<float> grad(out.size());
  Loss(loss, batch, outputs, out, t, &grad);
  for (size_t i = 0; i < out.size(); ++i) {
    const float keep = out[i];
    const float eps = 1e-2f;
    out[i] = keep + eps;
    const double up = Loss(loss, batch, outputs, out, t);
    out[i] = keep - eps;
    const double down = Loss(loss, batch, outputs, out, t);
    out[i] = keep;
    const double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(grad[i], numeric, 2e-3 + 1e-3 * std::fabs(numeric))
        << LossName(loss) << " output " << i;
  }
}

TEST(LossHeadTest, SparseCategoricalIsTheSoftmaxKernelsAndOneHotCategoricalTheSame) {
  const int batch = 7, classes = 5;
  Stream s;
  std::vector<float> z(batch * classes), sparse(batch), onehot(batch * classes, 0.0f);
  std::vector<float> labels(batch);
  for (float& v : z) v = 3 * s.Next();
  for (int r = 0; r < batch; ++r) {
    labels[r] = static_cast<float>((r * 3) % classes);
    sparse[r] = labels[r];
    onehot[r * classes + (r * 3) % classes] = 1.0f;
  }
  std::vector<float> want_grad(z.size()), grad(z.size()), grad_onehot(z.size());
  double want = 0;
  int want_right = 0;
  SoftmaxCrossEntropy<CpuDevice>()(CpuDevice(), batch, classes, z.data(), labels.data(), 1.0f,
                                   want_grad.data(), &want, &want_right);
  int right = 0, right_onehot = 0;
  EXPECT_NEAR(Loss(LossKind::kSparseCategoricalCrossentropy, batch, classes, z, sparse, &grad,
                   &right),
              want, 1e-9 * want);
  EXPECT_NEAR(Loss(LossKind::kCategoricalCrossentropy, batch, classes, z, onehot, &grad_onehot,
                   &right_onehot),
              want, 1e-9 * want);
  EXPECT_EQ(right, want_right);
  EXPECT_EQ(right_onehot, want_right);
  for (size_t i = 0; i < z.size(); ++i) {
    EXPECT_NEAR(grad[i], want_grad[i], 1e-6) << i;
    EXPECT_NEAR(grad_onehot[i], want_grad[i], 1e-6) << i;
  }
}

TEST(LossHeadTest, CategoricalWithSoftTargets) {
  const int batch = 3, classes = 4;
  Stream s;
  std::vector<float> z(batch * classes), t(batch * classes);
  for (float& v : z) v = 2 * s.Next();
  for (float& v : t) v = (s.Next() + 1) / 2;  // weights that do not sum to 1
  double want = 0;
  for (int r = 0; r < batch; ++r) {
    double norm = 0;
    for (int j = 0; j < classes; ++j) norm += std::exp(double{z[r * classes + j]});
    for (int j = 0; j < classes; ++j) {
      want -= t[r * classes + j] * std::log(std::exp(double{z[r * classes + j]}) / norm);
    }
  }
  EXPECT_NEAR(Loss(LossKind::kCategoricalCrossentropy, batch, classes, z, t), want, 1e-9);
  ExpectGradientMatchesDifferences(LossKind::kCategoricalCrossentropy, batch, classes, z, t);
}

TEST(LossHeadTest, BinaryCrossentropyOnLogits) {
  const int batch = 6, outputs = 3;
  Stream s;
  std::vector<float> z(batch * outputs), t(batch * outputs);
  for (float& v : z) v = 6 * s.Next();
  for (size_t i = 0; i < t.size(); ++i) t[i] = i % 4 == 3 ? 0.3f : (s.Next() > 0 ? 1.0f : 0.0f);
  z[0] = 40.0f;  // far in the tail: no overflow, no log(0)
  z[1] = -40.0f;
  double want = 0;
  int want_right = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    const double p = 1.0 / (1.0 + std::exp(-double{z[i]}));
    const double l = -(t[i] * std::log(p) + (1 - t[i]) * std::log1p(-p));
    want += std::isfinite(l) ? l / outputs : (z[i] > 0 ? (1 - t[i]) * z[i] : -t[i] * z[i]) / outputs;
    want_right += (p > 0.5) == (t[i] > 0.5f);
  }
  int right = 0;
  std::vector<float> prob(z.size());
  EXPECT_NEAR(Loss(LossKind::kBinaryCrossentropy, batch, outputs, z, t, nullptr, &right, &prob),
              want, 1e-7 * want);
  EXPECT_EQ(right, want_right);
  EXPECT_NEAR(prob[2], 1.0 / (1.0 + std::exp(-double{z[2]})), 1e-7);
  ExpectGradientMatchesDifferences(LossKind::kBinaryCrossentropy, batch, outputs, z, t);
}

TEST(LossHeadTest, MeanSquaredAndAbsoluteError) {
  const int batch = 4, outputs = 2;
  Stream s;
  std::vector<float> y(batch * outputs), t(batch * outputs);
  for (float& v : y) v = 5 * s.Next();
  for (float& v : t) v = 5 * s.Next();
  double mse = 0, mae = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d = double{y[i]} - t[i];
    mse += d * d / outputs;
    mae += std::fabs(d) / outputs;
  }
  int right = -1;
  EXPECT_NEAR(Loss(LossKind::kMeanSquaredError, batch, outputs, y, t, nullptr, &right), mse,
              1e-9 * mse);
  EXPECT_EQ(right, 0);
  EXPECT_NEAR(Loss(LossKind::kMeanAbsoluteError, batch, outputs, y, t), mae, 1e-9 * mae);
  ExpectGradientMatchesDifferences(LossKind::kMeanSquaredError, batch, outputs, y, t);
  ExpectGradientMatchesDifferences(LossKind::kMeanAbsoluteError, batch, outputs, y, t);
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
