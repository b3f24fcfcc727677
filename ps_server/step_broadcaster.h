// StepBroadcaster: on ps 0 of a sync cluster with several ps, sends each
// step decision of the local (deciding) store to every other ps
// (PsControl.CommitStep), so that they apply the same workers'
// gradients (update/parameter_store.h).
//
// One thread per other ps, each sending the decisions in order, each one
// until it is taken: a ps that is down or behind is asked again with
// back-off. A decision is given up when the local store was restored from
// a checkpoint since (its generation moved on: the step is void) or the
// other ps refuses it for good (another layout; logged).
//
// A decision goes over the other ps's tcp data plane (DataKind::kCommit,
// TLS and the token as for the workers' calls): the other ps applies the
// step while the workers wait for it, and a gRPC call would add a round
// trip of gRPC's own (a few hundred microseconds on loopback) to every
// step. When the data plane fails, the decision goes over gRPC
// (CommitStep), and so do the next ones for 10 s before the data plane is
// tried again: a decision is taken whichever way it comes (Commit of a
// decision already taken is OK).
//
// A follower's shards move when its backup is promoted (docs/replication.md):
// SetFollowers gives the new addresses, and the decisions in flight go
// there from their next attempt.
//
// Thread-safe; the store is borrowed and must outlive the broadcaster.
#ifndef PSCLUSTER_PS_SERVER_STEP_BROADCASTER_H_
#define PSCLUSTER_PS_SERVER_STEP_BROADCASTER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc.h"
#include "update/parameter_store.h"

namespace pscluster {

class StepBroadcaster {
 public:
  // Starts sending to `followers` (host:port of the other ps).
  StepBroadcaster(ParameterStore* store, const std::vector<std::string>& followers,
                  const RpcOptions& rpc = {});
  ~StepBroadcaster();  // stops the senders and joins them

  // Where the followers are served now, in the constructor's order; those
  // past the list given are not in use (the chief drains and adds ps) and
  // get no decisions until named again. InvalidArgument when more are given
  // than the constructor's.
  absl::Status SetFollowers(const std::vector<std::string>& followers);

  StepBroadcaster(const StepBroadcaster&) = delete;
  StepBroadcaster& operator=(const StepBroadcaster&) = delete;

 private:
  void SendAll(int follower, const RpcOptions& rpc);
  std::string AddressOf(int follower) const;

  ParameterStore* const store_;  // borrowed
  mutable absl::Mutex mu_;
  std::vector<std::string> followers_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::vector<std::thread> senders_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVER_STEP_BROADCASTER_H_
