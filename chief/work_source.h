// WorkSource: what the Coordinator's work RPCs reach, whichever strategy
// runs (chief/coordinator_service.h holds one and knows no strategy).
// Every strategy answers Heartbeat; the parameter-server run hands out
// chunks (GetWork: chief/dispatcher.h), the ring run steps and the chief's
// own state (RingWork, GetReplica: chief/ring_dispatcher.h). A call the
// running strategy does not serve answers FailedPrecondition naming the
// strategy that does (these defaults).
//
// Implementations are thread-safe: the Coordinator's handlers call them
// from gRPC threads while the chief's loop works on the same object.
#ifndef PSCLUSTER_CHIEF_WORK_SOURCE_H_
#define PSCLUSTER_CHIEF_WORK_SOURCE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordination.pb.h"
#include "proto/ps.pb.h"

namespace pscluster {

class WorkSource {
 public:
  virtual ~WorkSource() = default;

  // A worker's sign of life. InvalidArgument for a worker index out of
  // range.
  virtual absl::Status Heartbeat(const HeartbeatRequest& request, absl::Time now) = 0;

  // --strategy=parameter_server: the next chunk, or what to do instead.
  virtual absl::StatusOr<WorkResponse> GetWork(const WorkRequest& request, absl::Time now);

  // --strategy=multi_worker_mirrored: the next step of the ring, and the
  // state the chief itself holds (the initial weights or a checkpoint's).
  virtual absl::StatusOr<RingWorkResponse> RingWork(const RingWorkRequest& request, absl::Time now);
  virtual absl::StatusOr<ShardState> GetReplica(const ReplicaRequest& request);

  // --strategy=parameter_server: where each ps's shards are served now.
  virtual absl::StatusOr<PlacementResponse> GetPlacement();
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_WORK_SOURCE_H_
