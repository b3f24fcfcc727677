#include "wire/chief_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/retry.h"
#include "common/rpc.h"

namespace pscluster {
namespace {

// One Coordinator call with retries: 5 s per attempt, `timeout` in all.
template <typename Request, typename Response>
absl::Status CallWithRetries(
    const std::string& what, absl::Duration timeout, Coordinator::Stub* stub,
    grpc::Status (Coordinator::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
    const Request& request, Response* response, const std::atomic<bool>* stop = nullptr,
    absl::Duration attempt_timeout = absl::Seconds(5)) {
  RetryPolicy policy;
  policy.attempt_timeout = attempt_timeout;
  policy.total_timeout = timeout;
  return RetryRpc(
      what, policy,
      [&](absl::Time deadline) {
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(deadline));
        return (stub->*method)(&ctx, request, response);
      },
      stop);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChiefClient>> ChiefClient::Create(
    const ClusterSpec& cluster) {
  absl::StatusOr<std::string> address = cluster.address(kChiefJob, 0);
  if (!address.ok()) {
    return absl::FailedPreconditionError(
        "the cluster has no chief: workers and the evaluator need one to plan the run");
  }
  std::unique_ptr<ChiefClient> c(new ChiefClient());
  c->address_ = *address;
  c->stub_ = Coordinator::NewStub(MakeChannel(*address));
  return c;
}

absl::StatusOr<TrainingPlan> ChiefClient::WaitForPlan(const TaskId& task,
                                                      absl::Duration timeout,
                                                      const std::atomic<bool>* stop) {
  const absl::Time give_up = absl::Now() + timeout;
  RetryPolicy policy;
  policy.initial_backoff = absl::Milliseconds(100);
  policy.max_backoff = absl::Seconds(1);
  Backoff backoff(policy);
  grpc::Status last, refused;  // refused: the last failure to reach the chief
  for (int attempt = 0; absl::Now() < give_up; ++attempt) {
    if (stop != nullptr && *stop) return absl::CancelledError("stop requested");
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(std::min(give_up, absl::Now() + absl::Seconds(2))));
    // After a first failure to reach the chief, each call waits for the
    // channel to connect (gRPC tries again 100 ms to 1 s after a refusal)
    // instead of failing at once and sleeping: a task started before the
    // chief listens reaches it as soon as it does, which an evaluator
    // outside TF_CONFIG must do before a short run ends (the chief waits
    // only for an evaluator it has heard from).
    ctx.set_wait_for_ready(attempt > 0 && !refused.ok());
    GetPlanRequest req;
    req.set_task_type(task.type);
    req.set_task_index(task.index);
    GetPlanResponse resp;
    last = stub_->GetPlan(&ctx, req, &resp);
    if (last.ok() && resp.ready()) return resp.plan();
    if (!last.ok() && !IsRetryable(last)) {
      return FromGrpcStatus(last, absl::StrCat("asking the chief (", address_, ") for the plan"));
    }
    if (last.error_code() == grpc::StatusCode::UNAVAILABLE) refused = last;
    if (last.ok() || last.error_code() == grpc::StatusCode::UNAVAILABLE) {
      absl::SleepFor(backoff.Next());
    }
  }
  const grpc::Status& why = refused.ok() ? last : refused;
  return absl::DeadlineExceededError(absl::StrCat(
      "no training plan from the chief at ", address_, " within ", absl::FormatDuration(timeout),
      last.ok() ? " (it answered: not ready)" : " (last error: " + why.error_message() + ")"));
}

absl::StatusOr<bool> ChiefClient::Report(const ProgressReport& report,
                                         absl::Duration timeout) {
  ProgressAck ack;
  absl::Status s = CallWithRetries(absl::StrCat("reporting to the chief (", address_, ")"),
                                   timeout, stub_.get(), &Coordinator::Stub::ReportProgress,
                                   report, &ack);
  if (!s.ok()) return s;
  return ack.stop();
}

absl::StatusOr<WorkResponse> ChiefClient::GetWork(const WorkRequest& request,
                                                  absl::Duration timeout,
                                                  const std::atomic<bool>* stop) {
  WorkResponse resp;
  absl::Status s = CallWithRetries(absl::StrCat("asking the chief (", address_, ") for work"),
                                   timeout, stub_.get(), &Coordinator::Stub::GetWork, request,
                                   &resp, stop);
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<RingWorkResponse> ChiefClient::RingWork(const RingWorkRequest& request,
                                                       absl::Duration timeout,
                                                       const std::atomic<bool>* stop) {
  RingWorkResponse resp;
  absl::Status s = CallWithRetries(
      absl::StrCat("asking the chief (", address_, ") for the ring's next step"), timeout,
      stub_.get(), &Coordinator::Stub::RingWork, request, &resp, stop);
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<ShardState> ChiefClient::GetReplica(const ReplicaRequest& request,
                                                   absl::Duration timeout) {
  ShardState state;
  absl::Status s = CallWithRetries(
      absl::StrCat("fetching the state of step ", request.step(), " from the chief (", address_,
                   ")"),
      timeout, stub_.get(), &Coordinator::Stub::GetReplica, request, &state, nullptr,
      // A large model's values and slots, to several workers at once over
      // the chief's one link: an attempt cut off after a few seconds would
      // be sent again from its first byte, and again (80 MB x 3 to three
      // workers over 1 Gbit/s took 46 s of retries in the lab, not 6).
      /*attempt_timeout=*/timeout);
  if (!s.ok()) return s;
  return state;
}

absl::Status ChiefClient::Heartbeat(const HeartbeatRequest& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  HeartbeatResponse resp;
  return FromGrpcStatus(stub_->Heartbeat(&ctx, request, &resp),
                        absl::StrCat("heartbeat to the chief (", address_, ")"));
}

absl::Status ChiefClient::ReportEval(const EvalReport& report) {
  EvalAck ack;
  return CallWithRetries(absl::StrCat("reporting an evaluation to the chief (", address_, ")"),
                         absl::Seconds(10), stub_.get(), &Coordinator::Stub::ReportEval, report,
                         &ack);
}

bool ChiefClient::Alive(absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  GetPlanRequest req;
  GetPlanResponse resp;
  return stub_->GetPlan(&ctx, req, &resp).ok();
}

absl::StatusOr<PlacementResponse> ChiefClient::GetPlacement(absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  PlacementResponse resp;
  grpc::Status s = stub_->GetPlacement(&ctx, PlacementRequest(), &resp);
  if (!s.ok()) return FromGrpcStatus(s, "placement from the chief at " + address_);
  return resp;
}

std::function<std::string(int ps)> LocateThroughChief(ChiefClient* chief) {
  return [chief](int ps) -> std::string {
    absl::StatusOr<PlacementResponse> p = chief->GetPlacement(absl::Milliseconds(500));
    if (!p.ok() || ps < 0 || ps >= p->ps_addresses_size()) return "";
    return p->ps_addresses(ps);
  };
}

}  // namespace pscluster
