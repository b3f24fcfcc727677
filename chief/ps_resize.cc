// ParameterServerRun's live change of the ps in use (--min_ps): the next
// ps TF_CONFIG lists is added once it answers, and the last ps in use is
// drained when it asks to leave (ps_server on SIGTERM; PsStatsResponse
// .leaving). Either way the shards are placed again over the new count
// (model/placement.h's elastic placement: only the added or drained ps's
// share changes ps): with the workers paused, a checkpoint of every ps
// (chief/checkpointer.h), resharded (chief/snapshot.h), restored onto the
// new set under the next generation with each ps's records of what it
// applied (RestoreKind::kMove; the floats that stay on a ps are not sent,
// it keeps them: KeepInPlace), and the workers told where the shards are
// (they follow at their next step, as after a restore). Nothing trained is
// lost, and every chunk is applied once: the data position is the
// checkpoint's, taken with nothing in flight. The ps that left is demoted,
// so it answers for none of the shards it held (fenced, as a replaced
// primary is: docs/replication.md).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "chief/ps_run.h"
#include "chief/snapshot.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace pscluster {

absl::Status ParameterServerRun::CheckPsSet() {
  if (options_.min_ps == 0) return absl::OkStatus();
  const int in_use = placement_.num_ps;
  for (int i = 0; i < in_use; ++i) {
    absl::StatusOr<PsStatsResponse> st = ps_->Stats(i, absl::Seconds(1));
    if (!st.ok() || !st->leaving()) continue;
    if (i == in_use - 1 && in_use > 1) {
      return PlaceShardsAgain(in_use - 1, absl::StrCat("ps:", i, " leaves"));
    }
    if (!leave_refused_[i]) {
      leave_refused_[i] = true;
      spdlog::warn(
          "ps:{} asks to leave, but only the last ps in use{} is drained: it serves on until "
          "it stops, and is lost then",
          i, in_use > 1 ? absl::StrCat(" (ps:", in_use - 1, ")") : std::string(", of two or more,"));
    }
  }
  if (in_use < ps_->num_listed()) {
    absl::StatusOr<PsStatsResponse> st = ps_->Stats(in_use, absl::Milliseconds(500));
    if (st.ok() && !st->leaving() && (!st->initialized() || st->backup())) {
      leave_refused_[in_use] = false;
      return PlaceShardsAgain(in_use + 1, absl::StrCat("ps:", in_use, " answers"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerRun::PlaceShardsAgain(int num_ps, const std::string& why) {
  bool taken = false;
  PSCLUSTER_RETURN_IF_ERROR(MoveShardsPaused(num_ps, why, &taken));
  return taken ? checkpointer_->WriteLatest("the shards placed again") : absl::OkStatus();
}

absl::Status ParameterServerRun::MoveShardsPaused(int num_ps, const std::string& why, bool* taken) {
  const int was = placement_.num_ps;
  spdlog::warn("{}: placing the shards over {} ps (were {}); training pauses meanwhile", why,
               num_ps, was);
  const absl::Time t0 = absl::Now();
  PausedWorkers pause(dispatcher_.get());
  // Nothing in flight from here on: the checkpoint holds every update
  // made, and the data position of exactly those.
  if (absl::Status s = checkpointer_->Take("before placing the shards again", highest_version_,
                                           /*workers_idle=*/false, /*required=*/true,
                                           /*to_disk=*/false);
      !s.ok()) {
    spdlog::warn("the shards stay on {} ps for now: {}", was, std::string(s.message()));
    return absl::OkStatus();  // asked again at the next check
  }
  *taken = true;
  const absl::Time t1 = absl::Now();
  const Snapshot& before = *checkpointer_->latest();
  const Placement old = placement_;
  plan_.set_num_ps(num_ps);
  Placement next = PlaceForPlan(spec_, plan_);
  absl::StatusOr<Snapshot> moved = ReshardSnapshot(before, old, next);
  if (!moved.ok()) {
    plan_.set_num_ps(was);
    return moved.status();
  }
  const int64_t generation = dispatcher_->generation() + 1;
  moved->generation = generation;
  placement_ = std::move(next);
  ps_->set_num_ps(num_ps);
  recovery_->Resize();
  // The floats that stay on their ps are not sent: each keeps them.
  int64_t sent = 0;
  absl::Status restored =
      options_.move_keeps_in_place
          ? recovery_->RestoreAll(*moved, generation, /*new_placement=*/true, &old, &before, &sent)
          : recovery_->RestoreAll(*moved, generation, /*new_placement=*/true, nullptr, nullptr,
                                  &sent);
  if (!restored.ok()) {
    // Back to the old placement, from the same checkpoint: the workers
    // were paused since, so nothing is lost.
    spdlog::warn("placing the shards over {} ps failed ({}); every ps goes back to the {} ps "
                 "placement from the checkpoint of step {}, nothing lost",
                 num_ps, std::string(restored.message()), was, before.step);
    placement_ = old;
    plan_.set_num_ps(was);
    ps_->set_num_ps(was);
    recovery_->Resize();
    PSCLUSTER_RETURN_IF_ERROR(recovery_->RestoreAll(before, generation + 1, true));
    PSCLUSTER_RETURN_IF_ERROR(PublishPsSet());
    membership_->Apply(/*force=*/true);
    return absl::OkStatus();
  }
  if (num_ps < was) {
    // Fenced: the ps that left answers for none of its old shards (a
    // worker that has not followed yet is refused there, and retries
    // where the shards are now).
    const std::string address = ps_->address(was - 1);
    if (absl::Status s = ps_->DemoteLayout(address, old.fingerprint, absl::Seconds(5)); !s.ok()) {
      spdlog::warn("ps:{} could not be demoted ({}); it holds no shard of the new placement",
                   was - 1, std::string(s.message()));
    }
  }
  PSCLUSTER_RETURN_IF_ERROR(PublishPsSet());
  membership_->Apply(/*force=*/true);
  const int64_t step = before.step;
  const int64_t tensors = 1 + (before.ps.empty() ? 0 : before.ps[0].slots_size());
  checkpointer_->Adopt(*std::move(moved));  // `before` is gone from here on
  const absl::Time t2 = absl::Now();
  const double moved_mb = 4.0 * tensors * MovedFloats(old, placement_) / 1e6;
  const double total_mb = 4.0 * tensors * spec_.num_parameters / 1e6;
  spdlog::warn(
      "the shards are placed over {} ps from step {} (generation {}): {:.3g} MB of {:.3g} MB "
      "changed ps, {:.3g} MB sent to the ps; training paused {:.1f} ms ({:.1f} ms for the "
      "checkpoint, {:.1f} ms to place and restore)",
      num_ps, step, generation, moved_mb, total_mb, sent / 1e6, absl::ToDoubleMilliseconds(t2 - t0),
      absl::ToDoubleMilliseconds(t1 - t0), absl::ToDoubleMilliseconds(t2 - t1));
  return absl::OkStatus();
}

absl::Status ParameterServerRun::PublishPsSet() {
  PSCLUSTER_RETURN_IF_ERROR(recovery_->PublishPlacement());
  // One ps in use of several: the deciding ps sends its decisions to none.
  if (plan_.mode() == SYNC && placement_.num_ps == 1 && ps_->num_listed() > 1) {
    return ps_->SetFollowers(0, {}, absl::Seconds(5));
  }
  return absl::OkStatus();
}

}  // namespace pscluster
