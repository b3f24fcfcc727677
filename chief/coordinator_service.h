// CoordinatorService: the chief's gRPC face for workers and the evaluator
// (proto/coordination.proto). Hands out the plan once SetPlan() was called
// and records progress in a ProgressTracker. Thread-safe; the tracker is
// borrowed and must outlive the service.
#ifndef PSCLUSTER_CHIEF_COORDINATOR_SERVICE_H_
#define PSCLUSTER_CHIEF_COORDINATOR_SERVICE_H_

#include <functional>

#include "absl/synchronization/mutex.h"
#include "chief/dispatcher.h"
#include "chief/ring_dispatcher.h"
#include "chief/progress_tracker.h"
#include "proto/coordination.grpc.pb.h"

namespace pscluster {

class CoordinatorService final : public Coordinator::Service {
 public:
  // `dispatcher` answers GetWork and Heartbeat; both are borrowed.
  // (multi_worker_mirrored: see SetRing.)
  CoordinatorService(ProgressTracker* tracker, Dispatcher* dispatcher)
      : tracker_(tracker), dispatcher_(dispatcher) {}

  // multi_worker_mirrored: `ring` answers RingWork and Heartbeat (in place
  // of the dispatcher, which may then be null), and `state` GetReplica (the
  // chief's own state: the initial weights or a checkpoint's). Call before
  // the service is started; both borrowed.
  using StateSource = std::function<absl::StatusOr<ShardState>(const ReplicaRequest&)>;
  void SetRing(RingDispatcher* ring, StateSource state) {
    ring_ = ring;
    state_ = std::move(state);
  }

  void SetPlan(const TrainingPlan& plan);
  // Whether an evaluator has asked for the plan (one outside the cluster
  // is known only this way).
  bool evaluator_seen() const;

  grpc::Status GetPlan(grpc::ServerContext*, const GetPlanRequest*,
                       GetPlanResponse*) override;
  grpc::Status ReportProgress(grpc::ServerContext*, const ProgressReport*,
                              ProgressAck*) override;
  grpc::Status ReportEval(grpc::ServerContext*, const EvalReport*, EvalAck*) override;
  grpc::Status GetWork(grpc::ServerContext*, const WorkRequest*, WorkResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest*,
                         HeartbeatResponse*) override;
  grpc::Status RingWork(grpc::ServerContext*, const RingWorkRequest*,
                        RingWorkResponse*) override;
  grpc::Status GetReplica(grpc::ServerContext*, const ReplicaRequest*, ShardState*) override;

 private:
  ProgressTracker* const tracker_;
  Dispatcher* const dispatcher_;
  RingDispatcher* ring_ = nullptr;
  StateSource state_;
  mutable absl::Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool evaluator_seen_ ABSL_GUARDED_BY(mu_) = false;
  TrainingPlan plan_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_COORDINATOR_SERVICE_H_
