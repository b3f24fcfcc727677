// Heartbeat: a worker's heartbeats to the chief, from a thread of its own,
// so that a worker blocked in a sync step (waiting for a lost peer) is
// alive all the same. Beats start when it is constructed and stop, the
// thread joined, when it is destroyed; each says whether the worker is done
// (`done`, borrowed: it outlives the Heartbeat). A beat that fails is not
// retried: the next one follows `every` later. The thread has a chief
// client of its own; when that cannot be created, no beats are sent.
//
// Thread-safe: the owner constructs and destroys it; `done` may be set from
// any thread meanwhile.
#ifndef PSCLUSTER_WORKER_HEARTBEAT_H_
#define PSCLUSTER_WORKER_HEARTBEAT_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"

namespace pscluster {

class Heartbeat {
 public:
  Heartbeat(const ClusterSpec& cluster, int worker, uint64_t incarnation, absl::Duration every,
            const std::atomic<bool>* done);
  ~Heartbeat();

  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void Beat(ClusterSpec cluster, int worker, uint64_t incarnation, absl::Duration every,
            const std::atomic<bool>* done);

  absl::Notification stop_;
  std::thread thread_;  // last: started once stop_ exists
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_HEARTBEAT_H_
