// Fine-tuning the weights one has (the chief's --initial_weights), with the
// real daemons: a model trained a little and exported, its weights written
// into a Keras 3 .keras archive by tests/fixtures/keras/make_keras_weights.py
// (Debian's /usr/bin/python3 with python3-h5py), and a new run started
// from that archive: its first evaluation, made before the first update,
// scores what the first run's final evaluation scored, and the run improves
// on it. Started again over its checkpoints, the run keeps the checkpoint's
// weights. Weights that do not fit the model exit 2 before anything starts.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp ? tmp : "/tmp";
}

struct Eval {
  long step = -1;
  double accuracy = -1, loss = -1;
};

// The evaluator's first "eval: step=S accuracy=A loss=L" line.
std::optional<Eval> FirstEval(const std::string& log) {
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t at = line.find("eval: step=");
    if (at == absl::string_view::npos) continue;
    Eval e;
    for (absl::string_view field : absl::StrSplit(line.substr(at + 6), ' ')) {
      std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
      if (kv.first == "step") e.step = std::atol(kv.second.c_str());
      if (kv.first == "accuracy") e.accuracy = std::atof(kv.second.c_str());
      if (kv.first == "loss") e.loss = std::atof(kv.second.c_str());
    }
    return e;
  }
  return std::nullopt;
}

// SGD on whole-dataset-sized steps: 14 steps an epoch, a model that is far
// from trained after one, and one that the next epoch clearly improves.
const std::vector<std::string> kTraining = {"--epochs=1", "--optimizer=sgd",
                                            "--learning_rate=0.05", "--lr_decay_steps=0",
                                            "--batch_size=4096"};

TEST(InitialWeightsTest, AKerasArchiveOfTrainedWeightsIsWhereTheNextRunStarts) {
  const std::string data = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(data);
  const std::string dir = TmpDir();
  const std::string exported = dir + "/first.safetensors";
  const std::string archive = dir + "/first.keras";

  // 1. Train the mlp a little and export it.
  ClusterOptions o;
  o.data_dir = data;
  o.num_ps = 1;
  o.num_workers = 1;
  o.chief_args = kTraining;
  o.chief_args.insert(o.chief_args.end(), {"--model=mlp", "--export_path=" + exported});
  std::optional<FinalFigures> first;
  {
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const auto& [task, code] : (*c)->Wait(absl::Minutes(5))) {
      ASSERT_EQ(code, 0) << task << "\n" << (*c)->AllLogs();
    }
    first = ParseFinalLine((*c)->Log("chief:0"));
    ASSERT_TRUE(first.has_value()) << (*c)->Log("chief:0");
  }
  ASSERT_GT(first->test_accuracy, 0.2);  // trained a little...
  ASSERT_LT(first->test_accuracy, 0.93);  // ...and with room to improve

  // 2. Its weights in a Keras 3 archive: config.json, model.weights.h5.
  const ProcessResult py =
      RunBinary("/usr/bin/python3",
                {"tests/fixtures/keras/make_keras_weights.py", "model/builtin/mlp.json",
                 exported, archive},
                "", absl::Minutes(2));
  ASSERT_EQ(py.exit_code, 0) << py.output;

  // 3. A new run from the archive. The worker waits 1.5 s before each push,
  // so the evaluator (every 0.3 s) scores the initial weights first.
  o.chief_args = kTraining;
  o.chief_args.insert(o.chief_args.end(), {"--model=" + archive, "--initial_weights=archive",
                                           "--checkpoint_dir=" + dir + "/checkpoints"});
  o.worker_binary = kFaultyWorker;
  o.worker_args = {"--straggle_ms=1500"};
  o.evaluator_args = {"--eval_interval_s=0.3"};
  std::string chief;
  std::optional<Eval> at_start;
  {
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const auto& [task, code] : (*c)->Wait(absl::Minutes(5))) {
      ASSERT_EQ(code, 0) << task << "\n" << (*c)->AllLogs();
    }
    chief = (*c)->Log("chief:0");
    at_start = FirstEval((*c)->Log("evaluator:0"));
    ASSERT_TRUE(at_start.has_value()) << (*c)->Log("evaluator:0");
    ASSERT_EQ(at_start->step, 0) << "the first evaluation came after an update\n"
                                 << (*c)->Log("evaluator:0");
  }
  EXPECT_NE(chief.find("initial weights from " + archive), std::string::npos) << chief;
  const std::optional<FinalFigures> last = ParseFinalLine(chief);
  ASSERT_TRUE(last.has_value()) << chief;
  std::printf("archive accuracy %.4f loss %.4f; first evaluation (step 0) %.4f loss %.4f; "
              "final %.4f loss %.4f\n",
              first->test_accuracy, first->test_loss, at_start->accuracy, at_start->loss,
              last->test_accuracy, last->test_loss);
  // The same weights on the same test set: the same figures, as printed.
  EXPECT_NEAR(at_start->accuracy, first->test_accuracy, 1e-4);
  EXPECT_NEAR(at_start->loss, first->test_loss, 1e-4);
  EXPECT_GE(last->test_accuracy, at_start->accuracy);
  EXPECT_LT(last->test_loss, at_start->loss);

  // 4. The same command again over the run's checkpoints: the checkpoint
  // (the trained weights, every chunk done) wins over --initial_weights.
  o.worker_binary = "worker/worker";
  o.worker_args.clear();
  {
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const auto& [task, code] : (*c)->Wait(absl::Minutes(5))) {
      ASSERT_EQ(code, 0) << task << "\n" << (*c)->AllLogs();
    }
    const std::string again = (*c)->Log("chief:0");
    EXPECT_NE(again.find("resuming from the checkpoint of step " + std::to_string(last->steps)),
              std::string::npos)
        << again;
    const std::optional<FinalFigures> resumed = ParseFinalLine(again);
    ASSERT_TRUE(resumed.has_value()) << again;
    EXPECT_EQ(resumed->steps, last->steps);
    EXPECT_NEAR(resumed->test_accuracy, last->test_accuracy, 1e-4);
  }

  // 5. The mlp's weights for the cnn: refused at start-up, each named.
  const std::string json =
      "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": [\"127.0.0.1:2\"], "
      "\"worker\": [\"127.0.0.1:3\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}";
  ProcessResult r = RunBinary("chief/chief", {"--model=cnn", "--initial_weights=" + archive},
                              json, absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--initial_weights=" + archive + ": 7 mismatches with model 'cnn'"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("variable 'conv1/kernel' [3, 3, 1, 32] is absent from the file"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("variable 'dense1/kernel' has shape [1600, 64] in the model but "
                          "[784, 32] in the file (layers/dense/vars/0)"),
            std::string::npos)
      << r.output;

  // 6. A file on which libhdf5 allocates 23 GB (hdf5_weights_fuzzer): its
  // reading process is stopped at its memory bound and the chief exits 2
  // naming the file, in about a second.
  const std::string hostile = "fuzz/corpus/hdf5_weights_fuzzer/libhdf5_allocates_23_GB";
  r = RunBinary("chief/chief", {"--model=cnn", "--initial_weights=" + hostile}, json,
                absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--initial_weights=" + hostile +
                          ": reading it took more than 512 MiB of memory, which a weights file "
                          "of 41584 bytes does not need: the file is malformed"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
