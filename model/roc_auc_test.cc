#include "model/roc_auc.h"

#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(RocAucTest, KnownRankings) {
  EXPECT_DOUBLE_EQ(RocAuc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}), 0.75);
  EXPECT_DOUBLE_EQ(RocAuc({0.9f, 0.1f}, {1, 0}), 1.0);
  EXPECT_DOUBLE_EQ(RocAuc({0.5f, 0.5f}, {1, 0}), 0.5);
}

TEST(RocAucTest, OneClassOnlyIsMinusOne) {
  EXPECT_EQ(RocAuc({0.5f, 0.7f}, {1, 1}), -1);
  EXPECT_EQ(RocAuc({0.5f, 0.7f}, {0, 0}), -1);
  EXPECT_EQ(RocAuc({}, {}), -1);
}

TEST(RocAucTest, TiesAcrossClassesCountHalf) {
  // Positives at 0.5 and 0.9; negatives at 0.5 and 0.1: pairs won 3, tied 1.
  EXPECT_DOUBLE_EQ(RocAuc({0.5f, 0.9f, 0.5f, 0.1f}, {1, 1, 0, 0}), 3.5 / 4);
}

}  // namespace
}  // namespace pscluster
