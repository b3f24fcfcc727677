#include "worker/heartbeat.h"

#include <memory>

#include "absl/status/statusor.h"
#include "proto/coordination.pb.h"
#include "wire/chief_client.h"

namespace pscluster {

Heartbeat::Heartbeat(const ClusterSpec& cluster, int worker, uint64_t incarnation,
                     absl::Duration every, const std::atomic<bool>* done)
    : thread_(&Heartbeat::Beat, this, cluster, worker, incarnation, every, done) {}

Heartbeat::~Heartbeat() {
  stop_.Notify();
  thread_.join();
}

void Heartbeat::Beat(ClusterSpec cluster, int worker, uint64_t incarnation,
                     absl::Duration every, const std::atomic<bool>* done) {
  absl::StatusOr<std::unique_ptr<ChiefClient>> client = ChiefClient::Create(cluster);
  if (!client.ok()) return;
  HeartbeatRequest hb;
  hb.set_worker_index(worker);
  hb.set_incarnation(incarnation);
  do {
    hb.set_done(*done);
    (void)(*client)->Heartbeat(hb);
  } while (!stop_.WaitForNotificationWithTimeout(every));
}

}  // namespace pscluster
