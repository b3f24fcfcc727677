// Integration tests: the real ps_server, worker, evaluator and chief
// binaries as separate processes on 127.0.0.1, training on real MNIST.
#include <cstdio>
#include <map>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ = TestDataDir();
    PSCLUSTER_SKIP_WITHOUT_MNIST(data_dir_);
  }

  // Runs a cluster to the end and checks every task exited 0.
  std::unique_ptr<LocalCluster> RunToEnd(ClusterOptions options) {
    options.data_dir = data_dir_;
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(options);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(5));
    for (const auto& [task, code] : codes) {
      EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << (*c)->AllLogs();
    }
    return *std::move(c);
  }

  std::string data_dir_;
};

// The figures behind the thresholds below, in the test's output.
void Print(const char* what, const FinalFigures& f) {
  std::printf("%s: test_accuracy=%.4f test_loss=%.4f steps=%ld\n", what, f.test_accuracy,
              f.test_loss, f.steps);
}

TEST_F(ClusterTest, SyncTrainsToLossThreshold) {
  ClusterOptions o;
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync"};
  std::unique_ptr<LocalCluster> c = RunToEnd(o);
  ASSERT_NE(c, nullptr);
  std::optional<FinalFigures> f = ParseFinalLine(c->Log("chief:0"));
  ASSERT_TRUE(f.has_value()) << c->AllLogs();
  Print("mlp, 1 epoch, sync", *f);
  // Sync with two workers is deterministic: 0.9256 and 0.2611 in every run
  // (5 of this test, 5 of the unlisted evaluator's below, 5 of
  // security_test's, 2 through train.sh); --seed=2..5 gave accuracy
  // 0.9275-0.9350, loss 0.2204-0.2533. A change that reorders the
  // arithmetic moves the figures within that spread: the bars sit just
  // beyond its worst values.
  EXPECT_LT(f->test_loss, 0.27) << c->Log("chief:0");
  EXPECT_GT(f->test_accuracy, 0.92) << c->Log("chief:0");
  // 60000 examples in batches of 64: 938 chunks (the last of 32), and both
  // workers in every step's set: two chunks per step, 469 steps.
  EXPECT_NE(c->Log("chief:0").find("938 of 938 chunks trained"), std::string::npos)
      << c->Log("chief:0");
  EXPECT_EQ(f->steps, 469) << c->Log("chief:0");
  EXPECT_EQ(FindCounter(c->Log("chief:0"), "ps:0 version=", "dropped_stale"), 0);
  EXPECT_NE(c->Log("evaluator:0").find(absl::StrCat("eval: step=", f->steps, " accuracy=")),
            std::string::npos)
      << c->Log("evaluator:0");
}

TEST_F(ClusterTest, AsyncTrainsToLossThreshold) {
  ClusterOptions o;
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=async"};
  std::unique_ptr<LocalCluster> c = RunToEnd(o);
  ASSERT_NE(c, nullptr);
  std::optional<FinalFigures> f = ParseFinalLine(c->Log("chief:0"));
  ASSERT_TRUE(f.has_value()) << c->AllLogs();
  Print("mlp, 1 epoch, async", *f);
  // Measured over 7 runs (the order of the pushes varies): accuracy
  // 0.9275-0.9290, loss 0.2515-0.2535 (sync: 0.9256, 0.2611).
  EXPECT_LT(f->test_loss, 0.26) << c->Log("chief:0");
  EXPECT_GT(f->test_accuracy, 0.925) << c->Log("chief:0");
  // Every push is applied on every ps, one per chunk (938): none dropped,
  // none handed out again, the same pushes on both ps.
  const std::string chief = c->Log("chief:0");
  for (const char* ps : {"ps:0 version=", "ps:1 version="}) {
    EXPECT_EQ(FindCounter(chief, ps, "applied"), 938) << ps << chief;
    EXPECT_EQ(FindCounter(chief, ps, "dropped_stale"), 0) << ps;
  }
  EXPECT_EQ(FindCounter(chief, "every worker is done", "handed_out_again"), 0) << chief;
  const std::regex digest("ps:([01]) version=.* digest=([0-9a-f]+)");
  std::map<std::string, std::string> digests;
  for (std::sregex_iterator it(chief.begin(), chief.end(), digest), end; it != end; ++it) {
    digests[(*it)[1]] = (*it)[2];
  }
  ASSERT_EQ(digests.size(), 2u) << chief;
  EXPECT_EQ(digests["0"], digests["1"]) << chief;
}

TEST_F(ClusterTest, BackupWorkerGradientsAreDroppedAndTrainingConverges) {
  ClusterOptions o;
  o.num_workers = 3;
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync", "--replicas_to_aggregate=2"};
  o.worker_binary = kFaultyWorker;
  o.one_worker_args[2] = {"--straggle_ms=40"};
  std::unique_ptr<LocalCluster> c = RunToEnd(o);
  ASSERT_NE(c, nullptr);
  const std::string chief = c->Log("chief:0");
  std::optional<FinalFigures> f = ParseFinalLine(chief);
  ASSERT_TRUE(f.has_value()) << c->AllLogs();
  Print("mlp, 1 epoch, sync, 3 workers, 2 aggregated, worker:2 straggling", *f);
  // Measured over 5 runs: accuracy 0.9322-0.9344, loss 0.2315-0.2395, in
  // ~715 steps: chunks that one ps dropped and the other applied were
  // trained again (issue 9, item 1). Applied once each, the run takes
  // two chunks per step like the plain sync run above (loss 0.2611 with
  // this seed, 0.22-0.26 over seeds): the bars allow that too.
  EXPECT_LT(f->test_loss, 0.28) << chief;
  EXPECT_GT(f->test_accuracy, 0.92) << chief;
  std::optional<long> dropped = FindCounter(chief, "ps:0 version=", "dropped_stale");
  ASSERT_TRUE(dropped.has_value()) << chief;
  EXPECT_GT(*dropped, 0) << chief;
  EXPECT_NE(c->Log("worker:2").find("pushes dropped as stale"), std::string::npos);
}

TEST_F(ClusterTest, EvaluatorOutsideTheClusterAsTheKubeflowOperatorSetsItUp) {
  ClusterOptions o;
  o.evaluator_unlisted = true;
  o.chief_args = {"--model=mlp", "--epochs=1"};
  std::unique_ptr<LocalCluster> c = RunToEnd(o);
  ASSERT_NE(c, nullptr);
  std::optional<FinalFigures> f = ParseFinalLine(c->Log("chief:0"));
  ASSERT_TRUE(f.has_value()) << c->AllLogs();
  Print("mlp, 1 epoch, sync, evaluator not in the cluster", *f);
  // The final figures come from the unlisted evaluator's own report: the
  // same training as SyncTrainsToLossThreshold, 0.9256 in every run.
  EXPECT_GT(f->test_accuracy, 0.92) << c->AllLogs();
  EXPECT_NE(c->Log("evaluator:0").find("the chief no longer answers"), std::string::npos)
      << c->Log("evaluator:0");
}

// No evaluator in TF_CONFIG: given --data_dir, the chief scores the final
// weights on the test set itself (compute/scoring.h).
TEST_F(ClusterTest, WithoutAnEvaluatorTheChiefEvaluatesOnItsDataDir) {
  ClusterOptions o;
  o.evaluator = false;
  o.chief_args = {"--model=mlp", "--epochs=1", "--data_dir=" + data_dir_};
  std::unique_ptr<LocalCluster> c = RunToEnd(o);
  ASSERT_NE(c, nullptr);
  const std::string chief = c->Log("chief:0");
  std::optional<FinalFigures> f = ParseFinalLine(chief);
  ASSERT_TRUE(f.has_value()) << c->AllLogs();
  Print("mlp, 1 epoch, sync, no evaluator, the chief evaluates", *f);
  // The training of SyncTrainsToLossThreshold (0.9256 and 0.2611 in every
  // run), scored the evaluator's way: the same figures (measured: 0.9256,
  // 0.2611); the bars sit 0.02 below them.
  EXPECT_GT(f->test_accuracy, 0.905) << chief;
  EXPECT_LT(f->test_loss, 0.28) << chief;
  EXPECT_EQ(f->steps, 469) << chief;
  EXPECT_NE(chief.find(absl::StrCat("eval: step=", f->steps, " accuracy=")), std::string::npos)
      << chief;
  EXPECT_NE(chief.find("(final, by the chief on 10000 examples)"), std::string::npos) << chief;
}

// No evaluator and no --data_dir: the final line says so, without a NaN.
TEST_F(ClusterTest, WithoutAnEvaluatorOrDataDirTheFinalLineSaysNotEvaluated) {
  ClusterOptions o;
  o.evaluator = false;
  o.chief_args = {"--model=mlp", "--epochs=1"};
  std::unique_ptr<LocalCluster> c = RunToEnd(o);
  ASSERT_NE(c, nullptr);
  const std::string chief = c->Log("chief:0");
  const size_t at = chief.rfind("final: ");
  ASSERT_NE(at, std::string::npos) << c->AllLogs();
  const std::string line = chief.substr(at, chief.find('\n', at) - at);
  EXPECT_EQ(line.rfind("final: not evaluated (no evaluator in TF_CONFIG; give the chief "
                       "--data_dir to evaluate) steps=469 epochs=1 wall_s=",
                       0),
            0u)
      << line;
  EXPECT_EQ(line.find("nan"), std::string::npos) << line;
  // Parsers see no accuracy, and the steps.
  std::optional<FinalFigures> f = ParseFinalLine(chief);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->test_accuracy, -1);
  EXPECT_EQ(f->steps, 469);
}

TEST_F(ClusterTest, ChiefNamesTheTaskThatNeverAnswers) {
  ClusterOptions o;
  o.data_dir = data_dir_;
  o.chief_args = {"--model=mlp", "--epochs=1", "--wait_for_cluster_s=3"};
  o.not_started = {"worker:1"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(2));
  // It gave the run up (exit 3, common/exit_codes.h): starting it again
  // would not bring worker:1.
  EXPECT_EQ(codes["chief:0"], 3) << (*c)->AllLogs();
  const std::string log = (*c)->Log("chief:0");
  EXPECT_NE(log.find("did not answer within 3s: worker:1 (127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("the run failed; every task was told to stop (exit code 3)"),
            std::string::npos)
      << log;
  // The chief still ends the tasks that did start, as failed: each exits 3,
  // so the failure shows wherever it ran and no supervisor restarts them
  // to wait for a run that is over.
  EXPECT_EQ(codes["ps:0"], 3) << (*c)->AllLogs();
  EXPECT_EQ(codes["ps:1"], 3) << (*c)->AllLogs();
  EXPECT_EQ(codes["worker:0"], 3) << (*c)->AllLogs();
  EXPECT_EQ(codes["evaluator:0"], 3) << (*c)->AllLogs();
}

// Keras's other optimizers and its gradient clipping, end to end: an async
// run with RMSprop clipped to a global norm trains, and says so; SGD
// clipped to a tiny global norm barely moves (each update moves the
// weights by lr * 1e-5 at most), which it would not if the workers did not
// clip.
TEST_F(ClusterTest, AsyncWorkersClipTheirGradientsAsKerasWithAnyOptimizer) {
  ClusterOptions o;
  o.chief_args = {"--model=mlp",       "--epochs=1",          "--mode=async",
                  "--optimizer=rmsprop", "--learning_rate=0.001", "--global_clipnorm=1"};
  std::unique_ptr<LocalCluster> c = RunToEnd(o);
  ASSERT_NE(c, nullptr);
  std::optional<FinalFigures> f = ParseFinalLine(c->Log("chief:0"));
  ASSERT_TRUE(f.has_value()) << c->AllLogs();
  Print("mlp, 1 epoch, async, rmsprop, global_clipnorm 1", *f);
  EXPECT_NE(c->Log("chief:0").find("optimizer: rmsprop, learning_rate 0.001 x 0.5 every 1000 "
                                   "updates, rho 0.9, momentum 0, epsilon 1e-07, global_clipnorm 1 "
                                   "(--optimizer)"),
            std::string::npos)
      << c->Log("chief:0");
  // 0.9193-0.9198 over 4 runs (the order of the pushes varies).
  EXPECT_GT(f->test_accuracy, 0.915) << c->Log("chief:0");

  // Unclipped, this run reaches 0.94 (0.9417 through train.sh); clipped,
  // 0.0780 in 4 runs of 4: the weights barely left their initial values.
  o.chief_args = {"--model=mlp",       "--epochs=1",        "--mode=async",
                  "--optimizer=sgd",   "--learning_rate=0.5", "--global_clipnorm=0.00001"};
  c = RunToEnd(o);
  ASSERT_NE(c, nullptr);
  f = ParseFinalLine(c->Log("chief:0"));
  ASSERT_TRUE(f.has_value()) << c->AllLogs();
  Print("mlp, 1 epoch, async, sgd 0.5, global_clipnorm 1e-5", *f);
  EXPECT_LT(f->test_accuracy, 0.2) << c->Log("chief:0");
}

// Sync over 2 ps: the ps clip the step's mean gradient by the norm of the
// whole of it, which neither holds (update/step_clipping.h). The same run
// with the ring (each worker holds the whole mean and clips it) lands on
// the same accuracy; clipped to almost nothing, training barely moves.
TEST_F(ClusterTest, SyncPsClipTheStepsWholeGradientAsTheRingDoes) {
  std::map<std::string, double> accuracy;
  for (const char* clip : {"--global_clipnorm=0.5", "--clipnorm=0.2"}) {
    for (const bool ring : {false, true}) {
      const std::string what = absl::StrCat(ring ? "ring" : "2 ps", ", sgd 0.5, ", clip + 2);
      SCOPED_TRACE(what);
      ClusterOptions o;
      o.num_ps = ring ? 0 : 2;
      o.chief_args = {"--model=mlp",         "--epochs=1", "--mode=sync",     "--optimizer=sgd",
                      "--learning_rate=0.5", clip,         "--batch_size=128"};
      if (ring) o.chief_args.push_back("--strategy=multi_worker_mirrored");
      std::unique_ptr<LocalCluster> c = RunToEnd(o);
      ASSERT_NE(c, nullptr);
      std::optional<FinalFigures> f = ParseFinalLine(c->Log("chief:0"));
      ASSERT_TRUE(f.has_value()) << c->AllLogs();
      Print(what.c_str(), *f);
      accuracy[what] = f->test_accuracy;
      EXPECT_EQ(f->steps, 469) << c->Log("chief:0");
    }
  }
  // Measured (2026-11-30): 0.9310 both ways with global_clipnorm, 0.9219
  // both ways with clipnorm (test losses equal to 4 places too).
  EXPECT_NEAR(accuracy["2 ps, sgd 0.5, global_clipnorm=0.5"],
              accuracy["ring, sgd 0.5, global_clipnorm=0.5"], 0.001);
  EXPECT_NEAR(accuracy["2 ps, sgd 0.5, clipnorm=0.2"], accuracy["ring, sgd 0.5, clipnorm=0.2"],
              0.001);

  // Unclipped, sgd 0.5 reaches 0.94 in this epoch; clipped to 1e-5, the
  // weights barely leave their initial values.
  ClusterOptions o;
  o.chief_args = {"--model=mlp",     "--epochs=1",          "--mode=sync",
                  "--optimizer=sgd", "--learning_rate=0.5", "--global_clipnorm=0.00001"};
  std::unique_ptr<LocalCluster> c = RunToEnd(o);
  ASSERT_NE(c, nullptr);
  std::optional<FinalFigures> f = ParseFinalLine(c->Log("chief:0"));
  ASSERT_TRUE(f.has_value()) << c->AllLogs();
  Print("2 ps, sync, sgd 0.5, global_clipnorm 1e-5", *f);
  EXPECT_LT(f->test_accuracy, 0.2) << c->Log("chief:0");
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
