#include "ps_server/step_broadcaster.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/retry.h"
#include "proto/ps.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace pscluster {
namespace {

// Resending a decision: at once at first (a follower answers in
// microseconds when it is up), at most every 200 ms while it is down.
RetryPolicy ResendPolicy() {
  RetryPolicy p;
  p.initial_backoff = absl::Milliseconds(1);
  p.max_backoff = absl::Milliseconds(200);
  return p;
}

}  // namespace

StepBroadcaster::StepBroadcaster(ParameterStore* store,
                                 const std::vector<std::string>& followers,
                                 const RpcOptions& rpc)
    : store_(store) {
  for (const std::string& address : followers) {
    senders_.emplace_back([this, address, rpc] { SendAll(address, rpc); });
  }
}

StepBroadcaster::~StepBroadcaster() {
  stop_ = true;
  for (std::thread& t : senders_) t.join();
}

void StepBroadcaster::SendAll(const std::string& address, const RpcOptions& rpc) {
  std::unique_ptr<ParameterServer::Stub> stub =
      ParameterServer::NewStub(MakeChannel(address, rpc));
  int64_t sent = 0;  // sequence of the last decision taken or given up
  StepDecision d;
  while (!stop_) {
    if (!store_->NextDecision(sent, absl::Now() + absl::Milliseconds(200), &d)) continue;
    StepCommitRequest req;
    req.set_layout_fingerprint(d.layout_fingerprint);
    req.set_generation(d.generation);
    req.set_version(d.version);
    for (bool m : d.members) req.add_members(m);
    req.set_skip(d.skip);
    Backoff backoff(ResendPolicy());
    while (!stop_) {
      grpc::ClientContext ctx;
      ctx.set_deadline(DeadlineIn(std::chrono::seconds(2)));
      StepCommitResponse resp;
      const grpc::Status s = stub->CommitStep(&ctx, req, &resp);
      if (s.ok()) break;
      if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
          s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
          s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
        spdlog::error("ps at {} refused the decision of step {}: {}", address, d.version,
                      s.error_message());
        break;
      }
      // Restored since: the step is void, and so is telling anyone of it.
      if (store_->stats().generation != d.generation) break;
      absl::SleepFor(backoff.Next());
    }
    sent = d.sequence;
  }
}

}  // namespace pscluster
