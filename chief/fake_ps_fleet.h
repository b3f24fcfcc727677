// PsFleetForTests: the base of the chief's tests' fake fleets. Every call
// answers Unimplemented ("not in this test") but SetBackups (OK) and the
// addresses, which it keeps: "ps0:7000", "ps1:7000", ... until MoveTo. A
// fake overrides the calls its test makes.
#ifndef PSCLUSTER_CHIEF_FAKE_PS_FLEET_H_
#define PSCLUSTER_CHIEF_FAKE_PS_FLEET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "chief/ps_fleet.h"

namespace pscluster {

class PsFleetForTests : public PsFleet {
 public:
  explicit PsFleetForTests(int num_ps) {
    for (int i = 0; i < num_ps; ++i) addresses.push_back(absl::StrCat("ps", i, ":7000"));
  }

  int num_ps() const override { return static_cast<int>(addresses.size()); }
  std::string address(int ps) const override { return addresses[ps]; }
  void MoveTo(int ps, const std::string& address) override { addresses[ps] = address; }

  absl::StatusOr<PsStatsResponse> Stats(int, absl::Duration) override { return NotHere(); }
  absl::Status SetWorkers(int, const std::vector<bool>&, absl::Duration) override {
    return NotHere();
  }
  absl::StatusOr<ShardState> Snapshot(int, absl::Duration) override { return NotHere(); }
  absl::StatusOr<ShardState> CaptureSnapshot(int, absl::Duration) override { return NotHere(); }
  absl::StatusOr<ShardState> FetchCapturedSnapshot(int, absl::Duration) override {
    return NotHere();
  }
  absl::StatusOr<ShardState> RecentChunks(int, absl::Duration) override { return NotHere(); }
  absl::StatusOr<InitResponse> Init(int, const InitRequest&, absl::Duration) override {
    return NotHere();
  }
  absl::Status Restore(int, const RestoreRequest&, absl::Duration) override { return NotHere(); }
  absl::Status SetBackups(int, const std::vector<std::string>&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::StatusOr<ShardState> SnapshotOfBackup(const std::string&, absl::Duration) override {
    return NotHere();
  }
  absl::StatusOr<StepCommitRequest> GetDecision(int, int64_t, int64_t, absl::Duration) override {
    return NotHere();
  }
  absl::Status CommitStep(int, const StepCommitRequest&, absl::Duration) override {
    return NotHere();
  }
  absl::StatusOr<PsStatsResponse> StatsAt(const std::string&, absl::Duration) override {
    return NotHere();
  }
  absl::StatusOr<int64_t> Promote(const std::string&, int64_t, bool, const StepCommitRequest*,
                                  int64_t, int64_t, absl::Duration) override {
    return NotHere();
  }
  absl::Status SetFollowers(int, const std::vector<std::string>&, absl::Duration) override {
    return NotHere();
  }
  absl::Status Demote(const std::string&, absl::Duration) override { return NotHere(); }

  std::vector<std::string> addresses;

 private:
  static absl::Status NotHere() { return absl::UnimplementedError("not in this test"); }
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_FAKE_PS_FLEET_H_
