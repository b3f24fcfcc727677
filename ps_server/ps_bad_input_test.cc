// A parameter server refuses every malformed or hostile request with a
// clear status, and the refusal changes nothing: same values, same version.
// Real gRPC on loopback against a PsService in this process.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/task_server.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/ps_service.h"
#include "tests/local_cluster.h"
#include "update/parameter_store.h"

namespace pscluster {
namespace {

constexpr uint64_t kLayout = 1234;
constexpr int kFloats = 1000;

class PsBadInputTest : public ::testing::Test {
 protected:
  void Start(NonFinitePolicy policy = NONFINITE_REJECT, int max_message_bytes = 1 << 20) {
    metrics_ = *Metrics::Start("", "ps:0", MetricsRole::kPs);
    service_ = std::make_unique<PsService>(&store_, metrics_.get());
    const int port = testing::FreePort();
    RpcOptions rpc;
    rpc.max_message_bytes = max_message_bytes;
    server_ = *TaskServer::Start(port, service_->grpc_services(), nullptr, rpc);
    RpcOptions client;
    client.max_message_bytes = 64 << 20;  // lets the client send what the ps must refuse
    const std::shared_ptr<grpc::Channel> channel =
        MakeChannel(absl::StrCat("127.0.0.1:", port), client);
    stub_ = ParameterServer::NewStub(channel);
    control_ = PsControl::NewStub(channel);
    InitRequest init = Init(policy);
    std::vector<float> values(kFloats, 0.5f);
    init.set_values(values.data(), values.size() * sizeof(float));
    grpc::ClientContext ctx;
    InitResponse resp;
    ASSERT_TRUE(control_->Init(&ctx, init, &resp).ok());
    before_ = Pull();
  }
  void TearDown() override {
    if (server_) {
      store_.Cancel();
      server_->Stop(absl::ZeroDuration());
    }
  }

  static InitRequest Init(NonFinitePolicy policy = NONFINITE_REJECT) {
    InitRequest init;
    init.set_layout_fingerprint(kLayout);
    ShardSpec* a = init.add_shards();
    a->set_variable("dense/kernel");
    a->set_size(900);
    ShardSpec* b = init.add_shards();
    b->set_variable("dense/bias");
    b->set_offset(900);
    b->set_size(100);
    init.mutable_optimizer()->set_name("sgd");
    init.mutable_optimizer()->set_learning_rate(0.1f);
    init.set_mode(SYNC);
    init.set_num_workers(2);
    init.set_replicas_to_aggregate(1);
    init.set_nonfinite(policy);
    return init;
  }

  // A move's restore that keeps floats in place (RestoreRequest.kept): the
  // new layout's shards are the old bias (kept) then 50 new floats (sent).
  static RestoreRequest KeptRestore(uint64_t kept_layout, int64_t kept_version, int64_t from) {
    RestoreRequest r;
    InitRequest init = Init();
    init.set_layout_fingerprint(kLayout + 1);
    init.clear_shards();
    ShardSpec* bias = init.add_shards();
    bias->set_variable("dense/bias");
    bias->set_offset(900);
    bias->set_size(100);
    ShardSpec* kernel = init.add_shards();
    kernel->set_variable("dense/kernel");
    kernel->set_part(1);
    kernel->set_offset(450);
    kernel->set_size(50);
    *r.mutable_init() = init;
    r.set_new_placement(true);
    ShardState* s = r.mutable_state();
    s->set_layout_fingerprint(kLayout + 1);
    s->set_version(7);
    std::vector<float> sent(50, 3.0f);
    s->set_values(sent.data(), sent.size() * sizeof(float));
    *s->mutable_shards() = init.shards();
    KeptRange* k = r.add_kept();
    k->set_from(from);
    k->set_to(0);
    k->set_size(100);
    r.set_kept_layout(kept_layout);
    r.set_kept_version(kept_version);
    return r;
  }

  PushRequest GoodPush() const {
    PushRequest p;
    p.set_layout_fingerprint(kLayout);
    p.set_worker_index(0);
    p.set_num_examples(8);
    std::vector<float> g(kFloats, 1.0f);
    p.set_gradients(g.data(), g.size() * sizeof(float));
    return p;
  }

  grpc::Status Push(const PushRequest& p) {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    PushResponse resp;
    return stub_->Push(&ctx, p, &resp);
  }

  PullResponse Pull() {
    grpc::ClientContext ctx;
    PullRequest req;
    req.set_layout_fingerprint(kLayout);
    req.set_generation(-1);
    PullResponse resp;
    EXPECT_TRUE(stub_->Pull(&ctx, req, &resp).ok());
    return resp;
  }

  PsStatsResponse Stats() {
    grpc::ClientContext ctx;
    PsStatsResponse st;
    EXPECT_TRUE(stub_->GetStats(&ctx, PsStatsRequest(), &st).ok());
    return st;
  }

  // The refusal left the parameters and the version alone, and the
  // refused pushes so far are counted exactly, alike in GetStats and in
  // /metrics.
  void ExpectUnchanged() {
    const PullResponse now = Pull();
    EXPECT_EQ(now.version(), before_.version());
    EXPECT_EQ(now.values(), before_.values());
    const PsStatsResponse st = Stats();
    EXPECT_EQ(st.pushes_applied(), 0);
    EXPECT_EQ(st.pushes_rejected(), rejected_);
    EXPECT_EQ(metrics_->pushes_rejected().Value(), static_cast<double>(rejected_));
  }

  void ExpectRefused(const grpc::Status& s, grpc::StatusCode code, const std::string& text) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(text), std::string::npos) << s.error_message();
    ExpectUnchanged();
  }

  // A push refused as invalid: exactly `message`, and counted once.
  void ExpectPushRefused(const PushRequest& p, grpc::StatusCode code,
                         const std::string& message) {
    const grpc::Status s = Push(p);
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_EQ(s.error_message(), message);
    ++rejected_;
    ExpectUnchanged();
  }

  ParameterStore store_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<PsService> service_;
  std::unique_ptr<TaskServer> server_;
  std::unique_ptr<ParameterServer::Stub> stub_;
  std::unique_ptr<PsControl::Stub> control_;
  PullResponse before_;
  int64_t rejected_ = 0;  // pushes refused so far
};

TEST_F(PsBadInputTest, WrongShape) {
  Start();
  PushRequest p = GoodPush();
  std::vector<float> g(kFloats - 1, 1.0f);
  p.set_gradients(g.data(), g.size() * sizeof(float));
  ExpectPushRefused(p, grpc::StatusCode::INVALID_ARGUMENT,
                    "gradient has 999 floats; this ps holds 1000");
  p.mutable_gradients()->push_back('x');  // not a whole number of floats
  ExpectPushRefused(p, grpc::StatusCode::INVALID_ARGUMENT,
                    "gradients has 3997 bytes, not a whole number of float32s");
}

TEST_F(PsBadInputTest, NoExamples) {
  Start();
  PushRequest p = GoodPush();
  p.set_num_examples(0);
  ExpectPushRefused(
      p, grpc::StatusCode::INVALID_ARGUMENT,
      "num_examples must be >= 1 (a gradient of no example teaches nothing), got 0");
}

TEST_F(PsBadInputTest, WrongDtype) {
  Start();
  PushRequest p = GoodPush();
  p.set_dtype("float16");
  ExpectPushRefused(
      p, grpc::StatusCode::INVALID_ARGUMENT,
      "gradients: 'float16' is not a wire encoding: fp32, bf16, fp16, int8, topk or sign");
}

// Encoded gradients (wire/codec.h) that do not decode to this ps's
// shards (900 and 100 values): refused, naming the shard and the problem.
TEST_F(PsBadInputTest, MalformedEncodedGradients) {
  Start();
  PushRequest p = GoodPush();
  p.set_dtype("bf16");
  p.set_gradients(std::string(1800 + 150, '\0'));  // the second shard 25 values short
  ExpectPushRefused(p, grpc::StatusCode::INVALID_ARGUMENT,
                    "gradients encoded as bf16: tensor 1: malformed bf16 tensor: 150 bytes, "
                    "200 needed for 100 values");
  p.set_gradients(std::string(2000 + 2, '\0'));
  ExpectPushRefused(p, grpc::StatusCode::INVALID_ARGUMENT,
                    "gradients encoded as bf16: 2 bytes left over after the 2 tensors");
  // Top-k with an index beyond its shard.
  std::string topk;
  auto put = [&topk](uint32_t v) { topk.append(reinterpret_cast<const char*>(&v), 4); };
  put(1);
  put(950);
  put(0);
  p.set_dtype("topk");
  p.set_gradients(topk + std::string(4 + 800, '\0'));
  ExpectPushRefused(p, grpc::StatusCode::INVALID_ARGUMENT,
                    "gradients encoded as topk: tensor 0: malformed topk tensor: index 950 out "
                    "of order or range");
}

TEST_F(PsBadInputTest, UnknownVariable) {
  Start();
  RestoreRequest r;
  *r.mutable_init() = Init(NONFINITE_REJECT);
  ShardState* s = r.mutable_state();
  s->set_layout_fingerprint(kLayout);
  std::vector<float> v(kFloats, 9.0f);
  s->set_values(v.data(), v.size() * sizeof(float));
  *s->mutable_shards() = r.init().shards();
  s->mutable_shards(1)->set_variable("conv9/bias");
  grpc::ClientContext ctx;
  RestoreResponse resp;
  ExpectRefused(control_->Restore(&ctx, r, &resp), grpc::StatusCode::INVALID_ARGUMENT,
                "unknown variable conv9/bias");
}

TEST_F(PsBadInputTest, AMovesKeptFloatsMustBeOfTheStateHeld) {
  Start();
  for (const auto& [r, code, text] :
       std::vector<std::tuple<RestoreRequest, grpc::StatusCode, std::string>>{
           {KeptRestore(kLayout, 3, 900), grpc::StatusCode::FAILED_PRECONDITION,
            "the floats to keep are of version 3; this ps holds version 0"},
           {KeptRestore(kLayout + 5, 0, 900), grpc::StatusCode::FAILED_PRECONDITION,
            "the floats to keep: "},
           {KeptRestore(kLayout, 0, 950), grpc::StatusCode::INVALID_ARGUMENT,
            "values: kept range [950, +100) to 0 is out of order or past the 1000 floats held"}}) {
    grpc::ClientContext ctx;
    RestoreResponse resp;
    ExpectRefused(control_->Restore(&ctx, r, &resp), code, text);
  }
  // Of the state held: the bias kept, the 50 floats sent after it.
  RestoreRequest good = KeptRestore(kLayout, 0, 900);
  grpc::ClientContext ctx;
  RestoreResponse resp;
  ASSERT_TRUE(control_->Restore(&ctx, good, &resp).ok());
  grpc::ClientContext pull_ctx;
  PullRequest req;
  req.set_layout_fingerprint(kLayout + 1);
  req.set_generation(-1);
  PullResponse now;
  ASSERT_TRUE(stub_->Pull(&pull_ctx, req, &now).ok());
  std::vector<float> want(100, 0.5f);
  want.resize(150, 3.0f);
  ASSERT_EQ(now.values().size(), want.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(now.values().data(), want.data(), now.values().size()), 0);
  EXPECT_EQ(now.version(), 7);
}

TEST_F(PsBadInputTest, VersionFromTheFuture) {
  Start();
  PushRequest p = GoodPush();
  p.set_version(5);
  ExpectPushRefused(p, grpc::StatusCode::INVALID_ARGUMENT,
                    "gradient version 5 is from the future: this ps is at version 0");
}

// ps_service_fuzzer: a PushPull pulls the step after its version, and a
// resent push is answered from memory before its version is looked at, so
// version INT64_MAX overflowed there. Refused whole now.
TEST_F(PsBadInputTest, PushPullOfTheLastVersion) {
  Start();
  PushRequest p = GoodPush();
  p.set_version(std::numeric_limits<int64_t>::max());
  grpc::ClientContext ctx;
  PushPullResponse resp;
  const grpc::Status s = stub_->PushPull(&ctx, p, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message(), "version 9223372036854775807 is out of range");
  ++rejected_;
  ExpectUnchanged();
}

TEST_F(PsBadInputTest, NonFiniteGradientRejectedAndCounted) {
  Start(NONFINITE_REJECT);
  PushRequest p = GoodPush();
  std::vector<float> g(kFloats, 1.0f);
  g[17] = std::nanf("");
  p.set_gradients(g.data(), g.size() * sizeof(float));
  ExpectPushRefused(p, grpc::StatusCode::INVALID_ARGUMENT,
                    "gradient from worker 0 holds NaN or Inf; not applied");
  g[17] = INFINITY;
  p.set_gradients(g.data(), g.size() * sizeof(float));
  ExpectPushRefused(p, grpc::StatusCode::INVALID_ARGUMENT,
                    "gradient from worker 0 holds NaN or Inf; not applied");
  EXPECT_EQ(Stats().pushes_rejected(), 2);
}

TEST_F(PsBadInputTest, NonFiniteGradientSkipsTheStepUnderTheSkipPolicy) {
  Start(NONFINITE_SKIP_STEP);
  PushRequest p = GoodPush();
  std::vector<float> g(kFloats, 1.0f);
  g[3] = -INFINITY;
  p.set_gradients(g.data(), g.size() * sizeof(float));
  EXPECT_TRUE(Push(p).ok());
  const PullResponse now = Pull();
  EXPECT_EQ(now.values(), before_.values());  // the step happened but changed nothing
  EXPECT_EQ(now.version(), before_.version() + 1);
  EXPECT_EQ(Stats().steps_skipped_nonfinite(), 1);
  EXPECT_EQ(Stats().pushes_rejected(), 0);  // accepted, not refused
}

TEST_F(PsBadInputTest, OversizedMessageRefusedByTheConfiguredLimit) {
  Start(NONFINITE_REJECT, /*max_message_bytes=*/64 << 10);
  PushRequest p = GoodPush();
  std::vector<float> g(100000, 1.0f);  // 400 KB against a 64 KiB limit
  p.set_gradients(g.data(), g.size() * sizeof(float));
  // gRPC refuses it before the ps sees it: not among the refused pushes
  // the ps counts (the README says so).
  ExpectRefused(Push(p), grpc::StatusCode::RESOURCE_EXHAUSTED, "");
  EXPECT_EQ(Stats().pushes_rejected(), 0);
}

TEST_F(PsBadInputTest, PushFromATaskNotInTheCluster) {
  Start();
  PushRequest p = GoodPush();
  p.set_worker_index(7);
  ExpectPushRefused(p, grpc::StatusCode::INVALID_ARGUMENT,
                    "worker index 7 is out of range: 2 workers");
  p.set_worker_index(-1);
  ExpectPushRefused(p, grpc::StatusCode::INVALID_ARGUMENT,
                    "worker index -1 is out of range: 2 workers");
}

TEST_F(PsBadInputTest, OtherLayoutOrGeneration) {
  Start();
  PushRequest p = GoodPush();
  p.set_layout_fingerprint(kLayout + 1);
  ExpectPushRefused(p, grpc::StatusCode::FAILED_PRECONDITION,
                    "layout fingerprint 1235 does not match this ps's 1234 (model, number of "
                    "ps or shard size differ between tasks)");
  // Another generation is not the push's fault (a restore happened): not
  // counted as refused.
  p = GoodPush();
  p.set_generation(3);
  ExpectRefused(Push(p), grpc::StatusCode::ABORTED, "restored from a checkpoint");
}

TEST_F(PsBadInputTest, MembershipOfTheWrongSize) {
  Start();
  SetWorkersRequest r;
  r.set_layout_fingerprint(kLayout);
  r.add_active(true);
  grpc::ClientContext ctx;
  SetWorkersResponse resp;
  ExpectRefused(control_->SetWorkers(&ctx, r, &resp), grpc::StatusCode::INVALID_ARGUMENT,
                "1 entries");
}

}  // namespace
}  // namespace pscluster
