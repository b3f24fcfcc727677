// The README's headline on the CPU: the built-in CNN (the chief's default
// --model=cnn) trained for one epoch in the real cluster as train.sh runs it
// (2 ps, 2 workers, sync, Adam, the default batch and seed), and the weights
// it exports read back by an independent forward pass. One training run
// (~12 s of training on 2 cores) serves both tests.
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

// What the run left behind.
struct CnnRun {
  std::map<std::string, int> exit_codes;
  std::string chief_log;
  std::string ps_logs;
  std::string all_logs;
  std::string export_path;
};

class CnnTest : public ::testing::Test {
 protected:
  // Trains once for the whole suite; every test reads the same run.
  static void SetUpTestSuite() {
    data_dir_ = new std::string(TestDataDir());
    if (data_dir_->empty()) return;
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string logdir = absl::StrCat(tmp ? tmp : "/tmp", "/cnn_test_run");
    ClusterOptions o;
    o.data_dir = *data_dir_;
    o.chief_args = {"--model=cnn", "--epochs=1", "--mode=sync", "--logdir=" + logdir};
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    run_ = new CnnRun;
    if (!c.ok()) {
      run_->all_logs = c.status().ToString();
      return;
    }
    run_->exit_codes = (*c)->Wait(absl::Minutes(10));
    run_->chief_log = (*c)->Log("chief:0");
    run_->ps_logs = (*c)->Log("ps:0") + (*c)->Log("ps:1");
    run_->all_logs = (*c)->AllLogs();
    run_->export_path = logdir + "/model.safetensors";
  }
  static void TearDownTestSuite() {
    delete run_;
    run_ = nullptr;
    delete data_dir_;
    data_dir_ = nullptr;
  }
  void SetUp() override {
    PSCLUSTER_SKIP_WITHOUT_MNIST(*data_dir_);
    ASSERT_NE(run_, nullptr);
    ASSERT_FALSE(run_->exit_codes.empty()) << "the cluster did not start: " << run_->all_logs;
  }

  static std::string* data_dir_;
  static CnnRun* run_;
};

std::string* CnnTest::data_dir_ = nullptr;
CnnRun* CnnTest::run_ = nullptr;

TEST_F(CnnTest, OneEpochReachesTheHeadlineAccuracyInExactly469Steps) {
  for (const auto& [task, code] : run_->exit_codes) {
    EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << run_->all_logs;
  }
  std::optional<FinalFigures> f = ParseFinalLine(run_->chief_log);
  ASSERT_TRUE(f.has_value()) << run_->all_logs;
  std::printf("cnn, 1 epoch, 2 ps, 2 workers, sync: test_accuracy=%.4f test_loss=%.4f steps=%ld\n",
              f->test_accuracy, f->test_loss, f->steps);
  // Measured on the 2-core machine: 0.9825 in every run with the default
  // seed (sync with two workers is deterministic: 8 runs, each 0.9825,
  // loss 0.0556); --seed=2..5 gave 0.9849, 0.9832, 0.9845, 0.9811. A
  // change that reorders the arithmetic moves the figure within that spread,
  // so the bar sits just under its lowest value: 0.98, the README's claim.
  EXPECT_GE(f->test_accuracy, 0.98) << run_->chief_log;
  EXPECT_LT(f->test_loss, 0.06) << run_->chief_log;  // measured 0.0468-0.0556
  // 60000 examples in chunks of 64 (the global batch of 128 over two
  // workers): 938 chunks, the last of 32; both workers in every step's set,
  // so two chunks per step: 469 steps, every ps applying 938 pushes.
  EXPECT_EQ(f->steps, 469) << run_->chief_log;
  EXPECT_NE(run_->chief_log.find("938 of 938 chunks trained"), std::string::npos)
      << run_->chief_log;
  for (const char* ps : {"ps:0 version=", "ps:1 version="}) {
    EXPECT_EQ(FindCounter(run_->chief_log, ps, "version"), 469) << ps << "\n" << run_->chief_log;
    EXPECT_EQ(FindCounter(run_->chief_log, ps, "applied"), 938) << ps << "\n" << run_->chief_log;
    EXPECT_EQ(FindCounter(run_->chief_log, ps, "dropped_stale"), 0) << ps;
  }
}

// tests/keras_model_forward.py evaluates the exported weights on the test
// set with a numpy forward pass of its own over model/builtin/cnn.json (Keras
// layouts: HWIO conv kernels, [in, out] Dense kernels, Flatten in
// height-width-channel order) and must count the same correct predictions
// as the evaluator did on the same weights. Read with a wrong Flatten order
// the same file scores ~0.12, with the conv kernels' height and width
// swapped ~0.07.
TEST_F(CnnTest, ExportInKerasLayoutReproducesTheEvaluatorsAccuracy) {
  std::optional<FinalFigures> f = ParseFinalLine(run_->chief_log);
  ASSERT_TRUE(f.has_value()) << run_->all_logs;
  ExpectExportReproducesEvaluator("model/builtin/cnn.json", run_->export_path, *data_dir_, *f);
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
