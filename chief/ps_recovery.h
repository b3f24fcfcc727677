// PsRecovery: keeps the ps the processes the chief set up. Every check asks
// each ps for its stats; a ps that fails twice in a row, or answers as a
// new process (another incarnation) or uninitialised, is lost. With
// replicas (--ps_replicas) the backup store that holds the most is
// promoted at once: it serves the lost ps's shards from the version it
// holds, the workers are told where (Dispatcher::GetPlacement) and nothing
// else moves
// (docs/replication.md). A ps that was only cut off cannot answer anything
// since: its answers wait for its backup, which refuses it once promoted.
// A backup that stops answering is dropped, so that its primary goes on. Otherwise the workers are paused until the ps
// answers again: the same process (cut off, not restarted) resumes as it
// was; a restarted one has lost its parameters and, when its backup's
// state cannot serve, every ps is restored from the newest checkpoint
// under a new generation and the data position rewinds to the
// checkpoint's. The sync worker set is then sent to every ps again.
//
// Not thread-safe: the chief's loop calls it. Everything borrowed must
// outlive it.
#ifndef PSCLUSTER_CHIEF_PS_RECOVERY_H_
#define PSCLUSTER_CHIEF_PS_RECOVERY_H_

#include <atomic>
#include <cstdint>
#include <map>
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

// A backup of a ps's store: a store on another ps process (or the ps's own
// store while a backup serves its shards) that the primary keeps up to date.
struct StoreCopy {
  std::string address;  // host:port
  int holder = -1;      // the ps task whose process keeps it
  // Its primary reported every backup it keeps seeded and keeping up since
  // this one was set: from then on it holds every update a worker was
  // answered for (answers wait for every backup), and may be promoted.
  bool seeded = false;
};

// Where a ps's shards are held: the ps task whose process serves them
// (its own store, or a backup store promoted in that ps's place), and the
// backups its primary keeps now. A ps has R + 1 places for a copy: its own
// store and the backup stores of the next R ps (ps_server --backup_stores);
// the one that serves is the primary, the others its backups.
struct StoreCopies {
  int primary_holder = 0;
  std::vector<StoreCopy> backups;
  std::string home;  // the ps's own address (TF_CONFIG's)
  // The highest primary term this chief gave or saw a copy at: the next
  // promotion's is above it (docs/replication.md, Fencing).
  int64_t primary_term = 0;
};

// The backups' addresses (what SetBackups takes), and the ps holding them
// (what FailoverMetrics::SetCopies takes), in order.
std::vector<std::string> AddressesOf(const std::vector<StoreCopy>& backups);
std::vector<int> HoldersOf(const std::vector<StoreCopy>& backups);

class PsRecovery {
 public:
  // `incarnations`: each ps's process identity when it was initialised
  // (PsStart). A lost ps may take `recovery_timeout` to come back.
  // `copies`: per ps, where its copies are (absent: no backup), kept by
  // the run and changed here by a promotion. `metrics` counts each
  // recovery (null: none).
  PsRecovery(const PsSetup* setup, std::vector<uint64_t> incarnations,
             absl::Duration recovery_timeout, PsFleet* fleet, Dispatcher* dispatcher,
             MembershipSync* membership, const std::atomic<bool>* stop,
             std::vector<StoreCopies>* copies, FailoverMetrics* metrics = nullptr);

  // One round of checks. Raises *highest_version to every version seen
  // (lowers it to the checkpoint's step after a restore). `latest` is the
  // checkpoint to restore from (null: none yet). Errors end the run: a ps
  // not back within the timeout (Unavailable), a restarted ps with no
  // checkpoint (FailedPrecondition), a stop request (Cancelled), a failed
  // restore.
  absl::Status Check(const Snapshot* latest, int64_t* highest_version);

  // Whether a ps failed its last check: the next should come soon
  // (kLookAgainAfter), not after the usual period.
  bool suspects_loss() const;
  static constexpr absl::Duration kLookAgainAfter = absl::Milliseconds(100);

  // Shards served by another ps's backup store since a fail-over go back to
  // their own ps once its store, their backup now, is seeded and keeps up:
  // the store that served them is demoted and the own store promoted (a
  // planned fail-over: nothing rolled back, the workers told), so that no
  // process serves two ps's shards for long. Errors only when shards were
  // left with no primary (then the run ends); anything else is logged and
  // tried again on the next call.
  absl::Status MoveBack();

  // Restores every ps from `snap` under `generation`, all at once (a thread
  // per ps), and rewinds the data position to its (a start from a
  // checkpoint on disk, or a recovery). An error is the first ps's, in ps
  // order; the others were restored all the same.
  // Shards served by a promoted backup go back to their own ps.
  // `new_placement`: the shards were placed again over more or fewer ps
  // (the fleet's count now; PlaceShardsAgain): each ps takes the shards of
  // the placement in setup, whatever it held.
  // `kept_from` (with new_placement): the placement before the move,
  // whose shards each ps still holds as `before` has them (nothing
  // changed since): the floats that stay on a ps are not sent
  // (KeepInPlace). *sent, if given, counts the bytes of the states sent.
  absl::Status RestoreAll(const Snapshot& snap, int64_t generation, bool new_placement = false,
                          const Placement* kept_from = nullptr, const Snapshot* before = nullptr,
                          int64_t* sent = nullptr);

  // The fleet's ps count changed (a ps added or drained): the checks cover
  // the ps in use from now on. Call before RestoreAll of the new placement.
  void Resize();

  // Where each ps's shards are served now (the fleet's addresses) given to
  // the dispatcher, which tells the workers, and in sync to the deciding
  // ps, which sends its decisions there.
  absl::Status PublishPlacement();

 private:
  // While a ps is lost, the chief logs what it waits for this often.
  static constexpr absl::Duration kWaitReportEvery = absl::Seconds(5);

  absl::Status Recover(int ps, const std::string& why, const Snapshot* latest,
                       int64_t* highest_version);
  // Lost ps `ps`'s backup promoted (PromoteBackup), the fail-over counted
  // from `t0`: true; false, logged, when it has none or it cannot be.
  bool TryPromote(int ps, const std::string& why, absl::Time t0);
  // A backup that fails two looks in a row is dropped: its primary, which
  // holds its answers until the backup has the update, goes on without.
  void CheckBackups();
  // Ps `ps`'s primary keeps `backups` from now on, fewer than it kept (the
  // others lost): told so (SetBackups), then recorded, metrics included.
  absl::Status KeepOnly(int ps, std::vector<StoreCopy> backups);
  // The backup of ps `ps` to promote: of those seeded, answering and of
  // the run's generation, the one at the highest version (`only`: that
  // one or none). FailedPrecondition naming why each is not.
  struct ChosenBackup {
    int index = -1;  // in the StoreCopies' backups
    PsStatsResponse stats;
    int64_t highest_term = 0;  // of every backup that answered
  };
  absl::StatusOr<ChosenBackup> ChooseBackup(int ps, const std::string& only);
  // Lost ps `ps`'s backup store that holds the most (ChooseBackup) made the
  // primary of its shards under the next primary term, and every caller
  // told: OK, or why it could not be (then the old way serves).
  // The sync decider's backup decides under a new decider epoch, which
  // every follower is fenced at first: the lost decider may only be cut
  // off, and alive. `moving_back`: not lost, but demoted by MoveBack.
  absl::Status PromoteBackup(int ps, const std::string& why, bool moving_back = false);
  // Every ps's shards served at its own address again (before a restore
  // from a checkpoint), the workers and the deciding ps told.
  absl::Status MoveHome();
  // Restarted ps `ps` restored from its backup that holds the most (its
  // address in *from): OK, or why it could not be (then the checkpoint
  // serves), logged by the caller.
  absl::Status RestoreFromBackup(int ps, int64_t generation, std::string* from);
  // Sync: the highest decider epoch this chief gave or a ps but `skip`
  // holds (a chief restarted mid-run learns it from the ps). A restored or
  // promoted store takes it; a new decider the next.
  int64_t DeciderEpoch(int skip);

  const PsSetup* const setup_;
  const absl::Duration recovery_timeout_;
  PsFleet* const fleet_;
  Dispatcher* const dispatcher_;
  MembershipSync* const membership_;
  const std::atomic<bool>& stop_;
  std::vector<StoreCopies>* const copies_;
  FailoverMetrics* const metrics_;  // may be null
  std::vector<uint64_t> incarnation_;
  std::vector<int> failures_;  // consecutive failed checks, per ps
  // The same, of each backup store (by address).
  std::map<std::string, int> backup_failures_;
  // Per ps: when last seen, it answered without waiting for a backup that
  // had gone silent (docs/replication.md): its backup may lack updates.
  std::vector<bool> alone_;
  int64_t decider_epoch_ = 0;  // the highest known (DeciderEpoch)
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_PS_RECOVERY_H_
