#include "chief/ps_recovery.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace pscluster {

PsRecovery::PsRecovery(const PsSetup* setup, std::vector<uint64_t> incarnations,
                       absl::Duration recovery_timeout, PsFleet* fleet, Dispatcher* dispatcher,
                       MembershipSync* membership, const std::atomic<bool>* stop,
                       std::vector<StoreCopies>* copies, FailoverMetrics* metrics)
    : setup_(setup),
      recovery_timeout_(recovery_timeout),
      fleet_(fleet),
      dispatcher_(dispatcher),
      membership_(membership),
      stop_(*stop),
      copies_(copies),
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
  CheckBackups();
  return absl::OkStatus();
}

void PsRecovery::CheckBackups() {
  if (copies_ == nullptr) return;
  backup_failures_.resize(copies_->size(), 0);
  for (int i = 0; i < static_cast<int>(copies_->size()); ++i) {
    StoreCopies& c = (*copies_)[i];
    if (c.backup.empty()) {
      backup_failures_[i] = 0;
      continue;
    }
    absl::StatusOr<PsStatsResponse> st = fleet_->StatsAt(c.backup, absl::Seconds(1));
    if (st.ok()) {
      backup_failures_[i] = 0;
      continue;
    }
    if (++backup_failures_[i] < 2) continue;
    // Its primary holds every answer until the backup holds the update:
    // tell it to go on without (it gets another once one answers).
    if (absl::Status s = fleet_->SetBackups(i, {}, absl::Seconds(2)); !s.ok()) continue;
    spdlog::warn("ps:{}'s backup at {} (on ps:{}) is lost ({}): ps:{}'s store goes on without "
                 "it until it is back",
                 i, c.backup, c.backup_holder, std::string(st.status().message()), i);
    backup_failures_[i] = 0;
    c.backup.clear();
    c.backup_holder = -1;
    if (metrics_ != nullptr) metrics_->SetCopies(i, c.primary_holder, -1);
  }
}

bool PsRecovery::suspects_loss() const {
  return std::any_of(failures_.begin(), failures_.end(), [](int f) { return f > 0; });
}

absl::Status PsRecovery::Recover(int i, const std::string& why, const Snapshot* latest,
                                 int64_t* highest_version) {
  const absl::Time t0 = absl::Now();
  if (copies_ != nullptr && i < static_cast<int>(copies_->size()) &&
      !(*copies_)[i].backup.empty()) {
    const absl::Status promoted = PromoteBackup(i, why);
    if (promoted.ok()) {
      membership_->Apply(/*force=*/true);
      if (metrics_ != nullptr) {
        metrics_->CountFailover(FailoverMetrics::How::kPromoted, absl::Now() - t0);
      }
      return absl::OkStatus();
    }
    spdlog::warn("ps:{} lost ({}); its backup store cannot take over: {}", i, why,
                 std::string(promoted.message()));
  }
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
          i, (*copies_)[i].backup, generation, absl::ToDoubleSeconds(back - t0),
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

absl::Status PsRecovery::MoveBack() {
  if (copies_ == nullptr) return absl::OkStatus();
  for (int i = 0; i < static_cast<int>(copies_->size()); ++i) {
    StoreCopies& c = (*copies_)[i];
    if (c.primary_holder == i || c.backup.empty() || c.backup != c.home) continue;
    // The store that serves ps i's shards, with its backup in ps i's own
    // store seeded (something replicated) and keeping up.
    absl::StatusOr<PsStatsResponse> serving = fleet_->Stats(i, absl::Seconds(1));
    if (!serving.ok() || !serving->initialized() || serving->backup() ||
        serving->backups_set() == 0 || serving->backups_live() < serving->backups_set() ||
        serving->replicated_version() < 0) {
      continue;
    }
    absl::StatusOr<PsStatsResponse> own = fleet_->StatsAt(c.home, absl::Seconds(1));
    if (!own.ok() || !own->initialized() || !own->backup() ||
        own->generation() != dispatcher_->generation() || alone_[i]) {
      continue;
    }
    const std::string address = fleet_->address(i);
    const int holder = c.primary_holder;
    if (absl::Status s = fleet_->Demote(address, absl::Seconds(5)); !s.ok()) {
      spdlog::warn("ps:{}'s shards stay on ps:{} for now: demoting the store there: {}", i,
                   holder, std::string(s.message()));
      continue;
    }
    const absl::Status moved = PromoteBackup(i, "moved back", /*moving_back=*/true);
    if (moved.ok()) {
      membership_->Apply(/*force=*/true);
      if (metrics_ != nullptr) metrics_->CountMovedBack();
      continue;
    }
    if (fleet_->address(i) != address) return moved;  // promoted, the rest failed
    // Nothing moved: the demoted store, which holds all it held, serves
    // the shards again.
    const bool decides = setup_->mode == SYNC && i == 0 && fleet_->num_ps() > 1;
    absl::StatusOr<int64_t> again =
        fleet_->Promote(address, dispatcher_->generation(), decides, nullptr,
                        setup_->mode == SYNC ? DeciderEpoch(-1) + (decides ? 1 : 0) : 0,
                        absl::Seconds(5));
    if (!again.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "ps:", i, "'s shards have no primary: moving them back failed (", moved.message(),
          ") and the store on ps:", holder, " that served them cannot serve them again (",
          again.status().message(), ")"));
    }
    spdlog::warn("ps:{}'s shards stay on ps:{}: they could not go back ({})", i, holder,
                 std::string(moved.message()));
  }
  return absl::OkStatus();
}

absl::Status PsRecovery::PromoteBackup(int i, const std::string& why, bool moving_back) {
  StoreCopies& c = (*copies_)[i];
  const int n = fleet_->num_ps();
  const bool sync_steps = setup_->mode == SYNC && n > 1;
  const bool decides = sync_steps && i == 0;
  if (alone_[i]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "when last seen, ps:", i, " answered without its backup, which may lack updates"));
  }
  absl::StatusOr<PsStatsResponse> b = fleet_->StatsAt(c.backup, absl::Seconds(1));
  if (!b.ok()) return b.status();
  if (!b->initialized() || !b->backup()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the store at ", c.backup, " is not a seeded backup"));
  }
  const int64_t generation = dispatcher_->generation();
  if (b->generation() != generation) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the backup is of generation ", b->generation(), ", the run of ", generation));
  }
  int64_t epoch = 0;
  if (sync_steps) {
    // Every step a worker was answered for is on the backup, so no other
    // ps can be more than the step in flight ahead of it.
    epoch = std::max(decider_epoch_, b->decider_epoch());
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      absl::StatusOr<PsStatsResponse> other = fleet_->Stats(j, absl::Seconds(1));
      if (!other.ok()) return other.status();
      if (other->version() > b->version() + 1) {
        return absl::FailedPreconditionError(
            absl::StrCat("the backup is at version ", b->version(), " but ps:", j, " at ",
                         other->version(), ": it lacks updates"));
      }
      epoch = std::max(epoch, other->decider_epoch());
    }
    if (decides) ++epoch;
    decider_epoch_ = epoch;
  }
  // A decider lost may be alive and cut off, and still send followers its
  // decisions: each follower is fenced at the new epoch first, and refuses
  // them from then on. One lost with a step in flight may have sent its
  // decision to some followers: the backup, which never saw it, closes
  // that step with the same members.
  std::optional<StepCommitRequest> in_flight;
  if (decides) {
    for (int j = 1; j < n; ++j) {
      absl::StatusOr<StepCommitRequest> d =
          fleet_->GetDecision(j, b->version(), /*fence_below=*/epoch, absl::Seconds(2));
      if (d.ok()) {
        if (!in_flight.has_value()) in_flight = *std::move(d);
      } else if (!absl::IsNotFound(d.status())) {
        return d.status();
      }
    }
  }
  absl::StatusOr<int64_t> version =
      fleet_->Promote(c.backup, generation, decides,
                      in_flight.has_value() ? &*in_flight : nullptr, epoch, absl::Seconds(2));
  if (!version.ok()) return version.status();
  // From here on the backup is the primary: every caller is told.
  const std::string was = fleet_->address(i);
  const int lost_holder = c.primary_holder;
  fleet_->MoveTo(i, c.backup);
  incarnation_[i] = b->incarnation();
  failures_[i] = 0;
  c.primary_holder = c.backup_holder;
  c.backup.clear();
  c.backup_holder = -1;
  if (metrics_ != nullptr) metrics_->SetCopies(i, c.primary_holder, -1);
  const std::string deciding =
      !decides ? ""
               : absl::StrCat(", and decides the sync steps under decider epoch ", epoch,
                              in_flight.has_value() ? " from ps:0's decision in flight on" : "",
                              "; every follower refuses the decisions of ",
                              moving_back ? "the store that served them" : "ps:0",
                              " from now on");
  if (moving_back) {
    spdlog::warn(
        "ps:{}'s shards go back to ps:{} ({}), their backup, from the store on ps:{} that "
        "served them since a fail-over, at version {} (generation {}){}; nothing rolled back; "
        "the workers call them there instead of {}",
        i, i, fleet_->address(i), lost_holder, *version, generation, deciding, was);
  } else {
    spdlog::warn(
        "ps:{} lost ({}): its backup store on ps:{} ({}) serves its shards from now on, from "
        "version {} (generation {}){}; no checkpoint read, nothing rolled back; the workers "
        "call it there instead of {}",
        i, why, c.primary_holder, fleet_->address(i), *version, generation, deciding, was);
  }
  if (absl::Status s = PublishPlacement(); !s.ok()) return s;
  if (sync_steps && !decides) {
    // ps 0 may have given the lost process the decision of the step the
    // backup is at, and moved on: hand it over again. Not decided yet:
    // ps 0 sends it when it is.
    absl::StatusOr<StepCommitRequest> d =
        fleet_->GetDecision(0, *version, /*fence_below=*/0, absl::Seconds(5));
    if (d.ok()) {
      if (absl::Status s = fleet_->CommitStep(i, *d, absl::Seconds(10)); !s.ok()) return s;
    } else if (!absl::IsNotFound(d.status())) {
      return d.status();
    }
  }
  if (moving_back) return absl::OkStatus();
  // The lost process held the backups of other ps's stores: their
  // primaries stop waiting for it, and get new ones when it is back.
  for (int k = 0; k < static_cast<int>(copies_->size()); ++k) {
    StoreCopies& other = (*copies_)[k];
    if (k == i || other.backup_holder != lost_holder) continue;
    if (absl::Status s = fleet_->SetBackups(k, {}, absl::Seconds(2)); !s.ok()) {
      spdlog::warn("ps:{} keeps waiting for its backup on the lost ps:{} until it times out: {}",
                   k, lost_holder, std::string(s.message()));
      continue;
    }
    spdlog::warn("ps:{}'s store goes on without its backup on ps:{} until that ps is back", k,
                 lost_holder);
    other.backup.clear();
    other.backup_holder = -1;
    if (metrics_ != nullptr) metrics_->SetCopies(k, other.primary_holder, -1);
  }
  return absl::OkStatus();
}

absl::Status PsRecovery::RestoreFromBackup(int i, int64_t generation) {
  if (copies_ == nullptr || i >= static_cast<int>(copies_->size()) ||
      (*copies_)[i].backup.empty()) {
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
  absl::StatusOr<ShardState> state =
      fleet_->SnapshotOfBackup((*copies_)[i].backup, absl::Seconds(10));
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
  if (setup_->mode == SYNC) req.mutable_state()->set_decider_epoch(DeciderEpoch(i));
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
        fleet_->GetDecision(0, req.state().version(), /*fence_below=*/0, absl::Seconds(5));
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
  if (absl::Status s = MoveHome(); !s.ok()) return s;
  // The decider's epoch moves on (a restore never lowers it): ps 0's
  // process, which may be one replaced as the decider, decides again.
  const int64_t epoch = setup_->mode == SYNC ? DeciderEpoch(-1) : 0;
  for (int i = 0; i < fleet_->num_ps(); ++i) {
    RestoreRequest req;
    *req.mutable_init() = MakeInitRequest(*setup_, i);
    *req.mutable_state() = snap.ps[i];
    req.mutable_state()->set_generation(generation);
    req.mutable_state()->set_decider_epoch(epoch);
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

int64_t PsRecovery::DeciderEpoch(int skip) {
  for (int j = 0; j < fleet_->num_ps(); ++j) {
    if (j == skip) continue;
    absl::StatusOr<PsStatsResponse> st = fleet_->Stats(j, absl::Seconds(1));
    if (st.ok()) decider_epoch_ = std::max(decider_epoch_, st->decider_epoch());
  }
  return decider_epoch_;
}

absl::Status PsRecovery::MoveHome() {
  if (copies_ == nullptr) return absl::OkStatus();
  bool moved = false;
  for (int i = 0; i < static_cast<int>(copies_->size()); ++i) {
    StoreCopies& c = (*copies_)[i];
    if (c.primary_holder == i) continue;
    spdlog::warn("ps:{}'s shards go back to ps:{} ({}) from the backup store that served them",
                 i, i, c.home);
    fleet_->MoveTo(i, c.home);
    c.primary_holder = i;
    c.backup.clear();
    c.backup_holder = -1;
    if (metrics_ != nullptr) metrics_->SetCopies(i, i, -1);
    moved = true;
  }
  return moved ? PublishPlacement() : absl::OkStatus();
}

absl::Status PsRecovery::PublishPlacement() {
  std::vector<std::string> addresses(fleet_->num_ps());
  for (int j = 0; j < fleet_->num_ps(); ++j) addresses[j] = fleet_->address(j);
  dispatcher_->SetPlacement(addresses);
  if (setup_->mode != SYNC || fleet_->num_ps() < 2) return absl::OkStatus();
  // The decider's decisions go where every follower is now (a backup
  // promoted to decide starts sending them).
  addresses.erase(addresses.begin());
  return fleet_->SetFollowers(0, addresses, absl::Seconds(5));
}

}  // namespace pscluster
