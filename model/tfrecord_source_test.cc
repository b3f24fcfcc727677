#include "model/tfrecord_source.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/tfrecord.h"
#include "gtest/gtest.h"
#include "model/chunk_reader.h"
#include "model/dataset.h"
#include "model/example_source.h"

namespace pscluster {
namespace {

// The protobuf wire format by hand (tf_example_test checks our decoder
// against protoc's bytes; here we only need well-formed input).
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Field(int number, const std::string& body) {
  return Varint(static_cast<uint64_t>(number) << 3 | 2) + Varint(body.size()) + body;
}
std::string BytesFeature(const std::string& b) { return Field(1, Field(1, b)); }
std::string Int64Feature(int64_t v) { return Field(3, Field(1, Varint(static_cast<uint64_t>(v)))); }
std::string FloatFeature(const std::vector<float>& v) {
  std::string packed(v.size() * 4, '\0');
  std::memcpy(packed.data(), v.data(), packed.size());
  return Field(2, Field(1, packed));
}
std::string Example(const std::vector<std::pair<std::string, std::string>>& features) {
  std::string entries;
  for (const auto& [key, feature] : features) entries += Field(1, Field(1, key) + Field(2, feature));
  return Field(1, entries);
}

std::string TmpDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  const int rc = std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
  EXPECT_EQ(rc, 0) << dir;
  return dir;
}
void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A small 2x2x1 data set, one record per example given.
std::string SmallFolder(const std::string& name, const std::vector<std::string>& records) {
  const std::string dir = TmpDir(name);
  WriteFile(dir + "/tfrecord_schema.json", R"({"image": "img", "label": "y", "shape": [2, 2]})");
  std::string file;
  for (const std::string& r : records) AppendTFRecord(r, &file);
  WriteFile(dir + "/train-0.tfrecord", file);
  return dir;
}
std::string Good(int label) {
  return Example({{"img", BytesFeature(std::string("\x00\x33\x66\xff", 4))},
                  {"y", Int64Feature(label)}});
}

// The first error of gathering every example of `dir`.
std::string GatherError(const std::string& dir, ExampleSource::TargetCheck check = nullptr) {
  absl::StatusOr<std::unique_ptr<TFRecordSource>> s = TFRecordSource::Open(dir, Split::kTrain);
  if (!s.ok()) return std::string(s.status().message());
  if (check) (*s)->set_target_check(check);
  std::vector<int32_t> all((*s)->count());
  for (int i = 0; i < (*s)->count(); ++i) all[i] = i;
  std::vector<float> images(all.size() * 4), targets(all.size());
  absl::Status st = (*s)->Gather(all.data(), (*s)->count(), images.data(), targets.data());
  if (!st.ok()) {
    EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  }
  return std::string(st.message());
}

TEST(TFRecordSource, SmallFolderDecodes) {
  const std::string dir = SmallFolder("small", {Good(3), Good(1)});
  absl::StatusOr<std::unique_ptr<TFRecordSource>> s = TFRecordSource::Open(dir, Split::kTrain);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->count(), 2);
  EXPECT_EQ((*s)->pixels(), 4);
  EXPECT_EQ((*s)->index_bytes(), 32u);
  const int32_t order[] = {1, 0};
  std::vector<float> images(8), targets(2);
  ASSERT_TRUE((*s)->Gather(order, 2, images.data(), targets.data()).ok());
  EXPECT_EQ(targets, std::vector<float>({1, 3}));
  EXPECT_EQ(images, std::vector<float>({0, 0x33 / 255.0f, 0x66 / 255.0f, 1, 0, 0x33 / 255.0f,
                                        0x66 / 255.0f, 1}));
}

TEST(TFRecordSource, FloatImages) {
  const std::string dir = SmallFolder(
      "floats", {Example({{"img", FloatFeature({0.5f, -1, 2, 3})}, {"y", Int64Feature(0)}})});
  std::vector<float> images(4), targets(1);
  absl::StatusOr<std::unique_ptr<TFRecordSource>> s = TFRecordSource::Open(dir, Split::kTrain);
  ASSERT_TRUE(s.ok()) << s.status();
  const int32_t zero = 0;
  ASSERT_TRUE((*s)->Gather(&zero, 1, images.data(), targets.data()).ok());
  EXPECT_EQ(images, std::vector<float>({0.5f, -1, 2, 3}));
}

TEST(TFRecordSource, EveryBadRecordIsNamed) {
  const auto expect = [](const std::string& e, const std::string& what) {
    EXPECT_NE(e.find("/train-0.tfrecord: record 1 (byte offset 47): " + what), std::string::npos)
        << e;
  };
  expect(GatherError(SmallFolder("not_example", {Good(1), "garbage!"})), "not a tf.train.Example");
  expect(GatherError(SmallFolder("no_image", {Good(1), Example({{"y", Int64Feature(1)}})})),
         "no image feature \"img\"");
  expect(GatherError(SmallFolder(
             "no_label", {Good(1), Example({{"img", BytesFeature(std::string(4, 'a'))}})})),
         "no label feature \"y\"");
  expect(GatherError(SmallFolder("size", {Good(1), Example({{"img", BytesFeature("abc")},
                                                            {"y", Int64Feature(1)}})})),
         "image feature \"img\" holds 1 bytes value(s) of 3 bytes; the schema's shape 2x2x1 "
         "wants one of 4");
  expect(GatherError(SmallFolder("negative", {Good(1), Good(-1)})), "label -1 is out of range");
  expect(GatherError(SmallFolder("label_kind",
                                 {Good(1), Example({{"img", BytesFeature(std::string(4, 'a'))},
                                                    {"y", FloatFeature({1})}})})),
         "label feature \"y\" is a float_list of 1 values");
  // The model's check: 10 classes.
  expect(GatherError(SmallFolder("range", {Good(1), Good(10)}),
                     [](float t) {
                       return t < 10 ? absl::OkStatus()
                                     : absl::InvalidArgumentError("model \"m\" has 10 classes");
                     }),
         "label 10 is out of range: model \"m\" has 10 classes");
  // A bad data CRC is found when the record is read, not at Open.
  const std::string dir = SmallFolder("crc", {Good(1), Good(2)});
  std::fstream f(dir + "/train-0.tfrecord", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(47 + 12 + 3);
  f.put('\x7f');
  f.close();
  expect(GatherError(dir), "bad data CRC");
}

TEST(TFRecordSource, BadSchemaAndMissingFiles) {
  std::string dir = SmallFolder("schema", {Good(1)});
  WriteFile(dir + "/tfrecord_schema.json", R"({"image": "img", "shape": [0, 2]})");
  absl::StatusOr<std::unique_ptr<TFRecordSource>> s = TFRecordSource::Open(dir, Split::kTrain);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("tfrecord_schema.json: \"shape\" is [0,2]"),
            std::string::npos)
      << s.status();
  WriteFile(dir + "/tfrecord_schema.json", R"({"imgae": "img", "shape": [2, 2]})");
  s = TFRecordSource::Open(dir, Split::kTrain);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("unknown key \"imgae\""), std::string::npos) << s.status();
  WriteFile(dir + "/tfrecord_schema.json", R"({"shape": [2, 2]})");
  s = TFRecordSource::Open(dir, Split::kTest);
  ASSERT_TRUE(absl::IsNotFound(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("no " + dir + "/test*.tfrecord files"), std::string::npos)
      << s.status();
  EXPECT_TRUE(absl::IsNotFound(CheckDataFiles(dir, Split::kTest)));
  EXPECT_TRUE(CheckDataFiles(dir, Split::kTrain).ok());
  // A truncated file fails at Open.
  WriteFile(dir + "/train-1.tfrecord", "0123456789");
  s = TFRecordSource::Open(dir, Split::kTrain);
  ASSERT_TRUE(absl::IsDataLoss(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("train-1.tfrecord: record 0 (byte offset 0): truncated"),
            std::string::npos)
      << s.status();
}

// The real MNIST as in idx_dataset_test.
std::string RealDataDir() {
  if (const char* env = std::getenv("PSCLUSTER_DATA_DIR"); env && *env) return env;
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return "";
  const std::string runfile = std::string(srcdir) + "/" + workspace + "/model/tfrecord_source.h";
  char resolved[PATH_MAX];
  if (realpath(runfile.c_str(), resolved) == nullptr) return "";
  std::string path(resolved);
  for (int i = 0; i < 2; ++i) path = path.substr(0, path.rfind('/'));
  return path + "/../shared/data/mnist";
}

// MNIST's training set written as 3 shards of Examples gives, through
// ChunkReader, exactly the IDX data's chunks, in the same order.
TEST(TFRecordSource, SameChunksAsIdx) {
  const std::string mnist = RealDataDir();
  if (!CheckDataFiles(mnist, Split::kTrain).ok()) GTEST_SKIP() << "no MNIST at " << mnist;
  absl::StatusOr<Dataset> idx = LoadDataset(mnist, Split::kTrain);
  ASSERT_TRUE(idx.ok()) << idx.status();
  const std::string dir = TmpDir("mnist_tfrecord");
  WriteFile(dir + "/tfrecord_schema.json", R"({"shape": [28, 28, 1]})");
  const int per_shard = (idx->count + 2) / 3;
  for (int shard = 0; shard < 3; ++shard) {
    std::string file;
    for (int i = shard * per_shard; i < std::min(idx->count, (shard + 1) * per_shard); ++i) {
      std::string pixels(784, '\0');
      for (int p = 0; p < 784; ++p) {
        pixels[p] = static_cast<char>(static_cast<int>(idx->images[size_t(i) * 784 + p] * 255.0f + 0.5f));
      }
      AppendTFRecord(Example({{"label", Int64Feature(static_cast<int64_t>(idx->targets[i]))},
                              {"image", BytesFeature(pixels)}}),
                     &file);
    }
    WriteFile(dir + "/train-0000" + std::to_string(shard) + "-of-00003.tfrecord", file);
  }
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = OpenExampleSource(dir, Split::kTrain);
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_EQ((*source)->count(), idx->count);
  ASSERT_EQ((*source)->in_memory(), nullptr);
  ChunkReader from_idx(*idx, 1000, /*seed=*/42), from_tfrecord(source->get(), 1000, 42);
  std::vector<float> a(1000 * 784), b(1000 * 784), ta(1000), tb(1000);
  for (int64_t k : {0, 1, 59, 60, 61, 150}) {
    absl::StatusOr<int> na = from_idx.Fill(k, a.data(), ta.data());
    absl::StatusOr<int> nb = from_tfrecord.Fill(k, b.data(), tb.data());
    ASSERT_TRUE(na.ok() && nb.ok()) << nb.status();
    ASSERT_EQ(*na, *nb);
    EXPECT_EQ(a, b) << "chunk " << k;
    EXPECT_EQ(ta, tb) << "chunk " << k;
  }
  // LoadDataset (the evaluator's and chief's path) reads it whole, the same.
  absl::StatusOr<Dataset> whole = LoadDataset(dir, Split::kTrain);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->images, idx->images);
  EXPECT_EQ(whole->targets, idx->targets);
}

}  // namespace
}  // namespace pscluster
