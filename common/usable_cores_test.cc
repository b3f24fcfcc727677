#include "common/usable_cores.h"

#include <sched.h>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(UsableCoresTest, CpuMaxQuotaRoundsUp) {
  EXPECT_EQ(CoresFromCpuMax("200000 100000\n"), 2);
  EXPECT_EQ(CoresFromCpuMax("150000 100000"), 2);
  EXPECT_EQ(CoresFromCpuMax("50000 100000"), 1);
  EXPECT_EQ(CoresFromCpuMax("max 100000\n"), std::nullopt);
  EXPECT_EQ(CoresFromCpuMax(""), std::nullopt);
  EXPECT_EQ(CoresFromCpuMax("-1 100000"), std::nullopt);
}

TEST(UsableCoresTest, CgroupV2PathIsTheUnifiedLine) {
  EXPECT_EQ(CgroupV2Path("0::/\n"), "/");
  EXPECT_EQ(CgroupV2Path("4:memory:/x\n0::/kubepods/pod1/c2\n"), "/kubepods/pod1/c2");
  EXPECT_EQ(CgroupV2Path("1:cpu:/\n"), std::nullopt);
}

TEST(UsableCoresTest, TheSmallestQuotaCapsTheAffinity) {
  EXPECT_EQ(CoresWithin(8, {}), 8);
  EXPECT_EQ(CoresWithin(8, {"max 100000", "300000 100000", "400000 100000"}), 3);
  EXPECT_EQ(CoresWithin(2, {"400000 100000"}), 2);
  EXPECT_EQ(CoresWithin(0, {}), 1);
}

TEST(UsableCoresTest, NoMoreThanTheAffinityMask) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_GE(UsableCores(), 1);
  EXPECT_LE(UsableCores(), CPU_COUNT(&set));
}

}  // namespace
}  // namespace pscluster
