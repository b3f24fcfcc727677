// Checkpointer: the run's checkpoints. It takes a snapshot of every ps at
// one consistent cut (workers paused between steps; sync: every ps at one
// version; async: every worker parked first; each ps copies its state
// aside in memory, and sends it once the workers go on) together with the
// data position, keeps the newest in memory (ps recovery restores from it, so it
// never depends on a disk) and writes it to the checkpoint directory
// (chief/snapshot.h's encoding, model/checkpoint.h's files). It also says
// when the next periodic one is due and reads the newest back from disk for
// a restarted chief.
//
// Not thread-safe: the chief's loop calls it. Everything borrowed must
// outlive it.
#ifndef PSCLUSTER_CHIEF_CHECKPOINTER_H_
#define PSCLUSTER_CHIEF_CHECKPOINTER_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chief/dispatcher.h"
#include "chief/ps_fleet.h"
#include "chief/snapshot.h"
#include "model/model_spec.h"
#include "model/placement.h"
#include "proto/ps.pb.h"

namespace pscluster {

struct CheckpointerOptions {
  std::string dir;  // empty: kept in memory only
  int keep = 3;     // files kept in `dir`
  // A periodic checkpoint is due after this many steps / this long; 0 /
  // zero duration: not by that measure.
  int64_t every_steps = 200;
  absl::Duration every = absl::ZeroDuration();
  UpdateMode mode = SYNC;
  // The placement's option, to read a checkpoint of another ps count
  // (FromCheckpointFor).
  int64_t min_shard_bytes = 64 << 10;
  // Sync: how long the ps may disagree on the version before a checkpoint
  // is skipped (a worker between its pushes to two ps).
  absl::Duration settle_timeout = absl::Seconds(1);
};

class Checkpointer {
 public:
  // `run_started` goes into every snapshot (set_run_started changes it).
  Checkpointer(const CheckpointerOptions& options, const ModelSpec* spec,
               const Placement* placement, PsFleet* fleet, Dispatcher* dispatcher,
               const std::atomic<bool>* stop, absl::Time run_started);

  // Takes a checkpoint; `why` names it in the log. `workers_idle`: no
  // worker can be in a step (start-up), so none is waited for. A snapshot
  // that cannot be taken (a ps unreachable, workers that do not pause) is
  // skipped with a warning, OK, and the next is due after another interval
  // from `highest_version` (with `required`, the snapshot's error instead).
  // A file that cannot be written is an error. `to_disk` false: kept in
  // memory only, for WriteLatest to write once training goes on.
  absl::Status Take(const char* why, int64_t highest_version, bool workers_idle = false,
                    bool required = false, bool to_disk = true);

  // The newest checkpoint (latest()) written to the checkpoint directory;
  // nothing without a directory or a checkpoint. An error when the file
  // cannot be written.
  absl::Status WriteLatest(const char* why);

  // Whether a periodic checkpoint is due at `now` with the ps at up to
  // `highest_version`.
  bool Due(absl::Time now, int64_t highest_version) const;

  // The newest checkpoint in memory; null before the first.
  const Snapshot* latest() const { return latest_ ? &*latest_ : nullptr; }

  // Reads the newest checkpoint in the directory and keeps it as latest().
  // NotFound when there is no directory or no checkpoint in it; other
  // errors (unreadable, another layout) as FromCheckpoint and
  // ReadLatestCheckpoint give them.
  absl::StatusOr<const Snapshot*> ReadNewestFromDisk();

  void set_run_started(absl::Time t) { run_started_ = t; }

  // `snap` is the newest checkpoint from now on (the one just taken, its
  // shards placed again over another ps count): what a recovery restores.
  void Adopt(Snapshot snap) { latest_ = std::move(snap); }

 private:
  // Pauses the workers while each ps copies its state aside at one
  // consistent cut (CaptureWhilePaused), then fetches those states while
  // the workers train on. *paused: how long the workers were paused.
  absl::StatusOr<Snapshot> TakeSnapshot(bool workers_idle, absl::Duration* paused);
  // latest() written to the directory, logged with `why` and `note`.
  absl::Status WriteToDisk(const char* why, const std::string& note);
  // Sets `snap`'s fields but the ps's states, which hold only the version
  // and generation each ps captured. bytes[i]: ps i's bytes of state.
  absl::Status CaptureWhilePaused(bool workers_idle, const std::vector<double>& bytes,
                                  Snapshot* snap);
  // Asks the ps for their versions until they agree (sync: one version;
  // both modes: the run's generation) or `deadline` passes. `apart` is
  // empty when they agree, else says where each stands. An error when a ps
  // does not answer.
  absl::Status WaitForOneVersion(absl::Time deadline, std::string* apart);

  const CheckpointerOptions options_;
  const ModelSpec* const spec_;
  const Placement* const placement_;
  bool has_tables_ = false;  // the model has sparse tables (their rows' size is asked for)
  PsFleet* const fleet_;
  Dispatcher* const dispatcher_;
  const std::atomic<bool>& stop_;
  absl::Time run_started_;
  std::optional<Snapshot> latest_;
  int64_t last_step_ = 0;
  absl::Time last_time_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_CHECKPOINTER_H_
