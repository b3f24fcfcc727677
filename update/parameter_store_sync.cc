// ParameterStore's sync step protocol: gathering the members' gradients
// (PendingStep), closing a step (the deciding store) or applying the step
// another store decided (a following store, Commit), the ps's agreement on
// a clipped step's norms (update/step_clipping.h), computing a follower's
// next update ahead, the workers a step waits for, and the decider's epoch
// that fences a replaced decider.
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
  if (clipping_.enabled() && !d.skip) {
    // Clipped: the step waits for every ps's norms (its own first), as a
    // decision in flight would; alone, it has them at once.
    d.clipped = true;
    if (clipping_.num_ps() > 1) decisions_.Record({d});
    commit_ = std::move(d);
    MaybeApplyCommit();
    return;
  }
  // Out before the update: the other ps apply the step while this one
  // does.
  decisions_.Record({std::move(d)});
  ApplyStep(members, /*skip=*/false);
}

bool ParameterStore::GatherClipNorms(const std::vector<bool>& members) {
  const int self = config_.step_role == StepRole::kDecide ? 0 : -1;  // a follower keeps as -1
  if (clipping_.Kept(self, generation_, version_) == nullptr) {
    clipping_.Keep(self, generation_, version_,
                   clipping_.Norms(pending_.Gradient(members, threads_)));
    version_advanced_.SignalAll();  // a Commit waits for them
  }
  if (config_.step_role != StepRole::kDecide) return false;
  std::optional<std::vector<float>> scales = clipping_.Scales(generation_, version_);
  if (!scales.has_value()) return false;
  commit_->clip_scales = *std::move(scales);
  // The step again, with its scales: every ps applies its part scaled (a
  // decision adopted at a promotion goes under this decider's epoch).
  commit_->decider_epoch = decider_epoch_;
  decisions_.Record({*commit_});
  return true;
}

absl::Status ParameterStore::AddClipNorms(uint64_t layout_fingerprint, int ps, int64_t generation,
                                          int64_t version, std::vector<double> norms) {
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(CheckReady(layout_fingerprint));
  if (ps < 1 || ps >= clipping_.num_ps() ||
      static_cast<int>(norms.size()) != clipping_.num_trainable()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "squared norms of ", norms.size(), " variables from ps:", ps, "; this step clips ",
        clipping_.num_trainable(), " variables over ", clipping_.num_ps(), " ps"));
  }
  if (config_.step_role != StepRole::kDecide || !commit_.has_value() || !commit_->clipped ||
      commit_->version != version || commit_->generation != generation) {
    return absl::OkStatus();  // a step closed already (a resent answer)
  }
  clipping_.Keep(ps, generation, version, std::move(norms));
  MaybeApplyCommit();
  return absl::OkStatus();
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
  if (commit_->clipped && commit_->clip_scales.empty() && !GatherClipNorms(members)) return;
  if (torn) ++stats_.steps_torn;
  const bool skip = commit_->skip;
  const std::vector<float> scales = std::move(commit_->clip_scales);
  commit_.reset();
  if (!scales.empty()) {
    ApplyStep(members, skip, scales);
    return;
  }
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
  // A clipped step's update waits for its scales.
  if (config_.rule != UpdateRule::kSync || config_.step_role != StepRole::kFollow ||
      pending_.count() == 0 || clipping_.enabled()) {
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

bool ParameterStore::ApplyStep(const std::vector<bool>& members, bool skip,
                               const std::vector<float>& clip_scales) {
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
    if (!clip_scales.empty()) {
      clipped_.assign(grad, grad + config_.num_floats);
      clipping_.Clip(clip_scales, clipped_.data());
      grad = clipped_.data();
    }
    values_.Update(grad);
    sparse_.SumStep(pending_, members);
  }
  sparse_.Apply(version_);
  Report(grad, nonfinite, members, -1, 0, 0, -1, clip_scales);
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

absl::Status ParameterStore::Commit(uint64_t layout_fingerprint, const StepDecision& d,
                                    std::vector<double>* clip_norms, absl::Time deadline) {
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
  if (d.clipped && !clipping_.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat("step decision for version ", d.version,
                                                   " is clipped; this ps does not clip its steps"));
  }
  const bool asks_norms = d.clipped && d.clip_scales.empty() && clip_norms != nullptr;
  if (d.version < version_) {  // applied already
    // Its norms, while kept (a decider promoted mid-step asks again); none
    // for an older step, whose decision is only sent again.
    const std::vector<double>* kept =
        asks_norms ? clipping_.Kept(-1, d.generation, d.version) : nullptr;
    if (kept != nullptr) *clip_norms = *kept;
    return absl::OkStatus();
  }
  if (d.version > version_) {
    return absl::UnavailableError(absl::StrCat("step decision for version ", d.version,
                                               "; this ps is at version ", version_));
  }
  if (std::find(d.members.begin(), d.members.end(), true) == d.members.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step decision for version ", d.version, " names no member"));
  }
  if (!commit_.has_value()) {
    commit_ = d;
    // Kept for a backup promoted in the decider's place (DecisionFor).
    decisions_.Keep(d);
    for (int w = 0; w < config_.num_workers; ++w) {
      if (!d.members[w] && pending_.has(w)) DropPending(w);
    }
    MaybeApplyCommit();
  } else if (!d.clip_scales.empty() && commit_->clip_scales.empty()) {
    // A clipped step's scales, after its norms were asked.
    commit_->clip_scales = d.clip_scales;
    decisions_.Keep(d);
    MaybeApplyCommit();
  }  // else resent while waiting
  if (!asks_norms) return absl::OkStatus();
  const int64_t version = d.version, generation = d.generation;
  for (;;) {
    if (const std::vector<double>* kept = clipping_.Kept(-1, generation, version)) {
      *clip_norms = *kept;
      return absl::OkStatus();
    }
    if (cancelled_ || generation_ != generation || version_ != version) break;
    if (version_advanced_.WaitWithDeadline(&mu_, deadline)) break;
  }
  return absl::UnavailableError(absl::StrCat("the members' gradients of the step from version ",
                                             version, " are not all here yet"));
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
    // A decided step's member keeps it (a clipped step's norms are of it).
    if (!active[w] && pending_.has(w) && config_.step_role == StepRole::kDecide &&
        !(commit_.has_value() && commit_->members[w])) {
      DropPending(w);
    }
    active_[w] = active[w];
  }
  MaybeFinishStep();
  return absl::OkStatus();
}

}  // namespace pscluster
