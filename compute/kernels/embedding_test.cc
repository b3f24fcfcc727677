// The Embedding kernels (compute/kernels/embedding.h): the gather, the
// scatter-add with repeated ids, and which ids are out of range.
#include "compute/kernels/embedding.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

TEST(EmbeddingTest, ForwardGathersRowsAndTruncatesIds) {
  const std::vector<float> table = {0, 1, 10, 11, 20, 21};  // 3 rows of 2
  const std::vector<float> ids = {2, 0, 2, 1.75f};
  std::vector<float> y(8, -1.0f);
  EmbeddingForward(4, ids.data(), table.data(), 2, y.data());
  EXPECT_EQ(y, (std::vector<float>{20, 21, 0, 1, 20, 21, 10, 11}));
}

TEST(EmbeddingTest, BackwardAddsEveryUseOfARowAndLeavesTheOthers) {
  const std::vector<float> ids = {2, 0, 2};
  const std::vector<float> dy = {1, 2, 3, 4, 5, 6};
  std::vector<float> dtable = {0.5f, 0.5f, 0, 0, 0, 0};  // row 0 holds a shared layer's part
  EmbeddingBackward(3, ids.data(), dy.data(), 2, dtable.data());
  EXPECT_EQ(dtable, (std::vector<float>{3.5f, 4.5f, 0, 0, 6, 8}));
}

TEST(EmbeddingTest, FirstBadIdFindsNegativeLargeAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> good = {0, 10, 10.5f};
  EXPECT_EQ(FirstBadId(3, good.data(), 11), -1);
  for (float bad : {-1.0f, -0.5f, 11.0f, 1e9f, nan}) {
    const std::vector<float> ids = {3, bad, 4};
    EXPECT_EQ(FirstBadId(3, ids.data(), 11), 1) << bad;
  }
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
