// gRPC plumbing shared by every daemon: channels with our message limits,
// conversions between absl::Status and grpc::Status (only RPC adapters use
// them), and a parallel-call helper. Free functions; thread-safe.
#ifndef PSCLUSTER_COMMON_RPC_H_
#define PSCLUSTER_COMMON_RPC_H_

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace pscluster {

struct RpcOptions {
  // Largest message a daemon sends or accepts; bigger ones are refused
  // with RESOURCE_EXHAUSTED by gRPC itself.
  int max_message_bytes = 512 << 20;
};

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const RpcOptions& options = {});

// Applies our limits to a server under construction.
void ConfigureServer(grpc::ServerBuilder& builder, const RpcOptions& options = {});

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& context);

// A deadline `timeout` from now, for ClientContext::set_deadline.
inline std::chrono::system_clock::time_point DeadlineIn(
    std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

// Asks the standard grpc.health.v1 service at `address` whether it serves.
bool IsServing(grpc::Channel& channel, std::chrono::milliseconds timeout);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_RPC_H_
