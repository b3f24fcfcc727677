// Security end to end: the real daemons with mutual TLS and the cluster
// token (docs/security.md). Certificates come from
// deploy/tls/make_test_ca.sh; every case skips, saying why, without openssl.
#include "common/security.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordination.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "tests/local_cluster.h"
#include "wire/data_plane.h"

namespace pscluster {
namespace testing {
namespace {

using ::testing::HasSubstr;

struct Binary {
  const char* path;
  const char* task_type;
  std::vector<std::string> good_args;  // valid flags besides the ones under test
};
const Binary kBinaries[] = {{"ps_server/ps_server", "ps", {}},
                            {"worker/worker", "worker", {"--data_dir=/nonexistent"}},
                            {"evaluator/evaluator", "evaluator", {"--data_dir=/nonexistent"}},
                            {"chief/chief", "chief", {}}};

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

// Runs the test CA script into TEST_TMPDIR/<name>. Empty on failure.
std::string MakeCa(const std::string& name, const std::string& san_args = "") {
  const std::string dir = TempDir() + "/" + name;
  const std::string cmd = absl::StrCat("deploy/tls/make_test_ca.sh --force ", san_args, " ", dir,
                                       " >", dir, ".log 2>&1");
  return std::system(cmd.c_str()) == 0 ? dir : "";
}

// A daemon run in the background (RunBinary on a thread) until it exits
// or `timeout` passes.
class Background {
 public:
  Background(const std::string& binary, std::vector<std::string> args, const std::string& tf_config,
             absl::Duration timeout)
      : result_(std::async(std::launch::async,
                           [=] { return RunBinary(binary, args, tf_config, timeout); })) {}
  ProcessResult Wait() { return result_.get(); }

 private:
  std::future<ProcessResult> result_;
};

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("openssl version >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "no openssl on PATH to make the test certificates";
    }
    pki_ = MakeCa("pki");
    ASSERT_FALSE(pki_.empty()) << "deploy/tls/make_test_ca.sh failed; see " << TempDir()
                               << "/pki.log";
  }

  // The flags every daemon of the secured cluster gets.
  std::vector<std::string> SecureArgs() const {
    return {"--tls_cert=" + pki_ + "/task.pem", "--tls_key=" + pki_ + "/task.key",
            "--tls_ca=" + pki_ + "/ca.pem", "--auth_token_file=" + pki_ + "/token"};
  }

  // A client's security: this CA's cert and key, plus `token` (may be "").
  std::shared_ptr<const SecurityConfig> Client(const std::string& dir,
                                               const std::string& token) const {
    SecurityFlags f;
    f.tls_cert = dir + "/task.pem";
    f.tls_key = dir + "/task.key";
    f.tls_ca = dir + "/ca.pem";
    absl::StatusOr<SecurityConfig> c = LoadSecurityConfig(f, "grpc+tls", "test");
    EXPECT_TRUE(c.ok()) << c.status();
    c->token = token;
    return std::make_shared<const SecurityConfig>(*c);
  }

  std::string Token() const {
    std::ifstream in(pki_ + "/token");
    std::string t;
    in >> t;
    return t;
  }

  std::shared_ptr<grpc::Channel> Channel(const std::string& address,
                                         std::shared_ptr<const SecurityConfig> security) {
    RpcOptions o;
    o.security = std::move(security);
    return MakeChannel(address, o);
  }

  // Starts a ps_server alone with `args` and waits until its health
  // service answers `probe` (default: this CA's TLS, no token).
  std::unique_ptr<Background> StartPs(const std::vector<std::string>& args, std::string* address,
                                      std::shared_ptr<const SecurityConfig> probe = nullptr) {
    *address = absl::StrCat("127.0.0.1:", FreePort());
    const std::string tf_config = absl::StrCat(R"({"cluster": {"ps": [")", *address,
                                               R"("]}, "task": {"type": "ps", "index": 0}})");
    auto ps =
        std::make_unique<Background>("ps_server/ps_server", args, tf_config, absl::Seconds(90));
    auto channel = Channel(*address, probe ? probe : Client(pki_, ""));
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (!IsServing(*channel, std::chrono::milliseconds(500)) && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    return ps;
  }

  // Ends a daemon with a Shutdown that carries the token.
  void Shutdown(const std::string& address) {
    auto stub = TaskControl::NewStub(Channel(address, Client(pki_, Token())));
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
    ShutdownRequest req;
    req.set_reason("test over");
    ShutdownResponse resp;
    grpc::Status s = stub->Shutdown(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  std::string pki_;
};

TEST_F(SecurityTest, TrainingRunOverMutualTlsWithTokenFinishes) {
  const std::string data_dir = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(data_dir);
  // Two ps, sync: ps:0's step decisions travel to ps:1 over the same
  // mutual TLS with the token; the push-pulls over gRPC, then over the ps's
  // tcp data plane (its own TLS connection and token check). Then no ps:
  // the ring of workers (multi_worker_mirrored), whose chunks, aborts and
  // replica reads go worker to worker, and to the chief and evaluator.
  for (const std::string transport : {"grpc", "tcp", "ring"}) {
    SCOPED_TRACE("--transport=" + transport);
    const bool ring = transport == "ring";
    ClusterOptions o;
    o.num_ps = ring ? 0 : 2;
    o.num_workers = 2;
    o.data_dir = data_dir;
    o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync"};
    o.chief_args.push_back(ring ? "--strategy=multi_worker_mirrored" : "--transport=" + transport);
    o.all_args = SecureArgs();
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(5));
    for (const auto& [task, code] : codes) {
      EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << (*c)->AllLogs();
    }
    std::optional<FinalFigures> f = ParseFinalLine((*c)->Log("chief:0"));
    ASSERT_TRUE(f.has_value()) << (*c)->AllLogs();
    std::printf("mlp, 1 epoch, %s, 2 workers, sync, mutual TLS, %s: "
                "test_accuracy=%.4f test_loss=%.4f\n",
                ring ? "no ps" : "2 ps", ring ? "ring all-reduce" : transport.c_str(),
                f->test_accuracy, f->test_loss);
    // The same training as cluster_test's sync run: 0.9256 in every run
    // (the ring's sum of two gradients is the ps's to the bit).
    EXPECT_GT(f->test_accuracy, 0.92) << (*c)->Log("chief:0");
    EXPECT_EQ(f->steps, 469) << (*c)->Log("chief:0");
    if (ring) {
      EXPECT_THAT((*c)->Log("worker:1"), HasSubstr("mutual TLS, cluster token required"));
      EXPECT_THAT((*c)->Log("worker:1"), HasSubstr("ring 1: 2 workers"));
      EXPECT_THAT((*c)->Log("evaluator:0"), HasSubstr("eval: step=469 "));
      continue;
    }
    EXPECT_THAT((*c)->Log("ps:0"), HasSubstr("mutual TLS, cluster token required"));
    EXPECT_THAT((*c)->Log("ps:1"), HasSubstr("mutual TLS, cluster token required"));
    EXPECT_THAT((*c)->Log("ps:1"), HasSubstr("version=469 applied=938 "));
    if (transport == "tcp") {
      EXPECT_THAT((*c)->Log("chief:0"),
                  HasSubstr("push-pulls over each ps's tcp data plane, gradients sent layer by "
                            "layer during backprop, the next forward pass started on the first "
                            "layers' weights"));
      EXPECT_THAT((*c)->Log("worker:0"), HasSubstr("gradients leave layer by layer"));
      EXPECT_THAT((*c)->Log("worker:0"), HasSubstr("weights arrive first layers first"));
    }
  }
}

InitRequest SmallInit() {
  InitRequest req;
  req.set_layout_fingerprint(42);
  ShardSpec* shard = req.add_shards();
  shard->set_variable("v");
  shard->set_size(4);
  const float values[4] = {1, 2, 3, 4};
  req.set_values(std::string(reinterpret_cast<const char*>(values), sizeof(values)));
  req.mutable_optimizer()->set_name("sgd");
  req.mutable_optimizer()->set_learning_rate(0.1f);
  req.set_mode(ASYNC);
  req.set_num_workers(1);
  return req;
}

PushRequest SmallPush(uint64_t request_id) {
  PushRequest req;
  req.set_layout_fingerprint(42);
  req.set_worker_index(0);
  req.set_version(0);
  req.set_request_id(request_id);
  req.set_num_examples(1);
  const float grads[4] = {1, 1, 1, 1};
  req.set_gradients(std::string(reinterpret_cast<const char*>(grads), sizeof(grads)));
  return req;
}

grpc::Status Push(ParameterServer::Stub& stub, const PushRequest& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  PushResponse resp;
  return stub.Push(&ctx, req, &resp);
}

PsStatsResponse Stats(ParameterServer::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  PsStatsResponse resp;
  grpc::Status s = stub.GetStats(&ctx, PsStatsRequest(), &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

TEST_F(SecurityTest, PushWithoutOrWithWrongTokenIsRefusedAndNothingApplied) {
  std::string address;
  std::unique_ptr<Background> ps = StartPs(SecureArgs(), &address);
  const std::shared_ptr<grpc::Channel> good_channel = Channel(address, Client(pki_, Token()));
  auto good = ParameterServer::NewStub(good_channel);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    InitResponse resp;
    grpc::Status s = PsControl::NewStub(good_channel)->Init(&ctx, SmallInit(), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  auto no_token = ParameterServer::NewStub(Channel(address, Client(pki_, "")));
  auto wrong_token = ParameterServer::NewStub(Channel(address, Client(pki_, Token() + "x")));
  grpc::Status s = Push(*no_token, SmallPush(1));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  s = Push(*wrong_token, SmallPush(2));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  {
    grpc::ClientContext ctx;
    PsStatsResponse resp;
    s = no_token->GetStats(&ctx, PsStatsRequest(), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  }
  PsStatsResponse stats = Stats(*good);
  EXPECT_EQ(stats.pushes_applied(), 0);
  EXPECT_EQ(stats.pushes_rejected(), 0);
  EXPECT_EQ(stats.pushes_duplicate(), 0);
  EXPECT_EQ(stats.version(), 0);
  // The same push with the token is applied: the refusals were the token's.
  s = Push(*good, SmallPush(1));
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Stats(*good).pushes_applied(), 1);

  Shutdown(address);
  ProcessResult r = ps->Wait();
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Calls `method` ("/pscluster.Coordinator/GetPlan") with an empty request.
grpc::Status CallEmpty(grpc::Channel& channel, const std::string& method) {
  grpc::GenericStub stub(std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

// Every method of `service` (from the proto descriptors, so handlers added
// later are covered) refuses a call without the token. A method the server
// does not implement answers gRPC's own UNIMPLEMENTED with no message.
void ExpectEveryMethodNeedsTheToken(grpc::Channel& channel, const std::string& service) {
  const google::protobuf::ServiceDescriptor* d =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
  ASSERT_NE(d, nullptr) << service;
  for (int i = 0; i < d->method_count(); ++i) {
    const std::string method = absl::StrCat("/", service, "/", d->method(i)->name());
    grpc::Status s = CallEmpty(channel, method);
    const bool unimplemented_by_grpc =
        s.error_code() == grpc::StatusCode::UNIMPLEMENTED && s.error_message().empty();
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::UNAUTHENTICATED || unimplemented_by_grpc)
        << method << " without a token answered " << s.error_code() << " " << s.error_message()
        << ": its handler must start with CheckAuth(ctx)";
  }
}

TEST_F(SecurityTest, EveryMethodOfOurServicesChecksTheToken) {
  std::string ps_address;
  std::unique_ptr<Background> ps = StartPs(SecureArgs(), &ps_address);
  auto no_token = Channel(ps_address, Client(pki_, ""));
  ExpectEveryMethodNeedsTheToken(*no_token, "pscluster.ParameterServer");
  ExpectEveryMethodNeedsTheToken(*no_token, "pscluster.PsControl");
  ExpectEveryMethodNeedsTheToken(*no_token, "pscluster.TaskControl");

  // A chief waiting for a cluster that never comes serves the Coordinator.
  const std::string chief_address = absl::StrCat("127.0.0.1:", FreePort());
  const std::string tf_config = absl::StrCat(
      R"({"cluster": {"chief": [")", chief_address, R"("], "ps": [")", ps_address,
      R"("], "worker": ["127.0.0.1:)", FreePort(), R"("]}, "task": {"type": "chief"}})");
  std::vector<std::string> args = SecureArgs();
  args.push_back("--wait_for_cluster_s=10");
  Background chief("chief/chief", args, tf_config, absl::Seconds(60));
  auto to_chief = Channel(chief_address, Client(pki_, ""));
  const absl::Time give_up = absl::Now() + absl::Seconds(15);
  while (!IsServing(*to_chief, std::chrono::milliseconds(500)) && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ExpectEveryMethodNeedsTheToken(*to_chief, "pscluster.Coordinator");
  ExpectEveryMethodNeedsTheToken(*to_chief, "pscluster.TaskControl");
  // With the token the chief answers.
  {
    auto stub = Coordinator::NewStub(Channel(chief_address, Client(pki_, Token())));
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
    GetPlanRequest req;
    req.set_task_type("worker");
    GetPlanResponse resp;
    grpc::Status s = stub->GetPlan(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  Shutdown(chief_address);
  Shutdown(ps_address);
  chief.Wait();
  ProcessResult r = ps->Wait();
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(SecurityTest, ClientsWithoutTheRightTlsCannotConnect) {
  std::string address;
  std::unique_ptr<Background> ps = StartPs(SecureArgs(), &address);
  const std::string token = Token();
  auto get_stats = [&](std::shared_ptr<const SecurityConfig> security) {
    auto stub = ParameterServer::NewStub(Channel(address, std::move(security)));
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
    PsStatsResponse resp;
    return stub->GetStats(&ctx, PsStatsRequest(), &resp);
  };
  // The health service needs no token, but TLS all the same.
  EXPECT_TRUE(IsServing(*Channel(address, Client(pki_, "")), std::chrono::seconds(5)));

  SecurityConfig plaintext;
  plaintext.token = token;
  grpc::Status s = get_stats(std::make_shared<const SecurityConfig>(plaintext));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << "plaintext: " << s.error_message();
  EXPECT_FALSE(IsServing(*Channel(address, std::make_shared<const SecurityConfig>(plaintext)),
                         std::chrono::seconds(2)));

  // TLS that verifies the server, but no client certificate.
  SecurityConfig no_cert = *Client(pki_, token);
  no_cert.cert_pem.clear();
  no_cert.key_pem.clear();
  s = get_stats(std::make_shared<const SecurityConfig>(no_cert));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
      << "no client cert: " << s.error_message();

  // A certificate from another CA: each side refuses the other.
  const std::string other = MakeCa("other");
  ASSERT_FALSE(other.empty());
  s = get_stats(Client(other, token));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << "other CA: " << s.error_message();

  // The right credentials work.
  s = get_stats(Client(pki_, token));
  EXPECT_TRUE(s.ok()) << s.error_message();

  Shutdown(address);
  ProcessResult r = ps->Wait();
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// The tcp data plane takes the same credentials as gRPC: mutual TLS
// against the cluster's CA, then the token; anything less is refused and
// nothing is applied.
TEST_F(SecurityTest, TcpDataPlaneChecksTlsAndToken) {
  std::string address;
  std::unique_ptr<Background> ps = StartPs(SecureArgs(), &address);
  const std::string token = Token();
  const std::shared_ptr<grpc::Channel> channel = Channel(address, Client(pki_, token));
  auto stub = ParameterServer::NewStub(channel);
  {
    grpc::ClientContext ctx;
    InitResponse resp;
    ASSERT_TRUE(PsControl::NewStub(channel)->Init(&ctx, SmallInit(), &resp).ok());
  }
  const int port = Stats(*stub).data_port();
  ASSERT_GT(port, 0);
  uint64_t request_id = 0;
  auto push = [&](std::shared_ptr<const SecurityConfig> security) {
    DataChannel channel(
        address, [port](absl::Time) -> absl::StatusOr<int> { return port; }, security);
    PushRequest req = SmallPush(++request_id);
    PushPullResponse resp;
    std::promise<grpc::Status> done;
    channel.StartPushPull(&req, &resp, absl::Now() + absl::Seconds(10),
                          [&done](grpc::Status s) { done.set_value(s); });
    return done.get_future().get();
  };
  SecurityConfig plaintext;
  plaintext.token = token;
  grpc::Status s = push(std::make_shared<const SecurityConfig>(plaintext));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << "plaintext: " << s.error_message();
  SecurityConfig no_cert = *Client(pki_, token);
  no_cert.cert_pem.clear();
  no_cert.key_pem.clear();
  s = push(std::make_shared<const SecurityConfig>(no_cert));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << "no client cert: "
                                                           << s.error_message();
  const std::string other = MakeCa("other");
  ASSERT_FALSE(other.empty());
  s = push(Client(other, token));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << "other CA: " << s.error_message();
  EXPECT_NE(s.error_message().find("tls handshake"), std::string::npos) << s.error_message();
  for (const std::string wrong : {"", "not-the-token"}) {
    s = push(Client(pki_, wrong));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << "token '" << wrong << "': " << s.error_message();
  }
  EXPECT_EQ(Stats(*stub).pushes_applied(), 0);
  s = push(Client(pki_, token));
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Stats(*stub).pushes_applied(), 1);

  Shutdown(address);
  ProcessResult r = ps->Wait();
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Certificates rotate while the ps serves: renewed from the same CA
// (make_test_ca.sh --renew), then a CA replaced in three steps (trust both
// CAs; switch to the new CA's certificate; drop the old CA), each file
// written whole as a Secret update does. gRPC and the tcp data plane
// present and trust the new material on new connections; a new
// certificate leaves the connections open, a new CA ends them; a bad file
// (a key that is not the certificate's) is refused with the certificates
// in use kept.
TEST_F(SecurityTest, CertificatesRotateWithoutARestart) {
  const std::string next = MakeCa("next");
  ASSERT_FALSE(next.empty());
  const std::string dir = TempDir() + "/rotating";
  ASSERT_EQ(std::system(("rm -rf " + dir + " && cp -r " + pki_ + " " + dir).c_str()), 0);
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  // Written aside, then renamed into place: the task reads the old file
  // or the new one.
  auto put = [&dir](const std::string& name, const std::string& content) {
    std::ofstream(dir + "/.tmp") << content;
    ASSERT_EQ(std::rename((dir + "/.tmp").c_str(), (dir + "/" + name).c_str()), 0);
  };
  std::string address;
  std::unique_ptr<Background> ps =
      StartPs({"--tls_cert=" + dir + "/task.pem", "--tls_key=" + dir + "/task.key",
               "--tls_ca=" + dir + "/ca.pem", "--auth_token_file=" + pki_ + "/token"},
              &address);
  const std::string token = Token();
  // Clients: each CA's certificate, trusting `ca_pem`.
  auto client = [&](const std::string& pki, const std::string& ca_pem) {
    SecurityConfig c = *Client(pki, token);
    c.ca_pem = ca_pem;
    return std::make_shared<const SecurityConfig>(c);
  };
  const std::string old_ca = read(pki_ + "/ca.pem"), new_ca = read(next + "/ca.pem");
  // The certificate the ps presents to a new connection ("" if refused).
  auto presented = [&](std::shared_ptr<const SecurityConfig> security) {
    auto stub = ParameterServer::NewStub(Channel(address, std::move(security)));
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
    PsStatsResponse resp;
    if (!stub->GetStats(&ctx, PsStatsRequest(), &resp).ok()) return std::string();
    std::vector<grpc::string_ref> pems = ctx.auth_context()->FindPropertyValues("x509_pem_cert");
    return pems.empty() ? std::string() : std::string(pems[0].begin(), pems[0].end());
  };
  // Polls `done` until it holds; the task looks at its files every 5 s.
  auto eventually = [](const std::function<bool()>& done) {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (!done() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(200));
    return done();
  };
  const std::string first_leaf = read(pki_ + "/task.pem"), new_leaf = read(next + "/task.pem");
  ASSERT_EQ(presented(client(pki_, old_ca)), first_leaf);

  // The data plane: a connection made now, used again at the end.
  auto stub = ParameterServer::NewStub(Channel(address, client(pki_, old_ca)));
  {
    grpc::ClientContext ctx;
    InitResponse resp;
    ASSERT_TRUE(PsControl::NewStub(Channel(address, client(pki_, old_ca)))
                    ->Init(&ctx, SmallInit(), &resp)
                    .ok());
  }
  const int port = Stats(*stub).data_port();
  ASSERT_GT(port, 0);
  uint64_t request_id = 0;
  auto push = [&](DataChannel& channel) {
    PushRequest req = SmallPush(++request_id);
    req.set_version(Stats(*stub).version());
    PushPullResponse resp;
    std::promise<grpc::Status> done;
    channel.StartPushPull(&req, &resp, absl::Now() + absl::Seconds(10),
                          [&done](grpc::Status s) { done.set_value(s); });
    return done.get_future().get();
  };
  // A CA change closes the connections open: a call on one fails once.
  auto push_again = [&](DataChannel& channel) {
    grpc::Status s = push(channel);
    return s.ok() ? s : push(channel);
  };
  auto data_channel = [&](std::shared_ptr<const SecurityConfig> security) {
    return std::make_unique<DataChannel>(
        address, [port](absl::Time) -> absl::StatusOr<int> { return port; }, std::move(security));
  };
  std::unique_ptr<DataChannel> before = data_channel(client(pki_, old_ca));
  ASSERT_TRUE(push(*before).ok());

  // 0. Renewed from the same CA.
  const std::string renew = "deploy/tls/make_test_ca.sh --renew " + dir + " >" + dir + ".log 2>&1";
  ASSERT_EQ(std::system(renew.c_str()), 0) << read(dir + ".log");
  const std::string old_leaf = read(dir + "/task.pem");
  ASSERT_NE(old_leaf, first_leaf);
  EXPECT_TRUE(eventually([&] { return presented(client(pki_, old_ca)) == old_leaf; }));
  EXPECT_TRUE(push(*before).ok()) << "a new certificate leaves the connections open";

  // 1. Trust both CAs: a client of the new CA gets in.
  put("ca.pem", old_ca + new_ca);
  EXPECT_TRUE(eventually([&] { return presented(client(next, old_ca + new_ca)) == old_leaf; }));
  EXPECT_TRUE(push_again(*before).ok());

  // 2. The new CA's certificate and key; clients of either CA still get in.
  put("task.key", read(next + "/task.key"));
  put("task.pem", new_leaf);
  EXPECT_TRUE(eventually([&] { return presented(client(next, new_ca)) == new_leaf; }));
  std::unique_ptr<DataChannel> after = data_channel(client(next, new_ca));
  EXPECT_TRUE(push(*after).ok()) << "the data plane presents the new certificate";
  EXPECT_TRUE(push(*before).ok()) << "a new certificate leaves the connections open";

  // 3. Drop the old CA: its clients are refused, on gRPC and the data plane,
  // those connected before included (a CA change ends the connections open).
  put("ca.pem", new_ca);
  stub = ParameterServer::NewStub(Channel(address, client(next, new_ca)));
  EXPECT_TRUE(eventually([&] { return presented(client(pki_, old_ca + new_ca)).empty(); }));
  EXPECT_EQ(push_again(*before).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(push(*data_channel(client(pki_, old_ca + new_ca))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(presented(client(next, new_ca)), new_leaf);
  EXPECT_TRUE(push_again(*after).ok());

  // 4. A key that is not the certificate's is refused; nothing changes.
  put("task.key", read(pki_ + "/task.key"));
  absl::SleepFor(absl::Seconds(7));  // one look at the files (every 5 s) and gRPC's (1 s)
  EXPECT_EQ(presented(client(next, new_ca)), new_leaf);
  EXPECT_TRUE(push(*data_channel(client(next, new_ca))).ok());
  EXPECT_TRUE(push(*after).ok());
  before.reset();
  after.reset();

  auto control = TaskControl::NewStub(Channel(address, client(next, new_ca)));
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
  ShutdownResponse resp;
  EXPECT_TRUE(control->Shutdown(&ctx, ShutdownRequest(), &resp).ok());
  ProcessResult r = ps->Wait();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("a new CA"));
  EXPECT_THAT(r.output, HasSubstr("is not the private key of --tls_cert=" + dir + "/task.pem"));
}

TEST_F(SecurityTest, ServerNameOverrideForCertificatesWithoutTheAddress) {
  // A certificate that names neither 127.0.0.1 nor localhost.
  const std::string named = MakeCa("named", "--san DNS:pscluster");
  ASSERT_FALSE(named.empty());
  SecurityConfig client = *Client(named, "");
  client.server_name = "pscluster";
  std::string address;
  std::unique_ptr<Background> ps =
      StartPs({"--tls_cert=" + named + "/task.pem", "--tls_key=" + named + "/task.key",
               "--tls_ca=" + named + "/ca.pem"},
              &address, std::make_shared<const SecurityConfig>(client));
  client.server_name.clear();
  EXPECT_FALSE(IsServing(*Channel(address, std::make_shared<const SecurityConfig>(client)),
                         std::chrono::seconds(3)))
      << "the certificate does not name 127.0.0.1";
  client.server_name = "pscluster";
  auto channel = Channel(address, std::make_shared<const SecurityConfig>(client));
  EXPECT_TRUE(IsServing(*channel, std::chrono::seconds(5)));
  auto stub = TaskControl::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
  ShutdownResponse resp;
  EXPECT_TRUE(stub->Shutdown(&ctx, ShutdownRequest(), &resp).ok());
  ProcessResult r = ps->Wait();
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(SecurityTest, TokenWithoutTls) {
  std::string address;
  std::unique_ptr<Background> ps = StartPs({"--auth_token_file=" + pki_ + "/token"}, &address,
                                           std::make_shared<const SecurityConfig>());
  SecurityConfig plaintext;
  auto no_token =
      ParameterServer::NewStub(Channel(address, std::make_shared<const SecurityConfig>(plaintext)));
  grpc::Status s = Push(*no_token, SmallPush(1));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  plaintext.token = Token();
  auto good =
      ParameterServer::NewStub(Channel(address, std::make_shared<const SecurityConfig>(plaintext)));
  EXPECT_EQ(Stats(*good).pushes_applied(), 0);
  auto stub =
      TaskControl::NewStub(Channel(address, std::make_shared<const SecurityConfig>(plaintext)));
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
  ShutdownResponse resp;
  EXPECT_TRUE(stub->Shutdown(&ctx, ShutdownRequest(), &resp).ok());
  ProcessResult r = ps->Wait();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("plaintext, cluster token required"));
}

class PerBinaryTest : public ::testing::TestWithParam<Binary> {
 protected:
  std::string TfConfig(const std::string& rpc_layer) const {
    return absl::StrCat(
        R"({"cluster": {"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3"], "evaluator": ["h:4"]},)",
        R"( "task": {"type": ")", GetParam().task_type, R"(", "index": 0}, "rpc_layer": ")",
        rpc_layer, R"("})");
  }
  ProcessResult Run(std::vector<std::string> args, const std::string& rpc_layer) const {
    std::vector<std::string> all = GetParam().good_args;
    all.insert(all.end(), args.begin(), args.end());
    return RunBinary(GetParam().path, all, TfConfig(rpc_layer), absl::Seconds(30));
  }
};

TEST_P(PerBinaryTest, GrpcTlsWithoutFlagsExitsTwoNamingTheFlag) {
  ProcessResult r = Run({}, "grpc+tls");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("error: --tls_cert is required"));
  EXPECT_THAT(r.output, HasSubstr("rpc_layer \"grpc+tls\""));
  r = Run({"--tls_cert=/etc/hostname"}, "grpc+tls");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("error: --tls_key is required"));
}

TEST_P(PerBinaryTest, MissingOrEmptyTokenFileExitsTwoNamingIt) {
  ProcessResult r = Run({"--auth_token_file=/no/such/token"}, "grpc");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--auth_token_file=/no/such/token: cannot read"));
  const std::string empty = TempDir() + "/empty_token";
  std::ofstream(empty) << "\n  \n";
  r = Run({"--auth_token_file=" + empty}, "grpc");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--auth_token_file=" + empty + ": the file is empty"));
}

TEST_P(PerBinaryTest, MissingCertificateFileExitsTwoNamingIt) {
  ProcessResult r = Run({"--tls_cert=/no/cert.pem", "--tls_key=/no/key.pem"}, "grpc");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--tls_cert=/no/cert.pem: cannot read"));
}

TEST_P(PerBinaryTest, HelpListsTheSecurityFlags) {
  ProcessResult r = RunBinary(GetParam().path, {"--help"}, "", absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* flag : {"--tls_cert", "--tls_key", "--tls_ca", "--tls_server_name",
                           "--auth_token_file", "--tf_config"}) {
    EXPECT_THAT(r.output, HasSubstr(flag));
  }
}

INSTANTIATE_TEST_SUITE_P(AllBinaries, PerBinaryTest, ::testing::ValuesIn(kBinaries),
                         [](const ::testing::TestParamInfo<Binary>& info) {
                           return std::string(info.param.task_type);
                         });

}  // namespace
}  // namespace testing
}  // namespace pscluster
