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

// The index a device sums by: each row once, in the order first named,
// its positions in order; padded ids -(k + 1) on row k. The same whether
// the rows are looked up by array (few) or by hash map (many).
TEST(EmbeddingTest, IndexListsEachRowsPositionsInOrder) {
  const std::vector<float> ids = {2, 0, 2, 1.75f, 0, 2};
  for (int64_t rows : {3, 1000}) {
    EmbeddingIdIndex index;
    ASSERT_EQ(IndexEmbeddingIds(6, ids.data(), rows, false, &index), -1);
    EXPECT_EQ(index.uniques, 3);
    EXPECT_EQ(index.ints, (std::vector<int32_t>{2, 0, 1,             // rows
                                                0, 3, 5, 6,          // starts
                                                0, 2, 5, 1, 4, 3}))  // positions
        << rows;
  }
  const std::vector<float> padded = {-1, 3, -1, -4};  // rows 0, 3, 0, 3
  EmbeddingIdIndex index;
  ASSERT_EQ(IndexEmbeddingIds(4, padded.data(), 4, true, &index), -1);
  EXPECT_EQ(index.ints, (std::vector<int32_t>{0, 3, 0, 2, 4, 0, 2, 1, 3}));
  // A bad id: its index, nothing built; an empty batch: nothing to sum.
  const std::vector<float> bad = {1, 3, std::nanf("")};
  EXPECT_EQ(IndexEmbeddingIds(3, bad.data(), 3, false, &index), 1);
  EXPECT_EQ(index.uniques, 0);
  EXPECT_TRUE(index.ints.empty());
  ASSERT_EQ(IndexEmbeddingIds(0, ids.data(), 3, false, &index), -1);
  EXPECT_EQ(index.ints, (std::vector<int32_t>{0}));
  // The same index used again (its scratch kept): the same answer.
  ASSERT_EQ(IndexEmbeddingIds(4, padded.data(), 4, true, &index), -1);
  ASSERT_EQ(IndexEmbeddingIds(4, padded.data(), 4, true, &index), -1);
  EXPECT_EQ(index.ints, (std::vector<int32_t>{0, 3, 0, 2, 4, 0, 2, 1, 3}));
  ASSERT_EQ(IndexEmbeddingIds(6, ids.data(), 3, false, &index), -1);
  EXPECT_EQ(index.ints, (std::vector<int32_t>{2, 0, 1, 0, 3, 5, 6, 0, 2, 5, 1, 4, 3}));
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
