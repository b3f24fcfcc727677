// The gRPC health service of the real daemons (docs/observability.md):
// "" means the process is up and serves from the moment it listens;
// "pscluster.Ready" means the task is ready for its role: NOT_SERVING until
// then (ps: initialised; worker and evaluator: the chief's plan received;
// chief: every task answered and the ps initialised) and again once it is
// shutting down.
#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "proto/coordination.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

constexpr char kReady[] = "pscluster.Ready";
constexpr int kServing = HealthCheckResponse::SERVING;
constexpr int kNotServing = HealthCheckResponse::NOT_SERVING;

std::string StatusName(int s) {
  switch (s) {
    case HealthCheckResponse::UNKNOWN: return "UNKNOWN";
    case HealthCheckResponse::SERVING: return "SERVING";
    case HealthCheckResponse::NOT_SERVING: return "NOT_SERVING";
    case HealthCheckResponse::SERVICE_UNKNOWN: return "SERVICE_UNKNOWN";
  }
  return absl::StrCat("status ", s);
}

// The answer of Check(service) at `address`, or "rpc <code>" when the call
// fails (e.g. NOT_FOUND for a service the server does not know).
std::string Check(const std::string& address, const std::string& service) {
  auto stub = Health::NewStub(MakeChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(2)));
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return absl::StrCat("rpc ", s.error_code());
  return StatusName(resp.status());
}

// Polls Check(service) until it answers `want`; false after `timeout`.
bool WaitFor(const std::string& address, const std::string& service, const std::string& want,
             absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (absl::Now() < give_up) {
    if (Check(address, service) == want) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

// Follows Watch(service) at `address` on a thread of its own and keeps every
// status the server sends, until the stream ends (the server stops).
class Watcher {
 public:
  Watcher(const std::string& address, const std::string& service)
      : stub_(Health::NewStub(MakeChannel(address))) {
    ctx_.set_wait_for_ready(true);  // the task may not listen yet
    ctx_.set_deadline(DeadlineIn(std::chrono::minutes(5)));
    req_.set_service(service);
    thread_ = std::thread([this] {
      std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader =
          stub_->Watch(&ctx_, req_);
      HealthCheckResponse resp;
      while (reader->Read(&resp)) {
        absl::MutexLock lock(&mu_);
        seen_.push_back(resp.status());
      }
      (void)reader->Finish();
      absl::MutexLock lock(&mu_);
      finished_ = true;
    });
  }
  ~Watcher() { Join(absl::ZeroDuration()); }
  // Waits for the stream to end (the task exits), at most `timeout`.
  void Join(absl::Duration timeout) {
    if (!thread_.joinable()) return;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&finished_), timeout);
    }
    ctx_.TryCancel();
    thread_.join();
  }
  // Every status in order, consecutive repeats merged.
  std::vector<int> Seen() {
    absl::MutexLock lock(&mu_);
    std::vector<int> out;
    for (int s : seen_) {
      if (out.empty() || out.back() != s) out.push_back(s);
    }
    return out;
  }
  std::string SeenText() {
    std::vector<std::string> names;
    for (int s : Seen()) names.push_back(StatusName(s));
    return absl::StrJoin(names, " -> ");
  }

 private:
  std::unique_ptr<Health::Stub> stub_;
  grpc::ClientContext ctx_;
  HealthCheckRequest req_;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<int> seen_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// A ps alone, initialised (Init) or restored from a checkpoint (Restore) by
// the test in the chief's place.
class PsHealthTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PsHealthTest, ReadyOnceInitialisedAndNotWhileShuttingDown) {
  ClusterOptions o;
  o.num_ps = 1;
  o.num_workers = 1;
  o.evaluator = false;
  o.not_started = {"chief:0", "worker:0"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string ps = (*c)->Address("ps:0");

  // The process is up at once; it is not ready for its role.
  ASSERT_TRUE(WaitFor(ps, "", "SERVING", absl::Seconds(30))) << (*c)->AllLogs();
  Watcher watch(ps, kReady);
  EXPECT_EQ(Check(ps, kReady), "NOT_SERVING");
  absl::SleepFor(absl::Milliseconds(300));  // still so: nothing initialised it
  EXPECT_EQ(Check(ps, kReady), "NOT_SERVING");
  EXPECT_EQ(Check(ps, ""), "SERVING");

  auto channel = MakeChannel(ps);
  {
    auto stub = PsControl::NewStub(channel);
    InitRequest init;
    init.set_layout_fingerprint(7);
    ShardSpec* shard = init.add_shards();
    shard->set_variable("v");
    shard->set_size(4);
    const float values[4] = {1, 2, 3, 4};
    init.mutable_optimizer()->set_name("sgd");
    init.mutable_optimizer()->set_learning_rate(0.1f);
    init.set_mode(SYNC);
    init.set_num_workers(1);
    init.set_replicas_to_aggregate(1);
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    grpc::Status s;
    if (GetParam() == "Init") {
      init.set_values(values, sizeof(values));
      InitResponse resp;
      s = stub->Init(&ctx, init, &resp);
    } else {
      RestoreRequest req;
      *req.mutable_init() = init;
      ShardState* state = req.mutable_state();
      state->set_layout_fingerprint(7);
      *state->add_shards() = *shard;
      state->set_version(5);
      state->set_generation(1);
      state->set_values(values, sizeof(values));
      RestoreResponse resp;
      s = stub->Restore(&ctx, req, &resp);
    }
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_TRUE(WaitFor(ps, kReady, "SERVING", absl::Seconds(10))) << (*c)->AllLogs();
  EXPECT_EQ(Check(ps, ""), "SERVING");

  {
    auto stub = TaskControl::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    ShutdownRequest req;
    req.set_reason("health test");
    ShutdownResponse resp;
    grpc::Status s = stub->Shutdown(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  std::map<std::string, int> codes = (*c)->Wait(absl::Seconds(30));
  EXPECT_EQ(codes["ps:0"], 0) << (*c)->AllLogs();
  watch.Join(absl::Seconds(10));
  // What a readiness probe following it saw: not ready, ready, and not
  // ready again before the port closed.
  EXPECT_EQ(watch.Seen(), (std::vector<int>{kNotServing, kServing, kNotServing}))
      << watch.SeenText();
}

INSTANTIATE_TEST_SUITE_P(InitOrRestore, PsHealthTest, ::testing::Values("Init", "Restore"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// A whole cluster whose worker:1 starts late: until it does, the cluster is
// not up and no task is ready; then every task is, until the chief ends the
// run and each one shuts down.
TEST(HealthTest, EveryRoleIsReadyOnlyBetweenStartUpAndShutdown) {
  const std::string data = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(data);
  ClusterOptions o;
  o.data_dir = data;
  o.num_ps = 2;
  o.num_workers = 2;
  o.chief_args = {"--model=mlp", "--epochs=1", "--log_every_s=0.5"};
  o.start_later = {"worker:1"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<std::string> started = {"chief:0", "ps:0", "ps:1", "worker:0",
                                            "evaluator:0"};
  for (const std::string& t : started) {
    ASSERT_TRUE(WaitFor((*c)->Address(t), "", "SERVING", absl::Seconds(60)))
        << t << "\n" << (*c)->AllLogs();
  }
  std::map<std::string, std::unique_ptr<Watcher>> watch;
  for (const std::string& t : started) {
    watch[t] = std::make_unique<Watcher>((*c)->Address(t), kReady);
  }
  watch["worker:1"] = std::make_unique<Watcher>((*c)->Address("worker:1"), kReady);
  // The chief waits for worker:1, so no ps is initialised and no plan is
  // handed out: the processes are up, none is ready.
  absl::SleepFor(absl::Seconds(1));
  for (const std::string& t : started) {
    EXPECT_EQ(Check((*c)->Address(t), kReady), "NOT_SERVING") << t;
    EXPECT_EQ(Check((*c)->Address(t), ""), "SERVING") << t;
  }

  ASSERT_TRUE((*c)->StartTask("worker:1").ok());
  for (const char* t : {"chief:0", "ps:0", "ps:1", "worker:0", "worker:1", "evaluator:0"}) {
    EXPECT_TRUE(WaitFor((*c)->Address(t), kReady, "SERVING", absl::Seconds(60)))
        << t << "\n" << (*c)->AllLogs();
  }

  std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(5));
  for (const auto& [task, code] : codes) EXPECT_EQ(code, 0) << task << "\n" << (*c)->AllLogs();
  for (auto& [task, w] : watch) {
    w->Join(absl::Seconds(10));
    std::vector<int> seen = w->Seen();
    if (task == "worker:1") {
      // Its watch may connect after it got the plan.
      if (!seen.empty() && seen.front() == kNotServing) seen.erase(seen.begin());
      EXPECT_EQ(seen, (std::vector<int>{kServing, kNotServing})) << task << ": " << w->SeenText();
    } else {
      EXPECT_EQ(seen, (std::vector<int>{kNotServing, kServing, kNotServing}))
          << task << ": " << w->SeenText();
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
