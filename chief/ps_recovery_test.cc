#include "chief/ps_recovery.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "chief/failover_metrics.h"
#include "common/metrics.h"
#include "gtest/gtest.h"
#include "model/model_spec.h"
#include "model/placement.h"

namespace pscluster {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// Ps with set process identities. A ps that restarted answers with another
// incarnation, uninitialised; `unreachable[ps]` Stats calls fail before it
// answers again. The backup stores hand out `backup_state`, and Restore
// records what it was given and initialises the ps.
class FakeFleet : public PsFleet {
 public:
  explicit FakeFleet(int n) : incarnation(n), initialized(n, true), unreachable(n, 0) {
    for (int i = 0; i < n; ++i) incarnation[i] = i + 1;
  }

  int num_ps() const override { return static_cast<int>(incarnation.size()); }
  absl::StatusOr<PsStatsResponse> Stats(int ps, absl::Duration) override {
    if (unreachable[ps] > 0) {
      --unreachable[ps];
      return absl::UnavailableError(absl::StrCat("stats of ps:", ps, ": unreachable"));
    }
    PsStatsResponse st;
    st.set_initialized(initialized[ps]);
    st.set_incarnation(incarnation[ps]);
    st.set_generation(generation);
    st.set_version(initialized[ps] ? version : 0);
    return st;
  }
  absl::Status SetWorkers(int, const std::vector<bool>&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::StatusOr<ShardState> Snapshot(int, absl::Duration) override {
    return absl::UnimplementedError("not in this test");
  }
  absl::StatusOr<InitResponse> Init(int, const InitRequest&, absl::Duration) override {
    return absl::UnimplementedError("not in this test");
  }
  absl::Status SetBackups(int, const std::vector<std::string>&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::StatusOr<ShardState> SnapshotOfBackup(const std::string& address, absl::Duration) override {
    backups_asked.push_back(address);
    return backup_state;
  }
  absl::StatusOr<StepCommitRequest> GetDecision(int, int64_t, absl::Duration) override {
    return absl::NotFoundError("not decided");
  }
  absl::Status CommitStep(int, const StepCommitRequest&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status Restore(int ps, const RestoreRequest& request, absl::Duration) override {
    restored.push_back({ps, request.continues()});
    initialized[ps] = true;
    generation = request.state().generation();
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
  int64_t generation = 0;
  int64_t version = 300;
  absl::StatusOr<ShardState> backup_state = absl::UnavailableError("no backup store");
  std::vector<std::string> backups_asked;
  std::vector<std::pair<int, bool>> restored;  // ps, RestoreRequest.continues
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
                      &stop_, &backups_, failover_.get());
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
  std::vector<std::string> backups_ = {"ps1:7000", "ps0:7001"};  // ps i's on ps i+1
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
  backups_.clear();  // --ps_replicas=0
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

}  // namespace
}  // namespace pscluster
