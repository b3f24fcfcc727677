#include "chief/ps_recovery.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace pscluster {

PsRecovery::PsRecovery(const PsSetup* setup, std::vector<uint64_t> incarnations,
                       absl::Duration recovery_timeout, PsFleet* fleet, Dispatcher* dispatcher,
                       MembershipSync* membership, const std::atomic<bool>* stop,
                       const std::vector<std::string>* backups, FailoverMetrics* metrics)
    : setup_(setup),
      recovery_timeout_(recovery_timeout),
      fleet_(fleet),
      dispatcher_(dispatcher),
      membership_(membership),
      stop_(*stop),
      backups_(backups),
      metrics_(metrics),
      incarnation_(std::move(incarnations)),
      failures_(fleet->num_ps(), 0),
      alone_(fleet->num_ps(), false) {}

absl::Status PsRecovery::Check(const Snapshot* latest, int64_t* highest_version) {
  for (int i = 0; i < fleet_->num_ps(); ++i) {
    absl::StatusOr<PsStatsResponse> st = fleet_->Stats(i, absl::Seconds(1));
    if (!st.ok()) {
      if (++failures_[i] >= 2) {
        return Recover(i, std::string(st.status().message()), latest, highest_version);
      }
      continue;
    }
    failures_[i] = 0;
    alone_[i] = st->backups_set() > 0 && st->backups_live() < st->backups_set();
    *highest_version = std::max(*highest_version, st->version());
    if (!st->initialized() || st->incarnation() != incarnation_[i]) {
      return Recover(i, "it restarted and lost its parameters", latest, highest_version);
    }
  }
  return absl::OkStatus();
}

absl::Status PsRecovery::Recover(int i, const std::string& why, const Snapshot* latest,
                                 int64_t* highest_version) {
  const absl::Time t0 = absl::Now();
  spdlog::warn("ps:{} lost ({}); pausing the workers until it is back", i, why);
  // Resumed at the end; on an error the workers stay paused, as the run
  // ends. The checkpoint restore and the membership change inside nest.
  dispatcher_->Pause();
  const absl::Time give_up = t0 + recovery_timeout_;
  absl::Time next_report = t0 + kWaitReportEvery;
  absl::StatusOr<PsStatsResponse> st;
  while (true) {
    if (stop_) return absl::CancelledError("stopped while waiting for a ps");
    st = fleet_->Stats(i, absl::Seconds(1));
    if (st.ok()) break;
    if (absl::Now() >= next_report) {
      // An operator sees what the run waits for, and for how long: a ps
      // stopped by hand (docker kill, docker stop) is not restarted by
      // Docker, so someone must start it again.
      next_report = absl::Now() + kWaitReportEvery;
      spdlog::warn(
          "training paused: still waiting for ps:{} to answer ({:.0f} s of "
          "--ps_recovery_timeout_s={:.0f} s; the run fails after that): {}",
          i, absl::ToDoubleSeconds(absl::Now() - t0), absl::ToDoubleSeconds(recovery_timeout_),
          std::string(st.status().message()));
    }
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat("ps:", i, " did not come back within ",
                                                 absl::FormatDuration(recovery_timeout_), ": ",
                                                 st.status().message()));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  const absl::Time back = absl::Now();
  failures_[i] = 0;
  FailoverMetrics::How how = FailoverMetrics::How::kResumed;
  if (st->initialized() && st->incarnation() == incarnation_[i]) {
    // Cut off, not restarted: its state is intact and the workers' retried
    // pushes reach it now.
    spdlog::warn(
        "ps:{} answers again (the same process, {:.1f} s after it was found "
        "unreachable); nothing lost, resuming",
        i, absl::ToDoubleSeconds(back - t0));
  } else {
    int64_t generation = dispatcher_->generation();
    for (int j = 0; j < fleet_->num_ps(); ++j) {
      absl::StatusOr<PsStatsResponse> s = fleet_->Stats(j, absl::Seconds(2));
      if (s.ok()) generation = std::max(generation, s->generation());
    }
    const absl::Time restore_start = absl::Now();
    const absl::Status from_backup = RestoreFromBackup(i, generation);
    if (from_backup.ok()) {
      spdlog::warn(
          "ps:{} restarted: restored from its backup store ({}) as the primary it was, "
          "generation {}; no checkpoint read, nothing rolled back, no step redone; "
          "detected and back after {:.1f} s, restored in {:.2f} s",
          i, (*backups_)[i], generation, absl::ToDoubleSeconds(back - t0),
          absl::ToDoubleSeconds(absl::Now() - restore_start));
      how = FailoverMetrics::How::kBackup;
    } else {
      if (!absl::IsNotFound(from_backup)) {
        spdlog::warn("ps:{} cannot be restored from its backup ({}); the checkpoint serves", i,
                     std::string(from_backup.message()));
      }
      ++generation;
      if (latest == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("ps:", i, " restarted but there is no checkpoint to restore it from"));
      }
      const int64_t lost = std::max<int64_t>(0, *highest_version - latest->step);
      if (absl::Status s = RestoreAll(*latest, generation); !s.ok()) return s;
      spdlog::warn(
          "ps:{} restarted: every ps restored from the checkpoint of step {} "
          "(generation {}); {} step(s) since that checkpoint are lost and redone; "
          "detected and back after {:.1f} s, restored in {:.2f} s",
          i, latest->step, generation, lost, absl::ToDoubleSeconds(back - t0),
          absl::ToDoubleSeconds(absl::Now() - back));
      *highest_version = latest->step;
      how = FailoverMetrics::How::kCheckpoint;
    }
  }
  membership_->Apply(/*force=*/true);
  dispatcher_->Resume();
  if (metrics_ != nullptr) metrics_->CountFailover(how, absl::Now() - t0);
  return absl::OkStatus();
}

absl::Status PsRecovery::RestoreFromBackup(int i, int64_t generation) {
  if (backups_ == nullptr || i >= static_cast<int>(backups_->size()) || (*backups_)[i].empty()) {
    return absl::NotFoundError("no backup");
  }
  const bool decides = setup_->mode == SYNC && i == 0 && fleet_->num_ps() > 1;
  if (decides) {
    // Followers may have taken a decision of ps 0's that its backup never
    // saw; its replacement would decide that step again, maybe otherwise.
    return absl::FailedPreconditionError(
        "ps:0 decides the sync steps, and its backup cannot know the decisions in flight");
  }
  if (alone_[i]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "when last seen, ps:", i, " answered without its backup, which may lack updates"));
  }
  absl::StatusOr<ShardState> state = fleet_->SnapshotOfBackup((*backups_)[i], absl::Seconds(10));
  if (!state.ok()) return state.status();
  if (state->generation() != generation) {
    return absl::FailedPreconditionError(
        absl::StrCat("the backup is of generation ", state->generation(), ", the run of ",
                     generation));
  }
  if (setup_->mode == SYNC) {
    // Every update the old process answered is on its backup, so no other
    // ps can be more than the step in flight ahead of it.
    for (int j = 0; j < fleet_->num_ps(); ++j) {
      if (j == i) continue;
      absl::StatusOr<PsStatsResponse> other = fleet_->Stats(j, absl::Seconds(2));
      if (!other.ok()) return other.status();
      if (other->version() > state->version() + 1) {
        return absl::FailedPreconditionError(
            absl::StrCat("the backup is at version ", state->version(), " but ps:", j,
                         " at ", other->version(), ": it lacks updates"));
      }
    }
  }
  const int64_t reseed_bytes = static_cast<int64_t>(state->ByteSizeLong());
  RestoreRequest req;
  *req.mutable_init() = MakeInitRequest(*setup_, i);
  *req.mutable_state() = *std::move(state);
  req.set_continues(true);
  if (absl::Status s = fleet_->Restore(i, req, recovery_timeout_); !s.ok()) return s;
  // Copied into the ps, whether or not what follows lets it keep them.
  if (metrics_ != nullptr) metrics_->AddReseedBytes(reseed_bytes);
  absl::StatusOr<PsStatsResponse> st = fleet_->Stats(i, absl::Seconds(10));
  if (!st.ok()) return st.status();
  incarnation_[i] = st->incarnation();
  if (setup_->mode == SYNC && fleet_->num_ps() > 1) {
    // ps 0 may have given the old process the decision of the step this
    // state is at, and moved on: hand it over again. Not decided yet: ps 0
    // sends it when it is.
    absl::StatusOr<StepCommitRequest> d =
        fleet_->GetDecision(0, req.state().version(), absl::Seconds(5));
    if (d.ok()) {
      if (absl::Status s = fleet_->CommitStep(i, *d, absl::Seconds(10)); !s.ok()) return s;
    } else if (!absl::IsNotFound(d.status())) {
      return d.status();
    }
  }
  return absl::OkStatus();
}

absl::Status PsRecovery::RestoreAll(const Snapshot& snap, int64_t generation) {
  // The data position first, so that no worker gets a chunk of the old
  // generation once a ps holds the new one.
  if (absl::Status s = dispatcher_->Rewind(snap.chunks_per_epoch, snap.done_chunks, generation);
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < fleet_->num_ps(); ++i) {
    RestoreRequest req;
    *req.mutable_init() = MakeInitRequest(*setup_, i);
    *req.mutable_state() = snap.ps[i];
    req.mutable_state()->set_generation(generation);
    // The placement's shards: a snapshot read from a checkpoint file (or
    // resharded from another ps count) carries the values, not their list.
    *req.mutable_state()->mutable_shards() = req.init().shards();
    if (absl::Status s = fleet_->Restore(i, req, recovery_timeout_); !s.ok()) return s;
    absl::StatusOr<PsStatsResponse> st = fleet_->Stats(i, absl::Seconds(10));
    if (!st.ok()) return st.status();
    incarnation_[i] = st->incarnation();
  }
  return absl::OkStatus();
}

}  // namespace pscluster
