#include "compute/scoring.h"

#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

// Predicts label 0 for every example with loss 1 + its first pixel, and
// records the batches it was given.
class FakeBackend : public ComputeBackend {
 public:
  absl::Status TrainStep(const float*, const Batch&, const Batch&, float*, float*, int*) override {
    return absl::UnimplementedError("not for scoring");
  }
  absl::Status Evaluate(const float* params, const Batch& batch, double* loss_sum,
                        int* correct, float* outputs) override {
    if (fail_at >= 0 && int(sizes.size()) == fail_at) return absl::InternalError("device lost");
    EXPECT_EQ(params, expected_params);
    sizes.push_back(batch.size);
    *loss_sum = 0;
    *correct = 0;
    for (int i = 0; i < batch.size; ++i) {
      *loss_sum += 1 + batch.images[i * pixels];
      *correct += batch.targets[i] == 0;
      // A probability that ranks the examples by their first pixel.
      if (outputs != nullptr) outputs[i] = batch.images[i * pixels];
    }
    return absl::OkStatus();
  }
  StepTimes last_step_times() const override { return {}; }
  std::string name() const override { return "fake"; }

  const float* expected_params = nullptr;
  int pixels = 1;
  int fail_at = -1;
  std::vector<int> sizes;
};

ModelSpec Spec() {
  ModelSpec spec;
  spec.num_classes = 2;
  return spec;
}

Dataset MakeData(int count, int pixels) {
  Dataset d;
  d.count = count;
  d.height = 1;
  d.width = pixels;
  d.images.assign(size_t(count) * pixels, 0.f);
  d.targets.assign(count, 1);
  for (int i = 0; i < count; ++i) {
    d.images[size_t(i) * pixels] = float(i % 2);  // loss 1 or 2
    if (i % 4 == 0) d.targets[i] = 0;              // a quarter correct
  }
  return d;
}

TEST(ScoreOnDatasetTest, EveryExampleOnceInBatchesOfTheScoringSize) {
  const Dataset data = MakeData(2 * kScoringBatch + 8, 3);
  const std::vector<float> params(4);
  FakeBackend backend;
  backend.expected_params = params.data();
  backend.pixels = 3;
  TestScore score;
  ASSERT_TRUE(ScoreOnDataset(backend, Spec(), params.data(), data, &score).ok());
  EXPECT_EQ(backend.sizes, (std::vector<int>{kScoringBatch, kScoringBatch, 8}));
  EXPECT_DOUBLE_EQ(score.accuracy, 252.0 / 1008);  // i % 4 == 0 for i < 1008
  EXPECT_DOUBLE_EQ(score.loss, 1.5);
  EXPECT_EQ(score.auc, -1);  // not a binary model
  EXPECT_EQ(score.examples, 1008);
}

// A binary model's accuracy counts every output; its AUC ranks them.
TEST(ScoreOnDatasetTest, BinaryModelsGetAnAuc) {
  const Dataset data = MakeData(kScoringBatch + 4, 1);
  FakeBackend backend;
  ModelSpec spec = Spec();
  spec.loss = LossKind::kBinaryCrossentropy;
  spec.num_classes = 1;
  TestScore score;
  ASSERT_TRUE(ScoreOnDataset(backend, spec, nullptr, data, &score).ok());
  // 504 examples, labels 0 at i % 4 == 0, scores i % 2: the positives
  // (label 1) are the 252 odd examples (score 1) and 126 even ones (score
  // 0); the 126 negatives all score 0. Pairs won 252 * 126, tied 126 * 126.
  EXPECT_NEAR(score.auc, (252.0 * 126 + 0.5 * 126 * 126) / (378.0 * 126), 1e-12);
  EXPECT_DOUBLE_EQ(score.accuracy, 126.0 / 504);  // the 0.5-threshold's right answers
}

TEST(ScoreOnDatasetTest, MetricsTextNamesTheLossesMetrics) {
  EXPECT_EQ(MetricsText(LossKind::kSparseCategoricalCrossentropy, 0.99123, -1, 0.029, "test_"),
            "test_accuracy=0.9912 test_loss=0.0290");
  EXPECT_EQ(MetricsText(LossKind::kBinaryCrossentropy, 0.9, 0.95, 0.2, ""),
            "accuracy=0.9000 auc=0.9500 loss=0.2000");
  EXPECT_EQ(MetricsText(LossKind::kMeanSquaredError, 0, -1, 0.5, "test_"),
            "test_mse=0.5000 test_loss=0.5000");
  EXPECT_EQ(MetricsText(LossKind::kMeanAbsoluteError, 0, -1, 0.5, ""), "mae=0.5000 loss=0.5000");
}

TEST(ScoreOnDatasetTest, ABackendErrorIsReturnedWithNothingWritten) {
  const Dataset data = MakeData(kScoringBatch + 1, 1);
  FakeBackend backend;
  backend.fail_at = 1;
  TestScore score;
  score.accuracy = -7;
  absl::Status s = ScoreOnDataset(backend, Spec(), nullptr, data, &score);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_EQ(score.accuracy, -7);
}

TEST(ScoreOnDatasetTest, AnEmptyDataSetIsRefused) {
  FakeBackend backend;
  TestScore score;
  absl::Status s = ScoreOnDataset(backend, Spec(), nullptr, Dataset{}, &score);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(backend.sizes.empty());
}

}  // namespace
}  // namespace pscluster
