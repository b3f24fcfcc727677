#include "model/tfrecord_index.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/tfrecord.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

class TFRecordIndexTest : public ::testing::Test {
 protected:
  // Writes `bytes` to a file and opens it.
  int Write(const std::string& bytes) {
    path_ = std::string(std::getenv("TEST_TMPDIR")) + "/t.tfrecord";
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
    if (fd_ >= 0) close(fd_);
    fd_ = open(path_.c_str(), O_RDONLY);
    return fd_;
  }
  ~TFRecordIndexTest() override {
    if (fd_ >= 0) close(fd_);
  }
  // Whether indexing and then reading every record fails with `what`.
  std::string FirstError(const std::string& bytes) {
    std::vector<TFRecordRef> refs;
    const int fd = Write(bytes);
    absl::Status s = IndexTFRecordFile(fd, path_, 0, &refs);
    std::string data;
    for (size_t i = 0; s.ok() && i < refs.size(); ++i) {
      s = ReadTFRecordAt(fd, path_, refs[i], static_cast<int64_t>(i), &data);
    }
    if (!s.ok()) {
      EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    }
    return s.ok() ? "" : std::string(s.message());
  }

  std::string path_;
  int fd_ = -1;
};

std::string Three() {
  std::string out;
  AppendTFRecord("first", &out);
  AppendTFRecord("", &out);
  AppendTFRecord(std::string(100000, 'x'), &out);
  return out;
}

TEST_F(TFRecordIndexTest, RoundTripWithCommonWriter) {
  std::vector<TFRecordRef> refs;
  const int fd = Write(Three());
  ASSERT_TRUE(IndexTFRecordFile(fd, path_, 7, &refs).ok());
  ASSERT_EQ(refs.size(), 3u);
  EXPECT_EQ(refs[0].offset, 0u);
  EXPECT_EQ(refs[0].length, 5u);
  EXPECT_EQ(refs[1].offset, 21u);
  EXPECT_EQ(refs[2].length, 100000u);
  EXPECT_EQ(refs[2].file, 7u);
  std::string data;
  ASSERT_TRUE(ReadTFRecordAt(fd, path_, refs[2], 2, &data).ok());
  EXPECT_EQ(data, std::string(100000, 'x'));
  ASSERT_TRUE(ReadTFRecordAt(fd, path_, refs[0], 0, &data).ok());
  EXPECT_EQ(data, "first");
  ASSERT_TRUE(ReadTFRecordAt(fd, path_, refs[1], 1, &data).ok());
  EXPECT_EQ(data, "");
}

TEST_F(TFRecordIndexTest, EmptyFileHasNoRecords) {
  std::vector<TFRecordRef> refs;
  ASSERT_TRUE(IndexTFRecordFile(Write(""), path_, 0, &refs).ok());
  EXPECT_TRUE(refs.empty());
}

TEST_F(TFRecordIndexTest, BadLengthCrcNamesFileAndRecord) {
  std::string bytes = Three();
  bytes[21 + 9] ^= 1;  // record 1's length CRC
  const std::string e = FirstError(bytes);
  EXPECT_NE(e.find(path_ + ": record 1 (byte offset 21): bad length CRC"), std::string::npos) << e;
}

TEST_F(TFRecordIndexTest, CorruptLengthIsBadLengthCrc) {
  std::string bytes = Three();
  bytes[0] = 6;  // the length itself
  EXPECT_NE(FirstError(bytes).find("record 0 (byte offset 0): bad length CRC"), std::string::npos);
}

TEST_F(TFRecordIndexTest, BadDataCrc) {
  std::string bytes = Three();
  bytes[37 + 12 + 500] ^= 0x40;  // record 2's data
  const std::string e = FirstError(bytes);
  EXPECT_NE(e.find("record 2 (byte offset 37): bad data CRC"), std::string::npos) << e;
  bytes = Three();
  bytes[37 - 1] ^= 0x40;  // record 1's data CRC itself
  EXPECT_NE(FirstError(bytes).find("record 1 (byte offset 21): bad data CRC"), std::string::npos);
}

TEST_F(TFRecordIndexTest, EveryTruncationIsNamed) {
  const std::string bytes = Three();
  for (size_t n : {size_t{1}, size_t{11}, size_t{12}, size_t{20}, size_t{30}, size_t{37 + 12},
                   bytes.size() - 1}) {
    const std::string e = FirstError(bytes.substr(0, n));
    EXPECT_NE(e.find("truncated"), std::string::npos) << n << ": " << e;
    EXPECT_NE(e.find(path_), std::string::npos) << e;
  }
}

TEST_F(TFRecordIndexTest, FileShrunkAfterIndexing) {
  std::vector<TFRecordRef> refs;
  const int fd = Write(Three());
  ASSERT_TRUE(IndexTFRecordFile(fd, path_, 0, &refs).ok());
  ASSERT_EQ(truncate(path_.c_str(), 40), 0);
  std::string data;
  absl::Status s = ReadTFRecordAt(fd, path_, refs[2], 2, &data);
  EXPECT_TRUE(absl::IsDataLoss(s));
  EXPECT_NE(s.message().find("record 2 (byte offset 37): truncated"), std::string::npos) << s;
}

}  // namespace
}  // namespace pscluster
