// DecisionLog: the newest sync step decisions a store made or took, oldest
// first, kept for whoever needs one again: the followers a deciding store
// sends its decisions to (Next, by sequence number), a follower restored
// from its backup, a backup promoted in a lost decider's place (Find).
//
// Thread-safe, under a lock of its own: the store adds decisions under its
// own lock (taken before this one, never after), so that a decision goes
// out while the step it closes is still being applied, and the ps service's
// sender waits in Next without holding the store's.
#ifndef PSCLUSTER_UPDATE_DECISION_LOG_H_
#define PSCLUSTER_UPDATE_DECISION_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pscluster {

// Sync: which workers' gradients make up the step that takes the store
// from `version` to version + 1.
struct StepDecision {
  uint64_t layout_fingerprint = 0;
  int64_t generation = 0;
  int64_t version = 0;
  std::vector<bool> members;  // one per worker
  // The deciding store skipped the step (skip policy: a member's gradient
  // held NaN or Inf there); the others skip it too.
  bool skip = false;
  // Increases with every decision a deciding store makes (restores too).
  int64_t sequence = 0;
  // The decider's epoch, raised each time a backup is promoted to decide
  // in a lost decider's place. A following store refuses decisions of an
  // epoch below the highest it was fenced at or took (FenceDecisions,
  // Commit), so that a decider that was only cut off, and replaced, can no
  // longer have a step applied anywhere.
  int64_t decider_epoch = 0;
  // Sync clipping (update/step_clipping.h): the step is clipped; without
  // scales, the decider asks each ps for its squared norms; with them (the
  // decider's second decision of the step), each ps applies its part
  // scaled by them.
  bool clipped = false;
  std::vector<float> clip_scales;
};

class DecisionLog {
 public:
  // Decisions are kept until this many newer ones push them out: a
  // follower needs each one, and cannot fall behind by more than one (its
  // workers would wait for it).
  static constexpr size_t kKept = 16;

  // A deciding store's own decisions, in order: each gets the next
  // sequence number (and, when `epoch` is set, that decider epoch) and
  // wakes Next.
  void Record(std::vector<StepDecision> decisions, std::optional<int64_t> epoch = std::nullopt);
  // A following store's decision, kept as it came.
  void Keep(const StepDecision& decision);
  // Forgets every decision (the state they were of was replaced).
  void Clear();

  // The oldest decision with a sequence above `after_sequence`, waiting
  // for one until `deadline`. False on the deadline or after Cancel().
  bool Next(int64_t after_sequence, absl::Time deadline, StepDecision* out);

  // The newest kept decision for the step from `version` of
  // `generation` (a clipped step's second, with its scales, once it came).
  std::optional<StepDecision> Find(int64_t version, int64_t generation) const;

  // The kept decisions of `generation` for steps below `version`, oldest
  // first.
  std::vector<StepDecision> Before(int64_t version, int64_t generation) const;

  // Wakes every Next, for good.
  void Cancel();

 private:
  void AddLocked(StepDecision d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar made_;  // signalled on a recorded decision and on Cancel
  std::deque<StepDecision> decisions_ ABSL_GUARDED_BY(mu_);
  int64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_DECISION_LOG_H_
