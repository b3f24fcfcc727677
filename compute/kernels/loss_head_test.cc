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

// Keras's binary cross-entropy of probabilities (an ESMM product): y
// clipped to [1e-7, 1 - 1e-7], no gradient where the clip holds it.
TEST(LossHeadTest, BinaryCrossentropyOnProbabilities) {
  LossSpec loss;
  loss.num_groups = 1;
  loss.groups[0] = LossGroup{LossKind::kBinaryCrossentropy, 0, 2, 0, 1.0f, true};
  const std::vector<float> y = {0.25f, 0.9f, 1e-9f, 1.0f}, t = {1.0f, 0.0f, 1.0f, 1.0f};
  std::vector<float> grad(4), prob(4);
  double sum = 0;
  int right = 0;
  CpuLossHead(loss, 2, 2, y.data(), t.data(), 1.0f, grad.data(), prob.data(), &sum, &right);
  const double lo = 1e-7f, hi = 1.0f - 1e-7f;
  const double want =
      (-std::log(0.25) - std::log(1 - double{0.9f})) / 2 + (-std::log(lo) - std::log(hi)) / 2;
  EXPECT_NEAR(sum, want, 1e-9 * want);
  EXPECT_NEAR(grad[0], -1.0 / 0.25 / 2, 1e-6);
  EXPECT_NEAR(grad[1], 1.0 / (1 - double{0.9f}) / 2, 1e-5);
  EXPECT_EQ(grad[2], 0.0f);  // clipped at 1e-7
  EXPECT_EQ(grad[3], 0.0f);  // clipped at 1 - 1e-7
  EXPECT_EQ(prob, y);        // the outputs are the probabilities
  EXPECT_EQ(right, 1);       // only 1.0 for 1 is on the right side of 0.5
}

// Several outputs: each group's loss over its columns and targets, times
// its weight, summed; the gradient matches central differences.
TEST(LossHeadTest, SeveralOutputsAreWeightedGroups) {
  const int batch = 3, outputs = 6;  // 3 classes, 1 logit, 2 regression values
  LossSpec loss;
  loss.num_groups = 3;
  loss.groups[0] = LossGroup{LossKind::kSparseCategoricalCrossentropy, 0, 3, 0, 1.0f, false};
  loss.groups[1] = LossGroup{LossKind::kBinaryCrossentropy, 3, 1, 1, 2.0f, false};
  loss.groups[2] = LossGroup{LossKind::kMeanSquaredError, 4, 2, 2, 0.5f, false};
  ASSERT_EQ(TargetsPerExample(loss, outputs), 4);
  Stream s;
  std::vector<float> z(batch * outputs);
  for (float& v : z) v = 2 * s.Next();
  const std::vector<float> t = {2, 1, 0.5f, -1, 0, 0, 1.5f, 0.25f, 1, 1, -0.5f, 2};
  auto total = [&](const std::vector<float>& at, std::vector<float>* grad) {
    double sum = 0;
    int right = 0;
    CpuLossHead(loss, batch, outputs, at.data(), t.data(), 1.0f, grad ? grad->data() : nullptr,
                nullptr, &sum, &right);
    return sum;
  };
  double want = 0;
  for (int r = 0; r < batch; ++r) {
    std::vector<float> cls(z.begin() + r * 6, z.begin() + r * 6 + 3), one = {t[r * 4]};
    want += Loss(LossKind::kSparseCategoricalCrossentropy, 1, 3, cls, one);
    want += 2 * Loss(LossKind::kBinaryCrossentropy, 1, 1, {z[r * 6 + 3]}, {t[r * 4 + 1]});
    want += 0.5 * Loss(LossKind::kMeanSquaredError, 1, 2, {z[r * 6 + 4], z[r * 6 + 5]},
                       {t[r * 4 + 2], t[r * 4 + 3]});
  }
  EXPECT_NEAR(total(z, nullptr), want, 1e-9 * want);
  std::vector<float> grad(z.size());
  total(z, &grad);
  for (size_t i = 0; i < z.size(); ++i) {
    std::vector<float> up = z, down = z;
    up[i] += 1e-2f;
    down[i] -= 1e-2f;
    const double numeric = (total(up, nullptr) - total(down, nullptr)) / 2e-2;
    EXPECT_NEAR(grad[i], numeric, 2e-3 + 1e-3 * std::fabs(numeric)) << "output " << i;
  }
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
