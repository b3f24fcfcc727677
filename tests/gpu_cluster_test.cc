// A cluster of the real binaries whose workers compute on CUDA
// (--device=cuda:N, one GPU per worker where there are several) and whose
// evaluator picks the GPU itself (--device=auto):
// trains the CNN for an epoch, must reach the accuracy the CPU run reaches,
// and the workers must say they ran on their GPU. Skips, saying why,
// without a GPU or without CUDA in the build, or without MNIST.
#include <string>

#include "absl/strings/str_cat.h"
#include "compute/backend_factory.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

TEST(GpuClusterTest, WorkersOnCudaTrainTheCnn) {
  std::string why;
  const int gpus = CudaDevicesAvailable(&why);
  // "[gpu] ": a skip for want of a GPU (tests/run_all.sh).
  if (gpus == 0) GTEST_SKIP() << "[gpu] no CUDA device: " << why;
  ClusterOptions o;
  o.data_dir = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(o.data_dir);
  o.num_ps = 1;
  o.num_workers = 2;
  o.chief_args = {"--model=cnn", "--epochs=1", "--mode=sync"};
  for (int i = 0; i < o.num_workers; ++i) {
    o.one_worker_args[i] = {absl::StrCat("--device=cuda:", i % gpus)};
  }
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(10));
  for (const auto& [task, code] : codes) {
    EXPECT_EQ(code, 0) << task << "\n" << (*c)->AllLogs();
  }
  std::optional<FinalFigures> f = ParseFinalLine((*c)->Log("chief:0"));
  ASSERT_TRUE(f.has_value()) << (*c)->AllLogs();
  EXPECT_GT(f->test_accuracy, 0.97) << (*c)->Log("chief:0");
  for (int i = 0; i < o.num_workers; ++i) {
    const std::string log = (*c)->Log(absl::StrCat("worker:", i));
    EXPECT_NE(log.find(absl::StrCat("device=cuda:", i % gpus, " split:")),
              std::string::npos)
        << log;
  }
  // The evaluator runs with the default --device=auto: the first GPU.
  EXPECT_NE((*c)->Log("evaluator:0").find("test examples on cuda:0 ("),
            std::string::npos)
      << (*c)->Log("evaluator:0");
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
