#include "ps_server/step_broadcaster.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/retry.h"
#include "proto/ps.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "update/store_state.h"
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
    : store_(store), followers_(followers) {
  for (int k = 0; k < static_cast<int>(followers.size()); ++k) {
    senders_.emplace_back([this, k, rpc] { SendAll(k, rpc); });
  }
}

absl::Status StepBroadcaster::SetFollowers(const std::vector<std::string>& followers) {
  absl::MutexLock lock(&mu_);
  if (followers.size() > followers_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(followers.size(), " followers given; at most ",
                                                   followers_.size(), " follow this ps"));
  }
  for (size_t k = 0; k < followers_.size(); ++k) {
    const std::string now = k < followers.size() ? followers[k] : std::string();
    if (now == followers_[k]) continue;
    if (now.empty()) {
      spdlog::info("no step decisions for follower {} (not in use)", k + 1);
    } else {
      spdlog::warn("step decisions for follower {} go to {} (were {})", k + 1, now,
                   followers_[k].empty() ? std::string("none") : followers_[k]);
    }
    followers_[k] = now;
  }
  return absl::OkStatus();
}

std::string StepBroadcaster::AddressOf(int follower) const {
  absl::MutexLock lock(&mu_);
  return followers_[follower];
}

StepBroadcaster::~StepBroadcaster() {
  stop_ = true;
  for (std::thread& t : senders_) t.join();
}

void StepBroadcaster::SendAll(int follower, const RpcOptions& rpc) {
  std::string address;
  std::unique_ptr<PsControl::Stub> stub;
  std::unique_ptr<ParameterServer::Stub> stats_stub;  // asks for the data plane's port
  std::unique_ptr<DataChannel> data;
  // (Re)connects when the follower's address is new.
  auto connect = [&] {
    std::string now = AddressOf(follower);
    if ((stub != nullptr && now == address) || now.empty()) return;
    address = std::move(now);
    data.reset();
    const std::shared_ptr<grpc::Channel> channel = MakeChannel(address, rpc);
    stub = PsControl::NewStub(channel);
    stats_stub = ParameterServer::NewStub(channel);
    // The other ps's data plane; its port is asked over gRPC before a dial.
    data = std::make_unique<DataChannel>(address, DataPortFromStats(stats_stub.get(), address),
                                         rpc.security ? rpc.security : ProcessSecurity(),
                                         &stop_);
  };
  connect();
  absl::Time grpc_until = absl::InfinitePast();  // after the data plane failed
  int64_t sent = 0;  // sequence of the last decision taken or given up
  StepDecision d;
  while (!stop_) {
    if (!store_->NextDecision(sent, absl::Now() + absl::Milliseconds(200), &d)) continue;
    if (AddressOf(follower).empty()) {
      sent = d.sequence;  // a ps not in use (the chief's --min_ps) takes no decisions
      continue;
    }
    StepCommitRequest req;
    DecisionToRequest(d, &req);
    Backoff backoff(ResendPolicy());
    while (!stop_) {
      if (AddressOf(follower).empty()) break;  // out of use meanwhile
      connect();
      StepCommitResponse resp;
      grpc::Status s;
      if (absl::Now() >= grpc_until) {
        s = data->Unary(DataKind::kCommit, &req, &resp, absl::Now() + absl::Seconds(2));
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
      if (s.ok()) {
        // A clipped step without scales: the follower's squared norms (none
        // for a step it applied long ago, whose decision was sent again).
        if (d.clipped && d.clip_scales.empty() && resp.clip_norms_size() > 0) {
          absl::Status added = store_->AddClipNorms(
              d.layout_fingerprint, follower + 1, d.generation, d.version,
              std::vector<double>(resp.clip_norms().begin(), resp.clip_norms().end()));
          if (!added.ok()) {
            spdlog::error("ps at {} answered the step {} with norms that do not fit: {}", address,
                          d.version, std::string(added.message()));
          }
        }
        break;
      }
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
