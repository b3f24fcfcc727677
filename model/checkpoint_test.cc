#include "model/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/testing/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace pscluster {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A fresh directory for the running test (not created: WriteCheckpoint must).
std::string TestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp ? tmp : "/tmp") + "/checkpoint_test/" +
      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  fs::remove_all(dir);
  return dir;
}

using testing::ReadAll;
using testing::WriteAll;

// The names in `dir`, sorted.
std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// A small checkpoint whose values depend on `step`, so that the step a read
// returns can be told from its tensors too.
Checkpoint MakeCheckpoint(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.metadata["optimizer"] = R"({"name": "adam", "lr": 0.001})";
  c.metadata["run"] = "test";
  c.tensors.push_back({"dense/kernel", {2, 3}, {}});
  for (int i = 0; i < 6; ++i) {
    c.tensors.back().values.push_back(static_cast<float>(step) + 0.25f * i);
  }
  c.tensors.push_back({"dense/bias", {3}, {-1.0f, 0.0f, float(step)}});
  return c;
}

// Flips one bit of byte `offset` of the data section (after the header).
void FlipDataByte(const std::string& path, size_t offset) {
  std::string bytes = ReadAll(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) {
    header_len |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  }
  const size_t at = 8 + header_len + offset;
  ASSERT_LT(at, bytes.size());
  bytes[at] ^= 0x10;
  WriteAll(path, bytes);
}

// Routes the default spdlog logger into a string for the test's lifetime.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_);
    spdlog::set_default_logger(
        std::make_shared<spdlog::logger>("capture", std::move(sink)));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST(CheckpointFileNameTest, ZeroPadsToTenDigits) {
  EXPECT_EQ(CheckpointFileName(0), "ckpt-0000000000.safetensors");
  EXPECT_EQ(CheckpointFileName(1234), "ckpt-0000001234.safetensors");
  EXPECT_EQ(CheckpointFileName(12345678901), "ckpt-12345678901.safetensors");
}

TEST(CheckpointTest, RoundTripIsBitExact) {
  const std::string dir = TestDir() + "/nested/ckpts";  // parents missing too
  Checkpoint c;
  c.step = 42;
  c.metadata["chief"] = R"({"global_step": 42, "workers": ["w0", "w1"]})";
  c.metadata["note"] = "unicode ok: \xc3\xa9";
  c.tensors.push_back(
      {"special",
       {2, 3},
       {std::numeric_limits<float>::quiet_NaN(), FromBits(0x7fa00001u), -0.0f,
        std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::denorm_min(), 1.0f / 3.0f}});
  c.tensors.push_back({"scalar", {}, {-7.5f}});
  c.tensors.push_back({"empty", {0, 4}, {}});
  ASSERT_TRUE(WriteCheckpoint(dir, c, 3).ok());

  const std::string path = dir + "/ckpt-0000000042.safetensors";
  ASSERT_TRUE(fs::exists(path));
  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 42);
  EXPECT_EQ(r->metadata, c.metadata);  // no crc32c: or format keys
  ASSERT_EQ(r->tensors.size(), c.tensors.size());
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    EXPECT_EQ(r->tensors[i].name, c.tensors[i].name);
    EXPECT_EQ(r->tensors[i].shape, c.tensors[i].shape);
    EXPECT_TRUE(SameBits(r->tensors[i].values, c.tensors[i].values))
        << c.tensors[i].name;
  }

  // On disk: a plain safetensors file with one 8-hex-digit CRC per tensor.
  std::map<std::string, std::string> raw;
  ASSERT_TRUE(ReadSafetensors(path, &raw).ok());
  for (const NamedTensor& t : c.tensors) {
    char want[9];
    std::snprintf(want, sizeof(want), "%08x",
                  crc32c::Value(t.values.data(), t.values.size() * 4));
    EXPECT_EQ(raw["crc32c:" + t.name], want) << t.name;
  }
  EXPECT_EQ(raw["chief"], c.metadata["chief"]);

  absl::StatusOr<Checkpoint> direct = ReadCheckpoint(path);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(direct->step, 42);
  EXPECT_EQ(direct->metadata, c.metadata);
}

TEST(CheckpointTest, KeepLastPrunesAndManifestListsExactlyTheKeptOnes) {
  const std::string dir = TestDir();
  for (int64_t step : {10, 20, 30, 40, 50}) {
    ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(step), 2).ok());
  }
  EXPECT_THAT(Files(dir),
              ElementsAre("checkpoint.json", "ckpt-0000000040.safetensors",
                          "ckpt-0000000050.safetensors"));
  const nlohmann::json manifest =
      nlohmann::json::parse(ReadAll(dir + "/checkpoint.json"));
  EXPECT_EQ(manifest, nlohmann::json::parse(R"({
    "latest": "ckpt-0000000050.safetensors",
    "checkpoints": [
      {"file": "ckpt-0000000050.safetensors", "step": 50},
      {"file": "ckpt-0000000040.safetensors", "step": 40}]})"));
  absl::StatusOr<std::vector<std::string>> list = ListCheckpoints(dir);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, ElementsAre(dir + "/ckpt-0000000050.safetensors",
                                 dir + "/ckpt-0000000040.safetensors"));

  // keep_last = 1 keeps only the one just written.
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(60), 1).ok());
  EXPECT_THAT(Files(dir),
              ElementsAre("checkpoint.json", "ckpt-0000000060.safetensors"));
  list = ListCheckpoints(dir);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, ElementsAre(dir + "/ckpt-0000000060.safetensors"));
}

TEST(CheckpointTest, RewritingAStepReplacesItOnce) {
  const std::string dir = TestDir();
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(1), 5).ok());
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(2), 5).ok());
  Checkpoint again = MakeCheckpoint(2);
  again.metadata["run"] = "second";
  ASSERT_TRUE(WriteCheckpoint(dir, again, 5).ok());
  absl::StatusOr<std::vector<std::string>> list = ListCheckpoints(dir);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, ElementsAre(dir + "/ckpt-0000000002.safetensors",
                                 dir + "/ckpt-0000000001.safetensors"));
  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metadata.at("run"), "second");
}

// A chief that restarted from an older checkpoint writes lower steps; what it
// writes is the newest, and keep_last must not prune it in favour of a higher
// step from the abandoned run.
TEST(CheckpointTest, NewestIsTheLastWrittenEvenAtALowerStep) {
  const std::string dir = TestDir();
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(300), 2).ok());
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(210), 2).ok());
  absl::StatusOr<std::vector<std::string>> list = ListCheckpoints(dir);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, ElementsAre(dir + "/ckpt-0000000210.safetensors",
                                 dir + "/ckpt-0000000300.safetensors"));
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(220), 1).ok());
  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 220);
  EXPECT_THAT(Files(dir),
              ElementsAre("checkpoint.json", "ckpt-0000000220.safetensors"));
}

TEST(CheckpointTest, CorruptNewestFallsBackToThePreviousOne) {
  const std::string dir = TestDir();
  for (int64_t step : {100, 200, 300}) {
    ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(step), 3).ok());
  }
  const std::string newest = dir + "/ckpt-0000000300.safetensors";
  // Byte 30 is inside "dense/bias" (after the 24 bytes of "dense/kernel"):
  // the file still parses, only the CRC can tell.
  FlipDataByte(newest, 30);
  ASSERT_TRUE(ReadSafetensors(newest).ok());

  LogCapture log;
  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 200);
  const Checkpoint want = MakeCheckpoint(200);
  ASSERT_EQ(r->tensors.size(), 2u);
  EXPECT_TRUE(SameBits(r->tensors[0].values, want.tensors[0].values));
  EXPECT_TRUE(SameBits(r->tensors[1].values, want.tensors[1].values));
  EXPECT_THAT(log.text(), HasSubstr("ckpt-0000000300.safetensors"));
  EXPECT_THAT(log.text(), HasSubstr("dense/bias"));
  EXPECT_THAT(log.text(), HasSubstr("CRC-32C"));

  absl::StatusOr<Checkpoint> direct = ReadCheckpoint(newest);
  EXPECT_TRUE(absl::IsDataLoss(direct.status())) << direct.status();
  EXPECT_THAT(direct.status().message(), HasSubstr(newest));
}

TEST(CheckpointTest, MissingNewestFallsBackToThePreviousOne) {
  const std::string dir = TestDir();
  for (int64_t step : {100, 200}) {
    ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(step), 3).ok());
  }
  fs::remove(dir + "/ckpt-0000000200.safetensors");
  LogCapture log;
  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 100);
  EXPECT_THAT(log.text(), HasSubstr("ckpt-0000000200.safetensors"));

  // The next write lists only files that exist.
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(150), 3).ok());
  absl::StatusOr<std::vector<std::string>> list = ListCheckpoints(dir);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, ElementsAre(dir + "/ckpt-0000000150.safetensors",
                                 dir + "/ckpt-0000000100.safetensors"));
}

TEST(CheckpointTest, TensorWithoutItsCrcCountsAsCorrupt) {
  const std::string dir = TestDir();
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(1), 3).ok());
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(2), 3).ok());
  // Rewrite step 2 with one CRC key missing: the data itself is intact.
  const std::string path = dir + "/ckpt-0000000002.safetensors";
  std::map<std::string, std::string> meta;
  absl::StatusOr<std::vector<NamedTensor>> tensors =
      ReadSafetensors(path, &meta);
  ASSERT_TRUE(tensors.ok());
  ASSERT_EQ(meta.erase("crc32c:dense/kernel"), 1u);
  ASSERT_TRUE(WriteSafetensors(path, *tensors, meta).ok());

  absl::StatusOr<Checkpoint> direct = ReadCheckpoint(path);
  EXPECT_TRUE(absl::IsDataLoss(direct.status())) << direct.status();
  EXPECT_THAT(direct.status().message(), HasSubstr("dense/kernel"));
  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 1);
}

TEST(CheckpointTest, CrcForATensorTheFileLacksCountsAsCorrupt) {
  const std::string dir = TestDir();
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(1), 3).ok());
  const std::string path = dir + "/ckpt-0000000001.safetensors";
  std::map<std::string, std::string> meta;
  absl::StatusOr<std::vector<NamedTensor>> tensors =
      ReadSafetensors(path, &meta);
  ASSERT_TRUE(tensors.ok());
  tensors->pop_back();  // drops dense/bias, keeps its CRC
  ASSERT_TRUE(WriteSafetensors(path, *tensors, meta).ok());
  absl::StatusOr<Checkpoint> direct = ReadCheckpoint(path);
  EXPECT_TRUE(absl::IsDataLoss(direct.status())) << direct.status();
  EXPECT_THAT(direct.status().message(), HasSubstr("'dense/bias'"));
}

TEST(CheckpointTest, AllCorruptIsDataLoss) {
  const std::string dir = TestDir();
  for (int64_t step : {1, 2}) {
    ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(step), 3).ok());
  }
  FlipDataByte(dir + "/ckpt-0000000001.safetensors", 0);
  WriteAll(dir + "/ckpt-0000000002.safetensors", "truncated");
  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(dir));
  EXPECT_THAT(r.status().message(), HasSubstr("ckpt-0000000001.safetensors"));
  EXPECT_THAT(r.status().message(), HasSubstr("ckpt-0000000002.safetensors"));

  // The same without a manifest: the scan's candidates are all corrupt too.
  fs::remove(dir + "/checkpoint.json");
  r = ReadLatestCheckpoint(dir);
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
}

TEST(CheckpointTest, WithoutManifestTheScanFindsTheNewest) {
  const std::string dir = TestDir();
  for (int64_t step : {9, 10, 100}) {
    ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(step), 5).ok());
  }
  ASSERT_TRUE(fs::remove(dir + "/checkpoint.json"));
  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 100);
  absl::StatusOr<std::vector<std::string>> list = ListCheckpoints(dir);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, ElementsAre(dir + "/ckpt-0000000100.safetensors",
                                 dir + "/ckpt-0000000010.safetensors",
                                 dir + "/ckpt-0000000009.safetensors"));

  // The next write rebuilds the manifest from the scan.
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(101), 2).ok());
  EXPECT_THAT(Files(dir),
              ElementsAre("checkpoint.json", "ckpt-0000000100.safetensors",
                          "ckpt-0000000101.safetensors"));
}

TEST(CheckpointTest, UnusableManifestIsLoggedAndScanned) {
  const std::string dir = TestDir();
  for (int64_t step : {1, 2}) {
    ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(step), 5).ok());
  }
  for (const char* manifest :
       {"{not json", R"({"latest": "x", "checkpoints": []})",
        R"({"latest": "ckpt-0000000001.safetensors", "checkpoints":
            [{"file": "../ckpt-0000000001.safetensors", "step": 1}]})",
        R"({"latest": "ckpt-0000000002.safetensors", "checkpoints":
            [{"file": "ckpt-0000000001.safetensors", "step": 1}]})"}) {
    WriteAll(dir + "/checkpoint.json", manifest);
    LogCapture log;
    absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->step, 2) << manifest;
    EXPECT_THAT(log.text(), HasSubstr("checkpoint.json")) << manifest;
  }
}

TEST(CheckpointTest, LeftoverTemporaryFilesAreIgnored) {
  const std::string dir = TestDir();
  for (int64_t step : {1, 2}) {
    ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(step), 5).ok());
  }
  // A complete, valid checkpoint under a .tmp name at a higher step: a read
  // that looked at it would return step 9.
  const std::string stale = dir + "/ckpt-0000000009.safetensors.tmp";
  fs::copy_file(dir + "/ckpt-0000000002.safetensors", stale);
  WriteAll(dir + "/checkpoint.json.tmp", "garbage {");

  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 2);
  absl::StatusOr<std::vector<std::string>> list = ListCheckpoints(dir);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 2u);

  // Nor does the scan look at them.
  ASSERT_TRUE(fs::remove(dir + "/checkpoint.json"));
  r = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 2);
  list = ListCheckpoints(dir);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, ElementsAre(dir + "/ckpt-0000000002.safetensors",
                                 dir + "/ckpt-0000000001.safetensors"));

  // A write goes through them and clears the stale checkpoint temporary.
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(3), 5).ok());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(dir + "/checkpoint.json.tmp"));
  r = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 3);
}

TEST(CheckpointTest, UnlistedCheckpointFilesArePrunedByTheNextWrite) {
  const std::string dir = TestDir();
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(1), 2).ok());
  // As if a crash came between writing step 7 and listing it.
  fs::copy_file(dir + "/ckpt-0000000001.safetensors",
                dir + "/ckpt-0000000007.safetensors");
  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 1);  // the manifest rules
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(2), 2).ok());
  EXPECT_THAT(Files(dir),
              ElementsAre("checkpoint.json", "ckpt-0000000001.safetensors",
                          "ckpt-0000000002.safetensors"));
}

TEST(CheckpointTest, EmptyOrMissingDirIsNotFound) {
  const std::string dir = TestDir();
  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(dir);
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(dir));
  absl::StatusOr<std::vector<std::string>> list = ListCheckpoints(dir);
  EXPECT_TRUE(absl::IsNotFound(list.status())) << list.status();

  fs::create_directories(dir);
  WriteAll(dir + "/unrelated.txt", "hello");
  r = ReadLatestCheckpoint(dir);
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(dir));
  list = ListCheckpoints(dir);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, IsEmpty());
}

TEST(CheckpointTest, DirUnderARegularFileIsAnErrorNamingIt) {
  const std::string base = TestDir();
  fs::create_directories(base);
  WriteAll(base + "/file", "not a directory");
  const std::string dir = base + "/file/ckpts";
  absl::Status s = WriteCheckpoint(dir, MakeCheckpoint(1), 3);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(dir));
  EXPECT_THAT(Files(base), ElementsAre("file"));

  // The directory itself a regular file.
  s = WriteCheckpoint(base + "/file", MakeCheckpoint(1), 3);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(base + "/file"));
  absl::StatusOr<Checkpoint> r = ReadLatestCheckpoint(base + "/file");
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(base + "/file"));
}

TEST(CheckpointTest, InvalidArgumentsWriteNothing) {
  const std::string dir = TestDir();
  for (int keep_last : {0, -1}) {
    absl::Status s = WriteCheckpoint(dir, MakeCheckpoint(1), keep_last);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("keep_last"));
  }
  absl::Status s = WriteCheckpoint(dir, MakeCheckpoint(-1), 1);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  for (const char* key : {"format", "crc32c:dense/bias", "crc32c:"}) {
    Checkpoint c = MakeCheckpoint(1);
    c.metadata[key] = "x";
    s = WriteCheckpoint(dir, c, 1);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(key));
  }
  EXPECT_FALSE(fs::exists(dir));

  // A tensor the safetensors writer rejects leaves the directory as it was.
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(1), 2).ok());
  const std::string manifest = ReadAll(dir + "/checkpoint.json");
  Checkpoint bad = MakeCheckpoint(2);
  bad.tensors[0].values.pop_back();
  s = WriteCheckpoint(dir, bad, 2);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("ckpt-0000000002.safetensors"));
  EXPECT_EQ(ReadAll(dir + "/checkpoint.json"), manifest);
  EXPECT_THAT(Files(dir),
              ElementsAre("checkpoint.json", "ckpt-0000000001.safetensors"));
}

TEST(CheckpointTest, ReadCheckpointWantsACheckpointName) {
  const std::string dir = TestDir();
  ASSERT_TRUE(WriteCheckpoint(dir, MakeCheckpoint(1), 2).ok());
  const std::string renamed = dir + "/model.safetensors";
  fs::copy_file(dir + "/ckpt-0000000001.safetensors", renamed);
  absl::StatusOr<Checkpoint> r = ReadCheckpoint(renamed);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(renamed));
}

}  // namespace
}  // namespace pscluster
