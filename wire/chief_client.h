// ChiefClient: a worker's or evaluator's calls to the chief's Coordinator
// service. Not thread-safe; one owner.
#ifndef PSCLUSTER_WIRE_CHIEF_CLIENT_H_
#define PSCLUSTER_WIRE_CHIEF_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "proto/coordination.grpc.pb.h"

namespace pscluster {

class ChiefClient {
 public:
  // FailedPrecondition when the cluster has no chief.
  static absl::StatusOr<std::unique_ptr<ChiefClient>> Create(const ClusterSpec& cluster);

  // Polls the chief until it hands out a ready plan; retries while the
  // chief is unreachable. DeadlineExceeded naming the chief after
  // `timeout`; Cancelled once *stop turns true.
  absl::StatusOr<TrainingPlan> WaitForPlan(const TaskId& task, absl::Duration timeout,
                                           const std::atomic<bool>* stop);

  // Returns whether the chief asks the worker to stop. Retries while the
  // chief is down or restarting, up to `timeout`.
  absl::StatusOr<bool> Report(const ProgressReport& report,
                              absl::Duration timeout = absl::Seconds(10));
  // The next piece of work; retries while the chief is down or restarting
  // (workers hold meanwhile), up to `timeout`; the error names the chief.
  absl::StatusOr<WorkResponse> GetWork(const WorkRequest& request, absl::Duration timeout,
                                       const std::atomic<bool>* stop);
  // multi_worker_mirrored: the next step of the ring (as GetWork).
  absl::StatusOr<RingWorkResponse> RingWork(const RingWorkRequest& request,
                                            absl::Duration timeout,
                                            const std::atomic<bool>* stop);
  // multi_worker_mirrored: the state the chief holds (the initial weights
  // or a checkpoint's). One attempt may take all of `timeout` (a large
  // state over a slow link); it is retried within it only while the chief
  // cannot be reached.
  absl::StatusOr<ShardState> GetReplica(const ReplicaRequest& request, absl::Duration timeout);
  // One heartbeat, one attempt (the next one follows soon).
  absl::Status Heartbeat(const HeartbeatRequest& request);
  absl::Status ReportEval(const EvalReport& report);
  // Whether the chief answers within `timeout`.
  bool Alive(absl::Duration timeout);
  // Where each ps's shards are served now (docs/replication.md): one
  // attempt. Unlike the rest, may be called from any thread.
  absl::StatusOr<PlacementResponse> GetPlacement(absl::Duration timeout);

 private:
  ChiefClient() = default;
  std::string address_;
  std::unique_ptr<Coordinator::Stub> stub_;
};

// PsClientOptions::locate through the chief: where ps `ps`'s shards are
// served now, "" when the chief does not say within half a second. The
// chief is borrowed and must outlive the function.
std::function<std::string(int ps)> LocateThroughChief(ChiefClient* chief);

}  // namespace pscluster

#endif  // PSCLUSTER_WIRE_CHIEF_CLIENT_H_
