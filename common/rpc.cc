#include "common/rpc.h"

#include <mutex>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "proto/health.grpc.pb.h"

namespace pscluster {
namespace {

// Drives the connection attempts of TLS channels while no call is in
// flight. gRPC performs a channel's I/O only on threads that poll for it: a
// call under way, or a connectivity watch on a completion queue that some
// thread drains. After a failed attempt a channel stays in
// TRANSIENT_FAILURE, where calls without wait_for_ready fail at once
// without polling; a plaintext connect then still completes on gRPC's 5 s
// backup poll, but a TLS handshake needs several reads within one attempt's
// deadline (at most 1 s here) and never would: a worker that asked before
// the chief was up would wait forever. This one thread watches each
// CONNECTING or TRANSIENT_FAILURE channel for 100 ms at a time and polls
// meanwhile; a READY channel is left alone, so calls do their own I/O.
class ConnectionKeeper {
 public:
  static ConnectionKeeper& Get() {
    // Lives as long as the process: channels may be made until exit.
    static ConnectionKeeper* const keeper = new ConnectionKeeper();
    return *keeper;
  }

  void Add(const std::shared_ptr<grpc::Channel>& channel) {
    absl::MutexLock lock(&mu_);
    channels_.push_back(channel);
    std::call_once(started_, [this] {
      thread_ = std::thread([this] { Run(); });
      // At exit the thread must be gone before static destructors run: it
      // drops channels (the last reference to one may be its) and polls,
      // and gRPC's own state is torn down among those destructors (a
      // chief exiting with its peers gone died of a double free, 1 run in
      // about 25). atexit handlers run before the destructors of statics
      // made earlier, gRPC's among them.
      std::atexit([] { Get().Stop(); });
    });
  }

 private:
  ConnectionKeeper() = default;

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  void Run() {
    constexpr auto kWatch = std::chrono::milliseconds(100);
    while (!stop_) {
      // Holds the channels for one round only; dropped ones are forgotten.
      std::vector<std::shared_ptr<grpc::Channel>> connecting;
      {
        absl::MutexLock lock(&mu_);
        std::vector<std::weak_ptr<grpc::Channel>> alive;
        for (const std::weak_ptr<grpc::Channel>& w : channels_) {
          std::shared_ptr<grpc::Channel> c = w.lock();
          if (c == nullptr) continue;
          alive.push_back(w);
          const grpc_connectivity_state s = c->GetState(/*try_to_connect=*/false);
          if (s == GRPC_CHANNEL_CONNECTING || s == GRPC_CHANNEL_TRANSIENT_FAILURE) {
            connecting.push_back(std::move(c));
          }
        }
        channels_ = std::move(alive);
      }
      if (connecting.empty()) {
        absl::SleepFor(absl::Milliseconds(100));
        continue;
      }
      const auto deadline = std::chrono::system_clock::now() + kWatch;
      for (const auto& c : connecting) {
        c->NotifyOnStateChange(c->GetState(false), deadline, &cq_, nullptr);
      }
      // Draining the queue polls the watched channels' sockets.
      for (size_t i = 0; i < connecting.size(); ++i) {
        void* tag = nullptr;
        bool ok = false;
        cq_.Next(&tag, &ok);
      }
    }
  }

  grpc::CompletionQueue cq_;  // only the keeper's thread uses it
  std::once_flag started_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::vector<std::weak_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const RpcOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // Reconnect quickly when a peer comes back (defaults back off to 120 s).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // Despite its name, gRPC reads this as the least time a connection
  // attempt (TCP connect and handshake) gets before it is given up
  // (subchannel.cc's min_connect_timeout; 20 s by default). At 100 ms a
  // call made on a fresh channel to a live peer failed now and then on a
  // loaded host ("tcp handshaker shutdown": the connect had not completed
  // in 100 ms). 1 s still retries a black-holed peer (a cut link) every
  // second or so.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
  // Resolve the peer's name again at most 1 s after a failed connection,
  // not 30 s (gRPC's default): a Kubernetes pod made again (deleted, or its
  // node lost) comes back under the same DNS name at a new address.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1000);
  // Ping an idle or stuck connection every 2 s and drop it after 2 s
  // without an answer: after a network cut, calls go over a fresh
  // connection instead of waiting out TCP's retransmission back-off.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  std::shared_ptr<const SecurityConfig> security =
      options.security ? options.security : ProcessSecurity();
  AddSecurityChannelArgs(*security, &args);
  auto interceptors = MakeClientInterceptors(*security);
  std::shared_ptr<grpc::Channel> channel =
      interceptors.empty()
          ? grpc::CreateCustomChannel(address, MakeChannelCredentials(*security), args)
          : grpc::experimental::CreateCustomChannelWithInterceptors(
                address, MakeChannelCredentials(*security), args, std::move(interceptors));
  if (security->tls) ConnectionKeeper::Get().Add(channel);
  return channel;
}

std::shared_ptr<grpc::ServerCredentials> ListeningCredentials(const RpcOptions& options) {
  return MakeServerCredentials(options.security ? *options.security : *ProcessSecurity());
}

void ConfigureServer(grpc::ServerBuilder& builder, const RpcOptions& options) {
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  // A port another process listens on is refused ("port in use"), not
  // shared: gRPC sets SO_REUSEPORT by default, and then a second daemon
  // started on a ps's port (a stale one, a typo in TF_CONFIG) takes half
  // of the new connections without a word.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Accept our clients' keepalive pings (MakeChannel) instead of closing
  // the connection as abusive.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& context) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(context, ": ", status.error_message()));
}

bool Refused(const absl::Status& status) {
  if (!absl::IsUnavailable(status)) return false;
  const std::string m = absl::AsciiStrToLower(status.message());
  return absl::StrContains(m, "connection refused") || absl::StrContains(m, "connection reset") ||
         absl::StrContains(m, "socket closed");
}

bool IsServing(grpc::Channel& channel, std::chrono::milliseconds timeout,
               const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(timeout));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  return s.ok() &&
         resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace pscluster
