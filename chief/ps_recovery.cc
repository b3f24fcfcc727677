#include "chief/ps_recovery.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/parallel_for.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace pscluster {

std::vector<std::string> AddressesOf(const std::vector<StoreCopy>& backups) {
  std::vector<std::string> out;
  for (const StoreCopy& b : backups) out.push_back(b.address);
  return out;
}

std::vector<int> HoldersOf(const std::vector<StoreCopy>& backups) {
  std::vector<int> out;
  for (const StoreCopy& b : backups) out.push_back(b.holder);
  return out;
}

namespace {

// The end of a log line saying a backup was dropped: how many are left.
std::string OthersLeft(size_t left) {
  return left == 0 ? "" : absl::StrCat(", with ", left, " other backup(s)");
}

}  // namespace

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
  std::vector<std::pair<int, std::string>> lost;  // ps, why
  for (int i = 0; i < fleet_->num_ps(); ++i) {
    absl::StatusOr<PsStatsResponse> st = fleet_->Stats(i, absl::Seconds(1));
    if (!st.ok()) {
      if (++failures_[i] >= 2) lost.emplace_back(i, std::string(st.status().message()));
      continue;
    }
    failures_[i] = 0;
    alone_[i] = st->backups_set() > 0 && st->backups_live() < st->backups_set();
    if (copies_ != nullptr && i < static_cast<int>(copies_->size())) {
      StoreCopies& c = (*copies_)[i];
      c.primary_term = std::max(c.primary_term, st->primary_term());
      // Every backup set is seeded and keeps up (a new one holds version
      // -1 until seeded): each holds whatever a worker is answered for.
      if (!c.backups.empty() && st->backups_set() == static_cast<int>(c.backups.size()) &&
          st->backups_live() == st->backups_set() && st->replicated_version() >= 0) {
        for (StoreCopy& b : c.backups) b.seeded = true;
      }
    }
    *highest_version = std::max(*highest_version, st->version());
    if (!st->initialized() || st->incarnation() != incarnation_[i]) {
      lost.emplace_back(i, "it restarted and lost its parameters");
    }
  }
  if (lost.size() > 1) {
    // Several lost at once (--ps_replicas >= 2 keeps copies for that):
    // each one's backup promoted first, before any is waited for, the
    // followers before ps 0, whose backup decides only once every follower
    // answers to be fenced, a lost one's promoted backup included.
    std::stable_partition(lost.begin(), lost.end(), [](const auto& l) { return l.first != 0; });
    std::vector<std::pair<int, std::string>> left;
    for (const auto& [i, why] : lost) {
      if (!TryPromote(i, why, absl::Now())) left.emplace_back(i, why);
    }
    lost = std::move(left);
  }
  if (!lost.empty()) return Recover(lost[0].first, lost[0].second, latest, highest_version);
  CheckBackups();
  return absl::OkStatus();
}

bool PsRecovery::TryPromote(int i, const std::string& why, absl::Time t0) {
  if (copies_ == nullptr || i >= static_cast<int>(copies_->size()) ||
      (*copies_)[i].backups.empty()) {
    return false;
  }
  const absl::Status promoted = PromoteBackup(i, why);
  if (!promoted.ok()) {
    spdlog::warn("ps:{} lost ({}); its backup store cannot take over: {}", i, why,
                 std::string(promoted.message()));
    return false;
  }
  membership_->Apply(/*force=*/true);
  if (metrics_ != nullptr) {
    metrics_->CountFailover(FailoverMetrics::How::kPromoted, absl::Now() - t0);
  }
  return true;
}

void PsRecovery::CheckBackups() {
  if (copies_ == nullptr) return;
  std::map<std::string, int> failures;  // only the backups set now are counted
  for (int i = 0; i < static_cast<int>(copies_->size()); ++i) {
    StoreCopies& c = (*copies_)[i];
    for (size_t k = 0; k < c.backups.size();) {
      const StoreCopy b = c.backups[k];
      absl::StatusOr<PsStatsResponse> st = fleet_->StatsAt(b.address, absl::Seconds(1));
      if (st.ok()) {
        ++k;
        continue;
      }
      const int failed = backup_failures_[b.address] + 1;
      if (failed < 2) {
        failures[b.address] = failed;
        ++k;
        continue;
      }
      // Its primary holds every answer until the backup holds the update:
      // tell it to go on without (it gets it back once it answers).
      std::vector<StoreCopy> rest = c.backups;
      rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(k));
      if (!KeepOnly(i, rest).ok()) {
        failures[b.address] = failed;
        ++k;
        continue;
      }
      spdlog::warn("ps:{}'s backup at {} (on ps:{}) is lost ({}): ps:{}'s store goes on "
                   "without it until it is back{}",
                   i, b.address, b.holder, std::string(st.status().message()), i,
                   OthersLeft(rest.size()));
    }
  }
  backup_failures_ = std::move(failures);
}

bool PsRecovery::suspects_loss() const {
  return std::any_of(failures_.begin(), failures_.end(), [](int f) { return f > 0; });
}

absl::Status PsRecovery::Recover(int i, const std::string& why, const Snapshot* latest,
                                 int64_t* highest_version) {
  // One piece (107 lines), in the order a recovery must go: promote a
  // backup, else pause, wait for the ps (or, its shards' store lost away
  // from home, for the ps itself), then resume it as it was, from its
  // backup or from the checkpoint; each way out leaves the workers paused
  // or resumed as the run needs.
  const absl::Time t0 = absl::Now();
  if (TryPromote(i, why, t0)) return absl::OkStatus();
  spdlog::warn("ps:{} lost ({}); pausing the workers until it is back", i, why);
  // Resumed at the end; on an error the workers stay paused, as the run
  // ends. The checkpoint restore and the membership change inside nest.
  dispatcher_->Pause();
  const absl::Time give_up = t0 + recovery_timeout_;
  absl::Time next_report = t0 + kWaitReportEvery;
  // ps i's shards served by its backup promoted on another ps, lost with
  // that ps: the store does not come back where it was (a new process
  // takes new ports for its backup stores, and they hold nothing), so ps
  // i's own process is waited for too, and serves them again once back.
  const std::string serving = fleet_->address(i);
  const std::string home = copies_ != nullptr ? (*copies_)[i].home : serving;
  absl::StatusOr<PsStatsResponse> st;
  while (true) {
    if (stop_) return absl::CancelledError("stopped while waiting for a ps");
    st = fleet_->Stats(i, absl::Seconds(1));
    if (st.ok()) break;
    if (home != serving) {
      absl::StatusOr<PsStatsResponse> own = fleet_->StatsAt(home, absl::Seconds(1));
      if (own.ok()) {
        StoreCopies& c = (*copies_)[i];
        spdlog::warn("ps:{}'s shards were served by its backup on ps:{} ({}), lost too: ps:{} "
                     "itself ({}) serves them again",
                     i, c.primary_holder, serving, i, home);
        fleet_->MoveTo(i, home);
        c.primary_holder = i;
        if (metrics_ != nullptr) metrics_->SetCopies(i, i, HoldersOf(c.backups));
        PSCLUSTER_RETURN_IF_ERROR(PublishPlacement());
        st = std::move(own);
        break;
      }
    }
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
    std::string from;
    const absl::Status from_backup = RestoreFromBackup(i, generation, &from);
    if (from_backup.ok()) {
      spdlog::warn(
          "ps:{} restarted: restored from its backup store ({}) as the primary it was, "
          "generation {}; no checkpoint read, nothing rolled back, no step redone; "
          "detected and back after {:.1f} s, restored in {:.2f} s",
          i, from, generation, absl::ToDoubleSeconds(back - t0),
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
      PSCLUSTER_RETURN_IF_ERROR(RestoreAll(*latest, generation));
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
    if (c.primary_holder == i) continue;
    const auto home = std::find_if(c.backups.begin(), c.backups.end(),
                                   [&](const StoreCopy& b) { return b.address == c.home; });
    if (home == c.backups.end() || !home->seeded) continue;
    // The store that serves ps i's shards, with its backups, ps i's own
    // store among them, seeded and keeping up.
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
    c.primary_term = std::max(c.primary_term, serving->primary_term()) + 1;
    absl::StatusOr<int64_t> again =
        fleet_->Promote(address, dispatcher_->generation(), decides, nullptr,
                        setup_->mode == SYNC ? DeciderEpoch(-1) + (decides ? 1 : 0) : 0,
                        c.primary_term, absl::Seconds(5));
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
  // A promotion in the order the fencing needs it: choose the backup, fence
  // the followers against the old decider, take its decision in flight,
  // promote under a new term, move the stubs and the backups. Kept in one
  // piece (132 lines): each step's failure must undo or log what came before.
  StoreCopies& c = (*copies_)[i];
  const int n = fleet_->num_ps();
  const bool sync_steps = setup_->mode == SYNC && n > 1;
  const bool decides = sync_steps && i == 0;
  if (alone_[i]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "when last seen, ps:", i, " answered without its backup, which may lack updates"));
  }
  absl::StatusOr<ChosenBackup> chosen = ChooseBackup(i, moving_back ? c.home : "");
  if (!chosen.ok()) return chosen.status();
  const StoreCopy copy = c.backups[chosen->index];
  const PsStatsResponse* const b = &chosen->stats;
  const int64_t generation = dispatcher_->generation();
  // Above every term a copy had: the backups the promoted store seeds
  // refuse the records of the primary it replaces, which may be alive.
  const int64_t term =
      std::max({c.primary_term, chosen->highest_term, b->primary_term()}) + 1;
  int64_t epoch = 0;
  if (sync_steps) {
    // Every step a worker was answered for is on the backup, so no other
    // ps can be more than the step in flight ahead of it.
    epoch = std::max(decider_epoch_, b->decider_epoch());
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      absl::StatusOr<PsStatsResponse> other = fleet_->Stats(j, absl::Seconds(1));
      // Lost too: its backup, once promoted, is checked against this one.
      if (!other.ok() && failures_[j] > 0) continue;
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
      fleet_->Promote(copy.address, generation, decides,
                      in_flight.has_value() ? &*in_flight : nullptr, epoch, term,
                      absl::Seconds(2));
  if (!version.ok()) return version.status();
  // From here on the backup is the primary: every caller is told. Its
  // backups are set on the next KeepBackups (the others it had are seeded
  // again, by it).
  const std::string was = fleet_->address(i);
  const int lost_holder = c.primary_holder;
  fleet_->MoveTo(i, copy.address);
  incarnation_[i] = b->incarnation();
  failures_[i] = 0;
  c.primary_holder = copy.holder;
  c.primary_term = term;
  c.backups.clear();
  if (metrics_ != nullptr) metrics_->SetCopies(i, c.primary_holder, {});
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
        "the workers call them there instead of {}; primary term {}",
        i, i, fleet_->address(i), lost_holder, *version, generation, deciding, was, term);
  } else {
    spdlog::warn(
        "ps:{} lost ({}): its backup store on ps:{} ({}) serves its shards from now on, from "
        "version {} (generation {}){}; no checkpoint read, nothing rolled back; the workers "
        "call it there instead of {}; primary term {}: its other backups refuse the lost "
        "primary's records",
        i, why, c.primary_holder, fleet_->address(i), *version, generation, deciding, was,
        term);
  }
  PSCLUSTER_RETURN_IF_ERROR(PublishPlacement());
  if (sync_steps && !decides) {
    // ps 0 may have given the lost process the decision of the step the
    // backup is at, and moved on: hand it over again. Not decided yet:
    // ps 0 sends it when it is.
    absl::StatusOr<StepCommitRequest> d =
        fleet_->GetDecision(0, *version, /*fence_below=*/0, absl::Seconds(5));
    if (d.ok()) {
      PSCLUSTER_RETURN_IF_ERROR(fleet_->CommitStep(i, *d, absl::Seconds(10)));
    } else if (failures_[0] > 0) {
      // ps 0 is lost too: its backup, promoted to decide, sends the
      // decisions of the steps it holds again first.
    } else if (!absl::IsNotFound(d.status())) {
      return d.status();
    }
  }
  if (moving_back) return absl::OkStatus();
  // The lost process held the backups of other ps's stores: their
  // primaries stop waiting for it, and get new ones when it is back.
  for (int k = 0; k < static_cast<int>(copies_->size()); ++k) {
    StoreCopies& other = (*copies_)[k];
    if (k == i) continue;
    std::vector<StoreCopy> rest;
    for (const StoreCopy& bk : other.backups) {
      if (bk.holder != lost_holder) rest.push_back(bk);
    }
    if (rest.size() == other.backups.size()) continue;
    if (absl::Status s = KeepOnly(k, rest); !s.ok()) {
      spdlog::warn("ps:{} keeps waiting for its backup on the lost ps:{} until it times out: {}",
                   k, lost_holder, std::string(s.message()));
      continue;
    }
    spdlog::warn("ps:{}'s store goes on without its backup on ps:{} until that ps is back{}", k,
                 lost_holder, OthersLeft(rest.size()));
  }
  return absl::OkStatus();
}

absl::Status PsRecovery::KeepOnly(int ps, std::vector<StoreCopy> backups) {
  if (absl::Status s = fleet_->SetBackups(ps, AddressesOf(backups), absl::Seconds(2)); !s.ok()) {
    return s;
  }
  StoreCopies& c = (*copies_)[ps];
  c.backups = std::move(backups);
  if (metrics_ != nullptr) metrics_->SetCopies(ps, c.primary_holder, HoldersOf(c.backups));
  return absl::OkStatus();
}

absl::StatusOr<PsRecovery::ChosenBackup> PsRecovery::ChooseBackup(int i,
                                                                  const std::string& only) {
  const StoreCopies& c = (*copies_)[i];
  const int64_t generation = dispatcher_->generation();
  std::optional<ChosenBackup> best;
  int64_t highest_term = 0;
  std::string why_not;
  for (int k = 0; k < static_cast<int>(c.backups.size()); ++k) {
    const StoreCopy& copy = c.backups[k];
    if (!only.empty() && copy.address != only) continue;
    auto refuse = [&](absl::string_view why) {
      absl::StrAppend(&why_not, why_not.empty() ? "" : "; ", "the store at ", copy.address,
                      " (on ps:", copy.holder, ") ", why);
    };
    absl::StatusOr<PsStatsResponse> st = fleet_->StatsAt(copy.address, absl::Seconds(1));
    if (!st.ok()) {
      refuse(absl::StrCat("does not answer: ", st.status().message()));
      continue;
    }
    highest_term = std::max(highest_term, st->primary_term());
    if (!st->initialized() || !st->backup()) {
      refuse("is not a seeded backup");
    } else if (!copy.seeded) {
      refuse("was not seeded yet: it may lack updates a worker was answered for");
    } else if (st->generation() != generation) {
      refuse(absl::StrCat("is of generation ", st->generation(), ", the run of ", generation));
    } else if (!best.has_value() || st->version() > best->stats.version()) {
      best = ChosenBackup{k, *std::move(st), 0};
    }
  }
  if (!best.has_value()) {
    return absl::FailedPreconditionError(why_not.empty() ? "no backup" : why_not);
  }
  best->highest_term = highest_term;
  return *std::move(best);
}

absl::Status PsRecovery::RestoreFromBackup(int i, int64_t generation, std::string* from) {
  if (copies_ == nullptr || i >= static_cast<int>(copies_->size()) ||
      (*copies_)[i].backups.empty()) {
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
  absl::StatusOr<ChosenBackup> chosen = ChooseBackup(i, "");
  if (!chosen.ok()) return chosen.status();
  *from = (*copies_)[i].backups[chosen->index].address;
  absl::StatusOr<ShardState> state = fleet_->SnapshotOfBackup(*from, absl::Seconds(10));
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
  PSCLUSTER_RETURN_IF_ERROR(fleet_->Restore(i, req, recovery_timeout_));
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
      PSCLUSTER_RETURN_IF_ERROR(fleet_->CommitStep(i, *d, absl::Seconds(10)));
    } else if (!absl::IsNotFound(d.status())) {
      return d.status();
    }
  }
  return absl::OkStatus();
}

void PsRecovery::Resize() {
  const size_t n = fleet_->num_ps();
  incarnation_.resize(n, 0);
  failures_.assign(n, 0);
  alone_.assign(n, false);
}

absl::Status PsRecovery::RestoreAll(const Snapshot& snap, int64_t generation, bool new_placement,
                                    const Placement* kept_from, const Snapshot* before,
                                    int64_t* sent) {
  // The data position first, so that no worker gets a chunk of the old
  // generation once a ps holds the new one.
  if (absl::Status s = dispatcher_->Rewind(snap.chunks_per_epoch, snap.done_chunks, generation);
      !s.ok()) {
    return s;
  }
  PSCLUSTER_RETURN_IF_ERROR(MoveHome());
  // The decider's epoch moves on (a restore never lowers it): ps 0's
  // process, which may be one replaced as the decider, decides again.
  const int64_t epoch = setup_->mode == SYNC ? DeciderEpoch(-1) : 0;
  const int n = fleet_->num_ps();
  std::vector<int64_t> terms(n, -1);  // -1: the snapshot's
  for (int i = 0; i < n; ++i) {
    // Above every term a copy had: a backup store that served the shards
    // before (demoted from now on) takes this primary's seed.
    if (copies_ != nullptr && i < static_cast<int>(copies_->size())) {
      terms[i] = ++(*copies_)[i].primary_term;
    }
  }
  // Every ps at once: each request is built, sent and taken while the
  // others are (the workers wait for the slowest, not for the sum).
  std::vector<absl::Status> status(n);
  std::vector<uint64_t> incarnation(n, 0);
  std::vector<int64_t> bytes(n, 0);
  auto restore = [&](int i) -> absl::Status {
    // Async only: a sync run whose move kept floats in place stalled
    // after it once under Docker (cause not found yet), so a sync move
    // sends every ps all its floats, as before.
    bool keep = new_placement && setup_->mode == ASYNC && kept_from != nullptr &&
                before != nullptr && i < static_cast<int>(before->ps.size());
    if (keep) {
      // The ps must hold the checkpoint's floats still; asking first saves
      // sending the rest twice (the ps checks again as it restores).
      absl::StatusOr<PsStatsResponse> now = fleet_->Stats(i, absl::Seconds(2));
      keep = now.ok() && now->version() == before->ps[i].version();
    }
    for (;;) {
      RestoreRequest req;
      *req.mutable_init() = MakeInitRequest(*setup_, i);
      req.set_new_placement(new_placement);
      *req.mutable_state() = snap.ps[i];
      req.mutable_state()->set_generation(generation);
      req.mutable_state()->set_decider_epoch(epoch);
      if (terms[i] >= 0) req.mutable_state()->set_primary_term(terms[i]);
      // The placement's shards: a snapshot read from a checkpoint file (or
      // resharded from another ps count) carries the values, not their list.
      *req.mutable_state()->mutable_shards() = req.init().shards();
      if (keep && KeepInPlace(*kept_from, *setup_->placement, i, &req) > 0) {
        req.set_kept_layout(kept_from->fingerprint);
        req.set_kept_version(before->ps[i].version());
      }
      bytes[i] += static_cast<int64_t>(req.state().ByteSizeLong());
      // A move's restores are short: a ps that does not take its shards (the
      // added one lost) fails the move, and every ps goes back; the workers
      // wait meanwhile. About 100 MB/s or better, as a checkpoint's fetch.
      const absl::Duration timeout =
          new_placement ? absl::Seconds(5) + absl::Seconds(3 * req.state().ByteSizeLong() / 100e6)
                        : recovery_timeout_;
      const absl::Status s = fleet_->Restore(i, req, timeout);
      if (absl::IsFailedPrecondition(s) && req.kept_size() > 0) {
        // The ps moved on since the checkpoint (sync: a step in flight as
        // it was taken completed since): it is sent every float instead.
        spdlog::info("ps:{} is sent all its floats: {}", i, std::string(s.message()));
        keep = false;
        continue;
      }
      PSCLUSTER_RETURN_IF_ERROR(s);
      break;
    }
    absl::StatusOr<PsStatsResponse> st = fleet_->Stats(i, absl::Seconds(10));
    if (!st.ok()) return st.status();
    incarnation[i] = st->incarnation();
    return absl::OkStatus();
  };
  ParallelFor(n, /*min_range=*/1, /*threads=*/n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) status[i] = restore(static_cast<int>(i));
  });
  for (int i = 0; i < n; ++i) {
    if (status[i].ok()) incarnation_[i] = incarnation[i];
    if (sent != nullptr) *sent += bytes[i];
  }
  for (const absl::Status& s : status) PSCLUSTER_RETURN_IF_ERROR(s);
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
    c.backups.clear();
    if (metrics_ != nullptr) metrics_->SetCopies(i, i, {});
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
  absl::Status s = fleet_->SetFollowers(0, addresses, absl::Seconds(5));
  // ps 0 lost too: its backup is told where the followers are once it is
  // promoted to decide in its place.
  if (!s.ok() && failures_[0] > 0) return absl::OkStatus();
  return s;
}

}  // namespace pscluster
