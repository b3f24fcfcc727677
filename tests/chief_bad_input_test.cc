// The chief's coordination service (proto/coordination.proto) fed lying
// requests through the real daemons: while two workers train a sync run, a
// hostile client at the chief's address sends GetPlan, ReportProgress,
// ReportEval, GetWork, Heartbeat, RingWork and GetReplica requests with
// worker indices out of range, chunk counts that disagree with the
// workers', chunk numbers, generations and incarnations that no worker
// holds, NaN and negative figures; bytes that are no protobuf, and a
// message over the chief's limit. Each is refused (gRPC's own refusals
// aside, with a status naming the bad value), or, where the protocol
// answers OK, changes nothing the run depends on. The run ends as
// cluster_test's sync run does: every process exits 0, 469 steps, every
// chunk trained once and applied exactly once on both ps (the same pushes
// on each), the usual accuracy. With the evaluator outside TF_CONFIG,
// evaluation reports no evaluator could make never become the final
// figures.
//
// Not sent here: a request with a worker index in range, a chunk count that
// agrees and an incarnation of its own, or a plausible evaluation. Without
// identities the protocol's only one is (index, incarnation), so the chief
// rightly takes that sender for the worker restarted (fault_test); the
// cluster token keeps strangers out. With --authorize each task has an
// identity of its own, and tests/authorization_test.cc sends exactly those
// (work, heartbeats and progress as another worker, a forged final
// evaluation from a worker): each is refused and changes nothing.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordination.grpc.pb.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

// 60000 examples in worker batches of 64: what the workers count.
constexpr int kChunksPerEpoch = 938;
constexpr int32_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int32_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// The chief's limit (common/rpc.h RpcOptions::max_message_bytes).
constexpr size_t kChiefMaxMessage = size_t{512} << 20;

// One lie and the answer it must get: `code`, with `names` (the bad value)
// in the message.
struct Lie {
  std::string what;
  std::function<grpc::Status(Coordinator::Stub&, grpc::ClientContext*)> send;
  grpc::StatusCode code;
  std::string names;
  // Sent only once the workers train: before, a worker in range would be
  // the first to count the chunks, which the chief takes as the count.
  bool once_training = false;
};

WorkRequest Work(int32_t worker, int32_t chunks_per_epoch) {
  WorkRequest r;
  r.set_worker_index(worker);
  r.set_incarnation(std::numeric_limits<uint64_t>::max());
  r.set_chunks_per_epoch(chunks_per_epoch);
  // Chunks the other worker holds or has done, and ones that do not exist.
  for (int64_t k :
       {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{-1}, int64_t{kChunksPerEpoch}, kInt64Max}) {
    r.add_completed(k);
  }
  r.add_abandoned(3);
  r.add_abandoned(-7);
  r.set_completed_generation(0);  // the run's: only the index or the count keeps them out
  return r;
}

std::vector<Lie> Lies() {
  std::vector<Lie> lies;
  using Stub = Coordinator::Stub;
  using Ctx = grpc::ClientContext;
  for (int32_t w : {-1, 2, kInt32Max, kInt32Min}) {
    const std::string index = absl::StrCat("worker index ", w, " ");
    lies.push_back({absl::StrCat("GetWork from ", index),
                    [w](Stub& s, Ctx* c) {
                      WorkResponse r;
                      return s.GetWork(c, Work(w, kChunksPerEpoch), &r);
                    },
                    grpc::StatusCode::INVALID_ARGUMENT, index + "is not in this cluster of 2"});
    lies.push_back({absl::StrCat("Heartbeat from ", index),
                    [w](Stub& s, Ctx* c) {
                      HeartbeatRequest q;
                      q.set_worker_index(w);
                      q.set_incarnation(0);
                      q.set_done(true);
                      HeartbeatResponse r;
                      return s.Heartbeat(c, q, &r);
                    },
                    grpc::StatusCode::INVALID_ARGUMENT, index + "is not in this cluster of 2"});
    lies.push_back({absl::StrCat("ReportProgress from ", index),
                    [w](Stub& s, Ctx* c) {
                      ProgressReport q;
                      q.set_worker_index(w);
                      q.set_done(true);
                      q.set_examples(kInt64Max);
                      ProgressAck r;
                      return s.ReportProgress(c, q, &r);
                    },
                    grpc::StatusCode::INVALID_ARGUMENT, index + "is not in this cluster"});
  }
  // A worker in range whose chunk count disagrees with the workers' is
  // refused before the chief looks at who it is or what it completed.
  for (int32_t n : {0, -1, kInt32Min}) {
    lies.push_back({absl::StrCat("GetWork from worker 0 counting ", n, " chunks per epoch"),
                    [n](Stub& s, Ctx* c) {
                      WorkResponse r;
                      return s.GetWork(c, Work(0, n), &r);
                    },
                    grpc::StatusCode::INVALID_ARGUMENT,
                    absl::StrCat("chunks per epoch must be at least 1, got ", n)});
  }
  lies.push_back({"GetWork from worker 1 counting 2^31-1 chunks per epoch",
                  [](Stub& s, Ctx* c) {
                    WorkResponse r;
                    return s.GetWork(c, Work(1, kInt32Max), &r);
                  },
                  grpc::StatusCode::INVALID_ARGUMENT,
                  absl::StrCat(kInt32Max, " chunks per epoch over 1 epochs exceed")});
  for (int32_t n : {kChunksPerEpoch - 1, kChunksPerEpoch + 1}) {
    lies.push_back({absl::StrCat("GetWork from worker 1 counting ", n, " chunks per epoch"),
                    [n](Stub& s, Ctx* c) {
                      WorkResponse r;
                      return s.GetWork(c, Work(1, n), &r);
                    },
                    grpc::StatusCode::FAILED_PRECONDITION,
                    absl::StrCat("a worker counts ", n, " batches per epoch but another counted ",
                                 kChunksPerEpoch),
                    /*once_training=*/true});
  }
  // The ring's calls in a parameter-server run, whatever they claim.
  lies.push_back({"RingWork in a parameter-server run",
                  [](Stub& s, Ctx* c) {
                    RingWorkRequest q;
                    q.set_worker_index(0);
                    q.set_incarnation(1);
                    q.set_completed_step(kInt64Max);
                    q.set_failed_ring_id(-1);
                    q.set_chunks_per_epoch(kChunksPerEpoch);
                    q.set_state_ring_id(kInt64Max);
                    RingWorkResponse r;
                    return s.RingWork(c, q, &r);
                  },
                  grpc::StatusCode::FAILED_PRECONDITION,
                  "RingWork is for --strategy=multi_worker_mirrored"});
  lies.push_back({"GetReplica in a parameter-server run",
                  [](Stub& s, Ctx* c) {
                    ReplicaRequest q;
                    q.set_step(-5);
                    q.set_at_least(true);
                    ShardState r;
                    return s.GetReplica(c, q, &r);
                  },
                  grpc::StatusCode::FAILED_PRECONDITION,
                  "GetReplica is for --strategy=multi_worker_mirrored"});
  // Answered OK by design, and harmless: the plan (none before the chief
  // hands it out) is the same for every task, and a task type or index is
  // not trusted for anything (with an evaluator in TF_CONFIG, the final
  // figures come from asking it, not from who claimed to be one).
  for (const auto& [type, index] : std::vector<std::pair<std::string, int32_t>>{
           {"worker", -1}, {"worker", 2}, {"evaluator", kInt32Max}, {"", kInt32Min}}) {
    lies.push_back({absl::StrCat("GetPlan as ", type.empty() ? "no task type" : type, " ", index),
                    [type = type, index = index](Stub& s, Ctx* c) {
                      GetPlanRequest q;
                      q.set_task_type(type);
                      q.set_task_index(index);
                      GetPlanResponse r;
                      grpc::Status st = s.GetPlan(c, q, &r);
                      const bool plan_ok =
                          r.ready() ? r.plan().num_workers() == 2 && r.plan().num_ps() == 2 &&
                                          r.plan().epochs() == 1 && r.plan().mode() == SYNC
                                    : !r.has_plan();
                      if (st.ok() && !plan_ok) {
                        return grpc::Status(grpc::StatusCode::UNKNOWN,
                                            "GetPlan answered " + r.ShortDebugString());
                      }
                      return st;
                    },
                    grpc::StatusCode::OK, ""});
  }
  // A worker's own figures feed only the progress line: NaN (a diverging
  // run sends it) and absurd counts are shown, never acted on.
  lies.push_back({"ReportProgress as worker 0: NaN loss, negative counts, done",
                  [](Stub& s, Ctx* c) {
                    ProgressReport q;
                    q.set_worker_index(0);
                    q.set_epoch(-3);
                    q.set_step(-1);
                    q.set_examples(-kInt64Max);
                    q.set_loss(std::nanf(""));
                    q.set_accuracy(std::nanf(""));
                    q.set_global_version(kInt64Max);
                    q.set_done(true);
                    q.set_steps_per_epoch(kInt32Min);
                    q.set_epoch_examples(kInt64Max);
                    ProgressAck r;
                    return s.ReportProgress(c, q, &r);
                  },
                  grpc::StatusCode::OK, ""});
  // Evaluation reports from a task that is no evaluator: figures no
  // evaluator produces are refused; plausible ones are taken (a report
  // names no sender), and with the evaluator in TF_CONFIG the final
  // figures are the evaluator's answer, not the latest report.
  struct EvalLie {
    std::string what;
    std::function<void(EvalReport*)> lie;
    std::string names;
  };
  for (const EvalLie& e : std::vector<EvalLie>{
           {"a negative version", [](EvalReport* q) { q->set_version(-1); },
            "version -1 is negative"},
           {"negative examples", [](EvalReport* q) { q->set_examples(-10000); },
            "examples -10000 is negative"},
           {"accuracy 7", [](EvalReport* q) { q->set_accuracy(7); }, "accuracy 7 is not in [0, 1]"},
           {"accuracy NaN", [](EvalReport* q) { q->set_accuracy(std::nanf("")); },
            "accuracy nan is not in [0, 1]"},
           {"auc 99", [](EvalReport* q) { q->set_auc(99); }, "auc 99 is neither -1 nor in [0, 1]"},
           {"a negative loss", [](EvalReport* q) { q->set_loss(-1); }, "loss -1 is negative"},
           {"plausible figures", [](EvalReport*) {}, ""}}) {
    lies.push_back({"ReportEval with " + e.what,
                    [lie = e.lie](Stub& s, Ctx* c) {
                      EvalReport q;
                      q.set_version(kInt64Max);
                      q.set_examples(10000);
                      q.set_accuracy(0.5);
                      q.set_loss(1.5);
                      q.set_auc(-1);
                      q.set_final(true);
                      lie(&q);
                      EvalAck r;
                      return s.ReportEval(c, q, &r);
                    },
                    e.names.empty() ? grpc::StatusCode::OK : grpc::StatusCode::INVALID_ARGUMENT,
                    e.names});
  }
  return lies;
}

bool ChiefGone(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::CANCELLED;
}

// Sends `bytes` as the body of a unary call of `method` and waits for the
// status.
grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(2)));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&ctx, method, request, &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// Sends every lie (those marked once_training only when `training`) and
// counts in *wrong each answer that is not the expected one. False when
// the chief stopped answering (the run ended) before the round was through.
bool Round(Coordinator::Stub& stub, const std::vector<Lie>& lies, bool training,
           std::map<std::string, int>* wrong) {
  std::vector<std::string> round_wrong;
  for (const Lie& lie : lies) {
    if (lie.once_training && !training) continue;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(1)));
    const grpc::Status s = lie.send(stub, &ctx);
    if (ChiefGone(s)) return false;
    if (s.error_code() != lie.code || s.error_message().find(lie.names) == std::string::npos) {
      round_wrong.push_back(absl::StrCat(lie.what, ": got ", s.error_code(), " \"",
                                         s.error_message(), "\", want ", lie.code, " naming \"",
                                         lie.names, "\""));
    }
  }
  for (const std::string& w : round_wrong) ++(*wrong)[w];
  return true;
}

TEST(ChiefBadInputTest, LyingCoordinationRequestsChangeNothing) {
  ClusterOptions o;
  o.data_dir = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(o.data_dir);
  o.num_ps = 2;
  o.num_workers = 2;
  // cluster_test's sync run; progress lines every 50 ms show when chunks
  // are trained (the whole run takes a second or two).
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync", "--log_every_s=0.05"};
  // The chief waits for the workers: the first lies reach it before it
  // has a plan, the ones that take time before anything trains.
  o.start_later = {"worker:0", "worker:1"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();

  RpcOptions rpc;
  rpc.max_message_bytes = 1 << 30;  // lets the client send what the chief must refuse
  std::shared_ptr<grpc::Channel> channel = MakeChannel((*c)->Address("chief:0"), rpc);
  ASSERT_TRUE(channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Minutes(1))))
      << (*c)->AllLogs();
  std::unique_ptr<Coordinator::Stub> stub = Coordinator::NewStub(channel);
  const std::vector<Lie> lies = Lies();
  std::map<std::string, int> wrong;  // unexpected answers, and in how many rounds
  ASSERT_TRUE(Round(*stub, lies, /*training=*/false, &wrong)) << (*c)->AllLogs();

  // Bytes that are no protobuf (field 1 with wire type 7), and a
  // GetPlanRequest whose task type makes it 1 KiB larger than the chief's
  // limit.
  const grpc::Status raw = RawCall(channel, "/pscluster.Coordinator/GetWork", "\x0f\xff\xff\xff");
  std::string huge = "\x0a";  // field 1 (task_type), length-delimited
  const uint64_t type_bytes = kChiefMaxMessage + 1024;
  for (uint64_t v = type_bytes;; v >>= 7) {
    huge += static_cast<char>(v < 0x80 ? v : (v & 0x7f) | 0x80);
    if (v < 0x80) break;
  }
  huge.append(type_bytes, 'w');
  // Over a channel of its own without MakeChannel's 2 s keepalive: on a
  // loaded host, a client busy sending 512 MiB may not see its ping
  // answered in time and drop the call ("keepalive watchdog timeout"),
  // which says nothing of the chief's limit.
  grpc::ChannelArguments plain;
  plain.SetMaxSendMessageSize(1 << 30);
  const grpc::Status oversized =
      RawCall(grpc::CreateCustomChannel((*c)->Address("chief:0"),
                                        grpc::InsecureChannelCredentials(), plain),
              "/pscluster.Coordinator/GetPlan", huge);
  huge.clear();
  huge.shrink_to_fit();
  EXPECT_EQ(raw.error_code(), grpc::StatusCode::INTERNAL) << raw.error_message();
  EXPECT_EQ(oversized.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << oversized.error_message();
  EXPECT_NE(oversized.error_message().find("larger than max"), std::string::npos)
      << oversized.error_message();
  std::printf("bytes that are no protobuf: %d \"%s\"\nover the limit: %d \"%s\"\n",
              raw.error_code(), raw.error_message().c_str(), oversized.error_code(),
              oversized.error_message().c_str());

  // Rounds of lies while the workers train, until the chief stops
  // answering. A round counts as one during training when it ended before
  // the chief logged that every worker is done.
  ASSERT_TRUE((*c)->StartTask("worker:0").ok());
  ASSERT_TRUE((*c)->StartTask("worker:1").ok());
  std::atomic<bool> training{false};
  std::atomic<bool> stop{false};
  int rounds = 0, training_rounds = 0;
  std::thread hostile([&] {
    while (!stop.load()) {
      const bool all = training.load();
      if (Round(*stub, lies, all, &wrong)) {
        ++rounds;
        if (all && (*c)->Log("chief:0").find("every worker is done") == std::string::npos) {
          ++training_rounds;
        }
      }
      absl::SleepFor(absl::Milliseconds(2));  // the training takes a second or two
    }
  });
  training = (*c)->WaitForChunks(1, absl::Minutes(3));
  const std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(8));
  stop = true;
  hostile.join();

  for (const auto& [task, code] : codes) {
    EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << (*c)->AllLogs();
  }
  std::printf("%d rounds of %zu lies answered, %d of them while the workers trained\n", rounds,
              lies.size(), training_rounds);
  EXPECT_GT(training_rounds, 0) << (*c)->Log("chief:0");
  for (const auto& [w, n] : wrong) ADD_FAILURE() << w << " (in " << n << " rounds)";

  // The run is cluster_test's SyncTrainsToLossThreshold, untouched.
  const std::string chief = (*c)->Log("chief:0");
  std::optional<FinalFigures> f = ParseFinalLine(chief);
  ASSERT_TRUE(f.has_value()) << (*c)->AllLogs();
  std::printf("test_accuracy=%.4f test_loss=%.4f steps=%ld\n", f->test_accuracy, f->test_loss,
              f->steps);
  EXPECT_EQ(f->steps, 469) << chief;
  EXPECT_LT(f->test_loss, 0.27) << chief;
  EXPECT_GT(f->test_accuracy, 0.92) << chief;
  // The final figures are the evaluator's answer, not a report above.
  EXPECT_NE((*c)->Log("evaluator:0")
                .find(absl::StrFormat("eval: step=469 accuracy=%.4f loss=%.4f (final)",
                                      f->test_accuracy, f->test_loss)),
            std::string::npos)
      << (*c)->Log("evaluator:0");
  // Every chunk trained once (none skipped by a lying "completed", none
  // handed out again by a lying "abandoned"), and applied exactly once on
  // each ps, the same pushes on both.
  EXPECT_NE(chief.find("938 of 938 chunks trained"), std::string::npos) << chief;
  EXPECT_EQ(FindCounter(chief, "every worker is done", "handed_out_again"), 0) << chief;
  const std::regex line("(ps:[01]) version=.* applied=(\\d+) dropped_stale=(\\d+) .*digest=(\\w+)");
  std::map<std::string, std::string> digests;
  for (std::sregex_iterator it(chief.begin(), chief.end(), line), end; it != end; ++it) {
    EXPECT_EQ((*it)[2], "938") << (*it)[1];
    EXPECT_EQ((*it)[3], "0") << (*it)[1];
    digests[(*it)[1]] = (*it)[4];
  }
  ASSERT_EQ(digests.size(), 2u) << chief;
  EXPECT_EQ(digests["ps:0"], digests["ps:1"]);
}

// With the evaluator outside TF_CONFIG (the Kubeflow operator's layout) the
// chief takes the latest evaluation report as the run's final figures, and
// a report names no sender: one with figures no evaluator produces was
// taken too (the final line read test_accuracy=7.0000 test_loss=-1.0000).
// Such reports sent all through the run are refused, and the final
// figures are the evaluator's.
TEST(ChiefBadInputTest, ImpossibleEvaluationReportsNeverBecomeTheFinalFigures) {
  ClusterOptions o;
  o.data_dir = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(o.data_dir);
  o.evaluator_unlisted = true;
  // Two epochs (about 8 s): the evaluator, outside the cluster, must attach
  // while the run lasts; one epoch (4 s) was too short for it on a loaded
  // machine, and the final line was the chief's "not evaluated".
  o.chief_args = {"--model=mlp", "--epochs=2", "--mode=sync"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  std::unique_ptr<Coordinator::Stub> stub =
      Coordinator::NewStub(MakeChannel((*c)->Address("chief:0")));
  std::atomic<bool> stop{false};
  std::map<std::string, int> answers;  // by status code and message
  std::thread hostile([&] {
    while (!stop.load()) {
      grpc::ClientContext ctx;
      ctx.set_wait_for_ready(true);  // from before the chief serves
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
      EvalReport q;
      q.set_version(kInt64Max);
      q.set_examples(10000);
      q.set_accuracy(7);
      q.set_loss(0.01f);
      q.set_auc(-1);
      q.set_final(true);
      EvalAck ack;
      const grpc::Status s = stub->ReportEval(&ctx, q, &ack);
      if (!ChiefGone(s) && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        ++answers[absl::StrCat(s.error_code(), " \"", s.error_message(), "\"")];
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  const std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(5));
  stop = true;
  hostile.join();
  for (const auto& [task, code] : codes) {
    EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << (*c)->AllLogs();
  }
  ASSERT_FALSE(answers.empty()) << "no report reached the chief";
  for (const auto& [answer, n] : answers) {
    std::printf("%d reports answered %s\n", n, answer.c_str());
    EXPECT_EQ(answer, "3 \"evaluation report refused: accuracy 7 is not in [0, 1]\"");
  }
  std::optional<FinalFigures> f = ParseFinalLine((*c)->Log("chief:0"));
  ASSERT_TRUE(f.has_value()) << (*c)->AllLogs();
  std::printf("test_accuracy=%.4f test_loss=%.4f steps=%ld\n", f->test_accuracy, f->test_loss,
              f->steps);
  EXPECT_EQ(f->steps, 938);
  // Two epochs of the mlp, sync: 0.9363 in every run (fault_test's baseline).
  EXPECT_GT(f->test_accuracy, 0.93) << (*c)->Log("chief:0");
  EXPECT_LE(f->test_accuracy, 1) << (*c)->Log("chief:0");
  EXPECT_NE((*c)->Log("evaluator:0")
                .find(absl::StrFormat("eval: step=938 accuracy=%.4f loss=%.4f", f->test_accuracy,
                                      f->test_loss)),
            std::string::npos)
      << (*c)->Log("evaluator:0");
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
