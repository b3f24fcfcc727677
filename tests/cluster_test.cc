// Integration tests: the real ps_server, worker, evaluator and chief
// binaries as separate processes on 127.0.0.1, training on real MNIST.
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
    if (data_dir_.empty()) {
      GTEST_SKIP() << "no MNIST: set PSCLUSTER_DATA_DIR or put the IDX files in "
                      "../shared/data/mnist beside the workspace";
    }
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

TEST_F(ClusterTest, SyncTrainsToLossThreshold) {
  ClusterOptions o;
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync"};
  std::unique_ptr<LocalCluster> c = RunToEnd(o);
  ASSERT_NE(c, nullptr);
  std::optional<FinalFigures> f = ParseFinalLine(c->Log("chief:0"));
  ASSERT_TRUE(f.has_value()) << c->AllLogs();
  EXPECT_LT(f->test_loss, 0.45) << c->Log("chief:0");
  EXPECT_GT(f->test_accuracy, 0.88);
  // 60000 examples in batches of 64: 938 chunks, two per step: 469 steps,
  // plus at most a few where a worker with nothing left pushed an empty
  // gradient so as not to hold the other up.
  EXPECT_NE(c->Log("chief:0").find("938 of 938 chunks trained"), std::string::npos)
      << c->Log("chief:0");
  EXPECT_GE(f->steps, 469);
  EXPECT_LE(f->steps, 472);
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
  EXPECT_LT(f->test_loss, 0.45) << c->Log("chief:0");
  // Every push is applied (a step) or dropped: one per chunk (938), plus
  // one more for each chunk handed out again because a ps dropped it.
  std::optional<long> applied = FindCounter(c->Log("chief:0"), "ps:0 version=", "applied");
  ASSERT_TRUE(applied.has_value());
  std::optional<long> dropped = FindCounter(c->Log("chief:0"), "ps:0 version=", "dropped_stale");
  std::optional<long> again = FindCounter(c->Log("chief:0"), "every worker is done",
                                          "handed_out_again");
  ASSERT_TRUE(again.has_value()) << c->Log("chief:0");
  EXPECT_EQ(*applied + *dropped, 938 + *again);
}

TEST_F(ClusterTest, BackupWorkerGradientsAreDroppedAndTrainingConverges) {
  ClusterOptions o;
  o.num_workers = 3;
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync", "--replicas_to_aggregate=2"};
  o.one_worker_args[2] = {"--straggle_ms=40"};
  std::unique_ptr<LocalCluster> c = RunToEnd(o);
  ASSERT_NE(c, nullptr);
  const std::string chief = c->Log("chief:0");
  std::optional<FinalFigures> f = ParseFinalLine(chief);
  ASSERT_TRUE(f.has_value()) << c->AllLogs();
  EXPECT_LT(f->test_loss, 0.5) << chief;
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
  // The final figures come from the unlisted evaluator's own report.
  EXPECT_GT(f->test_accuracy, 0.88) << c->AllLogs();
  EXPECT_NE(c->Log("evaluator:0").find("the chief no longer answers"), std::string::npos)
      << c->Log("evaluator:0");
}

TEST_F(ClusterTest, ChiefNamesTheTaskThatNeverAnswers) {
  ClusterOptions o;
  o.data_dir = data_dir_;
  o.chief_args = {"--model=mlp", "--epochs=1", "--wait_for_cluster_s=3"};
  o.not_started = {"worker:1"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(2));
  EXPECT_EQ(codes["chief:0"], 1) << (*c)->AllLogs();
  const std::string log = (*c)->Log("chief:0");
  EXPECT_NE(log.find("did not answer within 3s: worker:1 (127.0.0.1:"), std::string::npos) << log;
  // The chief still ends the tasks that did start.
  EXPECT_EQ(codes["ps:0"], 0) << (*c)->AllLogs();
  EXPECT_EQ(codes["worker:0"], 0) << (*c)->AllLogs();
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
