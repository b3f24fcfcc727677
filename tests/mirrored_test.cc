// --strategy=multi_worker_mirrored through the real daemons on 127.0.0.1:
// no ps, a ring all-reduce between the workers. Every replica must hold the
// same bits after every step (the workers log a digest per step), the ring
// must move 2(n-1)/n of the model per worker per step, the evaluator must
// read the weights from a worker, and a worker killed with -9 mid-run must
// not stop the run: the chief forms a new ring and the run ends as well.
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

// The mlp's parameters: 784*32 + 32 + 32*10 + 10.
constexpr int64_t kMlpParams = 25450;

class MirroredTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ = TestDataDir();
    PSCLUSTER_SKIP_WITHOUT_MNIST(data_dir_);
  }

  ClusterOptions Options(int workers, const std::string& name,
                         const std::vector<std::string>& extra = {}) {
    ClusterOptions o;
    o.data_dir = data_dir_;
    o.num_ps = 0;
    o.num_workers = workers;
    const char* tmp = std::getenv("TEST_TMPDIR");
    checkpoint_dir_ = absl::StrCat(tmp ? tmp : "/tmp", "/ckpt-mirrored-", name);
    o.chief_args = {"--strategy=multi_worker_mirrored", "--model=mlp", "--epochs=1",
                    "--checkpoint_every_steps=100", "--heartbeat_timeout_s=2",
                    "--log_every_s=0.2", "--checkpoint_dir=" + checkpoint_dir_};
    // 64 examples per worker and step, as in the parameter servers' tests:
    // 938 chunks an epoch.
    o.chief_args.push_back(absl::StrCat("--batch_size=", 64 * workers));
    o.chief_args.insert(o.chief_args.end(), extra.begin(), extra.end());
    o.worker_args = {"--log_replica_digests", "--ring_timeout_s=5"};
    return o;
  }

  // Runs to the end; the final line's figures, or nullopt (test failed).
  std::optional<FinalFigures> Finish(LocalCluster& c, absl::Duration timeout) {
    std::map<std::string, int> codes = c.Wait(timeout);
    for (const auto& [task, code] : codes) {
      EXPECT_EQ(code, 0) << task << " exited with " << code << "\n" << c.AllLogs();
    }
    std::optional<FinalFigures> f = ParseFinalLine(c.Log("chief:0"));
    EXPECT_TRUE(f.has_value()) << c.AllLogs();
    return f;
  }

  // Every "replica step=S digest=D" line of each worker's log: for every
  // step, the digests of all workers that applied it must be one. Returns
  // how many steps were compared across at least two workers.
  int ExpectReplicasAgree(LocalCluster& c, int workers) {
    std::map<long, std::map<std::string, std::string>> digests;  // step -> worker -> digest
    const std::regex line("replica step=(\\d+) digest=([0-9a-f]{8})");
    for (int w = 0; w < workers; ++w) {
      const std::string task = absl::StrCat("worker:", w);
      // Every life of the task (a restarted worker logs to .2, .3, ...).
      const std::string log = c.Log(task);
      for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) {
        const long step = std::stol((*it)[1]);
        std::string& d = digests[step][absl::StrCat(task, "#", it->position())];
        d = (*it)[2];
      }
    }
    int compared = 0;
    for (const auto& [step, by_worker] : digests) {
      if (by_worker.size() < 2) continue;
      ++compared;
      const std::string& first = by_worker.begin()->second;
      for (const auto& [who, d] : by_worker) {
        EXPECT_EQ(d, first) << "step " << step << ": " << who << " holds other bits";
        if (d != first) return compared;  // one report is enough
      }
    }
    return compared;
  }

  std::string data_dir_;
  std::string checkpoint_dir_;
};

// Whether `log` holds one of each group of alternatives, the groups in
// order. (std::regex recurses per character and overflows the stack on a
// long run's log.)
bool InOrder(const std::string& log, const std::vector<std::vector<std::string>>& groups) {
  size_t at = 0;
  for (const std::vector<std::string>& alternatives : groups) {
    size_t next = std::string::npos;
    for (const std::string& a : alternatives) {
      const size_t found = log.find(a, at);
      if (found != std::string::npos) next = std::min(next, found + a.size());
    }
    if (next == std::string::npos) return false;
    at = next;
  }
  return true;
}

TEST_F(MirroredTest, ThreeReplicasHoldTheSameBitsAfterEveryStepAndTheRingMovesTwoThirds) {
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(Options(3, "fp32"));
  ASSERT_TRUE(c.ok()) << c.status();
  std::optional<FinalFigures> f = Finish(**c, absl::Minutes(4));
  ASSERT_TRUE(f.has_value());
  const std::string chief = (*c)->Log("chief:0");
  // 938 chunks, three a step: 312 full steps and one of two.
  EXPECT_NE(chief.find("938 of 938 chunks trained in 313 steps"), std::string::npos) << chief;
  EXPECT_EQ(f->steps, 313);
  EXPECT_EQ(ExpectReplicasAgree(**c, 3), 313);
  // One epoch of the mlp, three workers of batch 64: global batch 192 (the
  // two-worker runs' 128 end at 0.9256).
  EXPECT_GT(f->test_accuracy, 0.91) << chief;
  // The evaluator read the final weights from a worker's replica.
  EXPECT_NE((*c)->Log("evaluator:0").find("eval: step=313 accuracy="), std::string::npos)
      << (*c)->Log("evaluator:0");
  // 2(n-1)/n of the model's fp32 bytes per worker per step (the segments'
  // rounding to whole values is well within 1%), and the wire's headers
  // within 5% of it.
  const double bound = 2.0 * 2 / 3 * kMlpParams * 4;
  for (int w = 0; w < 3; ++w) {
    const std::string log = (*c)->Log(absl::StrCat("worker:", w));
    const std::optional<long> payload = FindCounter(log, "done:", "payload_sent");
    const std::optional<long> sent = FindCounter(log, "done:", "sent");
    ASSERT_TRUE(payload.has_value() && sent.has_value()) << log;
    std::cout << "worker " << w << ": payload " << *payload << " B/step, wire " << *sent
              << " B/step, 2(n-1)/n x M = " << bound << "\n";
    EXPECT_NEAR(*payload, bound, bound * 0.01) << log;
    EXPECT_LE(*sent, bound * 1.05) << log;
    EXPECT_GE(*sent, *payload) << log;
  }
  EXPECT_NE(chief.find("final checkpoint of step 313"), std::string::npos) << chief;
}

TEST_F(MirroredTest, Bfloat16OnTheRingHalvesTheBytesAndKeepsReplicasIdentical) {
  absl::StatusOr<std::unique_ptr<LocalCluster>> c =
      LocalCluster::Start(Options(2, "bf16", {"--ring_codec=bf16"}));
  ASSERT_TRUE(c.ok()) << c.status();
  std::optional<FinalFigures> f = Finish(**c, absl::Minutes(4));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->steps, 469);
  EXPECT_EQ(ExpectReplicasAgree(**c, 2), 469);
  // fp32's run of this cluster ends at 0.9256 (the parameter servers' sync
  // figure); bf16 partial sums cost little.
  EXPECT_GT(f->test_accuracy, 0.92) << (*c)->Log("chief:0");
  const double bound = 2.0 * 1 / 2 * kMlpParams * 2;
  for (int w = 0; w < 2; ++w) {
    const std::string log = (*c)->Log(absl::StrCat("worker:", w));
    const std::optional<long> payload = FindCounter(log, "done:", "payload_sent");
    ASSERT_TRUE(payload.has_value()) << log;
    EXPECT_NEAR(*payload, bound, bound * 0.01) << log;
  }
}

TEST_F(MirroredTest, AWorkerKilledMidRunLeavesTheRingAndJoinsAgainWhenBack) {
  // Four epochs over three workers; worker 1 is killed with -9 a sixteenth
  // of the way and started again a second later, as the launcher does. It
  // must be back before the two others finish the rest: with two epochs
  // and the kill at an eighth, the two trained the rest in 4.1 s beside a
  // full test run, before the restarted worker answered. Four epochs give
  // it about 9 s.
  constexpr int kChunks = 938 * 4;
  absl::StatusOr<std::unique_ptr<LocalCluster>> c =
      LocalCluster::Start(Options(3, "kill", {"--epochs=4"}));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->WaitForChunks(kChunks / 16, absl::Minutes(2))) << (*c)->AllLogs();
  ASSERT_TRUE((*c)->KillAndRestart("worker:1", absl::Seconds(1)).ok());
  std::optional<FinalFigures> f = Finish(**c, absl::Minutes(4));
  ASSERT_TRUE(f.has_value());
  const std::string chief = (*c)->Log("chief:0");
  EXPECT_TRUE(InOrder(chief, {{"ring 1 broke: worker 1 was lost",
                               "ring 1 broke: worker 1 restarted"},
                              {"worker 1 is back", "worker 1 joins"},
                              {": workers [0, 1, 2] from step"}}))
      << chief;
  // Every chunk trained once (a step no survivor completed is handed out
  // again), and the replicas agree on every step, also the returned one's.
  EXPECT_NE(chief.find(absl::StrCat(kChunks, " of ", kChunks, " chunks trained")),
            std::string::npos)
      << chief;
  EXPECT_GT(ExpectReplicasAgree(**c, 3), 500);
  EXPECT_NE((*c)->Log("worker:1").find("took the state of step"), std::string::npos);
  // Four epochs of the mlp, global batch 192, worker 1 killed and back:
  // 0.9454-0.9458 in four runs.
  EXPECT_GT(f->test_accuracy, 0.94) << chief;
  std::regex interesting("(broke|lost|restarted|is back|joins|ring \\d+:|took the state)"
                         "[^\n]*");
  for (std::sregex_iterator it(chief.begin(), chief.end(), interesting), end; it != end; ++it) {
    std::cout << "  chief: " << it->str() << "\n";
  }
  std::cout << "kill -9 worker:1: test_accuracy=" << f->test_accuracy << " steps=" << f->steps
            << "\n";
}

TEST_F(MirroredTest, TheSeedsCnnReachesItsAccuracyThoughAWorkerIsKilledMidRun) {
  // The built-in CNN, 6 epochs over two workers (the launcher's run ends at
  // 0.9902 undisturbed); worker 0 is killed with -9 a quarter of the way,
  // the ring goes on with worker 1 alone, and worker 0 joins again.
  constexpr int kChunks = 938 * 6;
  ClusterOptions o = Options(2, "cnn-kill", {"--model=cnn", "--epochs=6"});
  o.worker_args = {"--ring_timeout_s=5"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->WaitForChunks(kChunks / 4, absl::Minutes(3))) << (*c)->AllLogs();
  ASSERT_TRUE((*c)->KillAndRestart("worker:0", absl::Seconds(1)).ok());
  std::optional<FinalFigures> f = Finish(**c, absl::Minutes(8));
  ASSERT_TRUE(f.has_value());
  const std::string chief = (*c)->Log("chief:0");
  EXPECT_TRUE(InOrder(chief, {{"workers [1] from step"}, {"workers [0, 1] from step"}}))
      << chief;
  EXPECT_NE(chief.find(absl::StrCat(kChunks, " of ", kChunks, " chunks trained")),
            std::string::npos)
      << chief;
  EXPECT_GE(f->test_accuracy, 0.988) << chief;
  std::cout << "cnn, 6 epochs, 2 workers, kill -9 worker:0: test_accuracy=" << f->test_accuracy
            << " steps=" << f->steps << "\n";
}

TEST_F(MirroredTest, AChiefKilledMidRunResumesTheRingFromItsCheckpoint) {
  constexpr int kChunks = 938 * 2;
  absl::StatusOr<std::unique_ptr<LocalCluster>> c =
      LocalCluster::Start(Options(2, "chief-kill", {"--epochs=2"}));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->WaitForChunks(kChunks / 3, absl::Minutes(2))) << (*c)->AllLogs();
  ASSERT_TRUE((*c)->KillAndRestart("chief:0", absl::Seconds(1)).ok());
  std::optional<FinalFigures> f = Finish(**c, absl::Minutes(4));
  ASSERT_TRUE(f.has_value());
  const std::string chief = (*c)->Log("chief:0");
  EXPECT_NE(chief.find("resuming from the checkpoint of step"), std::string::npos) << chief;
  EXPECT_NE(chief.find(absl::StrCat(kChunks, " of ", kChunks, " chunks trained")),
            std::string::npos)
      << chief;
  // The workers went back to the new chief's checkpoint (their own newer
  // state is of the old chief's rings).
  EXPECT_TRUE(InOrder((*c)->Log("worker:0"), {{"took the state of step 0 from the chief"},
                                              {"took the state of step"}}))
      << (*c)->Log("worker:0");
  EXPECT_GT(ExpectReplicasAgree(**c, 2), 900);
  // Two epochs of the mlp over two workers: 0.9363 undisturbed (the
  // parameter servers' sync figure).
  EXPECT_GT(f->test_accuracy, 0.93) << chief;
}

TEST_F(MirroredTest, ARunResumesUnderTheOtherStrategyFromItsCheckpoint) {
  // One epoch on the parameter servers, the second on the ring, a third on
  // the parameter servers again, over one checkpoint directory: each run
  // starts from the last one's final checkpoint (its values, optimizer
  // slots and data position, resharded between two ps and one replica).
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/ckpt-mirrored-switch");
  std::filesystem::remove_all(dir);
  struct Leg {
    bool ring;
    int epochs;
    long steps;
  };
  double last_accuracy = 0;
  for (const Leg& leg : {Leg{false, 1, 469}, Leg{true, 2, 938}, Leg{false, 3, 1407}}) {
    SCOPED_TRACE(absl::StrCat(leg.ring ? "ring" : "parameter servers", ", epoch ", leg.epochs));
    ClusterOptions o;
    o.data_dir = data_dir_;
    o.num_ps = leg.ring ? 0 : 2;
    o.num_workers = 2;
    o.chief_args = {"--model=mlp", absl::StrCat("--epochs=", leg.epochs),
                    "--checkpoint_dir=" + dir, "--log_every_s=0.5",
                    absl::StrCat("--strategy=",
                                 leg.ring ? "multi_worker_mirrored" : "parameter_server")};
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    std::optional<FinalFigures> f = Finish(**c, absl::Minutes(4));
    ASSERT_TRUE(f.has_value());
    const std::string chief = (*c)->Log("chief:0");
    if (leg.epochs > 1) {
      EXPECT_NE(chief.find(absl::StrCat("resuming from the checkpoint of step ", leg.steps - 469)),
                std::string::npos)
          << chief;
    }
    EXPECT_EQ(f->steps, leg.steps) << chief;
    // Every epoch trained once: the resumed run's chunks are the new ones.
    EXPECT_NE(chief.find(absl::StrCat(938 * leg.epochs, " of ", 938 * leg.epochs,
                                      " chunks trained")),
              std::string::npos)
        << chief;
    // More epochs, better (the parameter servers' 1, 2 and 3 epochs
    // undisturbed: 0.9256, 0.9363, 0.94).
    EXPECT_GT(f->test_accuracy, last_accuracy + 0.002) << chief;
    last_accuracy = f->test_accuracy;
    std::cout << (leg.ring ? "ring" : "2 ps") << ", to epoch " << leg.epochs
              << ": test_accuracy=" << f->test_accuracy << " steps=" << f->steps << "\n";
  }
  EXPECT_GT(last_accuracy, 0.935);
}

TEST_F(MirroredTest, TheRingGoesOnWithoutAWorkerThatDoesNotComeBack) {
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(Options(3, "gone"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->WaitForChunks(938 / 4, absl::Minutes(2))) << (*c)->AllLogs();
  ASSERT_TRUE((*c)->Kill("worker:2").ok());
  std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(4));
  for (const auto& [task, code] : codes) {
    if (task == "worker:2") continue;
    EXPECT_EQ(code, 0) << task << "\n" << (*c)->AllLogs();
  }
  const std::string chief = (*c)->Log("chief:0");
  std::optional<FinalFigures> f = ParseFinalLine(chief);
  ASSERT_TRUE(f.has_value()) << (*c)->AllLogs();
  EXPECT_NE(chief.find("workers [0, 1] from step"), std::string::npos) << chief;
  EXPECT_NE(chief.find("938 of 938 chunks trained"), std::string::npos) << chief;
  EXPECT_GT(f->test_accuracy, 0.91) << chief;
}

// A checkpoint after every step: one is due when the last step is done
// and the workers, told DONE, never park for it. The run must end at once
// rather than wait out the chief's park timeout (60 s) and skip it.
TEST_F(MirroredTest, ACheckpointDueAfterTheLastStepDoesNotHoldUpTheEnd) {
  absl::StatusOr<std::unique_ptr<LocalCluster>> c =
      LocalCluster::Start(Options(2, "every-step", {"--checkpoint_every_steps=1"}));
  ASSERT_TRUE(c.ok()) << c.status();
  std::optional<FinalFigures> f = Finish(**c, absl::Minutes(5));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->steps, 469);
  const std::string chief = (*c)->Log("chief:0");
  EXPECT_EQ(chief.find("checkpoint skipped"), std::string::npos) << chief;
  EXPECT_NE(chief.find("final checkpoint of step 469"), std::string::npos) << chief;
}

TEST_F(MirroredTest, TheChiefRefusesSettingsThatDoNotApplyToTheRing) {
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--strategy=ring"}, "--strategy=ring: strategy 'ring' is not one of"},
      {{"--strategy=multi_worker_mirrored", "--mode=async"},
       "--mode=async: multi_worker_mirrored is synchronous"},
      {{"--strategy=multi_worker_mirrored", "--push_codec=int8"},
       "--push_codec=int8: applies to --strategy=parameter_server"},
      {{"--strategy=multi_worker_mirrored", "--transport=tcp"},
       "--transport=tcp: applies to --strategy=parameter_server"},
      {{"--strategy=multi_worker_mirrored", "--replicas_to_aggregate=1"},
       "--replicas_to_aggregate=1: multi_worker_mirrored sums every worker's gradient"},
      {{"--strategy=multi_worker_mirrored", "--ring_codec=int8"},
       "--ring_codec=int8: must be fp32, bf16 or fp16"},
      {{"--ring_codec=bf16"}, "--ring_codec=bf16: applies to --strategy=multi_worker_mirrored"},
      {{"--strategy=multi_worker_mirrored", "--ring_chunk_bytes=2"},
       "--ring_chunk_bytes=2: must be in [4, 268435456]"},
  };
  const std::string tf_config =
      R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]},
          "task": {"type": "chief", "index": 0}})";
  for (const Case& k : cases) {
    ProcessResult r = RunBinary("chief/chief", k.flags, tf_config, absl::Seconds(20));
    EXPECT_EQ(r.exit_code, 2) << k.flags.back() << "\n" << r.output;
    EXPECT_NE(r.output.find(k.says), std::string::npos) << k.flags.back() << "\n" << r.output;
  }
  // Without ps, the parameter servers' strategy has nothing to run on.
  ProcessResult r = RunBinary("chief/chief", {}, tf_config, absl::Seconds(20));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("lists no ps tasks: --strategy=parameter_server needs at least one"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
