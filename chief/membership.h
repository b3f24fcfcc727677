// MembershipSync: brings the dispatcher's sync worker set (whom a sync step
// waits for, Dispatcher::Membership) to every ps with SetWorkers, and tells
// the dispatcher which set the ps hold (a re-admitted worker gets work only
// then). Async training has no set: a change counts as applied at once.
//
// Adding a worker must happen at the same step on every ps, or the ps
// would count steps out of phase for good: the workers are paused until
// every ps is at one version before the set goes out. Taking one out needs
// no pause: every ps then completes the step without it.
//
// Not thread-safe: the chief's loop calls it. The fleet, the dispatcher and
// the stop flag are borrowed and must outlive it.
#ifndef PSCLUSTER_CHIEF_MEMBERSHIP_H_
#define PSCLUSTER_CHIEF_MEMBERSHIP_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "chief/dispatcher.h"
#include "chief/ps_fleet.h"
#include "proto/ps.pb.h"

namespace pscluster {

struct MembershipOptions {
  UpdateMode mode = SYNC;
  // How long the workers stay paused for the ps to reach one version.
  absl::Duration settle_timeout = absl::Seconds(2);
  // Each GetStats and SetWorkers call.
  absl::Duration stats_timeout = absl::Milliseconds(500);
  absl::Duration set_workers_timeout = absl::Seconds(2);
};

class MembershipSync {
 public:
  MembershipSync(const MembershipOptions& options, PsFleet* fleet, Dispatcher* dispatcher,
                 const std::atomic<bool>* stop)
      : options_(options), fleet_(fleet), dispatcher_(dispatcher), stop_(*stop) {}

  // Sends the current set when it changed since the last one every ps
  // took, or when `force` (a restored or restarted ps does not hold it).
  // True when every ps holds the current set. False when it was not sent
  // to every ps (a ps did not answer, or, adding a worker, the ps did not
  // reach one version within settle_timeout): the workers are resumed and
  // the next call tries again, forced again if this one was.
  bool Apply(bool force = false);

 private:
  // Sync: waits until every ps is at one version (twice in a row), up to
  // settle_timeout; false when they are not, or a ps does not answer.
  bool WaitForOneVersion();

  const MembershipOptions options_;
  PsFleet* const fleet_;
  Dispatcher* const dispatcher_;
  const std::atomic<bool>& stop_;
  int64_t sent_number_ = -1;       // the set every ps holds
  std::vector<bool> sent_active_;  // its members
  bool force_pending_ = false;     // a forced set has not reached every ps
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_MEMBERSHIP_H_
