// RingClient: the calls to the workers' Ring services from outside the
// ring (multi_worker_mirrored): reading a replica's state, for whoever has
// no ps to pull weights from (the evaluator; the chief's checkpoints and
// final weights), and the chief's order to abort a broken ring's
// all-reduces. Every replica of one step holds the same bits, so for the
// weights any worker will do; ReadWeights tries them in turn.
//
// Thread-safe.
#ifndef PSCLUSTER_WIRE_RING_CLIENT_H_
#define PSCLUSTER_WIRE_RING_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "proto/coordination.pb.h"
#include "proto/ring.grpc.pb.h"

namespace pscluster {

class RingClient {
 public:
  // Channels to every worker of `cluster`, by rank. `stop` (may be null)
  // cancels a wait.
  RingClient(const ClusterSpec& cluster, const std::atomic<bool>* stop = nullptr);

  // The state of worker `rank`'s replica as `request` asks (one attempt,
  // bounded by `timeout`); the error names the worker.
  absl::StatusOr<ShardState> Fetch(int rank, const ReplicaRequest& request,
                                   absl::Duration timeout);

  // The weights of step `min_step` or later from whichever worker has them
  // first, asking each in turn until `timeout`: into params (their size),
  // the step into *step. DeadlineExceeded naming min_step and the last
  // error; Cancelled once *stop.
  absl::Status ReadWeights(int64_t min_step, absl::Duration timeout, std::vector<float>* params,
                           int64_t* step);

  // Makes worker `rank`'s all-reduce of ring `ring_id` (or an older
  // one) return Aborted at once (one attempt, bounded by `timeout`).
  absl::Status Abort(int rank, int64_t ring_id, absl::Duration timeout);

  int num_workers() const { return static_cast<int>(stubs_.size()); }

 private:
  // InvalidArgument naming `rank` when the cluster has no such worker.
  absl::Status CheckRank(int rank) const;

  const std::atomic<bool>* const stop_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<Ring::Stub>> stubs_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WIRE_RING_CLIENT_H_
