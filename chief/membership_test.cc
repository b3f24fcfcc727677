#include "chief/membership.h"

#include <atomic>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chief/fake_ps_fleet.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// Ps that answer GetStats with set versions and record SetWorkers.
class FakeFleet : public PsFleetForTests {
 public:
  explicit FakeFleet(std::vector<int64_t> versions)
      : PsFleetForTests(static_cast<int>(versions.size())), versions(std::move(versions)) {}

  absl::StatusOr<PsStatsResponse> Stats(int ps, absl::Duration) override {
    if (ps == down) return absl::UnavailableError(absl::StrCat("stats of ps:", ps));
    PsStatsResponse st;
    st.set_version(versions[ps]);
    return st;
  }
  absl::Status SetWorkers(int ps, const std::vector<bool>& active, absl::Duration) override {
    if (ps == down) return absl::UnavailableError(absl::StrCat("setting the workers of ps:", ps));
    sent.push_back({ps, active});
    return absl::OkStatus();
  }

  std::vector<int64_t> versions;
  int down = -1;  // this ps does not answer
  std::vector<std::pair<int, std::vector<bool>>> sent;
};

WorkRequest Ask(int worker) {
  WorkRequest r;
  r.set_worker_index(worker);
  r.set_incarnation(worker + 1);
  r.set_chunks_per_epoch(8);
  return r;
}

class MembershipTest : public ::testing::Test {
 protected:
  MembershipTest() : fleet_({5, 5}), dispatcher_(2, 1, kT0) {}

  MembershipSync Make(UpdateMode mode) {
    MembershipOptions opt;  // the chief's: the ps get 2 s to reach one version
    opt.mode = mode;
    return MembershipSync(opt, &fleet_, &dispatcher_, &stop_);
  }
  WorkResponse::Kind Get(int worker) {
    absl::StatusOr<WorkResponse> w = dispatcher_.GetWork(Ask(worker), kT0);
    EXPECT_TRUE(w.ok()) << w.status();
    return w->kind();
  }
  // Worker 1 goes silent and is found lost.
  void LoseWorker1() {
    HeartbeatRequest h;
    h.set_worker_index(0);
    h.set_incarnation(1);
    ASSERT_TRUE(dispatcher_.Heartbeat(h, kT0 + absl::Seconds(4)).ok());
    ASSERT_EQ(dispatcher_.FindLost(kT0 + absl::Seconds(5), absl::Seconds(3)).size(), 1u);
  }

  FakeFleet fleet_;
  Dispatcher dispatcher_;
  std::atomic<bool> stop_{false};
};

using Sent = std::vector<std::pair<int, std::vector<bool>>>;

TEST_F(MembershipTest, TheFirstSetGoesToEveryPs) {
  MembershipSync sync = Make(SYNC);
  EXPECT_EQ(Get(0), WorkResponse::CHUNK);
  EXPECT_TRUE(sync.Apply(/*force=*/true));
  EXPECT_EQ(fleet_.sent, (Sent{{0, {true, true}}, {1, {true, true}}}));
  EXPECT_TRUE(sync.Apply());  // nothing changed: nothing sent
  EXPECT_EQ(fleet_.sent.size(), 2u);
}

TEST_F(MembershipTest, TakingAWorkerOutDoesNotWaitForTheVersions) {
  MembershipSync sync = Make(SYNC);
  ASSERT_TRUE(sync.Apply(true));
  fleet_.sent.clear();
  fleet_.versions = {5, 6};  // ps:1 completed the step, ps:0 not yet
  LoseWorker1();
  EXPECT_TRUE(sync.Apply());
  EXPECT_EQ(fleet_.sent, (Sent{{0, {true, false}}, {1, {true, false}}}));
}

TEST_F(MembershipTest, AWorkerIsAddedOnlyWhenEveryPsIsAtOneVersion) {
  MembershipSync sync = Make(SYNC);
  ASSERT_TRUE(sync.Apply(true));
  LoseWorker1();
  ASSERT_TRUE(sync.Apply());
  fleet_.sent.clear();
  // Worker 1 is back: it waits until the ps wait for it.
  EXPECT_EQ(Get(1), WorkResponse::PAUSE);

  // The ps are out of step (ps:0 has not applied the step ps:1 has): the
  // set must not go out, or worker 1 would join at different steps.
  fleet_.versions = {5, 6};
  EXPECT_FALSE(sync.Apply());
  EXPECT_TRUE(fleet_.sent.empty());
  EXPECT_EQ(Get(1), WorkResponse::PAUSE);  // the ps do not wait for it yet
  EXPECT_EQ(Get(0), WorkResponse::CHUNK);  // and the others were resumed

  // The next tick, the ps agree: sent, and worker 1 gets work.
  fleet_.versions = {6, 6};
  EXPECT_TRUE(sync.Apply());
  EXPECT_EQ(fleet_.sent, (Sent{{0, {true, true}}, {1, {true, true}}}));
  EXPECT_EQ(Get(1), WorkResponse::CHUNK);
}

TEST_F(MembershipTest, APsThatDoesNotAnswerGetsTheSetOnALaterTick) {
  MembershipSync sync = Make(SYNC);
  ASSERT_TRUE(sync.Apply(true));
  LoseWorker1();
  ASSERT_TRUE(sync.Apply());
  fleet_.sent.clear();
  EXPECT_EQ(Get(1), WorkResponse::PAUSE);
  fleet_.down = 1;  // its version is unknown
  EXPECT_FALSE(sync.Apply());
  EXPECT_TRUE(fleet_.sent.empty());
  EXPECT_EQ(Get(1), WorkResponse::PAUSE);
  fleet_.down = -1;
  EXPECT_TRUE(sync.Apply());
  EXPECT_EQ(fleet_.sent, (Sent{{0, {true, true}}, {1, {true, true}}}));
}

TEST_F(MembershipTest, AForcedSetThatDidNotReachEveryPsIsForcedAgain) {
  MembershipSync sync = Make(SYNC);
  ASSERT_TRUE(sync.Apply(true));
  fleet_.sent.clear();
  // ps:1 was restored (it holds no set) and is unreachable for a moment.
  fleet_.down = 1;
  EXPECT_FALSE(sync.Apply(/*force=*/true));
  EXPECT_EQ(fleet_.sent, (Sent{{0, {true, true}}}));
  fleet_.down = -1;
  EXPECT_TRUE(sync.Apply());  // the set did not change, and still goes out
  EXPECT_EQ(fleet_.sent, (Sent{{0, {true, true}}, {0, {true, true}}, {1, {true, true}}}));
  EXPECT_TRUE(sync.Apply());
  EXPECT_EQ(fleet_.sent.size(), 3u);
}

TEST_F(MembershipTest, AsyncTrainingHasNoSetToSend) {
  MembershipSync sync = Make(ASYNC);
  EXPECT_TRUE(sync.Apply(true));
  LoseWorker1();
  EXPECT_TRUE(sync.Apply());
  EXPECT_EQ(Get(1), WorkResponse::PAUSE);  // re-admitted now
  EXPECT_TRUE(sync.Apply());
  EXPECT_EQ(Get(1), WorkResponse::CHUNK);
  EXPECT_TRUE(fleet_.sent.empty());
}

}  // namespace
}  // namespace pscluster
