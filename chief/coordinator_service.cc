#include "chief/coordinator_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

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

grpc::Status CoordinatorService::GetPlan(grpc::ServerContext*, const GetPlanRequest* req,
                                         GetPlanResponse* resp) {
  absl::MutexLock lock(&mu_);
  if (req->task_type() == "evaluator") evaluator_seen_ = true;
  resp->set_ready(ready_);
  if (ready_) *resp->mutable_plan() = plan_;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ReportProgress(grpc::ServerContext*,
                                                const ProgressReport* req, ProgressAck*) {
  if (!tracker_->Record(*req, absl::Now())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("worker index ", req->worker_index(),
                                     " is not in this cluster"));
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ReportEval(grpc::ServerContext*, const EvalReport* req,
                                            EvalAck*) {
  tracker_->RecordEval(*req);
  return grpc::Status::OK;
}

}  // namespace pscluster
