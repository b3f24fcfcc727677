// Authorization by task identity (--authorize, docs/security.md) through
// the real daemons. Every task gets its own certificate (naming it as
// URI:pscluster://ROLE/INDEX) and its own token, from
// deploy/tls/make_test_ca.sh --tasks:
//
// - training runs finish as they do without identities, no call refused:
//   certificates over gRPC and over the ps's tcp data plane, the ring of
//   workers, and tokens alone (no TLS);
// - a hostile client holding worker 1's certificate and token (a
//   compromised worker), and then one holding the evaluator's, call every
//   method their role may not call on every task (the ps's control, the
//   replication and step-decision frames of its data plane, the chief's
//   evaluation reports, Shutdown), and forge what they may call as another
//   task (worker 1 pushing, asking for work and heartbeating as worker 0)
//   while the two honest workers train a sync run. Each of those calls is
//   refused with PERMISSION_DENIED and counted on /metrics; the run ends
//   with the clean run's final line, and each ps's applied digest is the
//   clean run's: nothing the hostile client sent changed a weight.
//
// Every case skips, saying why, without openssl.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "common/security.h"
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

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

constexpr char kTasks[] = "chief,ps/0,ps/1,worker/0,worker/1,evaluator";

class AuthorizationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("openssl version >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "no openssl on PATH to make the test certificates";
    }
    pki_ = TempDir() + "/ids";
    const std::string cmd = absl::StrCat("deploy/tls/make_test_ca.sh --force --tasks ", kTasks, " ",
                                         pki_, " >", pki_, ".log 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "make_test_ca.sh failed; see " << pki_ << ".log";
  }

  // Each daemon's own certificate and token ("{task}": local_cluster.h),
  // every task's token digests, and --authorize.
  std::vector<std::string> IdentityArgs(bool certificates, bool tokens) const {
    std::vector<std::string> a = {"--authorize"};
    if (certificates) {
      a.insert(a.end(), {"--tls_cert=" + pki_ + "/{task}.pem", "--tls_key=" + pki_ + "/{task}.key",
                         "--tls_ca=" + pki_ + "/ca.pem"});
    }
    if (tokens) {
      a.insert(a.end(), {"--auth_token_file=" + pki_ + "/{task}.token",
                         "--auth_identities_file=" + pki_ + "/identities"});
    }
    return a;
  }

  // A client holding task `name`'s ("worker-1") certificate and token.
  std::shared_ptr<const SecurityConfig> As(const std::string& name) const {
    SecurityFlags f;
    f.tls_cert = pki_ + "/" + name + ".pem";
    f.tls_key = pki_ + "/" + name + ".key";
    f.tls_ca = pki_ + "/ca.pem";
    absl::StatusOr<SecurityConfig> c = LoadSecurityConfig(f, "grpc+tls", "test");
    EXPECT_TRUE(c.ok()) << c.status();
    c->token = ReadFile(pki_ + "/" + name + ".token");
    return std::make_shared<const SecurityConfig>(*c);
  }

  std::shared_ptr<grpc::Channel> Channel(const std::string& address,
                                         std::shared_ptr<const SecurityConfig> security) {
    RpcOptions o;
    o.security = std::move(security);
    return MakeChannel(address, o);
  }

  std::string pki_;
};

// A sync run of the mlp, one epoch, 2 ps and 2 workers with the evaluator.
ClusterOptions SyncRun(const std::string& data_dir, std::vector<std::string> security) {
  ClusterOptions o;
  o.num_ps = 2;
  o.num_workers = 2;
  o.data_dir = data_dir;
  o.metrics = true;
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync"};
  o.all_args = std::move(security);
  return o;
}

TEST_F(AuthorizationTest, TrainingRunsWithPerTaskIdentitiesRefuseNothing) {
  const std::string data_dir = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(data_dir);
  const struct {
    const char* what;
    bool certificates, tokens;
    const char* strategy_flag;
  } runs[] = {
      {"certificates, gRPC", true, false, "--transport=grpc"},
      {"certificates and tokens, tcp data plane", true, true, "--transport=tcp"},
      {"certificates, the ring of workers", true, false, "--strategy=multi_worker_mirrored"},
      {"tokens alone, no TLS, tcp data plane", false, true, "--transport=tcp"},
  };
  for (const auto& run : runs) {
    SCOPED_TRACE(run.what);
    ClusterOptions o = SyncRun(data_dir, IdentityArgs(run.certificates, run.tokens));
    o.chief_args.push_back(run.strategy_flag);
    const bool ring = absl::StrContains(run.strategy_flag, "mirrored");
    if (ring) o.num_ps = 0;
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(3));
    for (const auto& [task, code] : codes) {
      EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << (*c)->AllLogs();
    }
    std::optional<FinalFigures> f = ParseFinalLine((*c)->Log("chief:0"));
    ASSERT_TRUE(f.has_value()) << (*c)->AllLogs();
    std::printf("%s: test_accuracy=%.4f steps=%d\n", run.what, f->test_accuracy, f->steps);
    EXPECT_EQ(f->steps, 469);
    EXPECT_GT(f->test_accuracy, 0.92);
    EXPECT_THAT((*c)->Log("chief:0"), HasSubstr("each call authorized by the caller's identity"));
    // No legitimate call was refused: the table allows all of them.
    EXPECT_THAT((*c)->AllLogs(), ::testing::Not(HasSubstr("refused pscluster.")));
  }
}

// Calls `method` of a service with an empty request: the status.
using Call = std::function<grpc::Status(grpc::ClientContext*)>;

// The calls a task with `hostile`'s identity may not make, on the cluster's
// tasks: each must be refused. `tcp_port` per ps: its data plane.
std::vector<std::pair<std::string, Call>> ForbiddenCalls(
    const std::map<std::string, std::shared_ptr<grpc::Channel>>& to, bool is_worker) {
  std::vector<std::pair<std::string, Call>> calls;
  for (const std::string ps : {"ps:0", "ps:1"}) {
    auto control = std::shared_ptr<PsControl::Stub>(PsControl::NewStub(to.at(ps)));
    auto data = std::shared_ptr<ParameterServer::Stub>(ParameterServer::NewStub(to.at(ps)));
    auto add = [&](const std::string& what, Call c) { calls.push_back({ps + " " + what, c}); };
    add("Init", [control](grpc::ClientContext* ctx) {
      InitResponse r;
      return control->Init(ctx, InitRequest(), &r);
    });
    add("SetWorkers", [control](grpc::ClientContext* ctx) {
      SetWorkersResponse r;
      return control->SetWorkers(ctx, SetWorkersRequest(), &r);
    });
    add("Snapshot", [control](grpc::ClientContext* ctx) {
      ShardState r;
      return control->Snapshot(ctx, SnapshotRequest(), &r);
    });
    add("Restore", [control](grpc::ClientContext* ctx) {
      RestoreResponse r;
      return control->Restore(ctx, RestoreRequest(), &r);
    });
    add("CommitStep", [control](grpc::ClientContext* ctx) {
      StepCommitResponse r;
      return control->CommitStep(ctx, StepCommitRequest(), &r);
    });
    add("Replicate", [control](grpc::ClientContext* ctx) {
      ReplicateResponse r;
      return control->Replicate(ctx, ReplicateRequest(), &r);
    });
    add("Promote", [control](grpc::ClientContext* ctx) {
      PromoteResponse r;
      return control->Promote(ctx, PromoteRequest(), &r);
    });
    add("SetBackups", [control](grpc::ClientContext* ctx) {
      SetBackupsResponse r;
      return control->SetBackups(ctx, SetBackupsRequest(), &r);
    });
    add("GetDecision", [control](grpc::ClientContext* ctx) {
      StepCommitRequest r;
      return control->GetDecision(ctx, GetDecisionRequest(), &r);
    });
    add("SetFollowers", [control](grpc::ClientContext* ctx) {
      SetFollowersResponse r;
      return control->SetFollowers(ctx, SetFollowersRequest(), &r);
    });
    add("Demote", [control](grpc::ClientContext* ctx) {
      DemoteResponse r;
      return control->Demote(ctx, DemoteRequest(), &r);
    });
    // Pushes: a worker as another worker; the evaluator at all.
    add("Push as worker 0", [data](grpc::ClientContext* ctx) {
      PushRequest q;
      q.set_worker_index(0);
      PushResponse r;
      return data->Push(ctx, q, &r);
    });
    add("PushPull as worker 0", [data](grpc::ClientContext* ctx) {
      PushRequest q;
      q.set_worker_index(0);
      PushPullResponse r;
      return data->PushPull(ctx, q, &r);
    });
  }
  for (const auto& [task, channel] : to) {
    auto control = std::shared_ptr<TaskControl::Stub>(TaskControl::NewStub(channel));
    calls.push_back({task + " Shutdown", [control](grpc::ClientContext* ctx) {
                       ShutdownRequest q;
                       q.set_reason("hostile");
                       ShutdownResponse r;
                       return control->Shutdown(ctx, q, &r);
                     }});
  }
  auto chief = std::shared_ptr<Coordinator::Stub>(Coordinator::NewStub(to.at("chief:0")));
  if (is_worker) {
    // A forged evaluation: figures any evaluator could make.
    calls.push_back({"chief ReportEval", [chief](grpc::ClientContext* ctx) {
                       EvalReport q;
                       q.set_version(469);
                       q.set_accuracy(0.999f);
                       q.set_loss(0.001f);
                       q.set_examples(10000);
                       q.set_final(true);
                       EvalAck r;
                       return chief->ReportEval(ctx, q, &r);
                     }});
  }
  // Work, progress and heartbeats as worker 0.
  calls.push_back({"chief GetWork as worker 0", [chief](grpc::ClientContext* ctx) {
                     WorkRequest q;
                     q.set_worker_index(0);
                     q.add_abandoned(5);
                     WorkResponse r;
                     return chief->GetWork(ctx, q, &r);
                   }});
  calls.push_back({"chief Heartbeat as worker 0", [chief](grpc::ClientContext* ctx) {
                     HeartbeatRequest q;
                     q.set_worker_index(0);
                     q.set_done(true);
                     HeartbeatResponse r;
                     return chief->Heartbeat(ctx, q, &r);
                   }});
  calls.push_back({"chief ReportProgress as worker 0", [chief](grpc::ClientContext* ctx) {
                     ProgressReport q;
                     q.set_worker_index(0);
                     ProgressAck r;
                     return chief->ReportProgress(ctx, q, &r);
                   }});
  calls.push_back({"chief GetPlan as the chief", [chief](grpc::ClientContext* ctx) {
                     GetPlanRequest q;
                     q.set_task_type("chief");
                     GetPlanResponse r;
                     return chief->GetPlan(ctx, q, &r);
                   }});
  return calls;
}

// A data-plane frame of `kind` with meta `meta` to the ps at host:port over
// TLS as `security`: the answer's code (-1 when the connection failed).
int DataPlaneFrame(const std::string& host, int port, const SecurityConfig& security, DataKind kind,
                   const std::string& meta) {
  absl::StatusOr<SslCtxPtr> tls = MakeClientSslCtx(security);
  if (!tls.ok()) return -1;
  absl::StatusOr<std::unique_ptr<DataSocket>> socket =
      DataSocket::Dial(host, port, tls->get(), host, absl::Now() + absl::Seconds(5));
  if (!socket.ok()) return -1;
  (*socket)->SetDeadline(absl::Now() + absl::Seconds(10));
  FrameHeader hello;
  hello.kind = static_cast<uint32_t>(DataKind::kHello);
  hello.meta_size = static_cast<uint32_t>(security.token.size());
  FrameHeader h;
  std::string m, p;
  if (!(*socket)->WriteFrame(hello, security.token, {}).ok()) return -1;
  if (!(*socket)->ReadFrame(&h, &m, &p, 1 << 20).ok() || h.code != 0) return -1;
  FrameHeader frame;
  frame.kind = static_cast<uint32_t>(kind);
  frame.meta_size = static_cast<uint32_t>(meta.size());
  frame.payload_size = 8;
  if (!(*socket)->WriteFrame(frame, meta, std::string(8, '\0')).ok()) return -1;
  if (!(*socket)->ReadFrame(&h, &m, &p, 1 << 20).ok()) return -1;
  return static_cast<int>(h.code);
}

TEST_F(AuthorizationTest, HostileTasksChangeNothing) {
  const std::string data_dir = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(data_dir);
  const std::vector<std::string> security = IdentityArgs(/*certificates=*/true, /*tokens=*/true);
  // The clean run.
  std::optional<FinalFigures> clean;
  std::map<std::string, std::string> clean_digest;
  {
    ClusterOptions o = SyncRun(data_dir, security);
    o.chief_args.push_back("--transport=tcp");
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const auto& [task, code] : (*c)->Wait(absl::Minutes(3))) {
      ASSERT_EQ(code, 0) << task << "\n" << (*c)->AllLogs();
    }
    clean = ParseFinalLine((*c)->Log("chief:0"));
    ASSERT_TRUE(clean.has_value());
    for (const std::string ps : {"ps:0", "ps:1"}) {
      clean_digest[ps] = ShutdownField((*c)->Log(ps), "applied_digest");
      ASSERT_FALSE(clean_digest[ps].empty()) << (*c)->Log(ps);
    }
  }
  for (const std::string hostile : {"worker-1", "evaluator-0"}) {
    SCOPED_TRACE("a hostile client holding " + hostile + "'s identity");
    const bool is_worker = hostile == "worker-1";
    ClusterOptions o = SyncRun(data_dir, security);
    o.chief_args.push_back("--transport=tcp");
    // Slower steps, so that the hostile calls land while it trains.
    o.worker_args = {"--threads=1"};
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    std::shared_ptr<const SecurityConfig> as = As(hostile);
    std::map<std::string, std::shared_ptr<grpc::Channel>> to;
    for (const std::string task : {"chief:0", "ps:0", "ps:1", "worker:0", "worker:1"}) {
      to[task] = Channel((*c)->Address(task), as);
    }
    // The ps's data plane: replication and step decisions, and a push as
    // worker 0.
    std::map<std::string, int> frames;
    for (const std::string ps : {"ps:0", "ps:1"}) {
      auto data = ParameterServer::NewStub(to.at(ps));
      // GetStats is open to every role: the ps's data port, once it serves.
      PsStatsResponse st;
      grpc::Status s;
      for (const absl::Time give_up = absl::Now() + absl::Seconds(30); absl::Now() < give_up;) {
        grpc::ClientContext ctx;
        ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
        s = data->GetStats(&ctx, PsStatsRequest(), &st);
        if (s.ok() && st.data_port() > 0) break;
        absl::SleepFor(absl::Milliseconds(100));
      }
      ASSERT_TRUE(s.ok()) << s.error_message();
      PushRequest as_zero;
      as_zero.set_worker_index(0);
      frames[ps + " Replicate frame"] =
          DataPlaneFrame("127.0.0.1", st.data_port(), *as, DataKind::kReplicate,
                         ReplicateRequest().SerializeAsString());
      frames[ps + " Commit frame"] =
          DataPlaneFrame("127.0.0.1", st.data_port(), *as, DataKind::kCommit,
                         StepCommitRequest().SerializeAsString());
      frames[ps + " PushPull frame as worker 0"] = DataPlaneFrame(
          "127.0.0.1", st.data_port(), *as, DataKind::kPushPull, as_zero.SerializeAsString());
    }
    std::vector<std::pair<std::string, Call>> calls = ForbiddenCalls(to, is_worker);
    std::map<std::string, int> allowed;  // calls not refused, by name
    std::map<std::string, int> refused;
    std::atomic<bool> stop{false};
    int rounds = 0;
    std::string metrics;
    std::thread attacker([&] {
      while (!stop.load()) {
        for (const auto& [what, call] : calls) {
          grpc::ClientContext ctx;
          ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
          const grpc::Status s = call(&ctx);
          if (s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
            ++refused[what];
          } else if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
                     s.error_code() != grpc::StatusCode::CANCELLED) {
            // UNAVAILABLE, CANCELLED: the task has ended, or was ending.
            ++allowed[what + ": " + std::to_string(s.error_code()) + " " + s.error_message()];
          }
        }
        if (++rounds == 1) {
          // Counted by method and the caller's role while it runs.
          metrics = ScrapeMetrics((*c)->MetricsPort("ps:0"));
        }
      }
    });
    std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(3));
    stop = true;
    attacker.join();
    for (const auto& [task, code] : codes) {
      EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << (*c)->AllLogs();
    }
    std::printf("%s: %d rounds of %zu forbidden calls while the run trained\n", hostile.c_str(),
                rounds, calls.size());
    EXPECT_GE(rounds, 1);
    EXPECT_TRUE(allowed.empty()) << "not refused: " << allowed.begin()->first;
    for (const auto& [what, call] : calls) EXPECT_GE(refused[what], 1) << what;
    for (const auto& [what, code] : frames) {
      EXPECT_EQ(code, static_cast<int>(grpc::StatusCode::PERMISSION_DENIED)) << what;
    }
    // The run is the clean one's, weight for weight.
    std::optional<FinalFigures> f = ParseFinalLine((*c)->Log("chief:0"));
    ASSERT_TRUE(f.has_value()) << (*c)->AllLogs();
    EXPECT_EQ(f->steps, clean->steps);
    EXPECT_EQ(f->test_accuracy, clean->test_accuracy);
    EXPECT_EQ(f->test_loss, clean->test_loss);
    for (const std::string ps : {"ps:0", "ps:1"}) {
      EXPECT_EQ(ShutdownField((*c)->Log(ps), "applied_digest"), clean_digest[ps]) << ps;
    }
    // Refusals are logged (once per connection) and counted by method and role.
    EXPECT_THAT((*c)->Log("ps:0"), HasSubstr("refused pscluster.PsControl/"));
    EXPECT_THAT(metrics,
                HasSubstr(absl::StrCat(
                    "pscluster_denied_calls_total{task=\"ps:0\",method=\"pscluster.",
                    "PsControl/Promote\",role=\"", is_worker ? "worker" : "evaluator", "\"} ")))
        << metrics;
  }
}

// Rotation without a restart (docs/security.md): worker 1's token is
// replaced while the cluster trains, in three steps: every task learns the
// new token's digest beside the old one (SIGHUP), the worker takes the new
// token (SIGHUP), and the old digest goes (the list rewritten, no signal:
// the files are watched). Training goes on across each step with nothing
// refused; then the old token is refused and the new one taken.
TEST_F(AuthorizationTest, TokensRotateWithoutARestart) {
  const std::string data_dir = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(data_dir);
  ClusterOptions o = SyncRun(data_dir, IdentityArgs(/*certificates=*/false, /*tokens=*/true));
  o.evaluator = false;
  // A run that does not end on its own while the test rotates.
  o.chief_args = {"--model=mlp", "--epochs=1000", "--mode=async", "--transport=tcp"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<std::string> tasks = {"chief:0", "ps:0", "ps:1", "worker:0", "worker:1"};
  const std::string list = pki_ + "/identities";
  const std::string before = ReadFile(list) + "\n";
  const std::string old_token = ReadFile(pki_ + "/worker-1.token");
  const std::string new_token = "the-new-token-of-worker-1-0123456789abcdef";
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
  };
  // Waits until `task`'s log, after its first `from` bytes, says `what`.
  auto wait_for = [&](const std::string& task, size_t from, const std::string& what) {
    const absl::Time give_up = absl::Now() + absl::Minutes(1);
    while (absl::Now() < give_up) {
      const std::string log = (*c)->Log(task);
      if (log.size() > from && log.find(what, from) != std::string::npos) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << task << " never logged '" << what << "':\n" << (*c)->Log(task);
    return false;
  };
  std::map<std::string, size_t> mark;
  auto mark_logs = [&] {
    for (const std::string& t : tasks) mark[t] = (*c)->Log(t).size();
  };
  ASSERT_TRUE((*c)->WaitForChunks(20, absl::Minutes(1))) << (*c)->AllLogs();

  // 1: both of worker 1's tokens are listed, everywhere.
  std::string both = before;
  absl::StrAppend(&both, "worker/1 ", TokenDigest(new_token), "\n");
  mark_logs();
  write(list, both);
  for (const std::string& t : tasks) ASSERT_TRUE((*c)->Signal(t, SIGHUP).ok()) << t;
  for (const std::string& t : tasks) {
    ASSERT_TRUE(wait_for(t, mark[t], "security files read again")) << t;
    ASSERT_TRUE(wait_for(t, mark[t], "7 tokens listed")) << t;
  }
  // 2: the worker sends its new token.
  mark_logs();
  write(pki_ + "/worker-1.token", new_token + "\n");
  ASSERT_TRUE((*c)->Signal("worker:1", SIGHUP).ok());
  ASSERT_TRUE(wait_for("worker:1", mark["worker:1"], "(SIGHUP): a new token"));
  // 3: the old digest goes; no signal.
  std::string after;
  for (absl::string_view line : absl::StrSplit(both, '\n')) {
    if (!line.empty() && line.find(TokenDigest(old_token)) == absl::string_view::npos) {
      absl::StrAppend(&after, line, "\n");
    }
  }
  mark_logs();
  write(list, after);
  for (const std::string& t : tasks) {
    ASSERT_TRUE(wait_for(t, mark[t], "(a file changed): the same token, 6 tokens listed")) << t;
  }
  // Training went on, worker 1 among the trainers, and nothing was refused.
  const int64_t chunks_then = [&] {
    const std::string log = (*c)->Log("chief:0");
    const size_t at = log.rfind(" chunks ");
    int64_t n = 0;
    if (at != std::string::npos) {
      (void)absl::SimpleAtoi(log.substr(at + 8, log.find('/', at) - at - 8), &n);
    }
    return n;
  }();
  EXPECT_TRUE((*c)->WaitForChunks(chunks_then + 40, absl::Minutes(1))) << (*c)->AllLogs();
  EXPECT_THAT((*c)->AllLogs(), ::testing::Not(HasSubstr("refused pscluster.")));
  EXPECT_THAT((*c)->AllLogs(), ::testing::Not(HasSubstr("UNAUTHENTICATED")));
  // The old token is refused now; the new one is taken.
  for (const auto& [token, code] : std::vector<std::pair<std::string, grpc::StatusCode>>{
           {old_token, grpc::StatusCode::UNAUTHENTICATED}, {new_token, grpc::StatusCode::OK}}) {
    SecurityConfig plain;
    plain.token = token;
    auto stub = ParameterServer::NewStub(
        Channel((*c)->Address("ps:0"), std::make_shared<const SecurityConfig>(plain)));
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    PsStatsResponse st;
    EXPECT_EQ(stub->GetStats(&ctx, PsStatsRequest(), &st).error_code(), code)
        << (token == old_token ? "the old token" : "the new token");
  }
}

// Bad identity flags: exit 2 naming what is wrong, before anything serves.
TEST_F(AuthorizationTest, BadIdentityFlagsExitTwoNamingThem) {
  const std::string tf_config = absl::StrCat(R"({"cluster": {"ps": ["127.0.0.1:)", FreePort(),
                                             R"("]}, "task": {"type": "ps", "index": 0}})");
  const struct {
    std::vector<std::string> args;
    std::string want;
  } cases[] = {
      {{"--authorize"}, "--authorize needs the callers' identities"},
      {{"--authorize", "--tls_cert=" + pki_ + "/worker-1.pem",
        "--tls_key=" + pki_ + "/worker-1.key", "--tls_ca=" + pki_ + "/ca.pem"},
       "--tls_cert names worker/1, but this task is ps/0"},
      {{"--authorize", "--tls_cert=" + pki_ + "/task.pem", "--tls_key=" + pki_ + "/task.key",
        "--tls_ca=" + pki_ + "/ca.pem"},
       "--authorize: --tls_cert must name this task (URI:pscluster://ps/0)"},
      {{"--authorize", "--auth_token_file=" + pki_ + "/worker-1.token",
        "--auth_identities_file=" + pki_ + "/identities"},
       "--auth_identities_file lists this token as worker/1, but this task is ps/0"},
      {{"--auth_token_file=" + pki_ + "/token", "--auth_identities_file=" + pki_ + "/identities"},
       "this task's token is not in --auth_identities_file"},
      {{"--auth_identities_file=" + pki_ + "/identities"},
       "--auth_identities_file=" + pki_ + "/identities needs --auth_token_file"},
      {{"--auth_token_file=" + pki_ + "/ps-0.token",
        "--auth_identities_file=" + pki_ + "/ps-0.pem"},
       "--auth_identities_file=" + pki_ + "/ps-0.pem: line 1: "},
  };
  for (const auto& c : cases) {
    ProcessResult r = RunBinary("ps_server/ps_server", c.args, tf_config, absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 2) << c.want << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.want));
  }
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
