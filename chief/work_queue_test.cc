#include "chief/work_queue.h"

#include <set>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(WorkQueueTest, LeasesEveryChunkOnceInOrder) {
  WorkQueue q(2, 2);
  ASSERT_TRUE(q.SetChunksPerEpoch(3).ok());
  EXPECT_EQ(q.total(), 6);
  std::vector<int64_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(*q.Lease(i % 2));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_FALSE(q.Lease(0).has_value());
  for (int i = 0; i < 6; ++i) q.Complete(i % 2, i);
  EXPECT_TRUE(q.AllDone());
}

// A worker's request sizes the queue: a count that would make more than
// kMaxChunks chunks is refused, and the queue keeps waiting for a real
// one (the chief once allocated whatever was claimed: 2^31 chunks per
// epoch took gigabytes and ended it; found by fuzz/chief_fuzzer).
TEST(WorkQueueTest, AnAbsurdChunksPerEpochIsRefused) {
  WorkQueue q(2, 3);
  const absl::Status s = q.SetChunksPerEpoch(2147483647);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("2147483647 chunks per epoch over 3 epochs exceed"),
            std::string::npos)
      << s;
  EXPECT_EQ(q.total(), 0);
  EXPECT_TRUE(q.SetChunksPerEpoch(4).ok());
  EXPECT_EQ(q.total(), 12);
}

TEST(WorkQueueTest, ALostWorkersUnfinishedChunksGoToOthersFirst) {
  WorkQueue q(2, 1);
  ASSERT_TRUE(q.SetChunksPerEpoch(6).ok());
  ASSERT_EQ(*q.Lease(0), 0);
  ASSERT_EQ(*q.Lease(1), 1);
  q.Complete(1, 1);
  ASSERT_EQ(*q.Lease(1), 2);
  EXPECT_EQ(q.Release(1), 1);  // chunk 2 was unfinished; chunk 1 stays done
  EXPECT_EQ(*q.Lease(0), 2);
  EXPECT_EQ(*q.Lease(0), 3);
  // The lost worker's late completion does not count.
  q.Complete(1, 2);
  EXPECT_EQ(q.done_count(), 1);
  // Every chunk ends up done exactly once.
  std::set<int64_t> done = {1};
  for (int64_t k : {0, 2, 3}) q.Complete(0, k), done.insert(k);
  while (auto k = q.Lease(0)) q.Complete(0, *k), done.insert(*k);
  EXPECT_EQ(done.size(), 6u);
  EXPECT_TRUE(q.AllDone());
}

// Release reads each worker's own list of leases (issue 57: it scanned
// every chunk of the run, so a thousand workers lost at once cost a
// thousand scans). Every way a lease begins (Lease, LeaseTo, Reserve) and
// ends (Complete, Return, Unreserve, Release, ReleaseAll, RestoreDone)
// keeps the list right: Release gives back exactly the chunks still leased
// to that worker, and nothing of another's.
TEST(WorkQueueTest, ReleaseGivesBackExactlyTheChunksStillLeasedToThatWorker) {
  WorkQueue q(3, 1);
  ASSERT_TRUE(q.SetChunksPerEpoch(12).ok());
  for (int i = 0; i < 6; ++i) ASSERT_EQ(q.Lease(i % 3), i);  // 0,3 to w0; 1,4 to w1; 2,5 to w2
  ASSERT_TRUE(q.LeaseTo(0, 9));
  ASSERT_TRUE(q.Reserve(0, 10, 0));
  q.Complete(0, 0);
  q.Return(0, 3);      // to do again (returned)
  q.Unreserve(0, 10);  // to do again
  q.Complete(1, 1);
  // Worker 0 holds chunk 9 alone now; worker 1 holds 4; worker 2 holds 2 and 5.
  EXPECT_EQ(q.Release(0), 1);
  EXPECT_FALSE(q.Holds(0, 9));
  EXPECT_TRUE(q.Holds(1, 4));
  EXPECT_TRUE(q.Holds(2, 2));
  EXPECT_EQ(q.Release(0), 0);  // nothing left: a second loss releases nothing
  EXPECT_EQ(q.Release(2), 2);
  EXPECT_EQ(q.Release(7), 0);  // out of range: ignored
  // The released and returned chunks come back lowest first.
  std::vector<int64_t> again;
  for (int i = 0; i < 5; ++i) again.push_back(*q.Lease(2));
  EXPECT_EQ(again, (std::vector<int64_t>{2, 3, 5, 6, 7}));
  EXPECT_EQ(q.Release(2), 5);
  // After ReleaseAll and a restore nobody holds anything.
  ASSERT_EQ(q.Lease(1), 2);
  q.ReleaseAll();
  EXPECT_EQ(q.Release(1), 0);
  ASSERT_EQ(q.Lease(1), 2);
  ASSERT_TRUE(q.RestoreDone("0-1").ok());
  EXPECT_EQ(q.Release(1), 0);
  EXPECT_EQ(q.Release(0), 0);
  EXPECT_EQ(q.Lease(0), 2);
  EXPECT_EQ(q.Release(0), 1);
}

// Many workers, many chunks, every worker lost in turn: each release
// returns what that worker held, and the run still ends with every chunk
// done once.
TEST(WorkQueueTest, LosingEveryWorkerOfALargeRunReturnsEachOnesLeases) {
  constexpr int kWorkers = 1000;
  WorkQueue q(kWorkers, 1);
  ASSERT_TRUE(q.SetChunksPerEpoch(20 * kWorkers).ok());
  for (int w = 0; w < kWorkers; ++w) {
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(q.Lease(w).has_value());
    q.Complete(w, 3 * w);  // its first one done
  }
  int64_t released = 0;
  for (int w = 0; w < kWorkers; ++w) {
    const int n = q.Release(w);
    EXPECT_EQ(n, 2) << "worker " << w;
    released += n;
  }
  EXPECT_EQ(released, 2 * kWorkers);
  for (int64_t k = 0; k < q.total(); ++k) {
    const std::optional<int64_t> c = q.Lease(static_cast<int>(k % kWorkers));
    if (!c.has_value()) break;
    q.Complete(static_cast<int>(k % kWorkers), *c);
  }
  EXPECT_EQ(q.done_count(), q.total());
  EXPECT_TRUE(q.AllDone());
}

TEST(WorkQueueTest, CompletionByAnotherWorkerIsIgnored) {
  WorkQueue q(2, 1);
  ASSERT_TRUE(q.SetChunksPerEpoch(2).ok());
  ASSERT_EQ(*q.Lease(0), 0);
  q.Complete(1, 0);
  q.Complete(0, 7);
  EXPECT_EQ(q.done_count(), 0);
}

TEST(WorkQueueTest, AChunkAWorkerHoldsIsLeasedToItAndNotHandedOut) {
  // A restarted chief: chunks 0 and 1 are done, worker 1's gradient of
  // chunk 3 waits in a step on the ps.
  WorkQueue q(2, 1);
  ASSERT_TRUE(q.SetChunksPerEpoch(5).ok());
  ASSERT_TRUE(q.RestoreDone("0-1").ok());
  EXPECT_TRUE(q.LeaseTo(1, 3));
  EXPECT_FALSE(q.LeaseTo(0, 3));  // leased already
  EXPECT_FALSE(q.LeaseTo(0, 1));  // done
  EXPECT_FALSE(q.LeaseTo(2, 4));  // no such worker
  EXPECT_FALSE(q.LeaseTo(0, 9));  // no such chunk
  EXPECT_EQ(*q.Lease(0), 2);
  EXPECT_EQ(*q.Lease(0), 4);
  EXPECT_FALSE(q.Lease(0).has_value());
  q.Complete(1, 3);
  EXPECT_EQ(q.done_count(), 3);
}

TEST(WorkQueueTest, DoneSetRoundTripsAndRestoreForgetsLeases) {
  WorkQueue q(1, 3);
  ASSERT_TRUE(q.SetChunksPerEpoch(4).ok());
  for (int i = 0; i < 7; ++i) q.Lease(0);
  for (int64_t k : {0, 1, 2, 4, 5}) q.Complete(0, k);
  const std::string saved = q.SaveDone();
  EXPECT_EQ(saved, "0-2,4-5");
  // Chunks 3 and 6 were leased when the checkpoint was taken.
  WorkQueue r(1, 3);
  ASSERT_TRUE(r.SetChunksPerEpoch(4).ok());
  ASSERT_TRUE(r.RestoreDone(saved).ok());
  EXPECT_EQ(r.done_count(), 5);
  EXPECT_EQ(*r.Lease(0), 3);
  EXPECT_EQ(*r.Lease(0), 6);
  EXPECT_EQ(r.SaveDone(), saved);
}

// A checkpoint's done set takes the chunks the ps applied whose workers
// had not reported them (ranges join where they touch or overlap).
TEST(WorkQueueTest, AddDoneJoinsChunksIntoRanges) {
  EXPECT_EQ(*WorkQueue::AddDone("0-2,4-5", {3}), "0-5");
  EXPECT_EQ(*WorkQueue::AddDone("0-405", {406, 407}), "0-407");
  EXPECT_EQ(*WorkQueue::AddDone("0-9", {8, 2, 12}), "0-9,12-12");
  EXPECT_EQ(*WorkQueue::AddDone("", {7, 5, 6}), "5-7");
  EXPECT_EQ(*WorkQueue::AddDone("4-5,0-1", {}), "0-1,4-5");
  EXPECT_EQ(*WorkQueue::AddDone("0-3", {3, 3}), "0-3");
  EXPECT_EQ(WorkQueue::AddDone("3-2", {1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WorkQueue::AddDone("0-1", {-1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The result restores as the done set it says.
  WorkQueue q(1, 1);
  ASSERT_TRUE(q.SetChunksPerEpoch(10).ok());
  ASSERT_TRUE(q.RestoreDone(*WorkQueue::AddDone("0-2", {3, 5})).ok());
  EXPECT_EQ(q.done_count(), 5);
  EXPECT_EQ(*q.Lease(0), 4);
}

TEST(WorkQueueTest, RejectsBadInput) {
  WorkQueue q(1, 1);
  EXPECT_EQ(q.SetChunksPerEpoch(0).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(q.SetChunksPerEpoch(5).ok());
  EXPECT_EQ(q.SetChunksPerEpoch(6).code(), absl::StatusCode::kFailedPrecondition);
  for (const char* bad : {"x", "1-", "3-2", "0-5", "-1-2"}) {
    EXPECT_EQ(q.RestoreDone(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(q.RestoreDone("").ok());
}

TEST(WorkQueueTest, ReleaseAllReturnsEveryLease) {
  WorkQueue q(2, 1);
  ASSERT_TRUE(q.SetChunksPerEpoch(3).ok());
  q.Lease(0);
  q.Lease(1);
  q.ReleaseAll();
  EXPECT_EQ(*q.Lease(1), 0);
}

// A reservation is a lease taken ahead: only of a chunk to do (and within
// the window), held by its worker, released with the worker's leases, and
// given back without counting as returned.
TEST(WorkQueueTest, AReservedChunkIsLeasedAheadAndCanBeGivenBack) {
  WorkQueue q(2, 1);
  ASSERT_TRUE(q.SetChunksPerEpoch(8).ok());
  EXPECT_EQ(q.Lease(0), 0);
  EXPECT_TRUE(q.Reserve(0, 2, 0));
  EXPECT_TRUE(q.Holds(0, 2));
  EXPECT_FALSE(q.Holds(1, 2));
  EXPECT_FALSE(q.Reserve(1, 2, 0));             // leased already
  EXPECT_FALSE(q.Reserve(1, 8, 0));             // past the end
  EXPECT_FALSE(q.Reserve(1, 5, /*window=*/5));  // 5 past the lowest unfinished (0)
  EXPECT_TRUE(q.Reserve(1, 4, /*window=*/5));
  EXPECT_EQ(q.Lease(1), 1);  // the reserved 2 is skipped
  EXPECT_EQ(q.Lease(1), 3);
  EXPECT_EQ(q.LowestTodo(), 5);
  q.Unreserve(1, 2);  // not its reservation: ignored
  EXPECT_TRUE(q.Holds(0, 2));
  q.Unreserve(0, 2);
  EXPECT_EQ(q.LowestTodo(), 2);
  EXPECT_EQ(q.returned_count(), 0);
  EXPECT_EQ(q.Lease(0), 2);
  EXPECT_EQ(q.Release(1), 3);  // 1, 3 and the reserved 4
  EXPECT_EQ(q.LowestTodo(), 1);
}

TEST(WorkQueueTest, AReturnedChunkIsHandedOutAgain) {
  WorkQueue q(2, 1);
  ASSERT_TRUE(q.SetChunksPerEpoch(3).ok());
  ASSERT_EQ(*q.Lease(0), 0);
  ASSERT_EQ(*q.Lease(0), 1);
  q.Return(1, 0);  // not its lease: ignored
  EXPECT_EQ(q.returned_count(), 0);
  q.Return(0, 0);
  EXPECT_EQ(q.returned_count(), 1);
  EXPECT_EQ(*q.Lease(1), 0);
  EXPECT_EQ(*q.Lease(1), 2);
}

TEST(WorkQueueTest, ALeaseWindowHoldsChunksFarPastTheLowestUnfinished) {
  WorkQueue q(2, 1);
  ASSERT_TRUE(q.SetChunksPerEpoch(10).ok());
  bool bounded = true;
  EXPECT_EQ(q.Lease(0, 3, &bounded), 0);  // lowest unfinished: 0
  EXPECT_FALSE(bounded);
  EXPECT_EQ(q.Lease(1, 3, &bounded), 1);
  EXPECT_EQ(q.Lease(1, 3, &bounded), 2);
  EXPECT_FALSE(q.Lease(1, 3, &bounded).has_value());  // 3 >= 0 + 3
  EXPECT_TRUE(bounded);
  q.Complete(1, 1);
  q.Complete(1, 2);
  EXPECT_FALSE(q.Lease(1, 3, &bounded).has_value());  // 0, the slowest, holds it
  EXPECT_TRUE(bounded);
  EXPECT_EQ(q.Lease(1, 0, &bounded), 3);  // no window: no bound
  q.Complete(0, 0);
  EXPECT_EQ(q.Lease(0, 3, &bounded), 4);  // lowest unfinished: 3
  EXPECT_EQ(q.Lease(0, 3, &bounded), 5);
  EXPECT_FALSE(q.Lease(0, 3, &bounded).has_value());
  EXPECT_TRUE(bounded);
  // A lost worker's chunk goes back: it is the lowest, never bounded.
  EXPECT_EQ(q.Release(1), 1);  // chunk 3
  EXPECT_EQ(q.Lease(0, 3, &bounded), 3);
  EXPECT_FALSE(bounded);
  // Out of chunks is not a bound.
  for (int64_t k = 3; k < 6; ++k) q.Complete(0, k);
  for (int64_t k = 6; k < 9; ++k) EXPECT_EQ(q.Lease(0, 3, &bounded), k) << k;
  EXPECT_FALSE(q.Lease(0, 3, &bounded).has_value());  // 9 >= 6 + 3
  EXPECT_TRUE(bounded);
  for (int64_t k = 6; k < 9; ++k) q.Complete(0, k);
  EXPECT_EQ(q.Lease(0, 3, &bounded), 9);
  EXPECT_FALSE(q.Lease(1, 3, &bounded).has_value());
  EXPECT_FALSE(bounded);
}

TEST(WorkQueueTest, RestoringTheDoneSetMovesTheWindowBack) {
  WorkQueue q(1, 1);
  ASSERT_TRUE(q.SetChunksPerEpoch(10).ok());
  for (int64_t k = 0; k < 6; ++k) {
    ASSERT_EQ(q.Lease(0, 2), k);
    q.Complete(0, k);
  }
  ASSERT_TRUE(q.RestoreDone("0-1").ok());
  bool bounded = false;
  EXPECT_EQ(q.Lease(0, 2, &bounded), 2);
  EXPECT_EQ(q.Lease(0, 2, &bounded), 3);
  EXPECT_FALSE(q.Lease(0, 2, &bounded).has_value());
  EXPECT_TRUE(bounded);
}

}  // namespace
}  // namespace pscluster
