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
                        int* correct) override {
    if (fail_at >= 0 && int(sizes.size()) == fail_at) return absl::InternalError("device lost");
    EXPECT_EQ(params, expected_params);
    sizes.push_back(batch.size);
    *loss_sum = 0;
    *correct = 0;
    for (int i = 0; i < batch.size; ++i) {
      *loss_sum += 1 + batch.images[i * pixels];
      *correct += batch.labels[i] == 0;
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

Dataset MakeData(int count, int pixels) {
  Dataset d;
  d.count = count;
  d.height = 1;
  d.width = pixels;
  d.images.assign(size_t(count) * pixels, 0.f);
  d.labels.assign(count, 1);
  for (int i = 0; i < count; ++i) {
    d.images[size_t(i) * pixels] = float(i % 2);  // loss 1 or 2
    if (i % 4 == 0) d.labels[i] = 0;              // a quarter correct
  }
  return d;
}

TEST(ScoreOnDatasetTest, EveryExampleOnceInBatchesOfTheScoringSize) {
  const Dataset data = MakeData(2 * kScoringBatch + 8, 3);
  const std::vector<float> params(4);
  FakeBackend backend;
  backend.expected_params = params.data();
  backend.pixels = 3;
  double accuracy = -1, loss = -1;
  ASSERT_TRUE(ScoreOnDataset(backend, params.data(), data, &accuracy, &loss).ok());
  EXPECT_EQ(backend.sizes, (std::vector<int>{kScoringBatch, kScoringBatch, 8}));
  EXPECT_DOUBLE_EQ(accuracy, 252.0 / 1008);  // i % 4 == 0 for i < 1008
  EXPECT_DOUBLE_EQ(loss, 1.5);
}

TEST(ScoreOnDatasetTest, ABackendErrorIsReturnedWithNothingWritten) {
  const Dataset data = MakeData(kScoringBatch + 1, 1);
  FakeBackend backend;
  backend.fail_at = 1;
  double accuracy = -1, loss = -1;
  absl::Status s = ScoreOnDataset(backend, nullptr, data, &accuracy, &loss);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_EQ(accuracy, -1);
  EXPECT_EQ(loss, -1);
}

TEST(ScoreOnDatasetTest, AnEmptyDataSetIsRefused) {
  FakeBackend backend;
  double accuracy = -1, loss = -1;
  absl::Status s = ScoreOnDataset(backend, nullptr, Dataset{}, &accuracy, &loss);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(backend.sizes.empty());
}

}  // namespace
}  // namespace pscluster
