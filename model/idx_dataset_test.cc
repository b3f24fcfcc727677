#include "model/idx_dataset.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

using Bytes = std::vector<uint8_t>;

void Put32(Bytes* b, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b->push_back(v >> shift);
}

Bytes ImagesFile(uint32_t count, uint32_t rows, uint32_t cols,
                 const Bytes& pixels, uint32_t magic = 0x00000803) {
  Bytes b;
  Put32(&b, magic);
  Put32(&b, count);
  Put32(&b, rows);
  Put32(&b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

Bytes LabelsFile(const Bytes& labels, uint32_t magic = 0x00000801) {
  Bytes b;
  Put32(&b, magic);
  Put32(&b, labels.size());
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

Bytes Gzip(const Bytes& raw) {
  uLongf size = compressBound(raw.size()) + 64;
  Bytes out(size);
  z_stream s{};
  // windowBits 15 + 16: gzip framing.
  EXPECT_EQ(deflateInit2(&s, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY),
            Z_OK);
  s.next_in = const_cast<Bytef*>(raw.data());
  s.avail_in = raw.size();
  s.next_out = out.data();
  s.avail_out = out.size();
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

class IdxDatasetTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp ? tmp : "/tmp") + "/idx_" +
           testing::UnitTest::GetInstance()->current_test_info()->name();
    mkdir(dir_.c_str(), 0755);
  }

  std::string Write(const std::string& name, const Bytes& bytes) {
    std::string path = dir_ + "/" + name;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr) << path;
    if (f != nullptr) {
      std::fwrite(bytes.data(), 1, bytes.size(), f);
      std::fclose(f);
    }
    return path;
  }

  // A 3-image 2x2 test split, gzip-compressed.
  void WriteSmallSplit(const std::string& prefix) {
    Write(prefix + "-images-idx3-ubyte.gz",
          Gzip(ImagesFile(3, 2, 2, {0, 255, 51, 102, 1, 2, 3, 4, 5, 6, 7, 8})));
    Write(prefix + "-labels-idx1-ubyte.gz", Gzip(LabelsFile({7, 0, 9})));
  }

  // Expects an InvalidArgument whose message names `path` and contains
  // `what`.
  void ExpectImagesError(const std::string& path, const std::string& what) {
    absl::StatusOr<IdxImages> images = ReadIdxImages(path);
    ASSERT_FALSE(images.ok()) << path;
    EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(images.status().message());
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  }

  std::string dir_;
};

TEST_F(IdxDatasetTest, LoadsGzipSplit) {
  WriteSmallSplit("train");
  absl::StatusOr<Dataset> d = LoadMnist(dir_, Split::kTrain);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 3);
  EXPECT_EQ(d->height, 2);
  EXPECT_EQ(d->width, 2);
  ASSERT_EQ(d->images.size(), 12u);
  EXPECT_EQ(d->images[0], 0.0f);
  EXPECT_EQ(d->images[1], 1.0f);
  EXPECT_FLOAT_EQ(d->images[2], 0.2f);
  EXPECT_FLOAT_EQ(d->images[3], 0.4f);
  EXPECT_EQ(d->targets, (std::vector<float>{7, 0, 9}));
}

TEST_F(IdxDatasetTest, LoadsUncompressedTestSplit) {
  Write("t10k-images-idx3-ubyte", ImagesFile(1, 1, 3, {0, 1, 255}));
  Write("t10k-labels-idx1-ubyte", LabelsFile({4}));
  absl::StatusOr<Dataset> d = LoadMnist(dir_ + "/", Split::kTest);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 1);
  EXPECT_EQ(d->width, 3);
  EXPECT_FLOAT_EQ(d->images[1], 1.0f / 255.0f);
  EXPECT_EQ(d->targets, std::vector<float>{4});
}

TEST_F(IdxDatasetTest, PrefersGzipWhenBothExist) {
  WriteSmallSplit("train");
  Write("train-images-idx3-ubyte", Bytes{1, 2, 3});  // would fail if read
  Write("train-labels-idx1-ubyte", Bytes{1, 2, 3});
  EXPECT_TRUE(LoadMnist(dir_, Split::kTrain).ok());
}

TEST_F(IdxDatasetTest, GzipIsDetectedFromContent) {
  std::string path = Write("images", Gzip(ImagesFile(1, 1, 1, {9})));
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->pixels, Bytes{9});
}

TEST_F(IdxDatasetTest, MissingFileNamesBothCandidates) {
  absl::StatusOr<Dataset> d = LoadMnist(dir_, Split::kTest);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  const std::string message(d.status().message());
  EXPECT_NE(message.find(dir_), std::string::npos) << message;
  EXPECT_NE(message.find("t10k-images-idx3-ubyte.gz and "
                         "t10k-images-idx3-ubyte"),
            std::string::npos)
      << message;
}

TEST_F(IdxDatasetTest, MissingLabelsAreNamed) {
  Write("train-images-idx3-ubyte", ImagesFile(1, 1, 1, {0}));
  absl::StatusOr<Dataset> d = LoadMnist(dir_, Split::kTrain);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("train-labels-idx1-ubyte.gz"),
            std::string::npos);
}

TEST_F(IdxDatasetTest, UnopenablePathIsNotFound) {
  absl::StatusOr<IdxImages> images = ReadIdxImages(dir_ + "/nope");
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(images.status().message().find(dir_ + "/nope"), std::string::npos);
}

TEST_F(IdxDatasetTest, EmptyFile) {
  ExpectImagesError(Write("empty", {}), "file is empty");
}

TEST_F(IdxDatasetTest, TruncatedHeader) {
  Bytes b = ImagesFile(1, 1, 1, {0});
  b.resize(10);
  ExpectImagesError(Write("short_header", b),
                    "truncated header: 10 bytes, expected 16");
}

TEST_F(IdxDatasetTest, BadMagic) {
  ExpectImagesError(Write("bad_magic", ImagesFile(1, 1, 1, {0}, 0x00000802)),
                    "is magic 0x00000802, expected an IDX image file");
}

TEST_F(IdxDatasetTest, LabelFileGivenAsImages) {
  ExpectImagesError(Write("labels_as_images", LabelsFile({1, 2})),
                    "is an IDX label file (0x00000801), expected an IDX "
                    "image file (0x00000803)");
}

TEST_F(IdxDatasetTest, ImagesGivenAsLabels) {
  std::string path = Write("images_as_labels", ImagesFile(1, 1, 1, {0}));
  absl::StatusOr<Bytes> labels = ReadIdxLabels(path);
  ASSERT_FALSE(labels.ok());
  EXPECT_NE(labels.status().message().find(
                path + ": is an IDX image file (0x00000803), expected an IDX "
                       "label file"),
            std::string::npos)
      << labels.status();
}

TEST_F(IdxDatasetTest, ZeroDimension) {
  ExpectImagesError(Write("zero_rows", ImagesFile(1, 0, 28, {})), "rows is 0");
  ExpectImagesError(Write("zero_count", ImagesFile(0, 28, 28, {})),
                    "count is 0");
}

TEST_F(IdxDatasetTest, DimensionTooLargeForInt) {
  ExpectImagesError(Write("huge_count", ImagesFile(0x80000000u, 1, 1, {})),
                    "count 2147483648 is too large");
}

TEST_F(IdxDatasetTest, ImplausibleHeaderDoesNotAllocate) {
  ExpectImagesError(
      Write("implausible", ImagesFile(0x7fffffffu, 0x7fffffffu, 1, {1, 2})),
      "the header is corrupt");
}

TEST_F(IdxDatasetTest, TruncatedRawData) {
  ExpectImagesError(Write("short_raw", ImagesFile(2, 2, 2, {1, 2, 3, 4, 5})),
                    "truncated: the header announces 8 bytes of data, the "
                    "file has 5");
}

TEST_F(IdxDatasetTest, TruncatedGzipData) {
  // Enough pixels that a cut in the middle of the deflate stream leaves
  // decodable data before it.
  Bytes pixels(100000);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = (i * 7919) % 251;
  Bytes gz = Gzip(ImagesFile(100, 100, 10, pixels));
  gz.resize(gz.size() / 2);
  std::string path = Write("cut.gz", gz);
  ExpectImagesError(path,
                    "corrupt gzip data: unexpected end of file (the "
                    "gzip file is truncated)");
}

TEST_F(IdxDatasetTest, CorruptGzipData) {
  Bytes pixels(4096);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = (i * 31) % 256;
  Bytes gz = Gzip(ImagesFile(16, 16, 16, pixels));
  // Damage the deflate stream (after the 10-byte gzip header) and the CRC.
  for (size_t i = 20; i < gz.size(); i += 7) gz[i] ^= 0x5a;
  ExpectImagesError(Write("corrupt.gz", gz), "corrupt gzip data: ");
}

TEST_F(IdxDatasetTest, GzipChecksumMismatch) {
  Bytes gz = Gzip(ImagesFile(1, 1, 2, {1, 2}));
  gz[gz.size() - 8] ^= 1;  // the CRC-32 in the gzip trailer
  ExpectImagesError(Write("bad_crc.gz", gz),
                    "corrupt gzip data: incorrect data check");
}

TEST_F(IdxDatasetTest, TrailingData) {
  ExpectImagesError(Write("trailing", ImagesFile(1, 1, 2, {1, 2, 3})),
                    "trailing data after the 2 bytes the header announces");
  ExpectImagesError(Write("trailing.gz", Gzip(ImagesFile(1, 1, 2, {1, 2, 3}))),
                    "trailing data");
}

TEST_F(IdxDatasetTest, CountMismatchNamesBothFiles) {
  Write("train-images-idx3-ubyte.gz", Gzip(ImagesFile(2, 1, 1, {0, 0})));
  Write("train-labels-idx1-ubyte.gz", Gzip(LabelsFile({1, 2, 3})));
  absl::StatusOr<Dataset> d = LoadMnist(dir_, Split::kTrain);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.status().message(),
            dir_ + "/train-images-idx3-ubyte.gz has 2 images but " + dir_ +
                "/train-labels-idx1-ubyte.gz has 3 labels");
}

TEST_F(IdxDatasetTest, LabelOutOfRange) {
  Write("t10k-images-idx3-ubyte", ImagesFile(3, 1, 1, {0, 0, 0}));
  Write("t10k-labels-idx1-ubyte", LabelsFile({1, 12, 3}));
  absl::StatusOr<Dataset> d = LoadMnist(dir_, Split::kTest);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(),
            dir_ +
                "/t10k-labels-idx1-ubyte: label 12 at index 1 is not a "
                "digit 0..9");
}

// The real MNIST, when the test runner points PSCLUSTER_DATA_DIR at it
// (bazel test --test_env=PSCLUSTER_DATA_DIR=/abs/path), or when it sits at
// <workspace>/../shared/data/mnist (found through this test's runfiles,
// which are symlinks into the workspace with --spawn_strategy=local).
std::string RealDataDir() {
  if (const char* env = std::getenv("PSCLUSTER_DATA_DIR"); env && *env) {
    return env;
  }
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return "";
  std::string runfile =
      std::string(srcdir) + "/" + workspace + "/model/idx_dataset.h";
  char resolved[PATH_MAX];
  if (realpath(runfile.c_str(), resolved) == nullptr) return "";
  std::string path(resolved);  // <workspace>/model/idx_dataset.h
  for (int i = 0; i < 2; ++i) path = path.substr(0, path.rfind('/'));
  return path + "/../shared/data/mnist";
}

void ExpectHistogram(const Dataset& d, const std::vector<int>& expected) {
  std::vector<int> histogram(10, 0);
  for (float label : d.targets) ++histogram[static_cast<int>(label)];
  EXPECT_EQ(histogram, expected);
  EXPECT_EQ(std::accumulate(histogram.begin(), histogram.end(), 0), d.count);
}

TEST(RealMnistTest, TrainAndTestSplits) {
  const std::string dir = RealDataDir();
  struct stat st;
  if (dir.empty() ||
      stat((dir + "/t10k-labels-idx1-ubyte.gz").c_str(), &st) != 0) {
    GTEST_SKIP()
        << "real MNIST not found (set PSCLUSTER_DATA_DIR, e.g. "
           "--test_env=PSCLUSTER_DATA_DIR=/path/to/mnist); looked in \""
        << dir << "\"";
  }
  absl::StatusOr<Dataset> train = LoadMnist(dir, Split::kTrain);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->count, 60000);
  EXPECT_EQ(train->height, 28);
  EXPECT_EQ(train->width, 28);
  EXPECT_EQ(train->images.size(), 60000u * 28 * 28);
  EXPECT_EQ(train->targets[0], 5);
  ExpectHistogram(*train,
                  {5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949});
  // The first training image's pixels sum to 27525 / 255.
  double sum = 0;
  for (int i = 0; i < 28 * 28; ++i) sum += train->images[i];
  EXPECT_NEAR(sum, 27525.0 / 255.0, 1e-3);

  absl::StatusOr<Dataset> test = LoadMnist(dir, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->count, 10000);
  EXPECT_EQ(test->targets[0], 7);
  ExpectHistogram(*test,
                  {980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009});
}

bool IsPermutation(std::vector<int32_t> v, int n) {
  if (static_cast<int>(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int i = 0; i < n; ++i) {
    if (v[i] != i) return false;
  }
  return true;
}

TEST(EpochPermutationTest, IsAPermutation) {
  for (int n : {1, 2, 3, 10, 1000, 60000}) {
    EXPECT_TRUE(IsPermutation(EpochPermutation(n, 42, 3), n)) << n;
  }
  EXPECT_TRUE(EpochPermutation(0, 1, 0).empty());
  EXPECT_TRUE(EpochPermutation(-5, 1, 0).empty());
}

// Pinned values (also produced by an independent Python version of the same
// splitmix64 + Fisher-Yates): every machine must shuffle identically.
TEST(EpochPermutationTest, IsPinnedAcrossMachines) {
  EXPECT_EQ(EpochPermutation(10, 42, 0),
            (std::vector<int32_t>{6, 1, 8, 5, 2, 7, 4, 3, 9, 0}));
  EXPECT_EQ(EpochPermutation(10, 42, 1),
            (std::vector<int32_t>{0, 4, 8, 3, 5, 9, 7, 2, 6, 1}));
  EXPECT_EQ(EpochPermutation(10, 7, 0),
            (std::vector<int32_t>{2, 0, 5, 7, 3, 9, 8, 1, 4, 6}));
}

TEST(EpochPermutationTest, IsDeterministicAndDiffersAcrossEpochsAndSeeds) {
  const std::vector<int32_t> a = EpochPermutation(60000, 1, 0);
  EXPECT_EQ(a, EpochPermutation(60000, 1, 0));
  EXPECT_NE(a, EpochPermutation(60000, 1, 1));
  EXPECT_NE(a, EpochPermutation(60000, 2, 0));
  EXPECT_NE(EpochPermutation(60000, 1, 2), EpochPermutation(60000, 2, 1));
  // Not the identity, and not nearly so.
  int fixed = 0;
  for (int i = 0; i < 60000; ++i) fixed += a[i] == i;
  EXPECT_LT(fixed, 20);
}

TEST(EpochPermutationTest, FirstElementIsRoughlyUniform) {
  // 4000 shuffles of 4: each value should lead about 1000 times.
  std::vector<int> lead(4, 0);
  for (int epoch = 0; epoch < 4000; ++epoch) {
    ++lead[EpochPermutation(4, 99, epoch)[0]];
  }
  for (int count : lead) {
    EXPECT_GT(count, 880);
    EXPECT_LT(count, 1120);
  }
}

TEST(ShardOfTest, ShardsPartitionThePermutation) {
  const std::vector<int32_t> perm = EpochPermutation(1003, 5, 0);
  for (int num_shards : {1, 2, 3, 7}) {
    std::vector<int32_t> all;
    size_t smallest = perm.size(), largest = 0;
    for (int shard = 0; shard < num_shards; ++shard) {
      std::vector<int32_t> s = ShardOf(perm, shard, num_shards);
      smallest = std::min(smallest, s.size());
      largest = std::max(largest, s.size());
      all.insert(all.end(), s.begin(), s.end());
    }
    EXPECT_TRUE(IsPermutation(all, 1003)) << num_shards;
    EXPECT_LE(largest - smallest, 1u) << num_shards;
  }
}

TEST(ShardOfTest, TakesStridedPositions) {
  const std::vector<int32_t> perm = {10, 11, 12, 13, 14, 15, 16};
  EXPECT_EQ(ShardOf(perm, 0, 3), (std::vector<int32_t>{10, 13, 16}));
  EXPECT_EQ(ShardOf(perm, 1, 3), (std::vector<int32_t>{11, 14}));
  EXPECT_EQ(ShardOf(perm, 2, 3), (std::vector<int32_t>{12, 15}));
  EXPECT_EQ(ShardOf(perm, 0, 1), perm);
  EXPECT_TRUE(ShardOf(perm, 0, 10).size() == 1);
}

TEST(ShardOfTest, InvalidShardIsEmpty) {
  const std::vector<int32_t> perm = {1, 2, 3};
  EXPECT_TRUE(ShardOf(perm, 3, 3).empty());
  EXPECT_TRUE(ShardOf(perm, -1, 3).empty());
  EXPECT_TRUE(ShardOf(perm, 0, 0).empty());
  EXPECT_TRUE(ShardOf(perm, 0, -2).empty());
}

}  // namespace
}  // namespace pscluster
