#include "chief/worker_liveness.h"

#include "gtest/gtest.h"

namespace pscluster {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(WorkerLivenessTest, EveryWorkerStartsAliveAndRunning) {
  WorkerLiveness l(3, kT0);
  for (int w = 0; w < 3; ++w) {
    EXPECT_TRUE(l.alive(w));
    EXPECT_FALSE(l.finished(w));
    EXPECT_TRUE(l.running(w));
  }
  EXPECT_TRUE(l.AnyRunning());
}

TEST(WorkerLivenessTest, AWorkerSilentLongerThanTheTimeoutIsLostOnce) {
  WorkerLiveness l(2, kT0);
  EXPECT_FALSE(l.Touch(0, 7, kT0 + absl::Seconds(4)));
  EXPECT_TRUE(l.FindSilent(kT0 + absl::Seconds(3), absl::Seconds(3)).empty());  // not longer
  std::vector<WorkerLiveness::Silent> lost = l.FindSilent(kT0 + absl::Seconds(5), absl::Seconds(3));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].worker, 1);
  EXPECT_EQ(lost[0].silent_for, absl::Seconds(5));
  EXPECT_FALSE(l.alive(1));
  EXPECT_TRUE(l.alive(0));
  // Lost already: not again.
  EXPECT_TRUE(l.FindSilent(kT0 + absl::Seconds(60), absl::Seconds(100)).empty());
  l.MarkBack(1);
  EXPECT_TRUE(l.running(1));
}

TEST(WorkerLivenessTest, ResetContactRestartsEveryClock) {
  WorkerLiveness l(2, kT0);
  l.ResetContact(kT0 + absl::Seconds(10));
  EXPECT_TRUE(l.FindSilent(kT0 + absl::Seconds(12), absl::Seconds(3)).empty());
  EXPECT_EQ(l.FindSilent(kT0 + absl::Seconds(14), absl::Seconds(3)).size(), 2u);
}

TEST(WorkerLivenessTest, ANewProcessInALiveWorkersPlaceMeansTheOldOneDied) {
  WorkerLiveness l(1, kT0);
  EXPECT_FALSE(l.Touch(0, 5, kT0));  // the first contact
  EXPECT_FALSE(l.Touch(0, 5, kT0));  // the same process
  EXPECT_TRUE(l.Touch(0, 6, kT0));   // restarted
  EXPECT_FALSE(l.alive(0));
  // Already lost: its next contacts say nothing new until it is back.
  EXPECT_FALSE(l.Touch(0, 6, kT0));
  l.MarkBack(0);
  EXPECT_FALSE(l.Touch(0, 6, kT0));
  EXPECT_TRUE(l.alive(0));
}

TEST(WorkerLivenessTest, FinishedWorkersAreNotWatched) {
  WorkerLiveness l(2, kT0);
  EXPECT_TRUE(l.MarkFinished(0));
  EXPECT_FALSE(l.MarkFinished(0));
  EXPECT_FALSE(l.running(0));
  std::vector<WorkerLiveness::Silent> lost = l.FindSilent(kT0 + absl::Minutes(1), absl::Seconds(3));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].worker, 1);
  // One finished, one lost: nobody is running.
  EXPECT_FALSE(l.AnyRunning());
  l.MarkBack(0);
  EXPECT_TRUE(l.running(0));
}

}  // namespace
}  // namespace pscluster
