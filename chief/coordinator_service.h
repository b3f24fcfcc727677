// CoordinatorService: the chief's gRPC face for workers and the evaluator
// (proto/coordination.proto). Hands out the plan once SetPlan() was called,
// records progress and evaluations in a ProgressTracker (an evaluation
// report with figures no evaluator produces is refused with
// INVALID_ARGUMENT naming the figure), and passes the work RPCs
// (Heartbeat, GetWork, RingWork, GetReplica, GetPlacement) to the running
// strategy's WorkSource, which answers those it does not serve with
// FAILED_PRECONDITION. Thread-safe; the tracker and the work source are
// borrowed and must outlive the service.
#ifndef PSCLUSTER_CHIEF_COORDINATOR_SERVICE_H_
#define PSCLUSTER_CHIEF_COORDINATOR_SERVICE_H_

#include "absl/synchronization/mutex.h"
#include "chief/progress_tracker.h"
#include "chief/work_source.h"
#include "proto/coordination.grpc.pb.h"

namespace pscluster {

class CoordinatorService final : public Coordinator::Service {
 public:
  CoordinatorService(ProgressTracker* tracker, WorkSource* work) : tracker_(tracker), work_(work) {}

  void SetPlan(const TrainingPlan& plan);
  // Whether an evaluator has asked for the plan (one outside the cluster
  // is known only this way).
  bool evaluator_seen() const;

  grpc::Status GetPlan(grpc::ServerContext*, const GetPlanRequest*, GetPlanResponse*) override;
  grpc::Status ReportProgress(grpc::ServerContext*, const ProgressReport*, ProgressAck*) override;
  grpc::Status ReportEval(grpc::ServerContext*, const EvalReport*, EvalAck*) override;
  grpc::Status GetWork(grpc::ServerContext*, const WorkRequest*, WorkResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest*,
                         HeartbeatResponse*) override;
  grpc::Status RingWork(grpc::ServerContext*, const RingWorkRequest*, RingWorkResponse*) override;
  grpc::Status GetReplica(grpc::ServerContext*, const ReplicaRequest*, ShardState*) override;
  grpc::Status GetPlacement(grpc::ServerContext*, const PlacementRequest*,
                            PlacementResponse*) override;

 private:
  ProgressTracker* const tracker_;
  WorkSource* const work_;
  mutable absl::Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool evaluator_seen_ ABSL_GUARDED_BY(mu_) = false;
  TrainingPlan plan_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_COORDINATOR_SERVICE_H_
