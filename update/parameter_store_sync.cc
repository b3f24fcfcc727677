// ParameterStore's sync step protocol: gathering the members' gradients
// (PendingStep), closing a step (the deciding store) or applying the step
// another store decided (a following store, Commit), computing a
// follower's next update ahead, the workers a step waits for, and the
// decider's epoch that fences a replaced decider.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "update/parameter_store.h"

namespace pscluster {

absl::StatusOr<PushResult> ParameterStore::PushSync(const PushArgs& args, bool finite) {
  const int w = args.worker;
  PushResult r;
  r.staleness = version_ - args.version;
  // A backup worker's late gradient, a second one for this step, one from
  // a worker the chief took out of the step (it rejoins through the
  // chief), or (following store) one the step's decision left out.
  const bool left_out = commit_.has_value() && !commit_->members[w];
  if (args.version < version_ || pending_.has(w) || !active_[w] || left_out) {
    ++stats_.pushes_dropped_stale;
    // A second push for this step leaves the first one's fate alone.
    if (!pending_.has(w)) outcome_[w] = {args.version, false};
    r.version = version_;
    return r;
  }
  pending_.Take(args, finite);
  outcome_[w] = {args.version, false};
  r.applied = true;
  MaybeFinishStep();
  r.version = version_;
  return r;
}

void ParameterStore::DropPending(int w) {
  pending_.Drop(w);
  outcome_[w] = {version_, false};
  ++stats_.pushes_dropped_stale;
}

void ParameterStore::MaybeFinishStep() {
  // A decider with a decision adopted at its promotion closes that step
  // as a follower would.
  if (config_.step_role == StepRole::kDecide && !commit_.has_value()) {
    MaybeCloseStep();
  } else {
    MaybeApplyCommit();
  }
}

void ParameterStore::MaybeCloseStep() {
  if (pending_.count() == 0) return;
  const int active = static_cast<int>(std::count(active_.begin(), active_.end(), true));
  if (pending_.count() < std::min(config_.replicas_to_aggregate, active)) return;
  StepDecision d;
  d.layout_fingerprint = config_.layout_fingerprint;
  d.generation = generation_;
  d.version = version_;
  d.decider_epoch = decider_epoch_;
  d.members.resize(config_.num_workers);
  for (int w = 0; w < config_.num_workers; ++w) d.members[w] = pending_.has(w);
  d.skip = pending_.AnyNonfinite(d.members);
  const std::vector<bool> members = d.members;
  // Out before the update: the other ps apply the step while this one
  // does.
  decisions_.Record({std::move(d)});
  ApplyStep(members, /*skip=*/false);
}

void ParameterStore::MaybeApplyCommit() {
  if (!commit_.has_value()) {
    MaybeComputeAhead();
    return;
  }
  for (int w = 0; w < config_.num_workers; ++w) {
    // A member's gradient still on its way: wait, unless the chief took
    // the worker out (it died after reaching the deciding ps only).
    if (commit_->members[w] && !pending_.has(w) && active_[w]) return;
  }
  std::vector<bool> members = commit_->members;
  bool torn = false;
  for (int w = 0; w < config_.num_workers; ++w) {
    if (members[w] && !pending_.has(w)) {
      members[w] = false;
      torn = true;
    }
  }
  if (torn) ++stats_.steps_torn;
  const bool skip = commit_->skip;
  commit_.reset();
  if (!skip && ahead_.values != nullptr && ahead_.version == version_ &&
      ahead_.generation == generation_ && ahead_.members == members &&
      !pending_.AnyNonfinite(members)) {
    // Computed already: the values ahead become the next version's, and
    // the optimizer takes its state aside.
    values_.TakeAhead(std::move(ahead_.values));
    ahead_ = Ahead();
    ++stats_.steps_ahead;
    sparse_.SumStep(pending_, members);
    sparse_.Apply(version_);
    if (listener_) Report(pending_.Gradient(members, threads_), false, members, -1, 0, 0);
    CloseStep(members);
    return;
  }
  ApplyStep(members, skip);
}

void ParameterStore::MaybeComputeAhead() {
  if (config_.rule != UpdateRule::kSync || config_.step_role != StepRole::kFollow ||
      pending_.count() == 0) {
    return;
  }
  // ps 0 closes a step with this many gradients: most likely these.
  const int active = static_cast<int>(std::count(active_.begin(), active_.end(), true));
  if (pending_.count() != std::min(config_.replicas_to_aggregate, active)) return;
  std::vector<bool> members(config_.num_workers);
  int64_t total = 0;
  for (int w = 0; w < config_.num_workers; ++w) {
    members[w] = pending_.has(w);
    if (members[w]) total += pending_.examples(w);
  }
  // A step with a NaN or Inf is skipped: nothing to compute.
  if (total <= 0 || pending_.AnyNonfinite(members)) return;
  if (ahead_.values != nullptr && ahead_.version == version_ && ahead_.generation == generation_ &&
      ahead_.members == members) {
    return;
  }
  std::shared_ptr<std::vector<float>> out = std::move(ahead_.values);
  if (out == nullptr) out = values_.TakeSpare();
  values_.UpdateAside(pending_.Gradient(members, threads_), out.get());
  ahead_ = Ahead{version_, generation_, std::move(members), std::move(out)};
}

bool ParameterStore::ApplyStep(const std::vector<bool>& members, bool skip) {
  int64_t total = 0;
  const bool nonfinite = skip || pending_.AnyNonfinite(members);
  for (int w = 0; w < config_.num_workers; ++w) {
    if (members[w]) total += pending_.examples(w);
  }
  const float* grad = nullptr;
  sparse_.ClearStep();
  if (nonfinite) {
    ++stats_.steps_skipped_nonfinite;
  } else if (total > 0) {
    grad = pending_.Gradient(members, threads_);
    values_.Update(grad);
    sparse_.SumStep(pending_, members);
  }
  sparse_.Apply(version_);
  Report(grad, nonfinite, members, -1, 0, 0);
  CloseStep(members);
  return nonfinite;
}

void ParameterStore::CloseStep(const std::vector<bool>& members) {
  std::vector<int64_t> chunks;
  for (int w = 0; w < config_.num_workers; ++w) {
    if (members[w]) {
      ++stats_.pushes_applied;
      stats_.applied_digest += GradientHash(static_cast<uint64_t>(version_), w);
      outcome_[w] = {version_, true};
      chunks.push_back(pending_.chunk(w));
    } else if (pending_.has(w)) {
      outcome_[w] = {version_, false};
      ++stats_.pushes_dropped_stale;
    }
  }
  pending_.Clear();
  recent_chunks_.Add(chunks, RecentChunksKept(config_.num_workers));
  ++version_;
  ++stats_.steps_applied;
  version_advanced_.SignalAll();
}

std::optional<bool> ParameterStore::StepOutcome(int worker, int64_t version) const {
  absl::MutexLock lock(&mu_);
  if (worker < 0 || worker >= static_cast<int>(outcome_.size())) return std::nullopt;
  if (outcome_[worker].first != version) return std::nullopt;
  // Taken into the step being gathered: not decided yet.
  if (version == version_ && pending_.has(worker)) return std::nullopt;
  return outcome_[worker].second;
}

bool ParameterStore::NextDecision(int64_t after_sequence, absl::Time deadline, StepDecision* out) {
  return decisions_.Next(after_sequence, deadline, out);
}

absl::StatusOr<StepDecision> ParameterStore::DecisionFor(uint64_t layout_fingerprint,
                                                         int64_t version) const {
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(CheckReady(layout_fingerprint));
  if (std::optional<StepDecision> d = decisions_.Find(version, generation_)) return *d;
  return absl::NotFoundError(absl::StrCat("no decision kept for the step from version ", version));
}

absl::Status ParameterStore::Commit(uint64_t layout_fingerprint, const StepDecision& d) {
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(CheckReady(layout_fingerprint));
  if (config_.store_role == StoreRole::kBackup) {
    // Unavailable: the caller asks again, where the primary is now (a
    // restarted ps serves as a backup at the address it had).
    return absl::UnavailableError(
        "this ps holds a backup of these shards: step decisions go to their primary");
  }
  if (config_.rule != UpdateRule::kSync || config_.step_role != StepRole::kFollow) {
    return absl::FailedPreconditionError(
        "this ps decides its steps itself; it takes no step decisions");
  }
  if (static_cast<int>(d.members.size()) != config_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("step decision names ", d.members.size(),
                                                   " workers; this ps serves ",
                                                   config_.num_workers));
  }
  if (d.generation != generation_) {
    return GenerationMismatch(d.generation, generation_, version_);
  }
  if (d.decider_epoch < decider_epoch_) {
    return absl::FailedPreconditionError(
        absl::StrCat("step decision for version ", d.version, " of decider epoch ", d.decider_epoch,
                     "; this ps takes epoch ", decider_epoch_,
                     " and above: the ps that made it was replaced as the decider"));
  }
  decider_epoch_ = d.decider_epoch;
  if (d.version < version_) return absl::OkStatus();  // applied already
  if (d.version > version_) {
    return absl::UnavailableError(absl::StrCat("step decision for version ", d.version,
                                               "; this ps is at version ", version_));
  }
  if (std::find(d.members.begin(), d.members.end(), true) == d.members.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step decision for version ", d.version, " names no member"));
  }
  if (commit_.has_value()) return absl::OkStatus();  // resent while waiting
  commit_ = d;
  // Kept for a backup promoted in the decider's place (DecisionFor).
  decisions_.Keep(d);
  for (int w = 0; w < config_.num_workers; ++w) {
    if (!d.members[w] && pending_.has(w)) DropPending(w);
  }
  MaybeApplyCommit();
  return absl::OkStatus();
}

absl::Status ParameterStore::FenceDecisions(uint64_t layout_fingerprint, int64_t epoch) {
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(CheckReady(layout_fingerprint));
  if (config_.store_role == StoreRole::kPrimary && config_.step_role == StepRole::kDecide) {
    return absl::FailedPreconditionError(
        "this ps decides its steps itself; only a following ps is fenced against a decider");
  }
  decider_epoch_ = std::max(decider_epoch_, epoch);
  return absl::OkStatus();
}

absl::Status ParameterStore::SetActiveWorkers(uint64_t layout_fingerprint,
                                              const std::vector<bool>& active) {
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(CheckReady(layout_fingerprint));
  if (static_cast<int>(active.size()) != config_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("worker set has ", active.size(),
                                                   " entries; this ps serves ", config_.num_workers,
                                                   " workers"));
  }
  for (int w = 0; w < config_.num_workers; ++w) {
    // A lost worker's half-done step: its data is handed to another
    // worker, so its gradient must not count. A following store keeps it
    // until the decision says whether the deciding store took it.
    if (!active[w] && pending_.has(w) && config_.step_role == StepRole::kDecide) {
      DropPending(w);
    }
    active_[w] = active[w];
  }
  MaybeFinishStep();
  return absl::OkStatus();
}

}  // namespace pscluster
