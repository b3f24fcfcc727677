// PsRecovery: keeps the ps the processes the chief set up. Every check asks
// each ps for its stats; a ps that fails twice in a row, or answers as a
// new process (another incarnation) or uninitialised, is lost: the workers
// are paused until it answers again. The same process (cut off, not
// restarted) resumes as it was. A restarted one has lost its parameters:
// with replicas (--ps_replicas=1) it takes its backup's state, as the
// primary it was, and nothing else moves (docs/replication.md); without
// (or when the backup is gone too, or for ps 0 of a sync run with several
// ps, whose decisions in flight its backup cannot know), every ps is
// restored from the newest checkpoint under a new generation and the data
// position rewinds to the checkpoint's. The sync worker set is then sent
// to every ps again.
//
// Not thread-safe: the chief's loop calls it. Everything borrowed must
// outlive it.
#ifndef PSCLUSTER_CHIEF_PS_RECOVERY_H_
#define PSCLUSTER_CHIEF_PS_RECOVERY_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "chief/dispatcher.h"
#include "chief/failover_metrics.h"
#include "chief/membership.h"
#include "chief/ps_fleet.h"
#include "chief/ps_setup.h"
#include "chief/snapshot.h"

namespace pscluster {

class PsRecovery {
 public:
  // `incarnations`: each ps's process identity when it was initialised
  // (PsStart). A lost ps may take `recovery_timeout` to come back.
  // `backups`: per ps, the address of its backup store ("" or absent:
  // none), kept by the run. `metrics` counts each recovery (null: none).
  PsRecovery(const PsSetup* setup, std::vector<uint64_t> incarnations,
             absl::Duration recovery_timeout, PsFleet* fleet, Dispatcher* dispatcher,
             MembershipSync* membership, const std::atomic<bool>* stop,
             const std::vector<std::string>* backups, FailoverMetrics* metrics = nullptr);

  // One round of checks. Raises *highest_version to every version seen
  // (lowers it to the checkpoint's step after a restore). `latest` is the
  // checkpoint to restore from (null: none yet). Errors end the run: a ps
  // not back within the timeout (Unavailable), a restarted ps with no
  // checkpoint (FailedPrecondition), a stop request (Cancelled), a failed
  // restore.
  absl::Status Check(const Snapshot* latest, int64_t* highest_version);

  // Restores every ps from `snap` under `generation` and rewinds the data
  // position to its (a start from a checkpoint on disk, or a recovery).
  absl::Status RestoreAll(const Snapshot& snap, int64_t generation);

 private:
  // While a ps is lost, the chief logs what it waits for this often.
  static constexpr absl::Duration kWaitReportEvery = absl::Seconds(5);

  absl::Status Recover(int ps, const std::string& why, const Snapshot* latest,
                       int64_t* highest_version);
  // Restarted ps `ps` restored from its backup: OK, or why it could not be
  // (then the checkpoint serves), logged by the caller.
  absl::Status RestoreFromBackup(int ps, int64_t generation);

  const PsSetup* const setup_;
  const absl::Duration recovery_timeout_;
  PsFleet* const fleet_;
  Dispatcher* const dispatcher_;
  MembershipSync* const membership_;
  const std::atomic<bool>& stop_;
  const std::vector<std::string>* const backups_;
  FailoverMetrics* const metrics_;  // may be null
  std::vector<uint64_t> incarnation_;
  std::vector<int> failures_;  // consecutive failed checks, per ps
  // Per ps: when last seen, it answered without waiting for a backup that
  // had gone silent (docs/replication.md): its backup may lack updates.
  std::vector<bool> alone_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_PS_RECOVERY_H_
