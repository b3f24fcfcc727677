#include "chief/dispatcher.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

WorkRequest Ask(int worker, uint64_t incarnation, std::vector<int64_t> completed = {},
                int64_t generation = 0) {
  WorkRequest r;
  r.set_worker_index(worker);
  r.set_incarnation(incarnation);
  r.set_chunks_per_epoch(4);
  r.set_completed_generation(generation);
  for (int64_t k : completed) r.add_completed(k);
  return r;
}

class DispatcherTest : public ::testing::Test {
 protected:
  DispatcherTest() : d_(2, 1, kT0) {
    int64_t n = 0;
    d_.Membership(&n);
    d_.MembershipApplied(n);
  }
  WorkResponse Get(const WorkRequest& r, absl::Time t = kT0) {
    absl::StatusOr<WorkResponse> w = d_.GetWork(r, t);
    EXPECT_TRUE(w.ok()) << w.status();
    return *w;
  }
  Dispatcher d_;
};

TEST_F(DispatcherTest, HandsOutChunksThenDone) {
  EXPECT_EQ(Get(Ask(0, 1)).chunk(), 0);
  EXPECT_EQ(Get(Ask(1, 2)).chunk(), 1);
  EXPECT_EQ(Get(Ask(0, 1, {0})).chunk(), 2);
  EXPECT_EQ(Get(Ask(1, 2, {1})).chunk(), 3);
  EXPECT_EQ(Get(Ask(0, 1, {2})).kind(), WorkResponse::IDLE);  // chunk 3 still out
  EXPECT_EQ(Get(Ask(1, 2, {3})).kind(), WorkResponse::DONE);
  EXPECT_EQ(Get(Ask(0, 1)).kind(), WorkResponse::DONE);
  EXPECT_TRUE(d_.AllFinished());
}

// reserve_next: each chunk comes with the one its worker gets next, k +
// num_workers, so that a sync step still takes the next two chunks
// whichever worker asks first; a lost worker's chunks go before a
// reservation; a restore forgets them.
TEST(DispatcherReserveTest, EachWorkerIsToldItsNextChunk) {
  Dispatcher d(2, 2, kT0, /*lease_window=*/0, /*reserve_next=*/true);
  int64_t n = 0;
  d.Membership(&n);
  d.MembershipApplied(n);
  auto get = [&d](const WorkRequest& r, absl::Time t = kT0) {
    absl::StatusOr<WorkResponse> w = d.GetWork(r, t);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *w : WorkResponse();
  };
  WorkResponse w = get(Ask(1, 2));  // worker 1 asks first
  EXPECT_EQ(w.chunk(), 0);
  EXPECT_EQ(w.next_chunk(), 2);
  w = get(Ask(0, 1));
  EXPECT_EQ(w.chunk(), 1);
  EXPECT_EQ(w.next_chunk(), 3);
  w = get(Ask(0, 1, {1}));  // worker 0 first this time: still its own
  EXPECT_EQ(w.chunk(), 3);
  EXPECT_EQ(w.next_chunk(), 5);
  w = get(Ask(1, 2, {0}));
  EXPECT_EQ(w.chunk(), 2);
  EXPECT_EQ(w.next_chunk(), 4);
  // Worker 1 is lost holding 2 and 4: worker 0 takes 2 before its
  // reserved 5, and then 4 (5 is to do again, for whoever is next).
  ASSERT_TRUE(d.Heartbeat(
                   [] {
                     HeartbeatRequest h;
                     h.set_incarnation(1);
                     return h;
                   }(),
                   kT0 + absl::Seconds(4))
                  .ok());
  const std::vector<Dispatcher::Lost> lost = d.FindLost(kT0 + absl::Seconds(5), absl::Seconds(3));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].worker, 1);
  EXPECT_EQ(lost[0].chunks_released, 2);
  d.Membership(&n);
  d.MembershipApplied(n);
  w = get(Ask(0, 1, {3}));
  EXPECT_EQ(w.chunk(), 2);
  EXPECT_EQ(w.next_chunk(), 4);
  // A restore forgets every lease, reservations too.
  ASSERT_TRUE(d.Rewind(4, "0-3", 1).ok());
  w = get(Ask(0, 1, {}, 1));
  EXPECT_EQ(w.chunk(), 4);
  EXPECT_EQ(w.next_chunk(), 6);
}

// Async (a lease window): the next chunk is the lowest one to do, within
// the window, whichever worker is faster.
TEST(DispatcherReserveTest, AsyncReservesTheLowestChunkToDo) {
  Dispatcher d(2, 2, kT0, /*lease_window=*/4, /*reserve_next=*/true);
  int64_t n = 0;
  d.Membership(&n);
  d.MembershipApplied(n);
  auto get = [&d](const WorkRequest& r) {
    absl::StatusOr<WorkResponse> w = d.GetWork(r, kT0);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *w : WorkResponse();
  };
  WorkResponse w = get(Ask(0, 1));
  EXPECT_EQ(w.chunk(), 0);
  EXPECT_EQ(w.next_chunk(), 1);
  w = get(Ask(1, 2));
  EXPECT_EQ(w.chunk(), 2);
  EXPECT_EQ(w.next_chunk(), 3);
  w = get(Ask(0, 1, {0}));  // worker 0 is faster
  EXPECT_EQ(w.chunk(), 1);
  EXPECT_EQ(w.next_chunk(), 4);
  w = get(Ask(0, 1, {1}));
  EXPECT_EQ(w.chunk(), 4);
  EXPECT_EQ(w.next_chunk(), 5);
  w = get(Ask(0, 1, {4}));
  EXPECT_EQ(w.chunk(), 5);
  EXPECT_FALSE(w.has_next_chunk());  // 6 is the window's end (2 is unfinished)
}

// Without reserve_next no chunk is named ahead.
TEST_F(DispatcherTest, NoNextChunkUnlessReserving) {
  EXPECT_FALSE(Get(Ask(0, 1)).has_next_chunk());
}

TEST_F(DispatcherTest, ARestartedChiefLeavesAChunkInAStepToItsWorker) {
  // Chunks 0 and 1 are done; worker 1's gradient of chunk 2 waits in the
  // step being gathered on the ps. Worker 0 gets chunk 3, not 2, and worker
  // 1's report of chunk 2 counts.
  ASSERT_TRUE(d_.Rewind(4, "0-1", 0).ok());
  EXPECT_EQ(d_.LeaseInFlight({{1, 2}, {0, 1}}), 1);  // chunk 1 is done
  EXPECT_EQ(Get(Ask(0, 1)).chunk(), 3);
  EXPECT_EQ(Get(Ask(1, 2, {2})).kind(), WorkResponse::IDLE);  // chunk 3 still out
  EXPECT_EQ(Get(Ask(0, 1, {3})).kind(), WorkResponse::DONE);
}

TEST_F(DispatcherTest, ALostWorkersChunkGoesToTheOtherAndItRejoinsOnceThePsKnow) {
  EXPECT_EQ(Get(Ask(0, 1)).chunk(), 0);
  EXPECT_EQ(Get(Ask(1, 2)).chunk(), 1);
  ASSERT_TRUE(d_.Heartbeat([] { HeartbeatRequest h; h.set_incarnation(1); return h; }(),
                           kT0 + absl::Seconds(4)).ok());
  std::vector<Dispatcher::Lost> lost = d_.FindLost(kT0 + absl::Seconds(5), absl::Seconds(3));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].worker, 1);
  EXPECT_EQ(lost[0].chunks_released, 1);
  int64_t n = 0;
  EXPECT_EQ(d_.Membership(&n), (std::vector<bool>{true, false}));
  d_.MembershipApplied(n);
  EXPECT_EQ(Get(Ask(0, 1, {0})).chunk(), 1);  // the lost worker's chunk first
  // Worker 1 comes back: no work until the ps wait for it again.
  EXPECT_EQ(Get(Ask(1, 3)).kind(), WorkResponse::PAUSE);
  EXPECT_EQ(d_.Membership(&n), (std::vector<bool>{true, true}));
  d_.MembershipApplied(n);
  EXPECT_EQ(Get(Ask(1, 3)).chunk(), 2);
  EXPECT_FALSE(d_.TakeEvents().empty());
}

// hold_chunks: a lost worker's chunks go to no one until settled; those
// every ps applied are done, the others to do again.
TEST_F(DispatcherTest, ALostWorkersHeldChunksAreSettledByWhatThePsApplied) {
  EXPECT_EQ(Get(Ask(1, 2)).chunk(), 0);
  ASSERT_TRUE(d_.Heartbeat(
                    [] {
                      HeartbeatRequest h;
                      h.set_worker_index(1);
                      h.set_incarnation(2);
                      return h;
                    }(),
                    kT0)
                  .ok());
  EXPECT_EQ(Get(Ask(1, 2, {0})).chunk(), 1);  // chunk 0 reported, chunk 1 not yet
  std::vector<Dispatcher::Lost> lost =
      d_.FindLost(kT0 + absl::Seconds(5), absl::Seconds(3), /*hold_chunks=*/true);
  ASSERT_EQ(lost.size(), 2u);  // worker 0 never asked: silent too
  const Dispatcher::Lost& w1 = lost[1];
  EXPECT_EQ(w1.worker, 1);
  EXPECT_EQ(w1.held, std::vector<int64_t>{1});
  int64_t n = 0;
  d_.Membership(&n);
  d_.MembershipApplied(n);
  // Held: worker 0, back, gets chunk 2, not the lost worker's chunk 1.
  EXPECT_EQ(Get(Ask(0, 1)).kind(), WorkResponse::PAUSE);
  d_.Membership(&n);
  d_.MembershipApplied(n);
  EXPECT_EQ(Get(Ask(0, 1)).chunk(), 2);
  // Every ps took chunk 1's gradient: done, not trained again.
  const Dispatcher::Settled first = d_.SettleLost(1, w1.held, {1});
  EXPECT_EQ(first.returned, 0);
  EXPECT_EQ(first.done, 1);
  EXPECT_EQ(d_.done_chunks(), 2);
  EXPECT_EQ(Get(Ask(0, 1, {2})).chunk(), 3);
  // A chunk no ps took goes back to the queue.
  lost = d_.FindLost(kT0 + absl::Seconds(10), absl::Seconds(3), /*hold_chunks=*/true);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].held, std::vector<int64_t>{3});
  const Dispatcher::Settled second = d_.SettleLost(0, lost[0].held, {1});
  EXPECT_EQ(second.returned, 1);
  EXPECT_EQ(second.done, 0);
  EXPECT_EQ(d_.done_chunks(), 3);
}

TEST_F(DispatcherTest, ANewIncarnationVoidsTheOldLeasesAndIsFirstTakenOutOfTheStep) {
  EXPECT_EQ(Get(Ask(1, 2)).chunk(), 0);
  // Restarted within the timeout: same index, new process. The ps must
  // first see it out of the sync set (dropping its old life's gradient).
  EXPECT_EQ(Get(Ask(1, 9)).kind(), WorkResponse::PAUSE);
  int64_t n = 0;
  EXPECT_EQ(d_.Membership(&n), (std::vector<bool>{true, false}));
  EXPECT_EQ(Get(Ask(1, 9)).kind(), WorkResponse::PAUSE);  // not applied yet
  d_.MembershipApplied(n);
  EXPECT_EQ(Get(Ask(1, 9)).kind(), WorkResponse::PAUSE);  // now readmitted
  EXPECT_EQ(d_.Membership(&n), (std::vector<bool>{true, true}));
  d_.MembershipApplied(n);
  EXPECT_EQ(Get(Ask(1, 9)).chunk(), 0);
}

// --min_workers: a worker absent at the start is out of the set, is never
// found lost, and joins when it first asks, once the ps know it.
TEST(DispatcherJoinTest, AnAbsentWorkerJoinsWhenItFirstAsks) {
  Dispatcher d(3, 1, kT0);
  d.MarkAbsent(2);
  d.MarkAbsent(7);  // out of range: ignored
  int64_t n = 0;
  EXPECT_EQ(d.Membership(&n), (std::vector<bool>{true, true, false}));
  d.MembershipApplied(n);
  auto get = [&d](const WorkRequest& r) {
    absl::StatusOr<WorkResponse> w = d.GetWork(r, kT0);
    EXPECT_TRUE(w.ok()) << w.status();
    return *w;
  };
  EXPECT_EQ(get(Ask(0, 1)).chunk(), 0);
  EXPECT_EQ(get(Ask(1, 2)).chunk(), 1);
  EXPECT_TRUE(d.FindLost(kT0 + absl::Seconds(60), absl::Seconds(3)).size() == 2u)
      << "the two that asked are silent; the absent one is not lost again";
  EXPECT_EQ(d.Membership(&n), (std::vector<bool>{false, false, false}));
  d.MembershipApplied(n);
  // Worker 2 starts: it waits for the set that holds it to reach the ps.
  EXPECT_EQ(get(Ask(2, 3)).kind(), WorkResponse::PAUSE);
  EXPECT_EQ(d.Membership(&n), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(get(Ask(2, 3)).kind(), WorkResponse::PAUSE);
  d.MembershipApplied(n);
  EXPECT_EQ(get(Ask(2, 3)).chunk(), 0) << "the lost workers' chunks first";
  const std::vector<std::string> events = d.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], "worker 2 joins the run and gets work from the next step");
}

TEST_F(DispatcherTest, PauseParksEveryLiveWorker) {
  d_.Pause();
  EXPECT_FALSE(d_.AllParked());
  EXPECT_EQ(Get(Ask(0, 1)).kind(), WorkResponse::PAUSE);
  EXPECT_FALSE(d_.AllParked());
  EXPECT_EQ(Get(Ask(1, 2)).kind(), WorkResponse::PAUSE);
  EXPECT_TRUE(d_.AllParked());
  d_.Resume();
  EXPECT_EQ(Get(Ask(0, 1)).kind(), WorkResponse::CHUNK);
}

// A checkpoint or a membership change (inner pause) inside a ps recovery or
// the start-up (outer pause): the inner one's end must not hand out work.
TEST_F(DispatcherTest, PausesNest) {
  d_.Pause();  // outer
  EXPECT_EQ(Get(Ask(0, 1)).kind(), WorkResponse::PAUSE);
  EXPECT_EQ(Get(Ask(1, 2)).kind(), WorkResponse::PAUSE);
  EXPECT_TRUE(d_.AllParked());
  d_.Pause();  // inner
  // Parked under the outer pause, no worker has started a step since.
  EXPECT_TRUE(d_.AllParked());
  d_.Resume();  // the inner one ends
  EXPECT_EQ(Get(Ask(0, 1)).kind(), WorkResponse::PAUSE);
  EXPECT_EQ(Get(Ask(1, 2)).kind(), WorkResponse::PAUSE);
  d_.Resume();  // the outer one ends
  EXPECT_EQ(Get(Ask(0, 1)).kind(), WorkResponse::CHUNK);
  d_.Resume();  // unmatched: ignored, the next Pause still pauses
  d_.Pause();
  EXPECT_EQ(Get(Ask(1, 2)).kind(), WorkResponse::PAUSE);
}

TEST_F(DispatcherTest, PausedWorkersGuardsNest) {
  {
    PausedWorkers outer(&d_);
    { PausedWorkers inner(&d_); }
    EXPECT_EQ(Get(Ask(0, 1)).kind(), WorkResponse::PAUSE);
  }
  EXPECT_EQ(Get(Ask(0, 1)).kind(), WorkResponse::CHUNK);
}

TEST_F(DispatcherTest, RewindRestoresTheDoneSetAndIgnoresOldGenerations) {
  EXPECT_EQ(Get(Ask(0, 1)).chunk(), 0);
  EXPECT_EQ(Get(Ask(0, 1, {0})).chunk(), 1);
  const std::string saved = d_.SaveDone();
  EXPECT_EQ(Get(Ask(0, 1, {1})).chunk(), 2);
  ASSERT_TRUE(d_.Rewind(4, saved, 1).ok());
  // A completion from before the restore does not count.
  WorkResponse w = Get(Ask(0, 1, {2}, /*generation=*/0));
  EXPECT_EQ(w.generation(), 1);
  EXPECT_EQ(w.chunk(), 1);
  EXPECT_EQ(d_.done_chunks(), 1);
}

// A restore or a new placement made while the workers are paused reaches
// the ps one by one: a paused worker is told the generation of the pause's
// start, and the new one only when the pause ends (a worker that pulled on
// the new generation before the placement was published had been refused
// by a ps already holding the new layout).
TEST_F(DispatcherTest, PausedWorkersLearnANewGenerationWhenThePauseEnds) {
  d_.Pause();
  ASSERT_TRUE(d_.Rewind(4, "", 1).ok());
  WorkResponse paused = Get(Ask(0, 1));
  EXPECT_EQ(paused.kind(), WorkResponse::PAUSE);
  EXPECT_EQ(paused.generation(), 0);
  d_.Resume();
  WorkResponse after = Get(Ask(0, 1));
  EXPECT_EQ(after.kind(), WorkResponse::CHUNK);
  EXPECT_EQ(after.generation(), 1);
}

TEST_F(DispatcherTest, AWorkerLostForGoodDoesNotHoldUpTheEnd) {
  for (int64_t k = 0; k < 4; ++k) {
    EXPECT_EQ(Get(Ask(0, 1, k ? std::vector<int64_t>{k - 1} : std::vector<int64_t>{})).chunk(), k);
  }
  EXPECT_EQ(d_.FindLost(kT0 + absl::Seconds(10), absl::Seconds(3)).size(), 2u);
  EXPECT_FALSE(d_.AllFinished());  // chunk 3 is not done yet
  // Worker 0 was lost too by the clock: its late completion of chunk 3
  // does not count, and once re-admitted it trains chunk 3 again.
  EXPECT_EQ(Get(Ask(0, 1, {3}), kT0 + absl::Seconds(10)).kind(), WorkResponse::PAUSE);
  int64_t n = 0;
  d_.Membership(&n);
  d_.MembershipApplied(n);  // the ps know it is out
  EXPECT_EQ(Get(Ask(0, 1), kT0 + absl::Seconds(10)).kind(), WorkResponse::PAUSE);
  d_.Membership(&n);
  d_.MembershipApplied(n);  // and back in
  EXPECT_EQ(Get(Ask(0, 1), kT0 + absl::Seconds(10)).chunk(), 3);
  EXPECT_EQ(Get(Ask(0, 1, {3}), kT0 + absl::Seconds(10)).kind(), WorkResponse::DONE);
  EXPECT_TRUE(d_.AllFinished());
}

TEST_F(DispatcherTest, RefusesStrangers) {
  EXPECT_EQ(d_.GetWork(Ask(5, 1), kT0).status().code(), absl::StatusCode::kInvalidArgument);
  WorkRequest r = Ask(0, 1);
  r.set_chunks_per_epoch(4);
  ASSERT_TRUE(d_.GetWork(r, kT0).ok());
  r.set_chunks_per_epoch(5);
  EXPECT_EQ(d_.GetWork(r, kT0).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Async bounded delay: with a window of 3 chunks, the fast worker 1 waits
// (BOUND) while worker 0 holds chunk 0, and goes on once it is done;
// waiting does not take it out of the worker set.
TEST(DispatcherBoundTest, AFastWorkerWaitsForTheSlowestChunk) {
  Dispatcher d(2, 2, kT0, /*lease_window=*/3);
  int64_t n = 0;
  d.Membership(&n);
  d.MembershipApplied(n);
  auto get = [&](const WorkRequest& r) {
    absl::StatusOr<WorkResponse> w = d.GetWork(r, kT0);
    EXPECT_TRUE(w.ok()) << w.status();
    return *w;
  };
  EXPECT_EQ(get(Ask(0, 1)).chunk(), 0);
  EXPECT_EQ(get(Ask(1, 2)).chunk(), 1);
  EXPECT_EQ(get(Ask(1, 2, {1})).chunk(), 2);
  const WorkResponse wait = get(Ask(1, 2, {2}));
  EXPECT_EQ(wait.kind(), WorkResponse::BOUND);
  EXPECT_EQ(d.bound_answers(), 1);
  int64_t number = 0;
  EXPECT_EQ(d.Membership(&number), (std::vector<bool>{true, true}));
  EXPECT_EQ(number, n);  // no membership change
  const WorkResponse w0 = get(Ask(0, 1, {0}));
  EXPECT_EQ(w0.kind(), WorkResponse::CHUNK);
  EXPECT_EQ(w0.chunk(), 3);
  EXPECT_EQ(get(Ask(1, 2)).chunk(), 4);
  EXPECT_EQ(get(Ask(1, 2)).chunk(), 5);                   // 5 < 3 + 3
  EXPECT_EQ(get(Ask(1, 2)).kind(), WorkResponse::BOUND);  // 6 >= 3 + 3
}

TEST_F(DispatcherTest, TheRingsCallsAreNotServed) {
  EXPECT_TRUE(absl::IsFailedPrecondition(d_.RingWork(RingWorkRequest(), kT0).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(d_.GetReplica(ReplicaRequest()).status()));
}

// hold_paused (issue 57): a paused worker's ask is held until the pause
// ends, its worker counted as parked meanwhile, and answered PAUSE (it asks
// again, as ever). The hold here is an hour: were Resume not to end it,
// the test would hang, not pass.
TEST(DispatcherHoldTest, APausedAskIsHeldUntilTheResume) {
  Dispatcher d(2, 1, kT0, /*lease_window=*/0, /*reserve_next=*/false,
               /*hold_paused=*/absl::Hours(1));
  int64_t n = 0;
  d.Membership(&n);
  d.MembershipApplied(n);
  d.Pause();
  EXPECT_FALSE(d.AllParked());
  absl::Notification asked;
  absl::StatusOr<WorkResponse> held;
  std::thread worker0([&] {
    held = d.GetWork(Ask(0, 1), kT0);
    asked.Notify();
  });
  std::thread worker1([&] { EXPECT_EQ(d.GetWork(Ask(1, 2), kT0)->kind(), WorkResponse::PAUSE); });
  // Both park while their answers are held.
  while (!d.AllParked()) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_FALSE(asked.HasBeenNotified());
  d.Resume();
  worker0.join();
  worker1.join();
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->kind(), WorkResponse::PAUSE);
  EXPECT_EQ(d.GetWork(Ask(0, 1), kT0)->kind(), WorkResponse::CHUNK);  // after the pause: work
}

// A nested pause holds until the outermost Resume; a hold that runs out
// answers PAUSE all the same.
TEST(DispatcherHoldTest, AHoldEndsWithTheOutermostResumeOrItsTime) {
  Dispatcher d(1, 1, kT0, /*lease_window=*/0, /*reserve_next=*/false,
               /*hold_paused=*/absl::Milliseconds(1));
  int64_t n = 0;
  d.Membership(&n);
  d.MembershipApplied(n);
  d.Pause();
  d.Pause();
  d.Resume();
  EXPECT_EQ(d.GetWork(Ask(0, 1), kT0)->kind(), WorkResponse::PAUSE);  // held 1 ms, still paused
  EXPECT_TRUE(d.AllParked());
  d.Resume();
  EXPECT_EQ(d.GetWork(Ask(0, 1), kT0)->kind(), WorkResponse::CHUNK);
}

}  // namespace
}  // namespace pscluster
