#include "common/tfrecord.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

uint64_t GetLE(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  }
  return v;
}

std::string Framed(const std::vector<std::string>& records) {
  std::string out;
  for (const auto& r : records) AppendTFRecord(r, &out);
  return out;
}

TEST(TFRecord, FramingIsByteExact) {
  std::string out;
  AppendTFRecord("abc", &out);
  ASSERT_EQ(out.size(), kTFRecordOverhead + 3);
  EXPECT_EQ(GetLE(out, 0, 8), 3u);
  const std::string length_bytes = out.substr(0, 8);
  EXPECT_EQ(GetLE(out, 8, 4), crc32c::Mask(crc32c::Value(length_bytes)));
  EXPECT_EQ(out.substr(12, 3), "abc");
  EXPECT_EQ(GetLE(out, 15, 4),
            crc32c::Mask(crc32c::Value(std::string_view("abc"))));
  // Appending keeps what was there.
  AppendTFRecord("", &out);
  EXPECT_EQ(out.size(), 2 * kTFRecordOverhead + 3);
  EXPECT_EQ(GetLE(out, 19, 8), 0u);
}

TEST(TFRecord, RoundTripsRecordsOfManySizes) {
  std::vector<std::string> records = {"", "x", std::string(1000, '\0'),
                                      "hello world"};
  std::string big;
  for (int i = 0; i < 70000; ++i) big.push_back(static_cast<char>(i * 31));
  records.push_back(big);
  auto parsed = ParseTFRecords(Framed(records), "mem");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, records);
}

TEST(TFRecord, EmptyInputHasNoRecords) {
  auto parsed = ParseTFRecords("", "mem");
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->empty());
}

TEST(TFRecord, EveryFlippedByteIsDetected) {
  const std::string good = Framed({"first", "second record"});
  const size_t second = kTFRecordOverhead + 5;
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x01;
    auto parsed = ParseTFRecords(bad, "events.bin");
    ASSERT_FALSE(parsed.ok()) << "flip at byte " << i << " went unnoticed";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(parsed.status().message()),
                HasSubstr("events.bin"));
    const std::string where =
        "offset " + std::to_string(i < second ? 0 : second);
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(where))
        << parsed.status();
  }
}

TEST(TFRecord, NamesWhichCrcFailed) {
  std::string bad = Framed({"payload"});
  bad[0] ^= 0x04;  // length byte
  EXPECT_THAT(std::string(ParseTFRecords(bad, "f").status().message()),
              HasSubstr("length CRC mismatch"));
  bad = Framed({"payload"});
  bad[13] ^= 0x04;  // a data byte
  EXPECT_THAT(std::string(ParseTFRecords(bad, "f").status().message()),
              HasSubstr("data CRC mismatch"));
}

TEST(TFRecord, TruncationIsDataLossAtTheRecordsOffset) {
  const std::string good = Framed({"one", "two"});
  const size_t second = kTFRecordOverhead + 3;
  for (size_t cut = 1; cut < good.size(); ++cut) {
    if (cut == second) continue;  // a clean record boundary
    auto parsed = ParseTFRecords(good.substr(0, cut), "f");
    ASSERT_FALSE(parsed.ok()) << "cut at " << cut;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("truncated"));
    EXPECT_THAT(
        std::string(parsed.status().message()),
        HasSubstr("offset " + std::to_string(cut < second ? 0 : second)));
  }
  auto first_only = ParseTFRecords(good.substr(0, second), "f");
  ASSERT_TRUE(first_only.ok());
  EXPECT_EQ(*first_only, std::vector<std::string>{"one"});
}

TEST(TFRecord, ReadsAFileAndNamesMissingOnes) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(tmp ? tmp : "/tmp") + "/tfrecord_test.rec";
  const std::string bytes = Framed({"a", "bb"});
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
  auto records = ReadTFRecordFile(path);
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(*records, (std::vector<std::string>{"a", "bb"}));
  ::unlink(path.c_str());

  auto missing = ReadTFRecordFile(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(path));
}

}  // namespace
}  // namespace pscluster
