#include "ps_server/step_broadcaster.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/retry.h"
#include "proto/ps.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "wire/data_plane.h"

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
  // The other ps's data plane; its port is asked over gRPC before a dial.
  auto port_of = DataPortFromStats(stub.get(), address);
  DataChannel data(address, port_of, rpc.security ? rpc.security : ProcessSecurity(), &stop_);
  absl::Time grpc_until = absl::InfinitePast();  // after the data plane failed
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
      StepCommitResponse resp;
      grpc::Status s;
      if (absl::Now() >= grpc_until) {
        s = data.Unary(DataKind::kCommit, &req, &resp, absl::Now() + absl::Seconds(2));
        if (!s.ok()) {
          // gRPC's answer is the one that counts (a refusal, a ps down).
          spdlog::warn("step decisions go to the ps at {} over gRPC for 10 s: its data plane "
                       "answered {}",
                       address, s.error_message());
          grpc_until = absl::Now() + absl::Seconds(10);
        }
      }
      if (absl::Now() < grpc_until) {
        grpc::ClientContext ctx;
        ctx.set_deadline(DeadlineIn(std::chrono::seconds(2)));
        s = stub->CommitStep(&ctx, req, &resp);
      }
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
