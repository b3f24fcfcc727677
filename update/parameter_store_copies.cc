// ParameterStore's copies: snapshots and restores (checkpoints, a backup's
// seed, a restarted primary continuing from its backup), the records a
// primary reports of each update and a backup applies, and promotion and
// demotion, fenced by primary terms and decider epochs
// (docs/replication.md).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "update/parameter_store.h"

namespace pscluster {

absl::Status ParameterStore::CheckSeed(const StoreState& state) const {
  // Fencing: a primary is never overwritten by a seed (AlreadyExists:
  // the primary is here; a promoted backup tells its old primary so),
  // nor a backup by a replaced primary's (a lower term: another backup
  // was promoted and seeded it; AlreadyExists tells that primary's
  // replicator so, whatever its generation) or by an older generation's
  // (a primary that was cut off and came back).
  if (config_.store_role != StoreRole::kBackup) {
    return absl::AlreadyExistsError("this ps is the primary of its store; it takes no backup seed");
  }
  if (state.primary_term < primary_term_) {
    return absl::AlreadyExistsError(absl::StrCat("this backup follows the primary of term ",
                                                 primary_term_, "; a seed of term ",
                                                 state.primary_term, " is of a replaced primary"));
  }
  if (generation_ > state.generation) {
    return absl::FailedPreconditionError(
        absl::StrCat("a backup seed of generation ", state.generation,
                     "; this backup is of generation ", generation_));
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::Restore(const StoreConfig& config, StoreState state,
                                     RestoreKind kind) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CheckConfig(config);
  if (!opt.ok()) return opt.status();
  if (static_cast<int64_t>(state.values.size()) != config.num_floats) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint holds ", state.values.size(),
                                                   " values; the layout has ", config.num_floats));
  }
  if (state.version < 0 || state.version > kMaxVersion || state.generation < 0 ||
      state.generation > kMaxVersion) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint version ", state.version,
                                                   " / generation ", state.generation,
                                                   " must be in [0, ", kMaxVersion, "]"));
  }
  if (state.pushes_applied < 0 || state.steps_applied < 0) {
    return absl::InvalidArgumentError(absl::StrCat("state counts ", state.pushes_applied,
                                                   " pushes and ", state.steps_applied,
                                                   " steps applied"));
  }
  PSCLUSTER_RETURN_IF_ERROR((*opt)->RestoreState(std::move(state.optimizer)));
  // The tables' rows, checked before anything changes.
  if (!state.sparse.empty() && state.sparse.size() != config.sparse_tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint holds ", state.sparse.size(),
                                                   " sparse tables; the model has ",
                                                   config.sparse_tables.size()));
  }
  std::vector<std::unique_ptr<SparseTable>> tables;
  for (size_t t = 0; t < config.sparse_tables.size(); ++t) {
    tables.push_back(*SparseTable::Create(config.sparse_tables[t]));
    if (t >= state.sparse.size()) continue;
    if (absl::Status s = tables.back()->Import(state.sparse[t]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("sparse table ", t, ": ", s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  if (initialized_ && config.store_role == StoreRole::kBackup) {
    PSCLUSTER_RETURN_IF_ERROR(CheckSeed(state));
  }
  if (initialized_ && kind != RestoreKind::kMove &&
      (config.layout_fingerprint != config_.layout_fingerprint ||
       config.num_floats != config_.num_floats)) {
    return absl::FailedPreconditionError(
        absl::StrCat("holds layout ", config_.layout_fingerprint, " (", config_.num_floats,
                     " floats); refusing to restore layout ", config.layout_fingerprint, " (",
                     config.num_floats, " floats)"));
  }
  StoreConfig c = config;
  c.generation = state.generation;
  PSCLUSTER_RETURN_IF_ERROR(Configure(c, *std::move(opt)));
  values_.Replaceable() = std::move(state.values);
  sparse_.Reset(std::move(tables));
  version_ = state.version;
  recent_chunks_.Reset(version_);  // a rollback's: of steps the restored state may not hold
  decider_epoch_ = std::max(decider_epoch_, state.decider_epoch);
  primary_term_ = std::max(primary_term_, state.primary_term);
  // Decisions of steps the restored state may not hold (Configure cleared
  // the kept ones).
  replicated_decisions_.clear();
  if (kind != RestoreKind::kRollback || c.store_role == StoreRole::kBackup) {
    stats_.applied_digest = state.applied_digest;
    stats_.pushes_applied = state.pushes_applied;
    stats_.steps_applied = state.steps_applied;
    for (const StoreState::Answered& a : state.answered) {
      if (a.worker >= 0 && a.worker < c.num_workers) {
        answered_.Remember(a.worker, a.request_id, a.result);
      }
    }
    if (static_cast<int>(state.outcomes.size()) == c.num_workers) outcome_ = state.outcomes;
    if (state.recent_chunks_since <= version_) {
      recent_chunks_.Load(state.recent_chunks, state.recent_chunks_since, version_);
    }
  }
  if (listener_) {
    AppliedUpdate u;
    u.restored = true;
    u.primary_term = primary_term_;
    u.generation = generation_;
    u.version = version_;
    listener_(std::move(u));
  }
  initialized_ = true;
  version_advanced_.SignalAll();
  return absl::OkStatus();
}

absl::Status ParameterStore::Snapshot(uint64_t layout_fingerprint, StoreState* out) const {
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(CheckReady(layout_fingerprint));
  out->version = version_;
  out->generation = generation_;
  out->values = values_.values();
  out->optimizer = values_.optimizer().SaveState();
  out->applied_digest = stats_.applied_digest;
  out->pushes_applied = stats_.pushes_applied;
  out->steps_applied = stats_.steps_applied;
  out->answered.clear();
  for (int w = 0; w < answered_.num_workers(); ++w) {
    for (const AnsweredPushes::Answer& a : answered_.of(w)) {
      // Taken into the sync step being gathered, the push is not decided
      // yet and its gradient is not in the state: a store that continues
      // this one (a backup promoted before the step closed) takes it again
      // when it is resent, instead of answering it as taken.
      if (pending_.has(w) && a.request_id == pending_.request_id(w)) continue;
      out->answered.push_back({w, a.request_id, a.result});
    }
  }
  out->outcomes = outcome_;
  out->sparse = sparse_.Export();
  out->recent_chunks = recent_chunks_.chunks();
  out->recent_chunks_since = recent_chunks_.since();
  out->decider_epoch = decider_epoch_;
  out->primary_term = primary_term_;
  return absl::OkStatus();
}

absl::Status ParameterStore::RecentChunksOf(uint64_t layout_fingerprint, StoreState* out) const {
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(CheckReady(layout_fingerprint));
  out->version = version_;
  out->generation = generation_;
  out->recent_chunks = recent_chunks_.chunks();
  out->recent_chunks_since = recent_chunks_.since();
  out->pending_chunks.clear();
  if (config_.rule == UpdateRule::kSync) {
    for (int w = 0; w < config_.num_workers; ++w) {
      out->pending_chunks.push_back(pending_.has(w) ? pending_.chunk(w) : -1);
    }
  }
  return absl::OkStatus();
}

size_t ParameterStore::RecentChunksKept(int num_workers) {
  return std::max<size_t>(4096, 16 * static_cast<size_t>(std::max(num_workers, 0)));
}

void ParameterStore::Report(const float* grad, bool skipped, const std::vector<bool>& members,
                            int worker, uint64_t request_id, int64_t staleness, int64_t chunk,
                            const std::vector<float>& clip_scales) {
  if (!listener_) return;
  AppliedUpdate u;
  u.generation = generation_;
  u.version = version_;
  u.primary_term = primary_term_;
  if (grad != nullptr) u.gradient.assign(grad, grad + config_.num_floats);
  u.skipped = skipped;
  u.clip_scales = clip_scales;
  u.members = members;
  if (!members.empty()) {
    u.member_request_ids.assign(config_.num_workers, 0);
    u.member_chunks.assign(config_.num_workers, -1);
    for (int w = 0; w < config_.num_workers; ++w) {
      if (!members[w]) continue;
      u.member_request_ids[w] = pending_.request_id(w);
      u.member_chunks[w] = pending_.chunk(w);
    }
  } else {
    u.member_chunks = {chunk};
  }
  u.worker = worker;
  u.request_id = request_id;
  u.staleness = staleness;
  u.sparse = sparse_.TakeStep();
  listener_(std::move(u));
}

void ParameterStore::SetUpdateListener(UpdateListener listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

absl::Status ParameterStore::CheckRecord(const AppliedUpdate& u) const {
  if (config_.store_role != StoreRole::kBackup) {
    return absl::FailedPreconditionError(
        "this ps is the primary of these shards; it takes no replicated updates");
  }
  // Checked with the apply, under one lock: a seed of the new primary may
  // come between two records of the old one.
  if (u.primary_term < primary_term_) {
    return absl::AlreadyExistsError(absl::StrCat("this backup follows the primary of term ",
                                                 primary_term_, "; records of term ",
                                                 u.primary_term, " are of a replaced primary"));
  }
  if (u.primary_term > primary_term_) {
    return absl::FailedPreconditionError(absl::StrCat("a record of primary term ", u.primary_term,
                                                      "; this backup follows term ", primary_term_,
                                                      ": seed it again from its new primary"));
  }
  if (u.generation != generation_) return GenerationMismatch(u.generation, generation_, version_);
  const bool sync = config_.rule == UpdateRule::kSync;
  if (!u.gradient.empty() && static_cast<int64_t>(u.gradient.size()) != config_.num_floats) {
    return absl::InvalidArgumentError(absl::StrCat("replicated update has ", u.gradient.size(),
                                                   " floats; this ps holds ", config_.num_floats));
  }
  if (sync ? (static_cast<int>(u.members.size()) != config_.num_workers ||
              (!u.member_request_ids.empty() &&
               static_cast<int>(u.member_request_ids.size()) != config_.num_workers))
           : (!u.members.empty() || !u.member_request_ids.empty() || u.worker < 0 ||
              u.worker >= config_.num_workers || u.gradient.empty() || u.skipped ||
              u.staleness < 0)) {
    return absl::InvalidArgumentError(absl::StrCat("replicated update for version ", u.version,
                                                   " does not fit a ", sync ? "sync" : "async",
                                                   " store of ", config_.num_workers, " workers"));
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::ApplyReplicated(uint64_t layout_fingerprint, const AppliedUpdate& u) {
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(CheckReady(layout_fingerprint));
  PSCLUSTER_RETURN_IF_ERROR(CheckRecord(u));
  if (u.version < version_) return absl::OkStatus();  // applied already
  bool sparse_finite = true;
  PSCLUSTER_RETURN_IF_ERROR(sparse_.Check(u.sparse, &sparse_finite));
  if (u.version > version_) {
    return absl::FailedPreconditionError(absl::StrCat("replicated update for version ", u.version,
                                                      "; this backup is at version ", version_,
                                                      ": seed it again from the primary"));
  }
  const bool sync = config_.rule == UpdateRule::kSync;
  if (u.skipped) ++stats_.steps_skipped_nonfinite;
  if (!u.gradient.empty()) values_.Update(u.gradient.data());
  sparse_.SetStep(u.sparse);
  sparse_.Apply(version_);
  sparse_.ClearStep();
  if (sync) {
    for (int w = 0; w < config_.num_workers; ++w) {
      if (!u.members[w]) continue;
      ++stats_.pushes_applied;
      stats_.applied_digest += GradientHash(static_cast<uint64_t>(version_), w);
      outcome_[w] = {version_, true};
    }
  } else {
    ++stats_.pushes_applied;
    stats_.applied_digest += AsyncGradientHash(
        u.member_chunks.empty() ? int64_t{-1} : u.member_chunks[0], u.request_id, u.worker);
    stats_.staleness_sum += u.staleness;
    stats_.staleness_max = std::max(stats_.staleness_max, u.staleness);
  }
  std::vector<int64_t> chunks;
  for (size_t w = 0; w < u.member_chunks.size(); ++w) {
    if (!sync || (w < u.members.size() && u.members[w])) chunks.push_back(u.member_chunks[w]);
  }
  recent_chunks_.Add(chunks, RecentChunksKept(config_.num_workers));
  ++version_;
  ++stats_.steps_applied;
  if (sync && config_.step_role == StepRole::kDecide) {
    // Its primary decided this step: sent again if this backup is
    // promoted to decide (Promote).
    StepDecision d;
    d.layout_fingerprint = config_.layout_fingerprint;
    d.generation = u.generation;
    d.version = u.version;
    d.members = u.members;
    d.skip = u.skipped;
    d.clipped = !u.clip_scales.empty();
    d.clip_scales = u.clip_scales;
    replicated_decisions_.push_back(std::move(d));
    if (replicated_decisions_.size() > DecisionLog::kKept) replicated_decisions_.pop_front();
  }
  if (sync) {
    // Answered as applied, with the version after the step.
    for (size_t w = 0; w < u.member_request_ids.size(); ++w) {
      if (u.members[w])
        answered_.Remember(static_cast<int>(w), u.member_request_ids[w],
                           PushResult{true, version_, 0});
    }
  } else {
    answered_.Remember(u.worker, u.request_id, PushResult{true, version_, u.staleness});
  }
  version_advanced_.SignalAll();
  return absl::OkStatus();
}

absl::Status ParameterStore::CheckInFlight(const StepDecision& in_flight, int64_t generation,
                                           StepRole step_role) const {
  if (step_role != StepRole::kDecide || config_.rule != UpdateRule::kSync ||
      in_flight.version > version_ || in_flight.generation != generation ||
      static_cast<int>(in_flight.members.size()) != config_.num_workers ||
      std::find(in_flight.members.begin(), in_flight.members.end(), true) ==
          in_flight.members.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the decision in flight is for version ", in_flight.version, " of generation ",
        in_flight.generation, " with ", in_flight.members.size(),
        " workers; this store is at version ", version_, " and is promoted under generation ",
        generation, " to ", step_role == StepRole::kDecide ? "decide" : "follow"));
  }
  return absl::OkStatus();
}

void ParameterStore::ResendDecisions(int64_t generation,
                                     const std::optional<StepDecision>& in_flight) {
  // The steps it applied, then the one in flight: each follower takes
  // those it lacks, in order, under this decider's epoch. Those it
  // applied are its own decisions (a decider demoted, and promoted again
  // before it was seeded: a follower may have refused the last under the
  // epoch of the promotion that failed) or its primary's, from the
  // records (a backup).
  std::vector<StepDecision> resend = decisions_.Before(version_, generation);
  for (StepDecision& d : replicated_decisions_) resend.push_back(std::move(d));
  replicated_decisions_.clear();
  if (in_flight.has_value() && in_flight->version == version_) {
    commit_ = *in_flight;
    for (int w = 0; w < config_.num_workers; ++w) {
      if (!commit_->members[w] && pending_.has(w)) DropPending(w);
    }
    resend.push_back(*in_flight);
  }
  decisions_.Record(std::move(resend), decider_epoch_);
}

absl::Status ParameterStore::Promote(uint64_t layout_fingerprint, int64_t generation,
                                     StepRole step_role,
                                     const std::optional<StepDecision>& in_flight,
                                     int64_t decider_epoch, int64_t primary_term) {
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(CheckReady(layout_fingerprint));
  if (config_.store_role != StoreRole::kBackup) {
    return absl::FailedPreconditionError("this ps is the primary of these shards already");
  }
  if (generation < generation_ || generation > kMaxVersion) {
    return absl::InvalidArgumentError(absl::StrCat("promotion to generation ", generation,
                                                   ": must be at least this store's ", generation_,
                                                   " and at most ", kMaxVersion));
  }
  if (primary_term < 0 || (primary_term > 0 && primary_term <= primary_term_)) {
    return absl::FailedPreconditionError(absl::StrCat("promotion under primary term ", primary_term,
                                                      ": this store follows term ", primary_term_,
                                                      "; a new primary's must be above it"));
  }
  if (in_flight.has_value()) {
    PSCLUSTER_RETURN_IF_ERROR(CheckInFlight(*in_flight, generation, step_role));
  }
  primary_term_ = primary_term > 0 ? primary_term : primary_term_ + 1;
  config_.store_role = StoreRole::kPrimary;
  config_.step_role = step_role;
  config_.generation = generation;
  generation_ = generation;
  stats_.generation = generation;
  decider_epoch_ = std::max(decider_epoch_, decider_epoch);
  if (step_role == StepRole::kDecide) ResendDecisions(generation, in_flight);
  replicated_decisions_.clear();
  // Waiting pulls of the old generation are answered Aborted.
  version_advanced_.SignalAll();
  return absl::OkStatus();
}

absl::Status ParameterStore::Demote(uint64_t layout_fingerprint) {
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(CheckReady(layout_fingerprint));
  config_.store_role = StoreRole::kBackup;
  replicated_decisions_.clear();  // it is seeded before it takes records
  // Waiting pulls and pushes see the new role.
  version_advanced_.SignalAll();
  return absl::OkStatus();
}

}  // namespace pscluster
