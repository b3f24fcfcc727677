#include "worker/batch_source.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "absl/status/status.h"
#include "model/chunk_reader.h"
#include "model/example_source.h"
#include "model/idx_dataset.h"

namespace pscluster {
namespace {

// 50 examples of 2x3 pixels whose values name the example and the pixel,
// and two int64 ids each (standing for pixels 1 and 2), e * 2^40 + j.
Dataset Numbered() {
  Dataset d;
  d.count = 50;
  d.height = 2;
  d.width = 3;
  d.ids_first = 1;
  d.ids_per_example = 2;
  for (int e = 0; e < d.count; ++e) {
    for (int p = 0; p < 6; ++p) d.images.push_back(e * 10.0f + p);
    d.targets.push_back(static_cast<float>(e % 10));
    for (int j = 0; j < 2; ++j) d.ids.push_back((int64_t{e} << 40) + j);
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
    // The ids travel with their examples.
    ASSERT_NE(b.ids, nullptr);
    for (int i = 0; i < n; ++i) {
      const int64_t e = static_cast<int64_t>(b.images[i * 6]) / 10;
      EXPECT_EQ(b.ids[i * 2], e << 40) << "chunk " << k << " example " << i;
      EXPECT_EQ(b.ids[i * 2 + 1], (e << 40) + 1) << "chunk " << k << " example " << i;
    }
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

// Peek(k) gathers chunk k ahead of its Get (the chief named it as the
// worker's next): that Get is a hit with the same examples, the batch the
// last Get returned stays as it was, and a Peek of a chunk the worker then
// does not get costs nothing but the gathering.
TEST(BatchSourceTest, PeekGathersTheNamedChunkForItsGet) {
  const Dataset data = Numbered();
  ChunkReader reader(data, 8, /*seed=*/3);
  ChunkReader oracle(data, 8, /*seed=*/3);
  BatchSource source(&reader, 8, /*stride_guess=*/2, /*prefetch=*/false);
  auto expect_chunk = [&](const Batch& b, int64_t k) {
    std::vector<float> images(8 * 6), labels(8);
    const absl::StatusOr<int> n = oracle.Fill(k, images.data(), labels.data());
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(b.size, *n) << "chunk " << k;
    EXPECT_EQ(b.key, static_cast<uint64_t>(k));
    EXPECT_EQ(std::vector<float>(b.images, b.images + *n * 6),
              std::vector<float>(images.begin(), images.begin() + *n * 6))
        << "chunk " << k;
  };
  absl::StatusOr<Batch> now = source.Get(0);
  ASSERT_TRUE(now.ok()) << now.status();
  absl::StatusOr<Batch> next = source.Peek(3);
  ASSERT_TRUE(next.ok()) << next.status();
  expect_chunk(*next, 3);
  expect_chunk(*now, 0);  // untouched by the Peek
  absl::StatusOr<Batch> got = source.Get(3);
  ASSERT_TRUE(got.ok()) << got.status();
  expect_chunk(*got, 3);
  EXPECT_EQ(source.hits(), 1);
  ASSERT_TRUE(source.Peek(5).ok());
  got = source.Get(4);  // not the peeked one
  ASSERT_TRUE(got.ok()) << got.status();
  expect_chunk(*got, 4);
  EXPECT_EQ(source.hits(), 1);
  EXPECT_EQ(source.gets(), 3);
}

// A source whose example 13 is a bad record, as a TFRecord file's can be.
class OneBadRecord : public ExampleSource {
 public:
  explicit OneBadRecord(const Dataset* d) : memory_(d) {}
  int count() const override { return memory_.count(); }
  int height() const override { return memory_.height(); }
  int width() const override { return memory_.width(); }
  int channels() const override { return memory_.channels(); }
  int targets_per_example() const override { return 1; }
  absl::Status Gather(const int32_t* indices, int n, float* images,
                      float* targets) const override {
    for (int i = 0; i < n; ++i) {
      if (indices[i] == 13) return absl::DataLossError("f.tfrecord: record 13: bad data CRC");
    }
    return memory_.Gather(indices, n, images, targets);
  }

 private:
  InMemoryExampleSource memory_;
};

// The chunk holding the bad record fails with its error, gathered ahead or
// not; the other chunks, before and after, are read as ever.
TEST(BatchSourceTest, BadRecordFailsItsChunkOnly) {
  const Dataset data = Numbered();
  const OneBadRecord bad(&data);
  for (bool prefetch : {false, true}) {
    ChunkReader reader(&bad, 8, /*seed=*/3);
    ChunkReader oracle(data, 8, /*seed=*/3);
    BatchSource source(&reader, 8, 1, prefetch);
    int failed = 0;
    for (int64_t k = 0; k < 7; ++k) {
      std::vector<float> images(8 * 6), labels(8);
      const absl::StatusOr<int> n = oracle.Fill(k, images.data(), labels.data());
      ASSERT_TRUE(n.ok());
      const absl::StatusOr<Batch> b = source.Get(k);
      if (!b.ok()) {
        ++failed;
        EXPECT_TRUE(absl::IsDataLoss(b.status())) << b.status();
        EXPECT_EQ(b.status().message(), "f.tfrecord: record 13: bad data CRC");
        continue;
      }
      EXPECT_EQ(b->size, *n);
      EXPECT_EQ(std::vector<float>(b->images, b->images + *n * 6),
                std::vector<float>(images.begin(), images.begin() + *n * 6));
    }
    EXPECT_EQ(failed, 1) << "prefetch " << prefetch;  // example 13 is in one chunk an epoch
  }
}

}  // namespace
}  // namespace pscluster
