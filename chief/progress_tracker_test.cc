#include "chief/progress_tracker.h"

#include <limits>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

ProgressReport Report(int worker, int epoch, int64_t examples, float loss, bool done) {
  ProgressReport r;
  r.set_worker_index(worker);
  r.set_epoch(epoch);
  r.set_examples(examples);
  r.set_loss(loss);
  r.set_accuracy(0.5f);
  r.set_global_version(examples / 10);
  r.set_done(done);
  r.set_epoch_examples(1000);
  return r;
}

TEST(ProgressTrackerTest, AggregatesWorkersAndEstimatesEta) {
  absl::Time t0 = absl::UnixEpoch();
  ProgressTracker t(2, 2, t0);
  EXPECT_TRUE(t.Record(Report(0, 0, 250, 1.0f, false)));
  EXPECT_TRUE(t.Record(Report(1, 0, 250, 3.0f, false)));
  Progress p = t.Snapshot(t0 + absl::Seconds(1));
  EXPECT_EQ(p.epoch, 1);
  EXPECT_EQ(p.examples, 500);
  EXPECT_DOUBLE_EQ(p.loss, 2.0);
  EXPECT_DOUBLE_EQ(p.examples_per_s, 500.0);
  // 1500 examples left at 500/s.
  EXPECT_DOUBLE_EQ(p.eta_s, 3.0);
  EXPECT_EQ(p.workers_done, 0);
}

TEST(ProgressTrackerTest, CountsTheWorkersDone) {
  absl::Time t0 = absl::UnixEpoch();
  ProgressTracker t(2, 1, t0);
  t.Record(Report(0, 0, 500, 1.0f, true));
  Progress p = t.Snapshot(t0 + absl::Seconds(1));
  EXPECT_EQ(p.workers_done, 1);
  EXPECT_EQ(p.epoch, 1);
  t.Record(Report(1, 0, 500, 1.0f, true));
  p = t.Snapshot(t0 + absl::Seconds(2));
  EXPECT_EQ(p.workers_done, 2);
  EXPECT_EQ(ProgressTracker::Format(p),
            "epoch 1/1 step 50 examples 1000 examples/s 500 loss 1.0000 acc 0.5000 eta 0s "
            "(2/2 workers done)");
}

// Counts are what workers report: sums that would overflow saturate (they
// were signed overflow; found by fuzz/chief_fuzzer).
TEST(ProgressTrackerTest, HugeReportedCountsSaturate) {
  ProgressTracker t(2, 3, absl::UnixEpoch());
  ProgressReport a = Report(0, 0, std::numeric_limits<int64_t>::max(), 0.5f, false);
  a.set_epoch_examples(std::numeric_limits<int64_t>::max());
  ProgressReport b = Report(1, 0, std::numeric_limits<int64_t>::max(), 0.5f, false);
  ASSERT_TRUE(t.Record(a));
  ASSERT_TRUE(t.Record(b));
  const Progress p = t.Snapshot(absl::UnixEpoch() + absl::Seconds(1));
  EXPECT_EQ(p.examples, std::numeric_limits<int64_t>::max());
  EXPECT_GE(p.eta_s, 0);
}

TEST(ProgressTrackerTest, RejectsOutOfRangeWorker) {
  ProgressTracker t(1, 1, absl::UnixEpoch());
  EXPECT_FALSE(t.Record(Report(3, 0, 1, 1, false)));
}

TEST(ProgressTrackerTest, FormatNamesEveryFigure) {
  Progress p;
  p.epoch = 2;
  p.epochs = 5;
  p.global_step = 468;
  p.examples_per_s = 5123;
  p.loss = 0.0412;
  p.accuracy = 0.9871;
  p.eta_s = 23;
  EXPECT_EQ(ProgressTracker::Format(p),
            "epoch 2/5 step 468 examples 0 examples/s 5123 loss 0.0412 acc 0.9871 eta 23s");
}

}  // namespace
}  // namespace pscluster
