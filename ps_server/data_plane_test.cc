// The tcp data plane (wire/data_plane.h, ps_server/data_plane_server.h)
// against a PsService in this process: its PushPull answers what the gRPC
// method answers, exactly once; the token is checked; a hostile or broken
// peer loses its connection and nothing else; deadlines and a stopping
// server end calls instead of hanging them; payloads move from and into
// the caller's memory; ps 0's step decisions travel over it
// (ps_server/step_broadcaster.h), or over gRPC when it fails.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/task_server.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/data_plane_server.h"
#include "ps_server/ps_service.h"
#include "ps_server/step_broadcaster.h"
#include "tests/local_cluster.h"
#include "update/parameter_store.h"
#include "wire/data_plane.h"

namespace pscluster {
namespace {

constexpr uint64_t kLayout = 77;
constexpr int kFloats = 300000;  // 1.2 MB a call: many socket reads

std::shared_ptr<const SecurityConfig> WithToken(const std::string& token) {
  auto c = std::make_shared<SecurityConfig>();
  c->token = token;
  return c;
}

class DataPlaneTest : public ::testing::Test {
 protected:
  // A ps (gRPC and data plane) that wants `token`; sgd at rate 0.5 from
  // weights 1.0, `workers` workers, sync or async.
  // `role`: kFollow makes it a ps that applies the steps another decides.
  void Start(UpdateMode mode, int workers = 1, const std::string& token = "sesame",
             StepRole role = StepRole::kDecide, std::vector<int64_t> shards = {kFloats}) {
    security_ = WithToken(token);
    metrics_ = *Metrics::Start("", "ps:0", MetricsRole::kPs);
    PsServiceOptions options;
    options.step_role = role;
    service_ = std::make_unique<PsService>(&store_, metrics_.get(), options);
    const int port = testing::FreePort();
    RpcOptions rpc;
    rpc.security = security_;
    server_ = *TaskServer::Start(port, service_->grpc_services(), nullptr, rpc);
    address_ = absl::StrCat("127.0.0.1:", port);
    absl::StatusOr<std::unique_ptr<DataPlaneServer>> data =
        DataPlaneServer::Start(0, service_.get(), security_, 4 << 20);
    ASSERT_TRUE(data.ok()) << data.status();
    data_ = *std::move(data);
    service_->shard().set_data_port(data_->port());
    const std::shared_ptr<grpc::Channel> channel = MakeChannel(address_, rpc);
    stub_ = ParameterServer::NewStub(channel);
    control_ = PsControl::NewStub(channel);
    InitRequest init;
    init.set_layout_fingerprint(kLayout);
    for (size_t k = 0; k < shards.size(); ++k) {
      ShardSpec* sh = init.add_shards();
      sh->set_variable(absl::StrCat("dense", k, "/kernel"));
      sh->set_size(shards[k]);
    }
    const std::vector<float> ones(kFloats, 1.0f);
    init.set_values(ones.data(), ones.size() * sizeof(float));
    init.mutable_optimizer()->set_name("sgd");
    init.mutable_optimizer()->set_learning_rate(0.5f);
    init.set_mode(mode);
    init.set_num_workers(workers);
    init.set_replicas_to_aggregate(workers);
    grpc::ClientContext ctx;
    InitResponse resp;
    ASSERT_TRUE(control_->Init(&ctx, init, &resp).ok());
  }

  void TearDown() override {
    store_.Cancel();
    data_.reset();
    if (server_) server_->Stop(absl::ZeroDuration());
  }

  // A channel to the ps that asks GetStats for the port, as PsClient does.
  std::unique_ptr<DataChannel> Channel(const std::string& token,
                                       const std::atomic<bool>* stop = nullptr) {
    RpcOptions rpc;
    rpc.security = WithToken(token);
    std::shared_ptr<ParameterServer::Stub> stub =
        ParameterServer::NewStub(MakeChannel(address_, rpc));
    auto port_of = [stub](absl::Time deadline) -> absl::StatusOr<int> {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(deadline));
      PsStatsResponse st;
      grpc::Status s = stub->GetStats(&ctx, PsStatsRequest(), &st);
      if (!s.ok()) return FromGrpcStatus(s, "GetStats");
      return st.data_port();
    };
    return std::make_unique<DataChannel>(address_, port_of, rpc.security, stop);
  }

  static PushRequest Push(int worker, uint64_t request_id, int64_t version, float grad) {
    PushRequest p;
    p.set_layout_fingerprint(kLayout);
    p.set_worker_index(worker);
    p.set_request_id(request_id);
    p.set_version(version);
    p.set_num_examples(1);
    const std::vector<float> g(kFloats, grad);
    p.set_gradients(g.data(), g.size() * sizeof(float));
    return p;
  }

  static grpc::Status Call(DataChannel& channel, PushRequest& req, PushPullResponse* resp,
                           absl::Duration timeout = absl::Seconds(30)) {
    std::promise<grpc::Status> done;
    channel.StartPushPull(&req, resp, absl::Now() + timeout,
                          [&done](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }

  PsStatsResponse Stats() {
    grpc::ClientContext ctx;
    PsStatsResponse st;
    EXPECT_TRUE(stub_->GetStats(&ctx, PsStatsRequest(), &st).ok());
    return st;
  }

  static std::vector<float> Values(const PushPullResponse& r) {
    std::vector<float> v(r.pull().values().size() / sizeof(float));
    std::memcpy(v.data(), r.pull().values().data(), v.size() * sizeof(float));
    return v;
  }

  ParameterStore store_;
  std::shared_ptr<const SecurityConfig> security_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<PsService> service_;
  std::unique_ptr<TaskServer> server_;
  std::unique_ptr<DataPlaneServer> data_;
  std::unique_ptr<ParameterServer::Stub> stub_;
  std::unique_ptr<PsControl::Stub> control_;
  std::string address_;
};

TEST_F(DataPlaneTest, PushPullAnswersAsGrpcAndAppliesOnce) {
  Start(ASYNC);
  std::unique_ptr<DataChannel> channel = Channel("sesame");
  PushRequest req = Push(0, 1, 0, 0.25f);
  const std::string sent = req.gradients();
  PushPullResponse resp;
  ASSERT_TRUE(Call(*channel, req, &resp).ok());
  EXPECT_EQ(req.gradients(), sent) << "the request's bytes must be left as they were";
  EXPECT_TRUE(resp.push().applied());
  EXPECT_EQ(resp.pull().version(), 1);
  std::vector<float> v = Values(resp);
  ASSERT_EQ(v.size(), static_cast<size_t>(kFloats));
  EXPECT_EQ(v.front(), 1.0f - 0.5f * 0.25f);
  EXPECT_EQ(v.back(), 1.0f - 0.5f * 0.25f);

  // The same request again (its reply lost): the first answer, not a
  // second update, over the data plane as over gRPC.
  PushPullResponse again;
  ASSERT_TRUE(Call(*channel, req, &again).ok());
  EXPECT_EQ(again.pull().version(), 1);
  EXPECT_EQ(again.pull().values(), resp.pull().values());
  PushRequest via_grpc = req;
  PushPullResponse grpc_resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->PushPull(&ctx, via_grpc, &grpc_resp).ok());
  EXPECT_EQ(grpc_resp.pull().values(), resp.pull().values());
  const PsStatsResponse st = Stats();
  EXPECT_EQ(st.pushes_applied(), 1);
  EXPECT_EQ(st.pushes_duplicate(), 2);
  EXPECT_EQ(st.data_port(), data_->port());

  // A next push on the same connection.
  PushRequest next = Push(0, 2, 1, 1.0f);
  ASSERT_TRUE(Call(*channel, next, &resp).ok());
  EXPECT_EQ(resp.pull().version(), 2);
  EXPECT_EQ(Values(resp)[7], 1.0f - 0.5f * 0.25f - 0.5f);
}

// A sink sees the answer's meta first (have = 0, the push's fate known),
// then its payload in rising pieces, each already in place, the last with
// all of it.
TEST_F(DataPlaneTest, AnAnswersPayloadIsReportedAsItArrives) {
  Start(ASYNC);
  std::unique_ptr<DataChannel> channel = Channel("sesame");
  PushRequest req = Push(0, 1, 0, 0.25f);
  PushPullResponse resp;
  std::vector<size_t> reports;
  bool applied_at_start = false, pieces_in_place = true;
  PayloadSink sink;
  sink.arrived = [&](size_t have) {
    if (have == 0) applied_at_start = resp.push().applied();
    const std::string& v = resp.pull().values();
    const float expect = 1.0f - 0.5f * 0.25f;
    for (size_t at = reports.empty() ? 0 : reports.back(); at + 4 <= have; at += 4) {
      float x;
      std::memcpy(&x, v.data() + at, 4);
      pieces_in_place = pieces_in_place && x == expect;
    }
    reports.push_back(have);
    return absl::OkStatus();
  };
  std::promise<grpc::Status> done;
  channel->StartPushPull(&req, &resp, absl::Now() + absl::Seconds(30),
                         [&done](grpc::Status s) { done.set_value(std::move(s)); }, {},
                         std::move(sink));
  ASSERT_TRUE(done.get_future().get().ok());
  EXPECT_TRUE(applied_at_start);
  EXPECT_TRUE(pieces_in_place);
  ASSERT_GT(reports.size(), 3u) << "1.2 MB should come in several pieces";
  EXPECT_EQ(reports.front(), 0u);
  EXPECT_EQ(reports.back(), static_cast<size_t>(kFloats) * sizeof(float));
  for (size_t k = 1; k < reports.size(); ++k) EXPECT_GT(reports[k], reports[k - 1]);

  // A sink's error fails the call (and the next call dials again).
  PushRequest next = Push(0, 2, 1, 1.0f);
  PayloadSink refuse;
  refuse.arrived = [](size_t have) {
    return have > 0 ? absl::InternalError("bad shard") : absl::OkStatus();
  };
  std::promise<grpc::Status> failed;
  channel->StartPushPull(&next, &resp, absl::Now() + absl::Seconds(30),
                         [&failed](grpc::Status s) { failed.set_value(std::move(s)); }, {},
                         std::move(refuse));
  const grpc::Status f = failed.get_future().get();
  EXPECT_EQ(f.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(f.error_message(), "bad shard");
  ASSERT_TRUE(Call(*channel, next, &resp).ok());  // its answer again, on a new connection
  EXPECT_EQ(resp.pull().version(), 2);
}

// The ps checks fp32 gradients for NaN and Inf piece by piece as they
// arrive (the store then does not scan them again): a bad value in any
// piece, the last value included, still has the push refused, with
// nothing applied.
TEST_F(DataPlaneTest, GradientsCheckedAsTheyArriveRefuseABadValueAnywhere) {
  Start(ASYNC);
  std::unique_ptr<DataChannel> channel = Channel("sesame");
  struct Bad {
    int64_t at;
    float value;
  };
  const std::vector<Bad> bad = {{0, std::numeric_limits<float>::quiet_NaN()},
                                {kFloats / 2 + 3, std::numeric_limits<float>::infinity()},
                                {kFloats - 1, -std::numeric_limits<float>::infinity()}};
  uint64_t id = 0;
  for (const Bad& b : bad) {
    PushRequest req = Push(0, ++id, 0, 0.25f);
    std::memcpy(req.mutable_gradients()->data() + b.at * sizeof(float), &b.value,
                sizeof(float));
    PushPullResponse resp;
    const grpc::Status s = Call(*channel, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT) << "bad value at " << b.at;
    EXPECT_NE(s.error_message().find("NaN or Inf"), std::string::npos) << s.error_message();
  }
  EXPECT_EQ(Stats().pushes_applied(), 0);
  EXPECT_EQ(Stats().pushes_rejected(), 3);
  PushRequest good = Push(0, ++id, 0, 0.25f);
  PushPullResponse resp;
  ASSERT_TRUE(Call(*channel, good, &resp).ok());
  EXPECT_EQ(resp.pull().version(), 1);
  EXPECT_EQ(Values(resp)[kFloats - 1], 1.0f - 0.5f * 0.25f);
}

// The ps sends fp32 answers from the store's own buffer, which an update
// never writes while an answer is being sent from it (it copies first).
// Three workers push at once: every update is the same everywhere, so a
// buffer written while it was sent would show as an answer whose values
// differ, or do not match its version.
TEST_F(DataPlaneTest, AnswersSentFromTheStoreAreNeverTornByConcurrentUpdates) {
  constexpr int kWorkers = 3;
  Start(ASYNC, kWorkers);
  constexpr int kPushes = 100;
  // 1 - 0.5 x g x version is exact in fp32 for these steps.
  constexpr float kGrad = 1.0f / 1024;
  std::vector<std::future<std::string>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.push_back(std::async(std::launch::async, [this, w]() -> std::string {
      std::unique_ptr<DataChannel> channel = Channel("sesame");
      PushPullResponse resp;
      for (int k = 0; k < kPushes; ++k) {
        PushRequest req = Push(w, static_cast<uint64_t>(k + 1), 0, kGrad);
        const grpc::Status s = Call(*channel, req, &resp);
        if (!s.ok()) return "push failed: " + s.error_message();
        const std::vector<float> v = Values(resp);
        const float expect = 1.0f - 0.5f * kGrad * static_cast<float>(resp.pull().version());
        for (size_t i = 0; i < v.size(); ++i) {
          if (v[i] != expect) {
            return absl::StrCat("worker ", w, " push ", k, ": value ", i, " is ", v[i],
                                ", not ", expect, " (version ", resp.pull().version(), ")");
          }
        }
      }
      return "";
    }));
  }
  for (auto& w : workers) EXPECT_EQ(w.get(), "");
  EXPECT_EQ(Stats().pushes_applied(), kWorkers * kPushes);
}

TEST_F(DataPlaneTest, MissingOrWrongTokenIsRefusedAndNothingApplied) {
  Start(ASYNC);
  for (const std::string token : {"", "sesamE", "sesame-and-more"}) {
    // GetStats needs the right token too: ask it with the right one, dial
    // the data plane with the wrong one.
    RpcOptions rpc;
    rpc.security = security_;
    std::shared_ptr<ParameterServer::Stub> stub =
        ParameterServer::NewStub(MakeChannel(address_, rpc));
    const int port = data_->port();
    DataChannel channel(
        address_, [port](absl::Time) -> absl::StatusOr<int> { return port; }, WithToken(token));
    PushRequest req = Push(0, 1, 0, 0.25f);
    PushPullResponse resp;
    const grpc::Status s = Call(channel, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::UNAUTHENTICATED) << "token '" << token << "': "
                                                    << s.error_message();
    EXPECT_EQ(s.error_message().find("sesame"), std::string::npos) << s.error_message();
  }
  EXPECT_EQ(Stats().pushes_applied(), 0);
  EXPECT_EQ(Stats().version(), 0);
}

// Raw bytes at the port: not a frame, a frame too large, a first frame that
// is not a hello. Each loses its connection; the ps serves on.
TEST_F(DataPlaneTest, HostilePeersLoseTheirConnectionOnly) {
  Start(ASYNC);
  auto raw = [&](const std::string& bytes) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(data_->port()));
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    // Whatever the ps answers, it then hangs up: read to the end.
    char buf[4096];
    std::string answer;
    ssize_t r;
    while ((r = recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, r);
    close(fd);
    return answer;
  };
  EXPECT_EQ(raw(std::string(32, 'x')), "");  // bad magic: dropped unanswered
  FrameHeader huge;
  huge.kind = static_cast<uint32_t>(DataKind::kHello);
  huge.meta_size = kMaxMetaBytes + 1;
  EXPECT_EQ(raw(std::string(reinterpret_cast<char*>(&huge), sizeof(huge))), "");
  FrameHeader not_hello;
  not_hello.kind = static_cast<uint32_t>(DataKind::kPushPull);
  const std::string answer =
      raw(std::string(reinterpret_cast<char*>(&not_hello), sizeof(not_hello)));
  ASSERT_GE(answer.size(), sizeof(FrameHeader));
  FrameHeader h;
  std::memcpy(&h, answer.data(), sizeof(h));
  EXPECT_EQ(h.code, static_cast<uint32_t>(grpc::INVALID_ARGUMENT));
  EXPECT_NE(answer.find("must start with a hello"), std::string::npos);

  // A payload above the ps's limit (4 MiB here) after a good hello: the
  // connection is dropped, the channel says so, and redials for the next.
  std::unique_ptr<DataChannel> channel = Channel("sesame");
  PushRequest big = Push(0, 1, 0, 0.25f);
  big.mutable_gradients()->resize(5 << 20);
  PushPullResponse resp;
  const grpc::Status s = Call(*channel, big, &resp);
  EXPECT_EQ(s.error_code(), grpc::UNAVAILABLE) << s.error_message();
  PushRequest good = Push(0, 2, 0, 0.25f);
  const grpc::Status ok = Call(*channel, good, &resp);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(Stats().pushes_applied(), 1);
}

// Sync, two workers, only one pushes: its call waits for a step that never
// comes. Its deadline ends it; then the ps stopping ends a second one.
TEST_F(DataPlaneTest, DeadlineAndStopEndAWaitingCall) {
  Start(SYNC, 2);
  std::unique_ptr<DataChannel> channel = Channel("sesame");
  PushRequest req = Push(0, 1, 0, 0.25f);
  PushPullResponse resp;
  const grpc::Status late = Call(*channel, req, &resp, absl::Milliseconds(300));
  EXPECT_EQ(late.error_code(), grpc::DEADLINE_EXCEEDED) << late.error_message();

  std::future<grpc::Status> waiting = std::async(std::launch::async, [&] {
    PushPullResponse r;
    return Call(*channel, req, &r, absl::Minutes(5));
  });
  // Stops once the call is in: the resend is then a known duplicate
  // waiting for its step.
  while (Stats().pushes_duplicate() < 1) absl::SleepFor(absl::Milliseconds(20));
  store_.Cancel();
  data_.reset();
  const grpc::Status ended = waiting.get();
  EXPECT_FALSE(ended.ok());
  EXPECT_NE(ended.error_code(), grpc::DEADLINE_EXCEEDED) << ended.error_message();
}

// A call made on the calling thread sends its gradient from runs of the
// caller's memory and reads the answer into runs of it, nothing in the
// messages; an answer of another size than the runs goes into the message.
TEST_F(DataPlaneTest, RunsAreSentFromAndReadIntoTheCallersMemory) {
  Start(ASYNC);
  std::unique_ptr<DataChannel> channel = Channel("sesame");
  // Two runs of a larger buffer, with a gap that is not sent (NaN would
  // be refused) and not written.
  constexpr size_t kSplit = 100000, kGap = 16;
  std::vector<float> grads(kFloats + kGap, 0.25f);
  std::fill(grads.begin() + kSplit, grads.begin() + kSplit + kGap, NAN);
  std::vector<float> params(kFloats + kGap, -7.0f);
  auto bytes = [](const float* p, size_t n) {
    return absl::string_view(reinterpret_cast<const char*>(p), n * sizeof(float));
  };
  auto into = [](float* p, size_t n) {
    return absl::Span<char>(reinterpret_cast<char*>(p), n * sizeof(float));
  };
  PushRequest req = Push(0, 1, 0, 0.0f);
  req.clear_gradients();
  bool scattered = false;
  PayloadRuns runs;
  runs.from = {bytes(grads.data(), kSplit), bytes(grads.data() + kSplit + kGap, kFloats - kSplit)};
  runs.to = {into(params.data(), kSplit), into(params.data() + kSplit + kGap, kFloats - kSplit)};
  runs.scattered = &scattered;
  PushPullResponse resp;
  const grpc::Status s =
      channel->PushPull(&req, &resp, absl::Now() + absl::Seconds(30), {}, {}, runs);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(scattered);
  EXPECT_TRUE(resp.push().applied());
  EXPECT_EQ(resp.pull().version(), 1);
  EXPECT_TRUE(resp.pull().values().empty());
  const float updated = 1.0f - 0.5f * 0.25f;
  for (size_t i : {size_t{0}, kSplit - 1, kSplit + kGap, params.size() - 1}) {
    EXPECT_EQ(params[i], updated) << i;
  }
  EXPECT_EQ(params[kSplit], -7.0f);
  EXPECT_EQ(params[kSplit + kGap - 1], -7.0f);

  // Runs that do not hold the answer: it comes in the message.
  runs.to.pop_back();
  PushRequest next = Push(0, 2, 1, 0.0f);
  next.clear_gradients();
  ASSERT_TRUE(
      channel->PushPull(&next, &resp, absl::Now() + absl::Seconds(30), {}, {}, runs).ok());
  EXPECT_FALSE(scattered);
  ASSERT_EQ(resp.pull().values().size(), static_cast<size_t>(kFloats) * sizeof(float));
  EXPECT_EQ(Values(resp)[kFloats - 1], updated - 0.5f * 0.25f);
  EXPECT_EQ(Stats().pushes_applied(), 2);
}

// fp32 gradients streamed last shard first (during backprop) are read into
// their places as they arrive, checked as they arrive: the update is the
// one of the same gradient in order, and a NaN anywhere is refused.
TEST_F(DataPlaneTest, AGradientSentLastShardFirstIsPlacedAsItArrives) {
  constexpr int64_t kFirst = kFloats / 3;
  Start(ASYNC, 1, "sesame", StepRole::kDecide, {kFirst, kFloats - kFirst});
  std::unique_ptr<DataChannel> channel = Channel("sesame");
  std::vector<float> sent(kFloats);  // shard 1 (0.5 each), then shard 0 (0.25 each)
  std::fill(sent.begin(), sent.begin() + (kFloats - kFirst), 0.5f);
  std::fill(sent.begin() + (kFloats - kFirst), sent.end(), 0.25f);
  PushRequest req = Push(0, 1, 0, 0.0f);
  req.set_shards_reversed(true);
  sent.back() = NAN;
  req.set_gradients(sent.data(), sent.size() * sizeof(float));
  PushPullResponse resp;
  EXPECT_EQ(Call(*channel, req, &resp).error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(Stats().pushes_rejected(), 1);
  sent.back() = 0.25f;
  req.set_gradients(sent.data(), sent.size() * sizeof(float));
  req.set_request_id(2);
  ASSERT_TRUE(Call(*channel, req, &resp).ok());
  const std::vector<float> v = Values(resp);
  ASSERT_EQ(v.size(), static_cast<size_t>(kFloats));
  EXPECT_EQ(v[0], 1.0f - 0.5f * 0.25f);
  EXPECT_EQ(v[kFirst - 1], 1.0f - 0.5f * 0.25f);
  EXPECT_EQ(v[kFirst], 1.0f - 0.5f * 0.5f);
  EXPECT_EQ(v[kFloats - 1], 1.0f - 0.5f * 0.5f);
}

// ps 0's step decisions reach another ps over its data plane: a follower's
// waiting PushPull is answered once the decision is taken there; a
// malformed decision is refused with the store's reason, and a wrong token
// before any.
TEST_F(DataPlaneTest, AStepDecisionTravelsOverTheDataPlane) {
  Start(SYNC, 1, "sesame", StepRole::kFollow);
  std::unique_ptr<DataChannel> worker = Channel("sesame");
  PushRequest req = Push(0, 1, 0, 0.25f);
  PushPullResponse resp;
  std::promise<grpc::Status> done;
  worker->StartPushPull(&req, &resp, absl::Now() + absl::Seconds(30),
                        [&done](grpc::Status s) { done.set_value(std::move(s)); });
  std::future<grpc::Status> answered = done.get_future();
  EXPECT_EQ(answered.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "a follower answers only once the step is decided";

  std::unique_ptr<DataChannel> leader = Channel("sesame");
  StepCommitRequest commit;
  commit.set_layout_fingerprint(kLayout);
  commit.set_version(0);
  StepCommitResponse cr;
  const grpc::Status bad =
      leader->Unary(DataKind::kCommit, &commit, &cr, absl::Now() + absl::Seconds(10));
  EXPECT_EQ(bad.error_code(), grpc::INVALID_ARGUMENT) << bad.error_message();
  commit.add_members(true);
  const grpc::Status ok =
      leader->Unary(DataKind::kCommit, &commit, &cr, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(cr.version(), 1);
  ASSERT_TRUE(answered.get().ok());
  EXPECT_TRUE(resp.push().applied());
  EXPECT_EQ(resp.pull().version(), 1);
  EXPECT_EQ(Values(resp)[0], 1.0f - 0.5f * 0.25f);

  const grpc::Status stranger = Channel("open sesame")->Unary(
      DataKind::kCommit, &commit, &cr, absl::Now() + absl::Seconds(10));
  EXPECT_EQ(stranger.error_code(), grpc::UNAUTHENTICATED) << stranger.error_message();
  EXPECT_EQ(Stats().steps_applied(), 1);
}

// A call made on the calling thread that waits for its step watches the
// stop flag, as the calling thread did while the channel's thread waited.
TEST_F(DataPlaneTest, AStopFlagEndsACallWaitingOnTheCallingThread) {
  Start(SYNC, 2);
  std::atomic<bool> stop{false};
  std::unique_ptr<DataChannel> channel = Channel("sesame", &stop);
  PushRequest req = Push(0, 1, 0, 0.25f);
  std::future<grpc::Status> waiting = std::async(std::launch::async, [&] {
    PushPullResponse r;
    return channel->PushPull(&req, &r, absl::Now() + absl::Minutes(5));
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  const absl::Time asked = absl::Now();
  stop = true;
  const grpc::Status ended = waiting.get();
  EXPECT_EQ(ended.error_code(), grpc::CANCELLED) << ended.error_message();
  EXPECT_LT(absl::Now() - asked, absl::Seconds(2));
}

// The step decisions of a sync ps 0 reach a following ps over its data
// plane, or over gRPC when it serves none.
TEST(StepBroadcasterTest, DecisionsReachAFollowerWithOrWithoutItsDataPlane) {
  for (const bool data_plane : {true, false}) {
    SCOPED_TRACE(data_plane ? "over the data plane" : "over gRPC");
    auto security = WithToken("sesame");
    RpcOptions rpc;
    rpc.security = security;
    struct Ps {
      ParameterStore store;
      std::unique_ptr<Metrics> metrics = *Metrics::Start("", "ps", MetricsRole::kPs);
      std::unique_ptr<PsService> service;
      std::unique_ptr<TaskServer> server;
      std::unique_ptr<DataPlaneServer> data;
      std::string address;
    };
    Ps ps[2];
    for (int i = 0; i < 2; ++i) {
      PsServiceOptions o;
      o.step_role = i == 0 ? StepRole::kDecide : StepRole::kFollow;
      ps[i].service = std::make_unique<PsService>(&ps[i].store, ps[i].metrics.get(), o);
      const int port = testing::FreePort();
      ps[i].server = *TaskServer::Start(port, ps[i].service->grpc_services(), nullptr, rpc);
      ps[i].address = absl::StrCat("127.0.0.1:", port);
      StoreConfig c;
      c.layout_fingerprint = kLayout;
      c.num_floats = 4;
      c.rule = UpdateRule::kSync;
      c.optimizer.name = "sgd";
      c.optimizer.learning_rate = 0.5f;
      c.step_role = o.step_role;
      const std::vector<float> ones(4, 1.0f);
      bool already = false;
      ASSERT_TRUE(ps[i].store.Init(c, ones.data(), &already).ok());
    }
    if (data_plane) {
      ps[1].data = *DataPlaneServer::Start(0, ps[1].service.get(), security, 1 << 20);
      ps[1].service->shard().set_data_port(ps[1].data->port());
    }
    {
      StepBroadcaster broadcaster(&ps[0].store, {ps[1].address}, rpc);
      const std::vector<float> grad(4, 0.25f);
      for (int i = 0; i < 2; ++i) {
        PushArgs a;
        a.layout_fingerprint = kLayout;
        a.num_examples = 1;
        a.gradients = grad.data();
        a.num_floats = 4;
        ASSERT_TRUE(ps[i].store.Push(a).ok());
      }
      std::string values;
      int64_t version = 0;
      const absl::Status pulled =
          ps[1].store.Pull(kLayout, 1, absl::Now() + absl::Seconds(20), &values, &version);
      ASSERT_TRUE(pulled.ok()) << pulled;
      EXPECT_EQ(version, 1);
    }
    for (Ps& p : ps) {
      p.store.Cancel();
      p.data.reset();
      p.server->Stop(absl::ZeroDuration());
    }
  }
}

// A length that lies: a peer claims far more payload than it sends (a
// worker's answer may claim up to kMaxAnswerPayloadBytes, 1 TiB) and hangs
// up. The read fails without first taking the memory claimed (it once
// resized the buffer to the claim: std::bad_alloc, the worker gone; found
// by fuzz/data_plane_fuzzer), and what did arrive is read.
TEST(DataSocketTest, ALyingLengthFailsTheReadWithoutTakingItsMemory) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  ASSERT_EQ(write(fds[1], "abc", 3), 3);
  close(fds[1]);
  absl::StatusOr<std::unique_ptr<DataSocket>> socket =
      DataSocket::Accept(fds[0], nullptr, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(socket.ok()) << socket.status();
  std::string payload;
  EXPECT_FALSE((*socket)->ReadSized(&payload, kMaxAnswerPayloadBytes).ok());
  EXPECT_LT(payload.capacity(), size_t{64} << 20);
  EXPECT_EQ(payload.substr(0, 3), "abc");
}

TEST(DataPlaneParseTest, TransportNamesAndHosts) {
  EXPECT_EQ(*ParseTransport(""), TRANSPORT_GRPC);
  EXPECT_EQ(*ParseTransport("grpc"), TRANSPORT_GRPC);
  EXPECT_EQ(*ParseTransport("tcp"), TRANSPORT_TCP);
  const absl::StatusOr<Transport> bad = ParseTransport("rdma");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'rdma'"), std::string::npos);
  EXPECT_EQ(HostOf("127.0.0.1:2222"), "127.0.0.1");
  EXPECT_EQ(HostOf("ps-0.ps.default.svc:2222"), "ps-0.ps.default.svc");
  EXPECT_EQ(HostOf("[::1]:2222"), "::1");
  EXPECT_EQ(HostOf("localhost"), "localhost");
}

}  // namespace
}  // namespace pscluster
