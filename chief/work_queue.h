// WorkQueue: which chunks of the run's data are done, leased to a worker,
// or still to do. A chunk is one worker batch: chunk k is batch
// k % chunks_per_epoch of epoch k / chunks_per_epoch (see WorkRequest in
// proto/coordination.proto). The chief leases chunks in order, takes back
// a lost worker's unfinished ones first, and saves and restores the done
// set with its checkpoints, so that every epoch covers each example once.
//
// Pure logic, no RPC. Thread-safe.
#ifndef PSCLUSTER_CHIEF_WORK_QUEUE_H_
#define PSCLUSTER_CHIEF_WORK_QUEUE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "absl/synchronization/mutex.h"

namespace pscluster {

class WorkQueue {
 public:
  WorkQueue(int num_workers, int epochs);

  // InvalidArgument naming `worker` when it is not one of the queue's
  // workers (0 .. num_workers - 1): the dispatchers' check of a request.
  absl::Status CheckWorker(int worker) const;

  // Set by the first worker that asks for work; every later worker must
  // agree (FailedPrecondition naming both values otherwise: their data
  // differs). InvalidArgument for a value < 1, or one that makes more than
  // kMaxChunks chunks over the epochs (a request's value sizes the queue).
  absl::Status SetChunksPerEpoch(int chunks_per_epoch);
  static constexpr int64_t kMaxChunks = int64_t{1} << 24;
  int chunks_per_epoch() const;  // 0 until set
  int64_t total() const;         // chunks in the whole run

  // The next chunk for `worker`: the lowest one to do. nullopt when none is
  // left to hand out (some may still be leased), or when `window` > 0 and
  // that chunk lies `window` or more chunks past the lowest one not done
  // (bounded delay, Li et al. OSDI'14: *bounded is then set to true).
  std::optional<int64_t> Lease(int worker, int64_t window = 0, bool* bounded = nullptr);
  // `worker` finished `chunk`; ignored unless it is leased to that worker.
  void Complete(int worker, int64_t chunk);
  // `chunk`, to do, is leased to `worker`, which holds it already (a
  // restarted chief learns it from the ps). False, and no change, when the
  // chunk is not to do or either is out of range.
  bool LeaseTo(int worker, int64_t chunk);
  // `chunk`, to do, is leased to `worker` ahead of its asking (the
  // dispatcher's reservation of its next chunk), when `window` is 0 or the
  // chunk lies less than `window` past the lowest one not done (as Lease).
  // False, and no change, otherwise.
  bool Reserve(int worker, int64_t chunk, int64_t window);
  // Whether `chunk` is leased to `worker`.
  bool Holds(int worker, int64_t chunk) const;
  // A reservation given back: `chunk` is to do again (not counted as
  // returned); ignored unless leased to `worker`.
  void Unreserve(int worker, int64_t chunk);
  // The lowest chunk to do, if any.
  std::optional<int64_t> LowestTodo();
  // `worker` gives `chunk` back undone; ignored unless leased to it.
  void Return(int worker, int64_t chunk);
  // `worker` is lost: its leased chunks are to do again. Returns how many.
  // Costs what that worker holds, not the run's chunks: a thousand workers
  // lost at once cost a thousand short lists, not a thousand scans of the
  // run.
  int Release(int worker);
  // The chunks leased to `worker` now, in no order (empty out of range).
  std::vector<int64_t> LeasedTo(int worker) const;
  // Every lease is forgotten (a restore: nobody's work counts any more).
  void ReleaseAll();

  bool AllDone() const;
  int64_t done_count() const;
  // Chunks given back undone by Return() so far.
  int64_t returned_count() const;
  // The done chunks as ranges, "0-99,120-130" (for a checkpoint), and back.
  // Restore forgets every lease; InvalidArgument for a malformed string or
  // a chunk beyond total().
  std::string SaveDone() const;
  absl::Status RestoreDone(const std::string& ranges);
  // `ranges` (SaveDone's form) with `chunks` added, in the same form (a
  // checkpoint's chunks that the ps applied and their workers have not
  // reported yet). InvalidArgument for a malformed string or chunk < 0.
  static absl::StatusOr<std::string> AddDone(const std::string& ranges,
                                             absl::Span<const int64_t> chunks);

 private:
  enum class State : uint8_t { kTodo, kLeased, kDone };
  void EnsureSized() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool LeasedTo(int worker, int64_t chunk) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `chunk`, to do, becomes leased to `worker` (in range).
  void LeaseLocked(int worker, int64_t chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `chunk`, leased to `worker`, leaves the lease for `to` (kTodo or kDone).
  void EndLease(int worker, int64_t chunk, State to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every lease forgotten (sizing, a restore).
  void ForgetLeases() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves first_todo_ to the lowest chunk to do; false when none is.
  bool SkipToTodo() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `chunk` lies `window` (> 0) or more chunks past the lowest one
  // not done (Lease's and Reserve's bound); advances first_undone_.
  bool PastWindow(int64_t chunk, int64_t window) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  const int num_workers_;
  const int epochs_;
  int chunks_per_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<State> state_ ABSL_GUARDED_BY(mu_);
  std::vector<int> owner_ ABSL_GUARDED_BY(mu_);  // for kLeased
  // Per worker, the chunks leased to it (in no order): owner_ read the
  // other way, so that Release need not scan state_.
  std::vector<std::vector<int64_t>> leases_ ABSL_GUARDED_BY(mu_);
  int64_t first_todo_ ABSL_GUARDED_BY(mu_) = 0;  // no kTodo below this
  int64_t first_undone_ ABSL_GUARDED_BY(mu_) = 0;  // every chunk below is kDone
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t returned_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_WORK_QUEUE_H_
