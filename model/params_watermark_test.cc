#include "model/params_watermark.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(ParamsWatermarkTest, APrefixIsInOnlyOnceEveryPieceOfItIs) {
  ParamsWatermark w(100);
  EXPECT_EQ(w.arrived(), 100);  // the first weights come whole
  EXPECT_EQ(w.complete_at(), absl::InfinitePast());
  EXPECT_TRUE(w.WaitArrived(100, absl::InfinitePast()).ok());
  w.Reset();
  EXPECT_EQ(w.arrived(), 0);
  EXPECT_TRUE(absl::IsDeadlineExceeded(w.WaitArrived(1, absl::InfinitePast())));
  EXPECT_TRUE(w.WaitArrived(0, absl::InfinitePast()).ok());
  w.MarkArrived(40, 60);  // another ps's shard, before the first one's
  EXPECT_EQ(w.arrived(), 0);
  w.MarkArrived(0, 30);
  EXPECT_EQ(w.arrived(), 30);
  EXPECT_TRUE(w.WaitArrived(30, absl::InfinitePast()).ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(w.WaitArrived(31, absl::InfinitePast())));
  w.MarkArrived(30, 40);  // closes the gap: the prefix runs through [40, 60)
  EXPECT_EQ(w.arrived(), 60);
  w.MarkArrived(70, 100);
  w.MarkArrived(65, 75);  // overlapping pieces merge
  EXPECT_EQ(w.arrived(), 60);
  EXPECT_EQ(w.complete_at(), absl::InfiniteFuture());
  const absl::Time before = absl::Now();
  w.MarkArrived(60, 65);
  EXPECT_EQ(w.arrived(), 100);
  EXPECT_GE(w.complete_at(), before);
  EXPECT_LE(w.complete_at(), absl::Now());
  w.MarkArrived(0, 200);  // past the end: clipped
  EXPECT_EQ(w.arrived(), 100);
}

TEST(ParamsWatermarkTest, PiecesInAnyOrderEndWithEverythingIn) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    ParamsWatermark w(1000);
    w.Reset();
    std::vector<int> cuts(1000);
    std::iota(cuts.begin(), cuts.end(), 0);
    std::shuffle(cuts.begin(), cuts.end(), rng);
    cuts.resize(20);
    cuts.push_back(0);
    cuts.push_back(1000);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<int> order(cuts.size() - 1);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<bool> in(1000, false);
    for (int k : order) {
      w.MarkArrived(cuts[k], cuts[k + 1]);
      std::fill(in.begin() + cuts[k], in.begin() + cuts[k + 1], true);
      const int64_t expect = std::find(in.begin(), in.end(), false) - in.begin();
      ASSERT_EQ(w.arrived(), expect) << "round " << round;
    }
  }
}

TEST(ParamsWatermarkTest, AWaiterWakesWhenItsLayerIsIn) {
  ParamsWatermark w(10);
  w.Reset();
  absl::Status got = absl::UnknownError("not run");
  std::thread waiter([&] { got = w.WaitArrived(6); });
  w.MarkArrived(3, 10);
  w.MarkArrived(0, 3);
  waiter.join();
  EXPECT_TRUE(got.ok()) << got;
}

TEST(ParamsWatermarkTest, FailWakesWaitersButWhatArrivedStaysUsable) {
  ParamsWatermark w(10);
  w.Reset();
  w.MarkArrived(0, 4);
  absl::Status got;
  std::thread waiter([&] { got = w.WaitArrived(10); });
  w.Fail("connection reset");
  waiter.join();
  EXPECT_TRUE(absl::IsAborted(got));
  EXPECT_EQ(got.message(), "connection reset");
  EXPECT_TRUE(w.WaitArrived(4).ok());
  w.Reset();  // the next pull starts clean
  EXPECT_TRUE(absl::IsDeadlineExceeded(w.WaitArrived(1, absl::InfinitePast())));
}

}  // namespace
}  // namespace pscluster
