// The OpenBLAS kernel family chosen for this CPU agrees with the flags the
// kernel reports in /proc/cpuinfo, read independently of the compiler's
// CPUID builtins.
#include "compute/kernels/blas_env.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

std::set<std::string> CpuFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(BlasEnvTest, CoreTypeFollowsTheCpuFlags) {
  const std::set<std::string> f = CpuFlags();
  if (f.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  const char* best = BestOpenBlasCoreType();
  if (f.count("avx512f") && f.count("avx512bw") && f.count("avx512dq") && f.count("avx512vl")) {
    ASSERT_NE(best, nullptr);
    EXPECT_STREQ(best, "SkylakeX");
  } else if (f.count("avx2") && f.count("fma")) {
    ASSERT_NE(best, nullptr);
    EXPECT_STREQ(best, "Haswell");
  } else {
    EXPECT_EQ(best, nullptr);
  }
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
