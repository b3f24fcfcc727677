#include "chief/checkpointer.h"

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chief/fake_ps_fleet.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"

namespace pscluster {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// Ps at set versions; ps `lagging` is one version behind for the first
// `lag_for` calls of Stats (a sync step that has completed on the others,
// its last push still on the way), or for ever when lag_for < 0.
class FakeFleet : public PsFleetForTests {
 public:
  explicit FakeFleet(std::vector<int64_t> versions)
      : PsFleetForTests(static_cast<int>(versions.size())), versions(std::move(versions)) {}

  absl::StatusOr<PsStatsResponse> Stats(int ps, absl::Duration) override {
    ++stats_calls;
    PsStatsResponse st;
    st.set_version(VersionOf(ps));
    return st;
  }
  // The state's header, as a ps answers a capture; the whole state (here
  // with a value) is kept for the fetch.
  absl::StatusOr<ShardState> CaptureSnapshot(int ps, absl::Duration) override {
    ShardState s;
    s.set_version(VersionOf(ps));
    for (int64_t k : recent_chunks[ps]) s.add_recent_chunks(k);
    // A step completing between the look at the versions and this one.
    if (ps == 0 && ahead_in_snapshots > 0) {
      --ahead_in_snapshots;
      s.set_version(s.version() + 1);
    }
    ++snapshots;
    captured[ps] = s;
    captured[ps]->set_values(std::string(4, char(ps)));
    return s;
  }
  absl::StatusOr<ShardState> FetchCapturedSnapshot(int ps, absl::Duration) override {
    if (!captured[ps]) return absl::FailedPreconditionError("nothing captured");
    ShardState s = *std::move(captured[ps]);
    captured[ps].reset();
    if (fetch_newer) s.set_version(s.version() + 1);
    ++fetches;
    return s;
  }

  int64_t VersionOf(int ps) const {
    const bool lags = ps == lagging && (lag_for < 0 || stats_calls <= lag_for);
    return versions[ps] - (lags ? 1 : 0);
  }

  std::vector<int64_t> versions;
  int lagging = -1;
  int lag_for = 0;
  int stats_calls = 0;
  int ahead_in_snapshots = 0;
  int snapshots = 0;  // captures
  std::atomic<int> fetches = 0;  // called on a thread per ps
  bool fetch_newer = false;  // a capture not this chief's replaced ours
  std::vector<int64_t> recent_chunks[2];  // the chunks of each ps's last steps
  std::optional<ShardState> captured[2];
};

class CheckpointerTest : public ::testing::Test {
 protected:
  CheckpointerTest() : fleet_({300, 300}), dispatcher_(2, 1, kT0) {
    absl::StatusOr<ModelSpec> spec = ModelByName("mlp");
    EXPECT_TRUE(spec.ok()) << spec.status();
    spec_ = *std::move(spec);
    placement_ = PlaceVariables(spec_, 2);
  }

  // `settle`: how long the ps may disagree; a test whose lagging ps catches
  // up after a number of looks gives it far longer than those looks take on
  // a loaded machine, so it counts looks, not time.
  Checkpointer Make(UpdateMode mode, absl::Duration settle = absl::Seconds(1),
                    const std::string& dir = "") {
    CheckpointerOptions o;
    o.dir = dir;  // empty: in memory
    o.every_steps = 100;
    o.mode = mode;
    o.settle_timeout = settle;
    return Checkpointer(o, &spec_, &placement_, &fleet_, &dispatcher_, &stop_, kT0);
  }

  FakeFleet fleet_;
  Dispatcher dispatcher_;
  ModelSpec spec_;
  Placement placement_;
  std::atomic<bool> stop_{false};
};

TEST_F(CheckpointerTest, SyncWaitsForTheLaggingPsToCatchUp) {
  // Far more looks than the 100 the chief once gave up after.
  fleet_.lagging = 1;
  fleet_.lag_for = 400;
  Checkpointer c = Make(SYNC, absl::Minutes(5));
  ASSERT_TRUE(c.Take("periodic", 300).ok());
  ASSERT_NE(c.latest(), nullptr);
  EXPECT_EQ(c.latest()->step, 300);
  EXPECT_EQ(fleet_.snapshots, 2);  // the shards are fetched once, when the versions agree
  EXPECT_FALSE(c.Due(absl::Now(), 399));
  EXPECT_TRUE(c.Due(absl::Now(), 400));
}

TEST_F(CheckpointerTest, SyncLooksAgainWhenAStepCompletesBetweenTheLooks) {
  fleet_.ahead_in_snapshots = 2;
  Checkpointer c = Make(SYNC);
  ASSERT_TRUE(c.Take("periodic", 300).ok());
  ASSERT_NE(c.latest(), nullptr);
  EXPECT_EQ(c.latest()->step, 300);
  EXPECT_EQ(fleet_.snapshots, 6);
}

TEST_F(CheckpointerTest, SyncSkipsWhenThePsNeverAgree) {
  // A worker died between its pushes to ps:0 and ps:1.
  fleet_.lagging = 1;
  fleet_.lag_for = -1;
  Checkpointer c = Make(SYNC);
  ASSERT_TRUE(c.Take("periodic", 300).ok());  // skipped, not an error
  EXPECT_EQ(c.latest(), nullptr);
  EXPECT_EQ(fleet_.snapshots, 0);
  // Tried again after another interval, not at once.
  EXPECT_FALSE(c.Due(absl::Now(), 399));
  EXPECT_TRUE(c.Due(absl::Now(), 400));
  // The final checkpoint is required: the caller hears why it was not taken.
  absl::Status s = c.Take("final", 300, /*workers_idle=*/false, /*required=*/true);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(c.latest(), nullptr);
}

TEST_F(CheckpointerTest, AsyncTakesThePsAtDifferentVersions) {
  fleet_.versions = {300, 280};
  Checkpointer c = Make(ASYNC);
  ASSERT_TRUE(c.Take("periodic", 300, /*workers_idle=*/true).ok());
  ASSERT_NE(c.latest(), nullptr);
  EXPECT_EQ(c.latest()->step, 280);  // the lowest
}

// Under the pause each ps only copies its state aside; the whole states
// come after it, and they are the ones captured.
TEST_F(CheckpointerTest, FetchesTheCapturedStatesAfterThePause) {
  Checkpointer c = Make(SYNC);
  ASSERT_TRUE(c.Take("periodic", 300).ok());
  ASSERT_NE(c.latest(), nullptr);
  EXPECT_EQ(fleet_.snapshots, 2);
  EXPECT_EQ(fleet_.fetches.load(), 2);
  ASSERT_EQ(c.latest()->ps.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(c.latest()->ps[i].version(), 300);
    EXPECT_EQ(c.latest()->ps[i].values(), std::string(4, char(i)));
  }
  EXPECT_EQ(dispatcher_.generation(), c.latest()->generation);
}

TEST_F(CheckpointerTest, ACheckpointKeptForLaterIsWrittenWhenAsked) {
  // A move's checkpoint: taken with the workers paused, written once they
  // train again.
  const char* tmp = std::getenv("TEST_TMPDIR");
  ASSERT_NE(tmp, nullptr);
  const std::string dir = std::string(tmp) + "/written_later";
  Checkpointer c = Make(SYNC, absl::Seconds(1), dir);
  ASSERT_TRUE(c.Take("before placing the shards again", 300, /*workers_idle=*/false,
                     /*required=*/true, /*to_disk=*/false)
                  .ok());
  ASSERT_NE(c.latest(), nullptr);
  EXPECT_EQ(ReadLatestCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(c.WriteLatest("the shards placed again").ok());
  absl::StatusOr<Checkpoint> written = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->step, 300);
  // Without a directory there is nothing to write, and nothing fails.
  Checkpointer in_memory = Make(SYNC);
  EXPECT_TRUE(in_memory.WriteLatest("nothing yet").ok());
}

TEST_F(CheckpointerTest, SkipsWhenTheFetchedStateIsNotTheCapturedOne) {
  fleet_.fetch_newer = true;
  Checkpointer c = Make(SYNC);
  ASSERT_TRUE(c.Take("periodic", 300).ok());  // skipped, not an error
  EXPECT_EQ(c.latest(), nullptr);
  absl::Status s = c.Take("final", 300, /*workers_idle=*/false, /*required=*/true);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("not the one captured"), std::string::npos) << s;
}

// A worker says its chunk is done when it next asks for work: the ps may
// hold a step whose chunks the dispatcher still has as leased. Sync: the
// checkpoint counts them done (the chunks of the ps's last steps), so a
// restore does not train them again on top of the state that holds them.
// Async waits for every worker to ask instead, and takes the done set as
// it is.
TEST_F(CheckpointerTest, SyncCountsTheChunksOfThePsLastStepsDone) {
  auto ask = [this](int worker, std::vector<int64_t> completed) {
    WorkRequest r;
    r.set_worker_index(worker);
    r.set_incarnation(worker + 1);
    r.set_chunks_per_epoch(8);
    for (int64_t k : completed) r.add_completed(k);
    absl::StatusOr<WorkResponse> w = dispatcher_.GetWork(r, kT0);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? w->chunk() : -1;
  };
  int64_t n = 0;
  dispatcher_.Membership(&n);
  dispatcher_.MembershipApplied(n);
  // Chunks 0-1 make the first step, reported; 2-3 the second, whose
  // workers have not asked again.
  EXPECT_EQ(ask(0, {}), 0);
  EXPECT_EQ(ask(1, {}), 1);
  EXPECT_EQ(ask(0, {0}), 2);
  EXPECT_EQ(ask(1, {1}), 3);
  EXPECT_EQ(dispatcher_.SaveDone(), "0-1");
  fleet_.recent_chunks[0] = {0, 1, 3, 2};
  fleet_.recent_chunks[1] = {1, 0, 3, 2};
  Checkpointer sync = Make(SYNC);
  ASSERT_TRUE(sync.Take("periodic", 300).ok());
  ASSERT_NE(sync.latest(), nullptr);
  EXPECT_EQ(sync.latest()->done_chunks, "0-3");
  Checkpointer async = Make(ASYNC);
  ASSERT_TRUE(async.Take("periodic", 300, /*workers_idle=*/true).ok());
  ASSERT_NE(async.latest(), nullptr);
  EXPECT_EQ(async.latest()->done_chunks, "0-1");
}

TEST_F(CheckpointerTest, StopEndsTheWait) {
  fleet_.lagging = 1;
  fleet_.lag_for = -1;
  stop_ = true;
  Checkpointer c = Make(SYNC);
  ASSERT_TRUE(c.Take("periodic", 300).ok());
  EXPECT_EQ(c.latest(), nullptr);
  EXPECT_LE(fleet_.stats_calls, 2);  // one look at each ps, no waiting
}

}  // namespace
}  // namespace pscluster
