#include "chief/ring_dispatcher.h"

#include <limits>
#include <tuple>

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

constexpr int kChunksPerEpoch = 10;

// Workers driven by hand: each holds a replica at some step, asks for work
// and does what the answer says, as worker/mirrored_loop.cc does.
class Ring {
 public:
  Ring(int workers, int epochs)
      : d_(workers, epochs, now_),
        completed_(workers, -1),
        state_ring_id_(workers, 0),
        incarnation_(workers, 1) {}

  RingWorkResponse Ask(int w, int64_t failed_ring_id = 0) {
    RingWorkRequest r;
    r.set_worker_index(w);
    r.set_incarnation(incarnation_[w]);
    r.set_completed_step(completed_[w]);
    r.set_state_ring_id(state_ring_id_[w]);
    r.set_failed_ring_id(failed_ring_id);
    r.set_chunks_per_epoch(kChunksPerEpoch);
    absl::StatusOr<RingWorkResponse> resp = d_.RingWork(r, now_);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : RingWorkResponse();
  }

  void Beat(int w) {
    HeartbeatRequest h;
    h.set_worker_index(w);
    h.set_incarnation(incarnation_[w]);
    EXPECT_TRUE(d_.Heartbeat(h, now_).ok());
  }

  // Every worker in `ws` asks until it gets a step; they must all get the
  // same step of the same ring. Then they train it (the chunks counted)
  // and hold its state. Returns the step.
  int64_t Step(const std::vector<int>& ws) {
    std::vector<RingWorkResponse> got;
    for (int w : ws) {
      RingWorkResponse r;
      for (int tries = 0; tries < 3; ++tries) {
        r = Ask(w);
        if (r.kind() != RingWorkResponse::WAIT) break;
      }
      EXPECT_EQ(r.kind(), RingWorkResponse::STEP) << "worker " << w;
      if (r.fetch_state()) {
        EXPECT_EQ(completed_[w] == r.step() - 1 && r.state_from() >= 0, false)
            << "worker " << w << " holds the state it is told to fetch";
        const int64_t source_step =
            r.state_from() < 0 ? d_.base_step() : completed_[r.state_from()];
        EXPECT_EQ(source_step, r.step() - 1) << "the source does not hold the ring's start";
        fetched_[w] = r.state_from();
      }
      got.push_back(r);
    }
    for (size_t i = 1; i < got.size(); ++i) {
      EXPECT_EQ(got[i].step(), got[0].step());
      EXPECT_EQ(got[i].ring_id(), got[0].ring_id());
      EXPECT_EQ(got[i].chunks_size(), got[0].chunks_size());
    }
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].members_size(), static_cast<int>(ws.size()));
      const int64_t k = got[i].chunks(got[i].rank());
      if (k >= 0) ++trained_[k];
      completed_[ws[i]] = got[i].step();
      state_ring_id_[ws[i]] = got[i].ring_id();
    }
    return got.empty() ? -1 : got[0].step();
  }

  // Every worker in `ws` asks until it is told DONE, stepping together.
  int Run(const std::vector<int>& ws) {
    int steps = 0;
    while (true) {
      RingWorkResponse r = Ask(ws[0]);
      if (r.kind() == RingWorkResponse::DONE) break;
      // Put back the first worker's answer by asking the same again below.
      Step(ws);
      ++steps;
    }
    for (int w : ws) EXPECT_EQ(Ask(w).kind(), RingWorkResponse::DONE);
    return steps;
  }

  void ExpectEveryChunkTrainedOnce(int epochs) {
    for (int64_t k = 0; k < int64_t{kChunksPerEpoch} * epochs; ++k) {
      EXPECT_EQ(trained_[k], 1) << "chunk " << k;
    }
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  RingDispatcher d_;
  std::vector<int64_t> completed_;
  std::vector<int64_t> state_ring_id_;
  std::vector<uint64_t> incarnation_;
  std::map<int64_t, int> trained_;
  std::map<int, int> fetched_;  // worker -> where it took its state from
};

// Steps and ring ids a worker reports (or a checkpoint's base step)
// that the ring's numbering would overflow on are refused naming them
// (a state_ring_id of INT64_MAX once made the next ring's id
// INT64_MAX + 1; found by fuzz/chief_fuzzer).
TEST(RingDispatcherTest, OutOfRangeStepsAndRingIdsAreRefused) {
  RingDispatcher d(2, 1, absl::UnixEpoch());
  for (auto [step, state_ring, failed_ring] :
       {std::tuple<int64_t, int64_t, int64_t>{-2, 0, 0},
        {std::numeric_limits<int64_t>::max(), 0, 0},
        {-1, std::numeric_limits<int64_t>::max(), 0},
        {-1, -1, 0},
        {-1, 0, std::numeric_limits<int64_t>::min()}}) {
    RingWorkRequest r;
    r.set_worker_index(0);
    r.set_incarnation(1);
    r.set_completed_step(step);
    r.set_state_ring_id(state_ring);
    r.set_failed_ring_id(failed_ring);
    r.set_chunks_per_epoch(kChunksPerEpoch);
    absl::StatusOr<RingWorkResponse> resp = d.RingWork(r, absl::UnixEpoch());
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kInvalidArgument) << step;
    EXPECT_NE(resp.status().message().find("out of range"), std::string::npos) << resp.status();
  }
  EXPECT_EQ(d.SetBase(std::numeric_limits<int64_t>::max(), kChunksPerEpoch, "", ShardState())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RingDispatcherTest, TheFirstRingWaitsForEveryWorkerAndStartsFromTheChief) {
  Ring r(3, 1);
  ASSERT_TRUE(r.d_.SetBase(0, 0, "", {}).ok());
  EXPECT_EQ(r.Ask(0).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.Ask(1).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.d_.ring_id(), 0);
  EXPECT_FALSE(r.d_.Settled());
  EXPECT_EQ(r.Ask(2).kind(), RingWorkResponse::WAIT);  // forms the ring
  EXPECT_EQ(r.d_.ring_id(), 1);
  EXPECT_FALSE(r.d_.Settled());  // every member is still to take the state
  EXPECT_EQ(r.d_.members(), (std::vector<int>{0, 1, 2}));
  RingWorkResponse first = r.Ask(1);
  ASSERT_EQ(first.kind(), RingWorkResponse::STEP);
  EXPECT_EQ(first.step(), 1);
  EXPECT_EQ(first.rank(), 1);
  EXPECT_TRUE(first.fetch_state());
  EXPECT_EQ(first.state_from(), -1);
  EXPECT_EQ(std::vector<int64_t>(first.chunks().begin(), first.chunks().end()),
            (std::vector<int64_t>{0, 1, 2}));
  r.Step({0, 1, 2});
  EXPECT_FALSE(r.d_.Settled());  // none has said yet that it holds the state
  for (int w : {0, 1, 2}) EXPECT_EQ(r.Ask(w).step(), 2) << w;  // each reports step 1
  EXPECT_TRUE(r.d_.Settled());
  std::vector<std::string> events = r.d_.TakeEvents();
  ASSERT_FALSE(events.empty());
  EXPECT_NE(events.back().find("from the initial weights"), std::string::npos) << events.back();
}

TEST(RingDispatcherTest, TrainsEveryChunkOnceWithTheLastStepShort) {
  Ring r(3, 2);
  ASSERT_TRUE(r.d_.SetBase(0, 0, "", {}).ok());
  for (int w : {0, 1, 2}) r.Ask(w);
  // 20 chunks over 3 workers: 6 full steps and one with two chunks.
  EXPECT_EQ(r.Run({0, 1, 2}), 7);
  r.ExpectEveryChunkTrainedOnce(2);
  EXPECT_TRUE(r.d_.AllFinished());
  EXPECT_EQ(r.d_.highest_step(), 7);
  EXPECT_EQ(r.d_.done_chunks(), 20);
}

TEST(RingDispatcherTest, ALostMemberBreaksTheRingAndTheOthersGoOnFromTheirState) {
  Ring r(3, 2);
  ASSERT_TRUE(r.d_.SetBase(0, 0, "", {}).ok());
  for (int w : {0, 1, 2}) r.Ask(w);
  r.Step({0, 1, 2});
  r.Step({0, 1, 2});
  // Step 3 opens; worker 1 dies in it, the others are inside its all-reduce.
  ASSERT_EQ(r.Ask(0).kind(), RingWorkResponse::STEP);
  ASSERT_EQ(r.Ask(2).kind(), RingWorkResponse::STEP);
  r.now_ += absl::Seconds(2);
  r.Beat(0);
  r.Beat(2);
  EXPECT_EQ(r.d_.FindLost(r.now_, absl::Seconds(1)), (std::vector<int>{1}));
  std::optional<RingDispatcher::Abort> abort = r.d_.TakeAbort();
  ASSERT_TRUE(abort.has_value());
  EXPECT_EQ(abort->ring_id, 1);
  EXPECT_EQ(abort->members, (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(r.d_.TakeAbort().has_value());  // told once
  // The survivors' all-reduce fails; they report it and wait.
  EXPECT_EQ(r.Ask(0, /*failed_ring_id=*/1).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.Ask(2, /*failed_ring_id=*/1).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.d_.ring_id(), 2);
  EXPECT_EQ(r.d_.members(), (std::vector<int>{0, 2}));
  // Step 3 again, on the survivors' own state (step 2): no fetch.
  RingWorkResponse again = r.Ask(0);
  ASSERT_EQ(again.kind(), RingWorkResponse::STEP);
  EXPECT_EQ(again.step(), 3);
  EXPECT_FALSE(again.fetch_state());
  EXPECT_EQ(std::vector<int64_t>(again.chunks().begin(), again.chunks().end()),
            (std::vector<int64_t>{6, 7}));  // step 3's chunks, handed out again
  r.Run({0, 2});
  r.ExpectEveryChunkTrainedOnce(2);
}

TEST(RingDispatcherTest, WhenOneSurvivorCompletedTheStepTheOthersTakeItsState) {
  Ring r(3, 2);
  ASSERT_TRUE(r.d_.SetBase(0, 0, "", {}).ok());
  for (int w : {0, 1, 2}) r.Ask(w);
  r.Step({0, 1, 2});
  // Step 2: worker 2's all-reduce finished before worker 1 died, worker
  // 0's did not.
  RingWorkResponse s0 = r.Ask(0), s1 = r.Ask(1), s2 = r.Ask(2);
  ASSERT_EQ(s2.kind(), RingWorkResponse::STEP);
  for (const RingWorkResponse* s : {&s0, &s1, &s2}) ++r.trained_[s->chunks(s->rank())];
  r.completed_[2] = 2;
  r.incarnation_[1] = 2;  // worker 1 restarted at once: a new process
  r.completed_[1] = -1;
  r.state_ring_id_[1] = 0;
  EXPECT_EQ(r.Ask(1).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.Ask(0, 1).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.Ask(2).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.d_.ring_id(), 2);
  EXPECT_EQ(r.d_.members(), (std::vector<int>{0, 1, 2}));
  r.fetched_.clear();
  EXPECT_EQ(r.Step({0, 1, 2}), 3);
  EXPECT_EQ(r.fetched_.at(0), 2);
  EXPECT_EQ(r.fetched_.at(1), 2);
  EXPECT_EQ(r.fetched_.count(2), 0u);
  r.Run({0, 1, 2});
  r.ExpectEveryChunkTrainedOnce(2);
}

TEST(RingDispatcherTest, AWorkerBackJoinsAfterTheOpenStepAndFetchesTheState) {
  Ring r(2, 2);
  ASSERT_TRUE(r.d_.SetBase(0, 0, "", {}).ok());
  for (int w : {0, 1}) r.Ask(w);
  r.Step({0, 1});
  r.now_ += absl::Seconds(5);
  r.Beat(0);
  EXPECT_EQ(r.d_.FindLost(r.now_, absl::Seconds(1)), (std::vector<int>{1}));
  EXPECT_EQ(r.Ask(0, 1).kind(), RingWorkResponse::WAIT);  // forms [0] alone
  EXPECT_EQ(r.d_.members(), (std::vector<int>{0}));
  r.Step({0});
  r.Step({0});
  // Worker 1 is back (a new process) while worker 0 is inside step 4.
  ASSERT_EQ(r.Ask(0).kind(), RingWorkResponse::STEP);
  r.incarnation_[1] = 7;
  r.completed_[1] = -1;
  r.state_ring_id_[1] = 0;
  EXPECT_EQ(r.Ask(1).kind(), RingWorkResponse::WAIT);
  EXPECT_FALSE(r.d_.Settled());  // no checkpoint while the ring grows
  // Worker 0 finishes step 4 (still its own ring), then the ring grows.
  r.trained_[4]++;
  r.completed_[0] = 4;
  EXPECT_EQ(r.Ask(0).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.d_.members(), (std::vector<int>{0, 1}));
  r.fetched_.clear();
  EXPECT_EQ(r.Step({0, 1}), 5);
  EXPECT_EQ(r.fetched_.at(1), 0);
  EXPECT_EQ(r.Ask(1).kind(), RingWorkResponse::STEP);  // reports it holds step 5
  EXPECT_TRUE(r.d_.Settled());
  r.Run({0, 1});
  r.ExpectEveryChunkTrainedOnce(2);
}

TEST(RingDispatcherTest, APauseParksTheRingAtAStepWithItsDoneChunks) {
  Ring r(2, 1);
  ASSERT_TRUE(r.d_.SetBase(0, 0, "", {}).ok());
  for (int w : {0, 1}) r.Ask(w);
  r.Step({0, 1});
  ASSERT_EQ(r.Ask(0).kind(), RingWorkResponse::STEP);  // step 2 opens
  r.d_.Pause();
  int64_t step;
  int source;
  std::string done;
  EXPECT_FALSE(r.d_.AllParked(&step, &source, &done));
  // Worker 1 still gets step 2 (worker 0 is in it), then both park.
  r.completed_[0] = 1;
  EXPECT_EQ(r.Step({0, 1}), 2);
  EXPECT_EQ(r.Ask(0).kind(), RingWorkResponse::WAIT);
  EXPECT_FALSE(r.d_.AllParked(&step, &source, &done));
  EXPECT_EQ(r.Ask(1).kind(), RingWorkResponse::WAIT);
  ASSERT_TRUE(r.d_.AllParked(&step, &source, &done));
  EXPECT_EQ(step, 2);
  EXPECT_EQ(source, 0);
  EXPECT_EQ(done, "0-3");
  ASSERT_TRUE(r.d_.SetBase(step, kChunksPerEpoch, done, {}).ok());
  r.d_.Resume();
  EXPECT_EQ(r.Step({0, 1}), 3);
}

TEST(RingDispatcherTest, WithNoReplicaLeftTheRingRestartsFromTheChiefsCheckpoint) {
  Ring r(2, 2);
  ASSERT_TRUE(r.d_.SetBase(0, 0, "", {}).ok());
  for (int w : {0, 1}) r.Ask(w);
  r.Step({0, 1});
  r.Step({0, 1});
  ASSERT_TRUE(r.d_.SetBase(2, kChunksPerEpoch, "0-3", {}).ok());  // a checkpoint
  r.Step({0, 1});
  // Both die; worker 0 comes back first, then worker 1, as new processes.
  r.now_ += absl::Seconds(5);
  EXPECT_EQ(r.d_.FindLost(r.now_, absl::Seconds(1)), (std::vector<int>{0, 1}));
  r.incarnation_ = {5, 6};
  r.completed_ = {-1, -1};
  r.state_ring_id_ = {0, 0};
  EXPECT_EQ(r.Ask(0).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.d_.ring_id(), 2);
  EXPECT_EQ(r.d_.members(), (std::vector<int>{0}));
  EXPECT_EQ(r.d_.done_chunks(), 4);  // step 3's chunks are to do again
  EXPECT_EQ(r.Ask(1).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.Ask(0).kind(), RingWorkResponse::WAIT);  // forms [0, 1]
  EXPECT_EQ(r.d_.ring_id(), 3);
  EXPECT_EQ(r.d_.members(), (std::vector<int>{0, 1}));
  r.trained_[4] = 0, r.trained_[5] = 0;  // step 3's first training was lost
  r.fetched_.clear();
  EXPECT_EQ(r.Step({0, 1}), 3);
  EXPECT_EQ(r.fetched_.at(0), -1);
  EXPECT_EQ(r.fetched_.at(1), -1);
  r.Run({0, 1});
  r.ExpectEveryChunkTrainedOnce(2);
}

TEST(RingDispatcherTest, ARestartedChiefNumbersItsRingsAboveTheWorkersAndStartsFromItsBase) {
  // The workers hold step 7 of ring 3; the new chief knows the
  // checkpoint of step 4 (chunks 0-7 done).
  Ring r(2, 1);
  ASSERT_TRUE(r.d_.SetBase(4, kChunksPerEpoch, "0-7", {}).ok());
  r.completed_ = {7, 7};
  r.state_ring_id_ = {3, 3};
  EXPECT_EQ(r.Ask(0).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.Ask(1).kind(), RingWorkResponse::WAIT);
  EXPECT_EQ(r.d_.ring_id(), 4);
  EXPECT_EQ(r.Step({0, 1}), 5);
  EXPECT_EQ(r.fetched_.at(0), -1);  // the chief's checkpoint, not their newer state
  EXPECT_EQ(r.fetched_.at(1), -1);
  EXPECT_EQ(r.trained_, (std::map<int64_t, int>{{8, 1}, {9, 1}}));  // the base's were done
  EXPECT_EQ(r.Ask(0).kind(), RingWorkResponse::DONE);
  EXPECT_EQ(r.d_.done_chunks(), 10);
}

TEST(RingDispatcherTest, RefusesAnUnknownWorkerAndDisagreeingData) {
  RingDispatcher d(2, 1, absl::Now());
  RingWorkRequest r;
  r.set_worker_index(2);
  r.set_chunks_per_epoch(5);
  EXPECT_TRUE(absl::IsInvalidArgument(d.RingWork(r, absl::Now()).status()));
  r.set_worker_index(0);
  ASSERT_TRUE(d.RingWork(r, absl::Now()).ok());
  r.set_worker_index(1);
  r.set_chunks_per_epoch(6);
  EXPECT_TRUE(absl::IsFailedPrecondition(d.RingWork(r, absl::Now()).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(d.SetBase(3, 5, "9-2", {})));
  EXPECT_TRUE(absl::IsFailedPrecondition(d.GetWork(WorkRequest(), absl::Now()).status()));
}

TEST(RingDispatcherTest, HandsOutItsBaseStateOfTheStepAsked) {
  RingDispatcher d(2, 1, absl::Now());
  ReplicaRequest request;
  EXPECT_TRUE(absl::IsUnavailable(d.GetReplica(request).status()));
  ShardState state;
  state.set_version(4);
  state.set_values("values");
  state.add_slots();
  ASSERT_TRUE(d.SetBase(4, kChunksPerEpoch, "0-7", state).ok());
  request.set_step(3);
  absl::Status older = d.GetReplica(request).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(older));
  EXPECT_EQ(older.message(), "the chief holds the state of step 4, not 3");
  request.set_at_least(true);
  absl::StatusOr<ShardState> got = d.GetReplica(request);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version(), 4);
  EXPECT_EQ(got->slots_size(), 1);
  request.set_step(4);
  request.set_at_least(false);
  request.set_values_only(true);
  got = d.GetReplica(request);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->values(), "values");
  EXPECT_EQ(got->slots_size(), 0);
  request.set_step(5);
  request.set_at_least(true);
  EXPECT_TRUE(absl::IsFailedPrecondition(d.GetReplica(request).status()));
}

}  // namespace
}  // namespace pscluster
