// TFRecord data end to end: MNIST written as TFRecord shards by
// tests/tools/idx_to_tfrecord.py (our own writer, no TensorFlow) trains the
// same model to the same accuracy as the IDX files, through the real ps,
// workers, evaluator and chief (all of which read the TFRecord folder); a
// bad record makes the worker exit 4 naming the file and the record.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

// Runs the writer on `src` into `out`; "" or the failure's output.
std::string WriteTFRecords(const std::string& src, const std::string& out, int shards) {
  const std::string cmd = absl::StrCat("/usr/bin/python3 tests/tools/idx_to_tfrecord.py '", src,
                                       "' '", out, "' --shards=", shards, " > '", out,
                                       ".log' 2>&1");
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(out + ".log");
    return absl::StrCat("failed: ", cmd, "\n", std::string(std::istreambuf_iterator<char>(log), {}));
  }
  return "";
}

class TFRecordClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    idx_dir_ = TestDataDir();
    PSCLUSTER_SKIP_WITHOUT_MNIST(idx_dir_);
    tfrecord_dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/mnist_tfrecord";
    const std::string error = WriteTFRecords(idx_dir_, tfrecord_dir_, 4);
    ASSERT_EQ(error, "");
  }

  // The final figures of a sync run (2 ps, 2 workers, evaluator) on `data`.
  std::optional<FinalFigures> Train(const std::string& data, std::string* chief_log) {
    ClusterOptions o;
    o.data_dir = data;
    o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync", "--seed=7"};
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return std::nullopt;
    for (const auto& [task, code] : (*c)->Wait(absl::Minutes(5))) {
      EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << (*c)->AllLogs();
    }
    *chief_log = (*c)->Log("chief:0");
    return ParseFinalLine(*chief_log);
  }

  std::string idx_dir_, tfrecord_dir_;
};

TEST_F(TFRecordClusterTest, SameAccuracyAsIdx) {
  std::string idx_log, tfrecord_log;
  std::optional<FinalFigures> idx = Train(idx_dir_, &idx_log);
  ASSERT_TRUE(idx.has_value()) << idx_log;
  std::optional<FinalFigures> tfrecord = Train(tfrecord_dir_, &tfrecord_log);
  ASSERT_TRUE(tfrecord.has_value()) << tfrecord_log;
  std::printf("mlp, 1 epoch, sync, seed 7: IDX test_accuracy=%.4f test_loss=%.4f steps=%ld; "
              "TFRecord (4 shards) test_accuracy=%.4f test_loss=%.4f steps=%ld\n",
              idx->test_accuracy, idx->test_loss, idx->steps, tfrecord->test_accuracy,
              tfrecord->test_loss, tfrecord->steps);
  // The same examples in the same order of indices, the same seed, sync
  // with two workers (deterministic): the same run, figure for figure.
  EXPECT_EQ(tfrecord->steps, idx->steps);
  EXPECT_EQ(tfrecord->test_accuracy, idx->test_accuracy) << tfrecord_log;
  EXPECT_EQ(tfrecord->test_loss, idx->test_loss) << tfrecord_log;
  EXPECT_GT(tfrecord->test_accuracy, 0.9);
}

TEST_F(TFRecordClusterTest, BadRecordExits4NamingIt) {
  // Flip one pixel byte inside every record of shard 1: the length headers
  // stay good (Open indexes the shard), the data CRC fails when a worker
  // reads any of them, which the first chunk does.
  const std::string shard = tfrecord_dir_ + "/train-00001-of-00004.tfrecord";
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << shard;
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  const int64_t record = 838;  // 12 + an Example of 822 bytes + 4
  ASSERT_EQ(size % record, 0) << size;
  for (int64_t at = 12 + 400; at < size; at += record) {
    f.seekp(at);
    f.put('\x5a');
  }
  f.close();
  ClusterOptions o;
  o.data_dir = tfrecord_dir_;
  o.num_workers = 1;
  o.evaluator = false;
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  // The worker's exit is the assertion: the chief and the ps, which would
  // wait for it to come back, are killed when the cluster goes.
  absl::StatusOr<int> code = (*c)->WaitForExit("worker:0", absl::Seconds(60));
  const std::string log = (*c)->Log("worker:0");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 4) << (*c)->AllLogs();
  EXPECT_NE(log.find("train-00001-of-00004.tfrecord: record "), std::string::npos) << log;
  EXPECT_NE(log.find("bad data CRC"), std::string::npos) << log;
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
