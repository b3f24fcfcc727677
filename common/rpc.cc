#include "common/rpc.h"

#include "absl/strings/str_cat.h"
#include "proto/health.grpc.pb.h"

namespace pscluster {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const RpcOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // Reconnect quickly when a peer comes back (defaults back off to 120 s).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   args);
}

void ConfigureServer(grpc::ServerBuilder& builder, const RpcOptions& options) {
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
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

bool IsServing(grpc::Channel& channel, std::chrono::milliseconds timeout) {
  auto stub = grpc::health::v1::Health::NewStub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(timeout));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  return s.ok() &&
         resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace pscluster
