// The worker's compute threads (--threads): explicit values win; the
// default (0) is every core the process may use on the CPU, 1 on a GPU.
// The worker logs its choice before it reads the data, so a missing data
// folder (exit 4) ends each run here early.
#include <sched.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/usable_cores.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

constexpr char kTfConfig[] =
    "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"]}, "
    "\"task\": {\"type\": \"worker\", \"index\": 0}}";

// The worker's "compute threads: N (why)" line, run with `args`.
std::string ThreadsLine(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"--data_dir=/nonexistent"};
  all.insert(all.end(), args.begin(), args.end());
  ProcessResult r = RunBinary("worker/worker", all, kTfConfig, absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 4) << r.output;  // the data, checked last
  const size_t at = r.output.find("compute threads: ");
  if (at == std::string::npos) return "(none) " + r.output;
  return r.output.substr(at, r.output.find('\n', at) - at);
}

TEST(WorkerThreadsTest, AnExplicitCountWins) {
  EXPECT_EQ(ThreadsLine({"--device=cpu", "--threads=3"}), "compute threads: 3 (--threads)");
}

TEST(WorkerThreadsTest, TheCpuDefaultIsTheCoresOfItsAffinityMask) {
  // The worker inherits this thread's mask: one CPU, then all of ours.
  cpu_set_t all, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const std::string pinned = ThreadsLine({"--device=cpu"});
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
  EXPECT_EQ(pinned, "compute threads: 1 (default: the cores this process may use)");

  // All of ours: as many as this process may use (the same mask and cgroup).
  EXPECT_EQ(ThreadsLine({"--device=cpu"}),
            absl::StrCat("compute threads: ", UsableCores(),
                         " (default: the cores this process may use)"));
  if (UsableCores() == 1) GTEST_SKIP() << "one core here: the default cannot be told from 1";
}

TEST(WorkerThreadsTest, OnAGpuTheDefaultIsOne) {
  ProcessResult r = RunBinary("worker/worker", {"--data_dir=/nonexistent", "--device=cuda"},
                              kTfConfig, absl::Seconds(60));
  if (r.exit_code == 2) GTEST_SKIP() << "[gpu] no usable CUDA GPU: " << r.output;
  EXPECT_NE(r.output.find("compute threads: 1 (default on a GPU)"), std::string::npos)
      << r.output;
}

TEST(WorkerThreadsTest, OutOfRangeCountsAreRefused) {
  ProcessResult r =
      RunBinary("worker/worker", {"--data_dir=/nonexistent", "--threads=-1"}, kTfConfig,
                absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--threads must be in [0, 256], got -1"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
