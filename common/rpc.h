// gRPC plumbing shared by every daemon: channels with our message limits
// and the process's transport security (common/security.h), conversions
// between absl::Status and grpc::Status (only RPC adapters use them), and a
// parallel-call helper. Free functions; thread-safe.
#ifndef PSCLUSTER_COMMON_RPC_H_
#define PSCLUSTER_COMMON_RPC_H_

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "common/security.h"

namespace pscluster {

struct RpcOptions {
  // Largest message a daemon sends or accepts; bigger ones are refused
  // with RESOURCE_EXHAUSTED by gRPC itself.
  int max_message_bytes = 512 << 20;
  // TLS and token; null: the process's (SetProcessSecurity).
  std::shared_ptr<const SecurityConfig> security;
};

// A channel with our limits, the security's credentials (TLS or
// plaintext) and, when there is a cluster token, an interceptor that sends
// it on every call. A TLS channel keeps trying to connect while no call is
// in flight (one background thread per process drives the handshakes), so
// calls without wait_for_ready succeed soon after a peer comes up.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const RpcOptions& options = {});

// Applies our limits to a server under construction.
void ConfigureServer(grpc::ServerBuilder& builder, const RpcOptions& options = {});

// Credentials for a server's listening port: TLS (mutual with a CA) or
// plaintext, from options.security or the process's.
std::shared_ptr<grpc::ServerCredentials> ListeningCredentials(const RpcOptions& options = {});

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& context);

// Whether a failed call says that no process listens at the address (its
// port closed: killed, or exited) rather than that it is slow or cut off.
bool Refused(const absl::Status& status);

// A deadline `timeout` from now, for ClientContext::set_deadline.
inline std::chrono::system_clock::time_point DeadlineIn(
    std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

// Asks the standard grpc.health.v1 service behind `channel` whether
// `service` serves: "" (the process is up) or kReadyService
// (common/task_server.h: the task is ready for its role). False when it
// answers anything but SERVING, or not within `timeout`.
bool IsServing(grpc::Channel& channel, std::chrono::milliseconds timeout,
               const std::string& service = "");

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_RPC_H_
