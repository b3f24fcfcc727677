// --device on the worker and the evaluator binaries: bad values and devices
// that cannot be used exit 2 naming the value, before any network activity;
// --help lists the flag.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compute/backend_factory.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

struct Binary {
  const char* path;
  const char* task_type;
};
const Binary kBinaries[] = {{"worker/worker", "worker"},
                            {"evaluator/evaluator", "evaluator"}};

std::string TfConfig(const char* type) {
  return absl::StrCat(
      "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": [\"127.0.0.1:2\"], "
      "\"worker\": [\"127.0.0.1:3\"], \"evaluator\": [\"127.0.0.1:4\"]}, "
      "\"task\": {\"type\": \"",
      type, "\", \"index\": 0}}");
}

class DeviceFlagTest : public ::testing::TestWithParam<Binary> {
 protected:
  ProcessResult Run(const std::string& device) {
    return RunBinary(GetParam().path,
                     {"--data_dir=/nonexistent", "--device=" + device},
                     TfConfig(GetParam().task_type), absl::Seconds(30));
  }
};

TEST_P(DeviceFlagTest, BadValuesExitTwoNamingThem) {
  for (const char* bad :
       {"gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:1000"}) {
    const ProcessResult r = Run(bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find(absl::StrCat("error: --device=", bad, ":")),
              std::string::npos)
        << r.output;
  }
}

TEST_P(DeviceFlagTest, CudaWithoutAGpuExitsTwoSayingWhy) {
  std::string why;
  // "[gpu] ": a skip that depends on the machine's GPUs (tests/run_all.sh).
  if (CudaDevicesAvailable(&why) > 0) GTEST_SKIP() << "[gpu] this machine has a GPU";
  const ProcessResult r = Run("cuda");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device=cuda: cuda:0 cannot be used: "),
            std::string::npos)
      << r.output;
}

TEST_P(DeviceFlagTest, GpuBeyondTheMachinesExitsTwo) {
  const ProcessResult r = Run("cuda:200");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device=cuda:200: cuda:200 "), std::string::npos)
      << r.output;
}

TEST_P(DeviceFlagTest, HelpListsTheFlag) {
  const ProcessResult r =
      RunBinary(GetParam().path, {"--help"}, "", absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--device"), std::string::npos) << r.output;
}

// The launcher's question to the worker, on any machine: one line saying
// whether a GPU runs the model; exit 2 naming a model it cannot read.
TEST(CheckModelTest, WorkerSaysWhetherAGpuRunsTheModel) {
  const std::string tf_config = TfConfig("worker");
  ProcessResult r = RunBinary("worker/worker", {"--check_model=cnn"}, tf_config, absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(BuiltWithCuda() ? "check_model: cnn: a GPU runs it"
                                          : "check_model: cnn: the GPU does not run it: "),
            std::string::npos)
      << r.output;
  r = RunBinary("worker/worker", {"--check_model=/nonexistent/model.json"}, tf_config,
                absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--check_model=/nonexistent/model.json: "), std::string::npos)
      << r.output;
}

INSTANTIATE_TEST_SUITE_P(WorkerAndEvaluator, DeviceFlagTest,
                         ::testing::ValuesIn(kBinaries),
                         [](const ::testing::TestParamInfo<Binary>& info) {
                           return std::string(info.param.task_type);
                         });

}  // namespace
}  // namespace testing
}  // namespace pscluster
