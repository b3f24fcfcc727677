// ChiefClient against a fake chief: how its calls wait and retry.
#include "wire/chief_client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

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

// A SlowChief on a free loopback port, and a client of it.
class ChiefClientTest : public ::testing::Test {
 protected:
  void Serve(absl::Duration delay, int64_t floats) {
    chief_ = std::make_unique<SlowChief>(delay, floats);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", ListeningCredentials(), &port);
    builder.RegisterService(chief_.get());
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr && port != 0);
    address_ = absl::StrCat("127.0.0.1:", port);
    absl::StatusOr<ClusterSpec> cluster = ClusterSpec::Create({{"chief", {{0, address_}}}}, "test");
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    absl::StatusOr<std::unique_ptr<ChiefClient>> client = ChiefClient::Create(*cluster);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();  // its calls end before chief_
  }

  std::unique_ptr<SlowChief> chief_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<ChiefClient> client_;
};

TEST_F(ChiefClientTest, AStateThatTakesLongerThanAnAttemptIsNotAskedForAgain) {
  // A large model's state to several workers over one slow link can take
  // longer than the 5 s an attempt of the other calls gets: cut off and
  // asked for again, its bytes would be sent again from the first one.
  ASSERT_NO_FATAL_FAILURE(Serve(absl::Seconds(6), 1 << 20));
  ReplicaRequest req;
  req.set_step(7);
  absl::StatusOr<ShardState> state = client_->GetReplica(req, absl::Seconds(30));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->version(), 7);
  EXPECT_EQ(state->values().size(), size_t{4} << 20);
  EXPECT_EQ(chief_->calls(), 1);
}

TEST_F(ChiefClientTest, AStateThatDoesNotComeInTimeFailsNamingTheChief) {
  ASSERT_NO_FATAL_FAILURE(Serve(absl::Seconds(3), 16));
  absl::StatusOr<ShardState> state = client_->GetReplica(ReplicaRequest(), absl::Seconds(1));
  ASSERT_FALSE(state.ok());
  EXPECT_NE(state.status().message().find(address_), std::string::npos) << state.status();
}

}  // namespace
}  // namespace pscluster
