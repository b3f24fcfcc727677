#include "chief/membership.h"

#include <optional>

namespace pscluster {

bool MembershipSync::Apply(bool force) {
  force_pending_ |= force;
  // Every tick asks; the set itself (one entry per worker) is read only
  // when it changed.
  if (dispatcher_->membership_number() == sent_number_ && !force_pending_) return true;
  int64_t number = 0;
  const std::vector<bool> active = dispatcher_->Membership(&number);
  if (number == sent_number_ && !force_pending_) return true;
  if (options_.mode != SYNC) {
    force_pending_ = false;
    dispatcher_->MembershipApplied(number);
    return true;
  }
  bool adds = false;
  for (size_t w = 0; w < active.size() && !sent_active_.empty(); ++w) {
    adds |= active[w] && !sent_active_[w];
  }
  std::optional<PausedWorkers> paused;
  if (adds) {
    paused.emplace(dispatcher_);
    // Sent to ps at different versions, the new member would be waited for
    // from different steps on different ps: resume the workers and try
    // again on the next call instead.
    if (!WaitForOneVersion()) return false;
  }
  for (int i = 0; i < fleet_->num_ps(); ++i) {
    if (!fleet_->SetWorkers(i, active, options_.set_workers_timeout).ok()) {
      return false;  // a ps down: sent again on the next call
    }
  }
  sent_number_ = number;
  sent_active_ = active;
  force_pending_ = false;
  dispatcher_->MembershipApplied(number);
  return true;
}

bool MembershipSync::WaitForOneVersion() {
  const absl::Time give_up = absl::Now() + options_.settle_timeout;
  int settled = 0;
  while (absl::Now() < give_up && !stop_) {
    int64_t version = -1;
    bool equal = true;
    for (int i = 0; i < fleet_->num_ps() && equal; ++i) {
      absl::StatusOr<PsStatsResponse> st = fleet_->Stats(i, options_.stats_timeout);
      if (!st.ok()) return false;
      if (version >= 0 && st->version() != version) equal = false;
      version = st->version();
    }
    settled = equal ? settled + 1 : 0;
    if (settled == 2) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return false;
}

}  // namespace pscluster
