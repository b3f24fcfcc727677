#include "chief/coordinator_service.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "common/security.h"

namespace pscluster {

void CoordinatorService::SetPlan(const TrainingPlan& plan) {
  absl::MutexLock lock(&mu_);
  plan_ = plan;
  ready_ = true;
}

bool CoordinatorService::evaluator_seen() const {
  absl::MutexLock lock(&mu_);
  return evaluator_seen_;
}

grpc::Status CoordinatorService::GetPlan(grpc::ServerContext* ctx, const GetPlanRequest* req,
                                         GetPlanResponse* resp) {
  std::optional<TaskIdentity> caller;
  if (grpc::Status s = CheckAuth(ctx, Rpc::kCoordinatorGetPlan, &caller); !s.ok()) return s;
  if (caller.has_value()) {
    const std::optional<Role> role = RoleFromName(req->task_type());
    // Another role's plan, or another task's: refused as acting as another.
    if (grpc::Status s = CheckActsAsItself(ctx, caller, Rpc::kCoordinatorGetPlan, caller->role,
                                           role == caller->role ? req->task_index() : int64_t{-1});
        !s.ok()) {
      return s;
    }
  }
  absl::MutexLock lock(&mu_);
  if (req->task_type() == "evaluator") evaluator_seen_ = true;
  resp->set_ready(ready_);
  if (ready_) *resp->mutable_plan() = plan_;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ReportProgress(grpc::ServerContext* ctx, const ProgressReport* req,
                                                ProgressAck*) {
  if (grpc::Status s =
          CheckAuth(ctx, Rpc::kCoordinatorReportProgress, Role::kWorker, req->worker_index());
      !s.ok()) {
    return s;
  }
  if (!tracker_->Record(*req)) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("worker index ", req->worker_index(), " is not in this cluster"));
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ReportEval(grpc::ServerContext* ctx, const EvalReport* req,
                                            EvalAck*) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kCoordinatorReportEval); !s.ok()) return s;
  // A report carries no identity, and with an evaluator outside TF_CONFIG
  // the latest one becomes the run's final figures: figures no evaluator
  // can produce are refused (a diverged model's NaN or infinite loss is
  // one it can).
  std::string bad;
  if (req->version() < 0) {
    bad = absl::StrCat("version ", req->version(), " is negative");
  } else if (req->examples() < 0) {
    bad = absl::StrCat("examples ", req->examples(), " is negative");
  } else if (!(req->accuracy() >= 0 && req->accuracy() <= 1)) {
    bad = absl::StrCat("accuracy ", req->accuracy(), " is not in [0, 1]");
  } else if (!(req->auc() == -1 || (req->auc() >= 0 && req->auc() <= 1))) {
    bad = absl::StrCat("auc ", req->auc(), " is neither -1 nor in [0, 1]");
  } else if (req->loss() < 0) {
    bad = absl::StrCat("loss ", req->loss(), " is negative");
  }
  if (!bad.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("evaluation report refused: ", bad));
  }
  tracker_->RecordEval(*req);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetWork(grpc::ServerContext* ctx, const WorkRequest* req,
                                         WorkResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kCoordinatorGetWork, Role::kWorker, req->worker_index());
      !s.ok()) {
    return s;
  }
  absl::StatusOr<WorkResponse> r = work_->GetWork(*req, absl::Now());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* ctx, const HeartbeatRequest* req,
                                           HeartbeatResponse*) {
  if (grpc::Status s =
          CheckAuth(ctx, Rpc::kCoordinatorHeartbeat, Role::kWorker, req->worker_index());
      !s.ok()) {
    return s;
  }
  return ToGrpcStatus(work_->Heartbeat(*req, absl::Now()));
}

grpc::Status CoordinatorService::RingWork(grpc::ServerContext* ctx, const RingWorkRequest* req,
                                          RingWorkResponse* resp) {
  if (grpc::Status s =
          CheckAuth(ctx, Rpc::kCoordinatorRingWork, Role::kWorker, req->worker_index());
      !s.ok()) {
    return s;
  }
  absl::StatusOr<RingWorkResponse> r = work_->RingWork(*req, absl::Now());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetReplica(grpc::ServerContext* ctx, const ReplicaRequest* req,
                                            ShardState* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kCoordinatorGetReplica); !s.ok()) return s;
  absl::StatusOr<ShardState> state = work_->GetReplica(*req);
  if (!state.ok()) return ToGrpcStatus(state.status());
  *resp = *std::move(state);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetPlacement(grpc::ServerContext* ctx, const PlacementRequest*,
                                              PlacementResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kCoordinatorGetPlacement); !s.ok()) return s;
  absl::StatusOr<PlacementResponse> p = work_->GetPlacement();
  if (!p.ok()) return ToGrpcStatus(p.status());
  *resp = *std::move(p);
  return grpc::Status::OK;
}

}  // namespace pscluster
