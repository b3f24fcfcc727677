#include "model/safetensors.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/testing/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

std::string TestPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/safetensors_test";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

using testing::ReadAll;
using testing::WriteAll;

uint64_t GetLE64(const std::string& s) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(s[i])) << (8 * i);
  return v;
}

// A file from a literal header and `data_bytes` of data (values 0, 1, ...).
std::string FileWith(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char(uint64_t(header.size()) >> (8 * i));
  out += header;
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(char(i));
  return out;
}

NamedTensor I64Tensor(const std::string& name, std::vector<int64_t> shape,
                      std::vector<int64_t> ints) {
  NamedTensor t{name, std::move(shape), {}};
  t.dtype = NamedTensor::Dtype::kI64;
  t.ints = std::move(ints);
  return t;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Safetensors, ExactByteLayoutOfATinyFile) {
  auto bytes = SerializeSafetensors({{"a", {2}, {1.0f, -2.0f}}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string json =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("__metadata__":{"format":"pt"}})";
  ASSERT_EQ(json.size(), 85u);  // padded to 88 so that 8 + 88 is aligned
  const uint64_t n = GetLE64(*bytes);
  EXPECT_EQ(n, 88u);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes->substr(8, n), json + std::string(3, ' '));
  EXPECT_EQ(bytes->substr(8 + n),
            std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8));
  EXPECT_EQ(bytes->size(), 8 + 88 + 8u);
}

// A tensor with a zero dimension parses to no values (its copy once passed
// memcpy a null destination: UB, found by fuzz/safetensors_fuzzer).
TEST(Safetensors, AnEmptyTensorRoundTrips) {
  absl::StatusOr<std::string> bytes = SerializeSafetensors({{"empty", {0, 3}, {}}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::vector<NamedTensor>> back = ParseSafetensors(*bytes, "empty.safetensors");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE((*back)[0].values.empty());
}

// I64 as the reference writer lays it out: 8 little-endian bytes a value
// (what numpy's "<i8" and torch.int64 read).
TEST(Safetensors, ExactByteLayoutOfAnInt64Tensor) {
  auto bytes = SerializeSafetensors({I64Tensor("ids", {2}, {1, -2})});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string json =
      R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
      R"("__metadata__":{"format":"pt"}})";
  const uint64_t n = GetLE64(*bytes);
  EXPECT_EQ(bytes->substr(8, json.size()), json);
  EXPECT_EQ(bytes->substr(8 + n),
            std::string("\x01\x00\x00\x00\x00\x00\x00\x00"
                        "\xfe\xff\xff\xff\xff\xff\xff\xff",
                        16));
}

// Int64 tensors beside float ones keep every value, the extremes included,
// and the float tensors after them keep their offsets.
TEST(Safetensors, Int64TensorsRoundTripBesideFloats) {
  const std::vector<NamedTensor> tensors = {
      {"t/rows", {2, 3}, {1, 2, 3, 4, 5, 6}},
      I64Tensor("t/ids", {4},
                {0, 7, std::numeric_limits<int64_t>::max(),
                 std::numeric_limits<int64_t>::min()}),
      I64Tensor("t/none", {0}, {}),
      I64Tensor("t/count", {}, {-5}),
      {"t/after", {1}, {9.5f}}};
  const std::string path = TestPath("int64.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  auto read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const NamedTensor& got = (*read)[i];
    EXPECT_EQ(got.name, tensors[i].name);
    EXPECT_EQ(got.dtype, tensors[i].dtype) << got.name;
    EXPECT_EQ(got.shape, tensors[i].shape) << got.name;
    EXPECT_EQ(got.ints, tensors[i].ints) << got.name;
    EXPECT_TRUE(SameBits(got.values, tensors[i].values)) << got.name;
    EXPECT_EQ(TensorBytes(got), TensorBytes(tensors[i])) << got.name;
  }
  EXPECT_EQ(DtypeName(NamedTensor::Dtype::kI64), std::string("I64"));
  EXPECT_EQ(DtypeName(NamedTensor::Dtype::kF32), std::string("F32"));
}

TEST(Safetensors, HeaderIsAlwaysAlignedToEightBytes) {
  for (int len = 1; len <= 9; ++len) {
    auto bytes = SerializeSafetensors({{std::string(len, 'w'), {1}, {3.0f}}});
    ASSERT_TRUE(bytes.ok());
    const uint64_t n = GetLE64(*bytes);
    EXPECT_EQ(n % 8, 0u) << "name length " << len;
    EXPECT_EQ(bytes->size(), 8 + n + 4);
    EXPECT_EQ((*bytes)[8], '{');
  }
}

TEST(Safetensors, RoundTripsThroughAFile) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<NamedTensor> tensors = {
      {"conv1/kernel", {3, 3, 1, 2}, {}},
      {"conv1/bias", {2}, {0.5f, -0.0f}},
      {"scalar", {}, {42.0f}},
      {"empty", {0, 3}, {}},
      {"special",
       {4},
       {nan, inf, -inf, std::numeric_limits<float>::denorm_min()}},
  };
  for (int i = 0; i < 18; ++i) tensors[0].values.push_back(0.1f * i - 1.0f);
  const std::string path = TestPath("round_trip.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path, tensors, {{"step", "1200"}, {"epoch", "3"}}).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  std::map<std::string, std::string> metadata;
  auto read = ReadSafetensors(path, &metadata);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ((*read)[i].name, tensors[i].name);
    EXPECT_EQ((*read)[i].shape, tensors[i].shape);
    EXPECT_TRUE(SameBits((*read)[i].values, tensors[i].values))
        << tensors[i].name;
  }
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{
                          {"format", "pt"}, {"step", "1200"}, {"epoch", "3"}}));
  // The file and the in-memory encoding agree.
  auto bytes =
      SerializeSafetensors(tensors, {{"step", "1200"}, {"epoch", "3"}});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(ReadAll(path), *bytes);
}

TEST(Safetensors, CallerMaySetTheFormatAndWriteNoTensors) {
  std::map<std::string, std::string> metadata;
  auto bytes = SerializeSafetensors({}, {{"format", "np"}});
  ASSERT_TRUE(bytes.ok());
  auto read = ParseSafetensors(*bytes, "mem", &metadata);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->empty());
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"format", "np"}}));
}

TEST(Safetensors, ReadReturnsDataOffsetOrderAndAcceptsOtherWriters) {
  // Keys in another order than the data, no metadata, and pretty-printed
  // JSON with trailing spaces, as other writers may produce.
  const std::string header =
      "{\n \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, "
      "8]},\n"
      " \"z\": {\"shape\": [1, 1], \"data_offsets\": [0, 4], \"dtype\": "
      "\"F32\"}}   ";
  auto read = ParseSafetensors(FileWith(header, 8), "mem");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].name, "z");
  EXPECT_EQ((*read)[0].shape, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ((*read)[1].name, "a");
  float expected_a;
  const char a_bytes[4] = {4, 5, 6, 7};
  std::memcpy(&expected_a, a_bytes, 4);
  EXPECT_TRUE(SameBits((*read)[1].values, {expected_a}));
}

struct BadFile {
  const char* what;
  std::string bytes;
  const char* message;  // expected substring
  absl::StatusCode code = absl::StatusCode::kDataLoss;
};

std::string T(const std::string& name, const std::string& body) {
  return "\"" + name + "\":" + body;
}

TEST(Safetensors, EveryValidationErrorIsReportedWithItsValue) {
  const std::string ok_a =
      T("a", R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})");
  std::string huge_len(8, '\xff');
  const std::vector<BadFile> cases = {
      {"empty file", "", "too short"},
      {"7 bytes", std::string(7, '\0'), "7 bytes"},
      {"header longer than file", std::string("\x40\0\0\0\0\0\0\0{}", 10),
       "header length 64 exceeds the 2 bytes"},
      {"header length 2^64-1", huge_len + "{}",
       "header length 18446744073709551615"},
      {"not starting with {", FileWith(" {}", 0), "does not start with '{'"},
      {"invalid JSON", FileWith("{\"a\":", 0), "not valid JSON"},
      {"trailing garbage", FileWith("{}x", 0), "not valid JSON"},
      {"metadata not object", FileWith(R"({"__metadata__":[]})", 0),
       "__metadata__ is not an object"},
      {"metadata value not string",
       FileWith(R"({"__metadata__":{"step":3}})", 0), "'step' is not a string"},
      {"entry not object", FileWith("{" + T("a", "[1]") + "}", 0),
       "tensor 'a' is not a JSON object"},
      {"no dtype",
       FileWith("{" + T("a", R"({"shape":[],"data_offsets":[0,4]})") + "}", 4),
       "tensor 'a' has no string dtype"},
      {"dtype F16",
       FileWith(
           "{" + T("a", R"({"dtype":"F16","shape":[2],"data_offsets":[0,4]})") +
               "}",
           4),
       "tensor 'a' has dtype F16; only F32", absl::StatusCode::kUnimplemented},
      {"no shape",
       FileWith("{" + T("a", R"({"dtype":"F32","data_offsets":[0,4]})") + "}",
                4),
       "tensor 'a' has no shape array"},
      {"negative dim",
       FileWith(
           "{" +
               T("a", R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})") +
               "}",
           4),
       "tensor 'a' has shape [-1]"},
      {"float dim",
       FileWith(
           "{" +
               T("a", R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})") +
               "}",
           4),
       "tensor 'a' has shape [1.5]"},
      {"no offsets",
       FileWith("{" + T("a", R"({"dtype":"F32","shape":[1]})") + "}", 4),
       "data_offsets missing"},
      {"three offsets",
       FileWith(
           "{" +
               T("a", R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})") +
               "}",
           8),
       "data_offsets [0,4,8]"},
      {"begin > end",
       FileWith(
           "{" + T("a", R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})") +
               "}",
           8),
       "[8, 4] with begin > end"},
      {"size does not match shape",
       FileWith(
           "{" + T("a", R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})") +
               "}",
           8),
       "tensor 'a' has shape [3] but data_offsets [0, 8] hold 8 bytes"},
      {"overflowing shape",
       FileWith("{" +
                    T("a", R"({"dtype":"F32","shape":[4294967296,4294967296],)"
                           R"("data_offsets":[0,0]})") +
                    "}",
                0),
       "tensor 'a' has shape [4294967296, 4294967296]"},
      {"past the data section", FileWith("{" + ok_a + "}", 4),
       "tensor 'a' data_offsets [0, 8] run past the 4-byte data section"},
      {"overlap",
       FileWith(
           "{" + ok_a + "," +
               T("b", R"({"dtype":"F32","shape":[2],"data_offsets":[4,12]})") +
               "}",
           12),
       "tensor 'b' data_offsets [4, 12] overlap tensor 'a' [0, 8]"},
      {"gap",
       FileWith(
           "{" + ok_a + "," +
               T("b", R"({"dtype":"F32","shape":[1],"data_offsets":[12,16]})") +
               "}",
           16),
       "bytes [8, 12) of the data section belong to no tensor (before tensor "
       "'b')"},
      {"gap at start",
       FileWith(
           "{" + T("a", R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})") +
               "}",
           8),
       "bytes [0, 4) of the data section"},
      {"bytes after the last tensor", FileWith("{" + ok_a + "}", 12),
       "bytes [8, 12) of the data section belong to no tensor"},
      {"I64 with 4 bytes a value",
       FileWith(
           "{" + T("a", R"({"dtype":"I64","shape":[2],"data_offsets":[0,8]})") +
               "}",
           8),
       "tensor 'a' has shape [2] but data_offsets [0, 8] hold 8 bytes, not 8 "
       "per I64 value"},
  };
  for (const BadFile& c : cases) {
    auto read = ParseSafetensors(c.bytes, "bad.safetensors");
    ASSERT_FALSE(read.ok()) << c.what << " was accepted";
    EXPECT_EQ(read.status().code(), c.code) << c.what << ": " << read.status();
    EXPECT_THAT(std::string(read.status().message()),
                HasSubstr("bad.safetensors: "))
        << c.what;
    EXPECT_THAT(std::string(read.status().message()), HasSubstr(c.message))
        << c.what;
  }
}

TEST(Safetensors, TruncatedOrExtendedFilesAreRejected) {
  auto bytes =
      SerializeSafetensors({{"a", {2}, {1.0f, 2.0f}}, {"b", {1}, {3.0f}}});
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(ParseSafetensors(*bytes, "f").ok());
  for (size_t cut = 0; cut < bytes->size(); ++cut) {
    auto read = ParseSafetensors(bytes->substr(0, cut), "f");
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss)
        << "cut at " << cut;
  }
  EXPECT_EQ(ParseSafetensors(*bytes + "x", "f").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(Safetensors, WriterRejectsBadTensors) {
  struct Case {
    const char* what;
    std::vector<NamedTensor> tensors;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"empty name", {{"", {1}, {1.0f}}}, "empty name"},
      {"reserved name",
       {{"__metadata__", {1}, {1.0f}}},
       "'__metadata__' is reserved"},
      {"repeated", {{"w", {1}, {1.0f}}, {"w", {1}, {1.0f}}}, "'w' is repeated"},
      {"negative dim", {{"w", {2, -1}, {}}}, "'w' has shape [2, -1]"},
      {"count mismatch",
       {{"w", {2, 3}, {1.0f}}},
       "'w' has shape [2, 3] (6 values) but 1 values"},
      {"scalar without value",
       {{"s", {}, {}}},
       "'s' has shape [] (1 values) but 0"},
      {"invalid UTF-8",
       {{"\xff\xfe", {1}, {1.0f}}},
       "cannot encode the header"},
      {"I64 count mismatch",
       {I64Tensor("ids", {3}, {1, 2})},
       "'ids' has shape [3] (3 values) but 2 values"},
      {"I64 holding floats",
       {[] {
         NamedTensor t = I64Tensor("ids", {1}, {1});
         t.values = {1.0f};
         return t;
       }()},
       "'ids' is I64 but also holds 1 F32 values"},
      {"F32 holding ints",
       {[] {
         NamedTensor t{"w", {1}, {1.0f}};
         t.ints = {1, 2};
         return t;
       }()},
       "'w' is F32 but also holds 2 I64 values"},
  };
  const std::string path = TestPath("rejected.safetensors");
  for (const Case& c : cases) {
    auto bytes = SerializeSafetensors(c.tensors);
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what;
    EXPECT_THAT(std::string(bytes.status().message()), HasSubstr(c.message))
        << c.what;
    absl::Status s = WriteSafetensors(path, c.tensors);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(path)) << c.what;
    EXPECT_FALSE(std::filesystem::exists(path)) << c.what;
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp")) << c.what;
  }
  auto bad_meta = SerializeSafetensors({}, {{"note", "\xc3"}});
  EXPECT_EQ(bad_meta.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Safetensors, WriteIsAtomic) {
  const std::string path = TestPath("atomic.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"v", {1}, {1.0f}}}).ok());
  const std::string first = ReadAll(path);

  // Overwriting replaces the file whole.
  ASSERT_TRUE(WriteSafetensors(path, {{"v", {2}, {2.0f, 3.0f}}}).ok());
  auto read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ((*read)[0].values, (std::vector<float>{2.0f, 3.0f}));

  // A write that fails (the temporary file cannot be created) leaves the
  // previous file untouched and names the temporary path.
  WriteAll(path, first);
  std::filesystem::create_directory(path + ".tmp");
  absl::Status s = WriteSafetensors(path, {{"v", {1}, {9.0f}}});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(path + ".tmp"));
  EXPECT_EQ(ReadAll(path), first);
  std::filesystem::remove(path + ".tmp");

  absl::Status missing_dir = WriteSafetensors(TestPath("no/such/dir.st"), {});
  EXPECT_EQ(missing_dir.code(), absl::StatusCode::kNotFound);
}

TEST(Safetensors, ReadNamesAMissingFile) {
  auto read = ReadSafetensors(TestPath("missing.safetensors"));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("missing.safetensors"));
  const std::string path = TestPath("corrupt.safetensors");
  WriteAll(path, "\x02\0\0\0\0\0\0\0{");
  auto corrupt = ReadSafetensors(path);
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(corrupt.status().message()), HasSubstr(path));
}

}  // namespace
}  // namespace pscluster
