#include "chief/ps_recovery.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "chief/failover_metrics.h"
#include "chief/fake_ps_fleet.h"
#include "common/metrics.h"
#include "gtest/gtest.h"
#include "model/model_spec.h"
#include "model/placement.h"

namespace pscluster {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// Ps with set process identities. A ps that restarted answers with another
// incarnation, uninitialised; `unreachable[ps]` Stats calls fail (with
// `unreachable_error`) before it answers again. The backup stores hand out
// `backup_state` and answer StatsAt as seeded backups of `backup_version`
// unless `backup_answers` is false; Restore records what it was given and
// initialises the ps.
class FakeFleet : public PsFleetForTests {
 public:
  explicit FakeFleet(int n)
      : PsFleetForTests(n),
      incarnation(n),
      initialized(n, true),
      unreachable(n, 0),
      decider_epoch(n, 0) {
    for (int i = 0; i < n; ++i) incarnation[i] = i + 1;
  }

  // Stats and Restore are called on a thread per ps (RestoreAll).
  absl::StatusOr<PsStatsResponse> Stats(int ps, absl::Duration) override {
    std::lock_guard<std::mutex> lock(mu);
    if (unreachable[ps] > 0) {
      --unreachable[ps];
      return absl::UnavailableError(absl::StrCat("stats of ps:", ps, ": ", unreachable_error));
    }
    PsStatsResponse st;
    st.set_initialized(initialized[ps]);
    st.set_incarnation(incarnation[ps]);
    st.set_generation(generation);
    st.set_version(initialized[ps] ? version : 0);
    st.set_decider_epoch(decider_epoch[ps]);
    st.set_backups_set(backups_kept);
    st.set_backups_live(backups_live);
    st.set_replicated_version(replicated_version);
    return st;
  }
  absl::Status SetWorkers(int, const std::vector<bool>&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status SetBackups(int ps, const std::vector<std::string>& addresses,
                          absl::Duration) override {
    backups_set.push_back({ps, addresses});
    return absl::OkStatus();
  }
  absl::StatusOr<ShardState> SnapshotOfBackup(const std::string& address, absl::Duration) override {
    backups_asked.push_back(address);
    return backup_state;
  }
  absl::StatusOr<StepCommitRequest> GetDecision(int ps, int64_t, int64_t fence_below,
                                                absl::Duration) override {
    if (fence_below > 0) {
      if (unfenceable == ps) return absl::UnavailableError("the follower does not answer");
      fenced.push_back({ps, fence_below});
      decider_epoch[ps] = std::max(decider_epoch[ps], fence_below);
    }
    if (ps != 0 && followers_took.has_value()) return *followers_took;
    return absl::NotFoundError("not decided");
  }
  absl::Status CommitStep(int, const StepCommitRequest&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status Restore(int ps, const RestoreRequest& request, absl::Duration) override {
    std::lock_guard<std::mutex> lock(mu);
    restored.push_back({ps, request.continues()});
    initialized[ps] = true;
    generation = request.state().generation();
    return absl::OkStatus();
  }
  absl::StatusOr<PsStatsResponse> StatsAt(const std::string& address, absl::Duration) override {
    if (!backup_answers || silent.count(address) > 0) {
      return absl::UnavailableError(absl::StrCat(address, ": no store"));
    }
    PsStatsResponse st;
    st.set_initialized(true);
    st.set_backup(true);
    st.set_incarnation(77);
    st.set_generation(generation);
    auto v = version_at.find(address);
    st.set_version(v != version_at.end() ? v->second : backup_version);
    auto t = term_at.find(address);
    if (t != term_at.end()) st.set_primary_term(t->second);
    return st;
  }
  absl::StatusOr<int64_t> Promote(const std::string& address, int64_t, bool decides,
                                  const StepCommitRequest* in_flight, int64_t epoch,
                                  int64_t term, absl::Duration) override {
    promoted.push_back(address);
    promoted_term = term;
    if (address == refuses_promotion) return absl::UnavailableError("promotion refused");
    promoted_to_decide = decides;
    promoted_in_flight = in_flight != nullptr;
    promoted_epoch = epoch;
    return backup_version;
  }
  absl::Status SetFollowers(int, const std::vector<std::string>& addresses,
                            absl::Duration) override {
    followers = addresses;
    return absl::OkStatus();
  }
  absl::Status Demote(const std::string& address, absl::Duration) override {
    demoted.push_back(address);
    return absl::OkStatus();
  }

  // A new process for `ps`: uninitialised, another identity.
  void Restart(int ps) {
    initialized[ps] = false;
    incarnation[ps] += 100;
  }

  std::vector<uint64_t> incarnation;
  std::vector<bool> initialized;
  std::vector<int> unreachable;
  std::vector<int64_t> decider_epoch;  // each ps's, as its stats say
  std::string unreachable_error = "unreachable";
  int64_t generation = 0;
  int64_t version = 300;
  absl::StatusOr<ShardState> backup_state = absl::UnavailableError("no backup store");
  bool backup_answers = false;
  int64_t backup_version = 300;
  // Per backup store: its version and primary term (else backup_version
  // and 0), or silent.
  std::map<std::string, int64_t> version_at;
  std::map<std::string, int64_t> term_at;
  std::set<std::string> silent;
  std::vector<std::string> backups_asked;
  std::vector<std::pair<int, bool>> restored;  // ps, RestoreRequest.continues
  std::mutex mu;
  std::vector<std::string> promoted;
  bool promoted_to_decide = false;
  bool promoted_in_flight = false;
  int64_t promoted_epoch = -1;
  int64_t promoted_term = -1;
  std::vector<std::pair<int, int64_t>> fenced;  // ps, GetDecision's fence_below
  int unfenceable = -1;  // a follower that does not answer GetDecision
  std::string refuses_promotion;  // the store that Promote fails for
  std::vector<std::string> demoted;
  // What every ps's stats say of its backups.
  int backups_kept = 0;
  int backups_live = 0;
  int64_t replicated_version = -1;
  std::optional<StepCommitRequest> followers_took;  // a decision the followers have
  std::vector<std::pair<int, std::vector<std::string>>> backups_set;
  std::vector<std::string> followers;
};

// The value of the sample of `name` whose labels are the task's and
// `labels` (as the text format writes them: the task first, the others
// sorted, with a leading comma); nullopt when absent.
std::optional<double> Sample(const std::string& text, const std::string& name,
                             const std::string& labels) {
  const std::string key = absl::StrCat(name, "{task=\"chief:0\"", labels, "} ");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, key)) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(key.size()), &v)) return v;
  }
  return std::nullopt;
}

class PsRecoveryTest : public ::testing::Test {
 protected:
  PsRecoveryTest() : fleet_(2), dispatcher_(2, 1, kT0) {
    absl::StatusOr<ModelSpec> spec = ModelByName("mlp");
    EXPECT_TRUE(spec.ok()) << spec.status();
    spec_ = *std::move(spec);
    placement_ = PlaceVariables(spec_, 2);
    setup_.placement = &placement_;
    setup_.mode = ASYNC;
    setup_.num_workers = 2;
    MembershipOptions mopt;
    mopt.mode = ASYNC;
    membership_ = std::make_unique<MembershipSync>(mopt, &fleet_, &dispatcher_, &stop_);
    absl::StatusOr<std::unique_ptr<Metrics>> metrics =
        Metrics::Start("", "chief:0", MetricsRole::kChief);
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = *std::move(metrics);
    absl::StatusOr<std::unique_ptr<FailoverMetrics>> failover =
        FailoverMetrics::Create(metrics_.get());
    EXPECT_TRUE(failover.ok()) << failover.status();
    failover_ = *std::move(failover);
    // A checkpoint of step 200 to fall back on.
    checkpoint_.step = 200;
    checkpoint_.ps.resize(2);
    for (ShardState& s : checkpoint_.ps) s.set_version(200);
  }

  PsRecovery Make() {
    return PsRecovery(&setup_, {1, 2}, absl::Seconds(10), &fleet_, &dispatcher_, membership_.get(),
                      &stop_, &copies_, failover_.get());
  }

  // A backup store's state of ps 1: at the fleet's version and generation,
  // with values.
  ShardState BackupState() const {
    ShardState s;
    s.set_version(fleet_.version);
    s.set_generation(fleet_.generation);
    s.set_values(std::string(4 * 1000, '\x01'));
    return s;
  }

  double Failovers(const std::string& how) const {
    return Sample(metrics_->Serialize(), "pscluster_ps_failovers_total",
                  absl::StrCat(",how=\"", how, "\""))
        .value_or(-1);
  }
  double Value(const std::string& name) const {
    return Sample(metrics_->Serialize(), name, "").value_or(-1);
  }

  FakeFleet fleet_;
  Dispatcher dispatcher_;
  ModelSpec spec_;
  Placement placement_;
  PsSetup setup_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<MembershipSync> membership_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<FailoverMetrics> failover_;
  // ps i's backup on ps i+1's backup store.
  std::vector<StoreCopies> copies_ = {{0, {{"ps1:7001", 1, true}}, "ps0:7000"},
                                      {1, {{"ps0:7001", 0, true}}, "ps1:7000"}};
  Snapshot checkpoint_;
};

TEST_F(PsRecoveryTest, NothingCountedWhileEveryPsAnswers) {
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(highest, 300);
  EXPECT_EQ(Failovers("backup"), 0);
  EXPECT_EQ(Failovers("checkpoint"), 0);
  EXPECT_EQ(Failovers("resumed"), 0);
  EXPECT_EQ(Value("pscluster_ps_recovery_pause_seconds_count"), 0);
  EXPECT_EQ(Value("pscluster_ps_reseed_bytes_total"), 0);
}

TEST_F(PsRecoveryTest, RestartedPsFromItsBackupCountsTheFailoverAndTheBytes) {
  fleet_.backup_state = BackupState();
  // Not promoted (here refused), the backup's state serves the restarted ps.
  fleet_.backup_answers = true;
  fleet_.refuses_promotion = "ps0:7001";
  const double bytes = static_cast<double>(BackupState().ByteSizeLong());
  ASSERT_GT(bytes, 4000);
  fleet_.Restart(1);
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  ASSERT_EQ(fleet_.backups_asked, std::vector<std::string>{"ps0:7001"});
  ASSERT_EQ(fleet_.restored.size(), 1u);
  EXPECT_EQ(fleet_.restored[0], std::make_pair(1, true));  // only ps 1, continuing
  EXPECT_EQ(highest, 300);                                 // nothing rolled back
  EXPECT_EQ(Failovers("backup"), 1);
  EXPECT_EQ(Failovers("checkpoint"), 0);
  EXPECT_EQ(Failovers("resumed"), 0);
  EXPECT_EQ(Value("pscluster_ps_recovery_pause_seconds_count"), 1);
  EXPECT_EQ(Value("pscluster_ps_reseed_bytes_total"), bytes);

  // Restarted again: the bytes add up.
  fleet_.Restart(1);
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(Failovers("backup"), 2);
  EXPECT_EQ(Value("pscluster_ps_recovery_pause_seconds_count"), 2);
  EXPECT_EQ(Value("pscluster_ps_reseed_bytes_total"), 2 * bytes);
}

TEST_F(PsRecoveryTest, StaleBackupFallsBackToTheCheckpointAndCopiesNothing) {
  ShardState stale = BackupState();
  stale.set_generation(fleet_.generation - 1);
  fleet_.backup_state = stale;
  fleet_.Restart(1);
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(fleet_.restored.size(), 2u);  // every ps, from the checkpoint
  EXPECT_EQ(highest, 200);
  EXPECT_EQ(Failovers("backup"), 0);
  EXPECT_EQ(Failovers("checkpoint"), 1);
  EXPECT_EQ(Failovers("resumed"), 0);
  EXPECT_EQ(Value("pscluster_ps_recovery_pause_seconds_count"), 1);
  EXPECT_EQ(Value("pscluster_ps_reseed_bytes_total"), 0);
}

TEST_F(PsRecoveryTest, NoBackupRestoresFromTheCheckpoint) {
  copies_.clear();  // --ps_replicas=0
  fleet_.Restart(0);
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_TRUE(fleet_.backups_asked.empty());
  EXPECT_EQ(Failovers("backup"), 0);
  EXPECT_EQ(Failovers("checkpoint"), 1);
  EXPECT_EQ(Value("pscluster_ps_reseed_bytes_total"), 0);
}

TEST_F(PsRecoveryTest, SameProcessAnsweringAgainIsResumed) {
  fleet_.unreachable[1] = 3;  // two checks find it lost, then one more look
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(Failovers("resumed"), 0);  // one failed look is not a loss
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_TRUE(fleet_.restored.empty());
  EXPECT_EQ(Failovers("resumed"), 1);
  EXPECT_EQ(Failovers("backup"), 0);
  EXPECT_EQ(Failovers("checkpoint"), 0);
  EXPECT_EQ(Value("pscluster_ps_recovery_pause_seconds_count"), 1);
}

TEST_F(PsRecoveryTest, APsWhosePortRefusesHasItsBackupPromotedAndTheWorkersAreTold) {
  fleet_.backup_answers = true;
  fleet_.unreachable[1] = 2;
  fleet_.unreachable_error = "failed to connect to all addresses; last error: UNKNOWN: "
                             "ipv4:127.0.0.1:7000: Failed to connect to remote host: Connection "
                             "refused";
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_TRUE(r.suspects_loss());  // looked at again soon
  EXPECT_TRUE(fleet_.promoted.empty());
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_FALSE(r.suspects_loss());
  EXPECT_EQ(fleet_.promoted, std::vector<std::string>{"ps0:7001"});
  EXPECT_EQ(fleet_.address(1), "ps0:7001");
  EXPECT_TRUE(fleet_.restored.empty());  // nothing copied, nothing rolled back
  EXPECT_EQ(highest, 300);
  absl::StatusOr<PlacementResponse> placement = dispatcher_.GetPlacement();
  ASSERT_TRUE(placement.ok());
  EXPECT_EQ(std::vector<std::string>(placement->ps_addresses().begin(),
                                     placement->ps_addresses().end()),
            (std::vector<std::string>{"ps0:7000", "ps0:7001"}));
  EXPECT_EQ(placement->epoch(), 1);
  // ps 1 is served by ps 0's process now, with no backup yet; ps 0's
  // backup was on the lost process: its primary stops waiting for it.
  EXPECT_EQ(copies_[1].primary_holder, 0);
  EXPECT_TRUE(copies_[1].backups.empty());
  EXPECT_TRUE(copies_[0].backups.empty());
  ASSERT_EQ(fleet_.backups_set.size(), 1u);
  EXPECT_EQ(fleet_.backups_set[0].first, 0);
  EXPECT_TRUE(fleet_.backups_set[0].second.empty());
  EXPECT_EQ(Failovers("promoted"), 1);
  EXPECT_EQ(Failovers("checkpoint"), 0);
  EXPECT_EQ(Value("pscluster_ps_recovery_pause_seconds_count"), 1);
  EXPECT_EQ(Sample(metrics_->Serialize(), "pscluster_ps_store_info",
                   ",holder=\"ps:0\",role=\"primary\",store=\"ps:1\"")
                .value_or(-1),
            1);
  // Its backup store answers the checks from now on.
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(fleet_.promoted.size(), 1u);
}

TEST_F(PsRecoveryTest, ARestartedPsHasItsBackupPromoted) {
  fleet_.backup_answers = true;
  fleet_.Restart(1);
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(fleet_.promoted, std::vector<std::string>{"ps0:7001"});
  EXPECT_TRUE(fleet_.restored.empty());
  EXPECT_TRUE(fleet_.backups_asked.empty());
  EXPECT_EQ(Failovers("promoted"), 1);
  EXPECT_EQ(Failovers("backup"), 0);
}

TEST_F(PsRecoveryTest, APsThatTimesOutIsReplacedToo) {
  // It may be alive, cut off: it answers nothing its backup lacks, and the
  // backup, once promoted, refuses it (docs/replication.md, Fencing).
  fleet_.backup_answers = true;
  fleet_.unreachable[1] = 2;
  fleet_.unreachable_error = "Deadline Exceeded";
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(fleet_.promoted, std::vector<std::string>{"ps0:7001"});
  EXPECT_EQ(Failovers("promoted"), 1);
  EXPECT_EQ(Failovers("resumed"), 0);
}

TEST_F(PsRecoveryTest, ABackupThatStopsAnsweringIsDropped) {
  // Its primary holds every answer for it: told to go on without it.
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_TRUE(fleet_.backups_set.empty());  // one failed look is not a loss
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  ASSERT_EQ(fleet_.backups_set.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(fleet_.backups_set[i].first, i);
    EXPECT_TRUE(fleet_.backups_set[i].second.empty());
    EXPECT_TRUE(copies_[i].backups.empty());
  }
  EXPECT_EQ(Sample(metrics_->Serialize(), "pscluster_ps_failovers_total", ",how=\"promoted\"")
                .value_or(-1),
            0);
}

TEST_F(PsRecoveryTest, TheSyncDeciderIsReplacedUnderANewEpochOnceEveryFollowerIsFenced) {
  fleet_.backup_answers = true;
  setup_.mode = SYNC;
  // Restarted, with a decision in flight that a follower took: its backup
  // decides from then on under epoch 1, starting with that decision, and
  // sends its decisions to the follower, which was fenced at epoch 1 first.
  StepCommitRequest took;
  took.set_version(fleet_.backup_version);
  fleet_.followers_took = took;
  fleet_.Restart(0);
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(fleet_.promoted, std::vector<std::string>{"ps1:7001"});
  EXPECT_TRUE(fleet_.promoted_to_decide);
  EXPECT_TRUE(fleet_.promoted_in_flight);
  EXPECT_EQ(fleet_.promoted_epoch, 1);
  EXPECT_EQ(fleet_.fenced, (std::vector<std::pair<int, int64_t>>{{1, 1}}));
  EXPECT_EQ(fleet_.address(0), "ps1:7001");
  EXPECT_EQ(fleet_.followers, std::vector<std::string>{"ps1:7000"});
  EXPECT_EQ(Failovers("promoted"), 1);
  EXPECT_EQ(Failovers("checkpoint"), 0);
}

TEST_F(PsRecoveryTest, ACutOffSyncDeciderIsReplacedTooUnderTheEpochAfterTheHighest) {
  fleet_.backup_answers = true;
  setup_.mode = SYNC;
  // Timing out, ps:0 may be alive and still send the follower decisions:
  // the follower, which took epoch 4 already, is fenced at 5 before the
  // backup decides.
  fleet_.decider_epoch[1] = 4;
  fleet_.unreachable[0] = 2;
  fleet_.unreachable_error = "Deadline Exceeded";
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_TRUE(fleet_.promoted.empty());  // one failed look
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(fleet_.promoted, std::vector<std::string>{"ps1:7001"});
  EXPECT_TRUE(fleet_.promoted_to_decide);
  EXPECT_FALSE(fleet_.promoted_in_flight);
  EXPECT_EQ(fleet_.promoted_epoch, 5);
  EXPECT_EQ(fleet_.fenced, (std::vector<std::pair<int, int64_t>>{{1, 5}}));
  EXPECT_EQ(Failovers("promoted"), 1);
}

TEST_F(PsRecoveryTest, ASyncDeciderIsNotReplacedWhileAFollowerCannotBeFenced) {
  fleet_.backup_answers = true;
  setup_.mode = SYNC;
  fleet_.unfenceable = 1;
  fleet_.unreachable[0] = 3;
  fleet_.unreachable_error = "Deadline Exceeded";
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  // Not promoted: waited for until it answers again, as without replicas.
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_TRUE(fleet_.promoted.empty());
  EXPECT_EQ(fleet_.address(0), "ps0:7000");
  EXPECT_EQ(Failovers("resumed"), 1);
}

TEST_F(PsRecoveryTest, ABackupBehindTheOtherPsIsNotPromoted) {
  fleet_.backup_answers = true;
  setup_.mode = SYNC;
  // A follower's backup two steps behind the decider lacks an update.
  fleet_.backup_version = fleet_.version - 2;
  fleet_.Restart(1);
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_TRUE(fleet_.promoted.empty());
  EXPECT_EQ(Failovers("checkpoint"), 1);
}

TEST_F(PsRecoveryTest, ASyncFollowerPromotedIsGivenTheStepAndTheDecider) {
  fleet_.backup_answers = true;
  setup_.mode = SYNC;
  fleet_.backup_version = fleet_.version - 1;  // the step in flight is not on it
  fleet_.Restart(1);
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(fleet_.promoted, std::vector<std::string>{"ps0:7001"});
  EXPECT_FALSE(fleet_.promoted_to_decide);
  EXPECT_EQ(fleet_.promoted_epoch, 0);  // the decider's: it follows
  EXPECT_TRUE(fleet_.fenced.empty());
  EXPECT_EQ(fleet_.followers, std::vector<std::string>{"ps0:7001"});
  EXPECT_EQ(Failovers("promoted"), 1);
}

// After a fail-over ps:1's shards are served by its backup store on ps:0,
// and ps:1's own store is their backup.
void ServedByTheBackup(FakeFleet* fleet, std::vector<StoreCopies>* copies) {
  fleet->MoveTo(1, "ps0:7001");
  (*copies)[1] = {0, {{"ps1:7000", 1, true}}, "ps1:7000"};
}

TEST_F(PsRecoveryTest, ShardsGoBackToTheirOwnPsOnceItsStoreKeepsUp) {
  fleet_.backup_answers = true;
  setup_.mode = SYNC;
  ServedByTheBackup(&fleet_, &copies_);
  PsRecovery r = Make();
  // Not yet seeded: nothing moves.
  fleet_.backups_kept = 1;
  fleet_.backups_live = 1;
  ASSERT_TRUE(r.MoveBack().ok());
  EXPECT_TRUE(fleet_.demoted.empty());
  // Seeded and keeping up: the store on ps:0 is demoted, ps:1's own store
  // promoted (a follower: under the decider's epoch), the workers told.
  fleet_.replicated_version = 300;
  ASSERT_TRUE(r.MoveBack().ok());
  EXPECT_EQ(fleet_.demoted, std::vector<std::string>{"ps0:7001"});
  EXPECT_EQ(fleet_.promoted, std::vector<std::string>{"ps1:7000"});
  EXPECT_FALSE(fleet_.promoted_to_decide);
  EXPECT_EQ(fleet_.address(1), "ps1:7000");
  EXPECT_EQ(copies_[1].primary_holder, 1);
  EXPECT_TRUE(copies_[1].backups.empty());
  EXPECT_EQ(fleet_.followers, std::vector<std::string>{"ps1:7000"});
  EXPECT_EQ(Value("pscluster_ps_moved_back_total"), 1);
  EXPECT_EQ(Failovers("promoted"), 0);  // not a fail-over
  // At home: nothing more to move.
  ASSERT_TRUE(r.MoveBack().ok());
  EXPECT_EQ(fleet_.demoted.size(), 1u);
}

TEST_F(PsRecoveryTest, ShardsThatCannotGoBackAreServedAgainWhereTheyWere) {
  fleet_.backup_answers = true;
  ServedByTheBackup(&fleet_, &copies_);
  fleet_.backups_kept = 1;
  fleet_.backups_live = 1;
  fleet_.replicated_version = 300;
  fleet_.refuses_promotion = "ps1:7000";
  PsRecovery r = Make();
  ASSERT_TRUE(r.MoveBack().ok());
  EXPECT_EQ(fleet_.demoted, std::vector<std::string>{"ps0:7001"});
  EXPECT_EQ(fleet_.promoted, (std::vector<std::string>{"ps1:7000", "ps0:7001"}));
  EXPECT_EQ(fleet_.address(1), "ps0:7001");
  EXPECT_EQ(copies_[1].primary_holder, 0);
  EXPECT_EQ(Value("pscluster_ps_moved_back_total"), 0);
}

// --ps_replicas=2: ps 1's store has two backups (here both kept by ps 0's
// process, which the recovery does not mind).
void TwoBackupsOfPs1(std::vector<StoreCopies>* copies, bool seeded) {
  (*copies)[1].backups = {{"ps0:7001", 0, seeded}, {"ps0:7002", 0, seeded}};
}

TEST_F(PsRecoveryTest, OfTwoBackupsTheOneHoldingTheMostIsPromotedAboveEveryTerm) {
  fleet_.backup_answers = true;
  TwoBackupsOfPs1(&copies_, /*seeded=*/true);
  // The lost primary answered 299 and applied 300, which one backup holds.
  fleet_.version_at = {{"ps0:7001", 299}, {"ps0:7002", 300}};
  fleet_.term_at = {{"ps0:7001", 2}, {"ps0:7002", 2}};
  fleet_.unreachable[1] = 2;
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(fleet_.promoted, std::vector<std::string>{"ps0:7002"});
  // Above the terms the backups follow: the one not promoted refuses the
  // lost primary's records once the new one has seeded it.
  EXPECT_EQ(fleet_.promoted_term, 3);
  EXPECT_EQ(copies_[1].primary_term, 3);
  EXPECT_EQ(fleet_.address(1), "ps0:7002");
  EXPECT_TRUE(copies_[1].backups.empty());  // the run's KeepBackups sets them again
  EXPECT_EQ(Failovers("promoted"), 1);
}

TEST_F(PsRecoveryTest, ABackupNotSeededYetIsNotPromotedThoughItHoldsMore) {
  fleet_.backup_answers = true;
  TwoBackupsOfPs1(&copies_, /*seeded=*/true);
  copies_[1].backups[1].seeded = false;  // set, not known to be seeded yet
  fleet_.version_at = {{"ps0:7001", 299}, {"ps0:7002", 300}};
  fleet_.unreachable[1] = 2;
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(fleet_.promoted, std::vector<std::string>{"ps0:7001"});
}

TEST_F(PsRecoveryTest, NoBackupSeededMeansNoPromotion) {
  fleet_.backup_answers = true;
  TwoBackupsOfPs1(&copies_, /*seeded=*/false);
  fleet_.unreachable[1] = 2;
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());  // waited for, answers again
  EXPECT_TRUE(fleet_.promoted.empty());
  EXPECT_EQ(Failovers("resumed"), 1);
}

TEST_F(PsRecoveryTest, BackupsCountAsSeededOnceTheirPrimarySaysEveryOneKeepsUp) {
  fleet_.backup_answers = true;
  TwoBackupsOfPs1(&copies_, /*seeded=*/false);
  PsRecovery r = Make();
  int64_t highest = 0;
  // One of the two set so far (a SetBackups not taken yet): not seeded.
  fleet_.backups_kept = 1;
  fleet_.backups_live = 1;
  fleet_.replicated_version = 300;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_FALSE(copies_[1].backups[0].seeded);
  // Both set and live, one still holding nothing (-1): not seeded.
  fleet_.backups_kept = 2;
  fleet_.backups_live = 2;
  fleet_.replicated_version = -1;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_FALSE(copies_[1].backups[0].seeded);
  // Both hold a version.
  fleet_.replicated_version = 300;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_TRUE(copies_[1].backups[0].seeded);
  EXPECT_TRUE(copies_[1].backups[1].seeded);
}

TEST_F(PsRecoveryTest, OneOfTwoBackupsLostIsDroppedAlone) {
  fleet_.backup_answers = true;
  TwoBackupsOfPs1(&copies_, /*seeded=*/true);
  fleet_.silent = {"ps0:7002"};
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_TRUE(fleet_.backups_set.empty());  // one failed look is not a loss
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  ASSERT_EQ(fleet_.backups_set.size(), 1u);
  EXPECT_EQ(fleet_.backups_set[0].first, 1);
  EXPECT_EQ(fleet_.backups_set[0].second, std::vector<std::string>{"ps0:7001"});
  ASSERT_EQ(copies_[1].backups.size(), 1u);
  EXPECT_EQ(copies_[1].backups[0].address, "ps0:7001");
  EXPECT_TRUE(copies_[1].backups[0].seeded);  // it was, and stays
}

TEST_F(PsRecoveryTest, TwoLostAtOnceAreBothPromotedTheFollowerFirst) {
  // --ps_replicas=2 keeps a copy of each store for that. The decider's
  // backup is promoted last: it fences every follower first, the lost
  // one's promoted backup included.
  fleet_.backup_answers = true;
  setup_.mode = SYNC;
  // ps 0's backup kept by a process not lost (a third ps's, with R = 2).
  copies_[0].backups = {{"ps2:7002", 2, true}};
  fleet_.Restart(0);
  fleet_.Restart(1);
  PsRecovery r = Make();
  int64_t highest = 0;
  ASSERT_TRUE(r.Check(&checkpoint_, &highest).ok());
  EXPECT_EQ(fleet_.promoted, (std::vector<std::string>{"ps0:7001", "ps2:7002"}));
  EXPECT_EQ(fleet_.address(0), "ps2:7002");
  EXPECT_EQ(fleet_.address(1), "ps0:7001");
  EXPECT_EQ(fleet_.followers, std::vector<std::string>{"ps0:7001"});
  EXPECT_EQ(Failovers("promoted"), 2);
  EXPECT_EQ(Failovers("checkpoint"), 0);
  EXPECT_TRUE(fleet_.restored.empty());
}

}  // namespace
}  // namespace pscluster
