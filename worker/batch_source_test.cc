#include "worker/batch_source.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "model/chunk_reader.h"
#include "model/idx_dataset.h"

namespace pscluster {
namespace {

// 50 examples of 2x3 pixels whose values name the example and the pixel.
Dataset Numbered() {
  Dataset d;
  d.count = 50;
  d.height = 2;
  d.width = 3;
  for (int e = 0; e < d.count; ++e) {
    for (int p = 0; p < 6; ++p) d.images.push_back(e * 10.0f + p);
    d.targets.push_back(static_cast<float>(e % 10));
  }
  return d;
}

// Get(k) returns exactly what ChunkReader::Fill gives for chunk k, hit or
// miss, and counts the hits of the stride guess.
void ExpectSequence(bool prefetch, int stride_guess, const std::vector<int64_t>& ks,
                    int64_t want_hits) {
  const Dataset data = Numbered();
  ChunkReader reader(data, 8, /*seed=*/3);
  ChunkReader oracle(data, 8, /*seed=*/3);
  BatchSource source(&reader, 8, stride_guess, prefetch);
  for (int64_t k : ks) {
    const absl::StatusOr<Batch> got = source.Get(k);
    ASSERT_TRUE(got.ok()) << got.status();
    const Batch& b = *got;
    std::vector<float> images(8 * 6);
    std::vector<float> labels(8);
    const absl::StatusOr<int> filled = oracle.Fill(k, images.data(), labels.data());
    ASSERT_TRUE(filled.ok()) << filled.status();
    const int n = *filled;
    ASSERT_EQ(b.size, n) << "chunk " << k;
    EXPECT_EQ(b.key, static_cast<uint64_t>(k));
    EXPECT_EQ(std::vector<float>(b.images, b.images + n * 6),
              std::vector<float>(images.begin(), images.begin() + n * 6))
        << "chunk " << k;
    EXPECT_EQ(std::vector<float>(b.targets, b.targets + n),
              std::vector<float>(labels.begin(), labels.begin() + n))
        << "chunk " << k;
  }
  EXPECT_EQ(source.gets(), static_cast<int64_t>(ks.size()));
  EXPECT_EQ(source.hits(), want_hits);
}

TEST(BatchSourceTest, OneWorkerInOrderIsAlwaysReadyAfterTheFirst) {
  // 7 chunks per epoch: 5..8 cross into the next epoch's permutation, and
  // chunk 6 is an epoch's short last one.
  ExpectSequence(true, 1, {0, 1, 2, 3, 4, 5, 6, 7, 8}, 8);
}

TEST(BatchSourceTest, StrideIsLearnedAndWrongGuessesCostNothingButTime) {
  // Guess 2 apart: 2 and 4 hit; 5 misses (6 was gathered), the stride
  // becomes 1: 6 hits; 9 misses; 1 (going back) misses.
  ExpectSequence(true, 2, {0, 2, 4, 5, 6, 9, 1}, 3);
}

TEST(BatchSourceTest, WithoutPrefetchNothingIsGatheredAhead) {
  ExpectSequence(false, 1, {0, 1, 2, 3}, 0);
}

}  // namespace
}  // namespace pscluster
