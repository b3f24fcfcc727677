// ChiefClient against a fake chief: how its calls wait and retry.
#include "worker/chief_client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cluster_spec.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "proto/coordination.grpc.pb.h"

namespace pscluster {
namespace {

// A chief whose GetReplica answers after `delay` with a state of `floats`
// values, counting the calls it got.
class SlowChief final : public Coordinator::Service {
 public:
  SlowChief(absl::Duration delay, int64_t floats) : delay_(delay), floats_(floats) {}

  grpc::Status GetReplica(grpc::ServerContext* ctx, const ReplicaRequest* req,
                          ShardState* state) override {
    ++calls_;
    const absl::Time answer_at = absl::Now() + delay_;
    while (absl::Now() < answer_at) {
      if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      absl::SleepFor(absl::Milliseconds(20));
    }
    state->set_version(req->step());
    state->set_values(std::string(floats_ * 4, '\1'));
    return grpc::Status::OK;
  }

  int calls() const { return calls_; }

 private:
  const absl::Duration delay_;
  const int64_t floats_;
  std::atomic<int> calls_{0};
};

TEST(ChiefClientTest, AStateThatTakesLongerThanAnAttemptIsNotAskedForAgain) {
  // A large model's state to several workers over one slow link can take
  // longer than the 5 s an attempt of the other calls gets: cut off and
  // asked for again, its bytes would be sent again from the first one.
  SlowChief chief(absl::Seconds(6), 1 << 20);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", ListeningCredentials(), &port);
  builder.RegisterService(&chief);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_TRUE(server != nullptr && port != 0);
  absl::StatusOr<ClusterSpec> cluster =
      ClusterSpec::Create({{"chief", {{0, absl::StrCat("127.0.0.1:", port)}}}}, "test");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<std::unique_ptr<ChiefClient>> client = ChiefClient::Create(*cluster);
  ASSERT_TRUE(client.ok()) << client.status();
  ReplicaRequest req;
  req.set_step(7);
  absl::StatusOr<ShardState> state = (*client)->GetReplica(req, absl::Seconds(30));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->version(), 7);
  EXPECT_EQ(state->values().size(), size_t{4} << 20);
  EXPECT_EQ(chief.calls(), 1);
  server->Shutdown();
}

TEST(ChiefClientTest, AStateThatDoesNotComeInTimeFailsNamingTheChief) {
  SlowChief chief(absl::Seconds(3), 16);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", ListeningCredentials(), &port);
  builder.RegisterService(&chief);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_TRUE(server != nullptr && port != 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<ClusterSpec> cluster = ClusterSpec::Create({{"chief", {{0, address}}}}, "test");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<std::unique_ptr<ChiefClient>> client = ChiefClient::Create(*cluster);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<ShardState> state = (*client)->GetReplica(ReplicaRequest(), absl::Seconds(1));
  ASSERT_FALSE(state.ok());
  EXPECT_NE(state.status().message().find(address), std::string::npos) << state.status();
  server->Shutdown();
}

}  // namespace
}  // namespace pscluster
