// Users' own models through the real cluster (2 ps, 2 workers, the
// evaluator): a Keras 3 .keras archive and a model TensorFlow.js wrote,
// each with BatchNormalization, "same" convolutions, Dropout and pooling
// the built-in CNN does not have, and a TensorFlow.js model with two
// inputs, each trained for one epoch on MNIST (the second from an .npz that
// numpy writes from the IDX files here). The weights each
// run exports are read back by tests/keras_model_forward.py, an
// independent numpy forward pass over the same model file, which must count
// the evaluator's correct predictions.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

struct TrainedRun {
  std::map<std::string, int> exit_codes;
  std::string chief_log, all_logs, export_path;
};

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp ? tmp : "/tmp";
}

TrainedRun Train(const std::string& data, const std::string& model, const std::string& mode,
          const std::string& name) {
  TrainedRun run;
  const std::string logdir = absl::StrCat(TmpDir(), "/", name);
  ClusterOptions o;
  o.data_dir = data;
  o.chief_args = {"--model=" + model, "--epochs=1", "--mode=" + mode, "--logdir=" + logdir};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  if (!c.ok()) {
    run.all_logs = c.status().ToString();
    return run;
  }
  run.exit_codes = (*c)->Wait(absl::Minutes(10));
  run.chief_log = (*c)->Log("chief:0");
  run.all_logs = (*c)->AllLogs();
  run.export_path = logdir + "/model.safetensors";
  return run;
}

// Train's run, checked: every task exited 0 and the chief printed its
// final figures, which are printed again and returned (nullopt, after a
// failed expectation, without them). `*run` keeps the logs and the export.
std::optional<FinalFigures> TrainAndReport(const std::string& data, const std::string& model,
                                           const std::string& mode, const std::string& name,
                                           TrainedRun* run) {
  *run = Train(data, model, mode, name);
  EXPECT_FALSE(run->exit_codes.empty()) << run->all_logs;
  for (const auto& [task, code] : run->exit_codes) {
    EXPECT_EQ(code, 0) << task << "\n" << run->all_logs;
  }
  std::optional<FinalFigures> f = ParseFinalLine(run->chief_log);
  EXPECT_TRUE(f.has_value()) << run->all_logs;
  if (f) {
    std::printf("%s, 1 epoch, %s: test_accuracy=%.4f test_loss=%.4f\n", model.c_str(),
                mode.c_str(), f->test_accuracy, f->test_loss);
  }
  return f;
}

class KerasModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = TestDataDir();
    PSCLUSTER_SKIP_WITHOUT_MNIST(data_);
  }
  std::string data_;
};

// A model with two inputs, the top and the bottom half of the image (an
// MNIST example's 784 values are the two halves' end to end, the layout
// of a model with several inputs), one Conv2D applied to both halves.
TEST_F(KerasModelTest, TwoInputModelTrainsOnImageHalvesAndItsExportReadsBack) {
  const std::string model = "tests/fixtures/keras/tfjs_halves.json";
  TrainedRun run;
  std::optional<FinalFigures> f = TrainAndReport(data_, model, "sync", "halves", &run);
  ASSERT_TRUE(f.has_value());
  // Measured 0.9466 (one epoch, 40,378 parameters).
  EXPECT_GE(f->test_accuracy, 0.93) << run.chief_log;
  ExpectExportReproducesEvaluator(model, run.export_path, data_, *f);
}

TEST_F(KerasModelTest, Keras3ArchiveWithBatchNormTrainsSyncAndItsExportReadsBack) {
  const std::string model = "tests/fixtures/keras/keras3_cnn.keras";
  TrainedRun run;
  std::optional<FinalFigures> f = TrainAndReport(data_, model, "sync", "keras3", &run);
  ASSERT_TRUE(f.has_value());
  // Measured 0.9759 on 2 cores (sync; which worker takes which chunk varies
  // from run to run, and with it the last digits).
  EXPECT_GE(f->test_accuracy, 0.97) << run.chief_log;
  ExpectExportReproducesEvaluator(model, run.export_path, data_, *f);
}

TEST_F(KerasModelTest, TensorFlowJsModelTrainsAsyncFromNpz) {
  // The same MNIST as an .npz, written by numpy.
  const std::string npz = TmpDir() + "/mnist.npz";
  const std::string script = absl::StrCat(
      "import gzip, numpy as np\n"
      "def idx(p, off):\n"
      "    return np.frombuffer(gzip.open(p).read()[off:], dtype=np.uint8)\n"
      "d = '", data_, "/'\n"
      "x = idx(d + 'train-images-idx3-ubyte.gz', 16).reshape(-1, 28, 28)\n"
      "y = idx(d + 'train-labels-idx1-ubyte.gz', 8).astype(np.int64)\n"
      "xt = idx(d + 't10k-images-idx3-ubyte.gz', 16).reshape(-1, 28, 28, 1)\n"
      "yt = idx(d + 't10k-labels-idx1-ubyte.gz', 8)\n"
      "np.savez('", npz, "', x_train=x, y_train=y, x_test=xt, y_test=yt)\n");
  const ProcessResult py = RunBinary("/usr/bin/python3", {"-c", script}, "", absl::Minutes(2));
  ASSERT_EQ(py.exit_code, 0) << py.output;
  const std::string model = "tests/fixtures/keras/tfjs_cnn.json";
  TrainedRun run;
  std::optional<FinalFigures> f = TrainAndReport(npz, model, "async", "tfjs", &run);
  ASSERT_TRUE(f.has_value());
  // A small model (8 and 16 filters, global average pooling, a sigmoid
  // layer) after one async epoch: measured 0.4367 (chance: 0.1); async
  // orders the updates differently in every run.
  EXPECT_GE(f->test_accuracy, 0.35) << run.chief_log;
  ExpectExportReproducesEvaluator(model, run.export_path, npz, *f);
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
