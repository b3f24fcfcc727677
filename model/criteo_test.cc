#include "model/criteo.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

// A line from fields given as label, 13 integers and 26 categories.
std::string Line(const std::string& label, const std::vector<std::string>& integers,
                 const std::vector<std::string>& categories) {
  std::vector<std::string> fields = {label};
  fields.insert(fields.end(), integers.begin(), integers.end());
  fields.insert(fields.end(), categories.begin(), categories.end());
  return absl::StrJoin(fields, "\t");
}

// A full line: integers 0..12, categories "000000c0".."000000d9".
std::string GoodLine() {
  std::vector<std::string> integers, categories;
  for (int i = 0; i < 13; ++i) integers.push_back(std::to_string(i));
  for (int c = 0; c < 26; ++c) categories.push_back(absl::StrCat("000000", absl::Hex(0xc0 + c)));
  return Line("1", integers, categories);
}

// GoodLine with field `field` (0-based, 0 the label) replaced by `text`.
std::string WithField(int field, const std::string& text) {
  std::vector<std::string> fields = absl::StrSplit(GoodLine(), '\t');
  fields[field] = text;
  return absl::StrJoin(fields, "\t");
}

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

TEST(ParseCriteoLineTest, ReadsEveryField) {
  CriteoExample e;
  ASSERT_TRUE(ParseCriteoLine(GoodLine(), &e).ok());
  EXPECT_EQ(e.label, 1.0f);
  for (int i = 0; i < 13; ++i) {
    EXPECT_TRUE(e.has_integer(i));
    EXPECT_EQ(e.integers[i], i);
  }
  for (int c = 0; c < 26; ++c) EXPECT_EQ(e.categories[c], 0xc0 + c + 1);
}

TEST(ParseCriteoLineTest, RealCriteoLine) {
  // The first line of the Display Advertising Challenge's train.txt.
  const std::string line =
      "0\t1\t1\t5\t0\t1382\t4\t15\t2\t181\t1\t2\t\t2\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t"
      "25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t"
      "1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t\t3a171ecb\t"
      "c5c50484\te8b83407\t9727dd16\n";
  CriteoExample e;
  ASSERT_TRUE(ParseCriteoLine(line, &e).ok());
  EXPECT_EQ(e.label, 0.0f);
  EXPECT_EQ(e.integers[4], 1382);
  EXPECT_FALSE(e.has_integer(11));  // I12 is empty
  EXPECT_EQ(e.categories[0], 0x68fd1e64 + 1);
  EXPECT_EQ(e.categories[21], kCriteoMissingId);  // C22 is empty
  EXPECT_EQ(e.categories[25], 0x9727dd16 + 1);
}

TEST(ParseCriteoLineTest, EmptyFieldsAreMissing) {
  const std::string line = Line("0", std::vector<std::string>(13), std::vector<std::string>(26));
  CriteoExample e;
  ASSERT_TRUE(ParseCriteoLine(line, &e).ok());
  EXPECT_EQ(e.integer_present, 0u);
  for (int i = 0; i < 13; ++i) EXPECT_EQ(e.integers[i], 0);
  for (int64_t id : e.categories) EXPECT_EQ(id, kCriteoMissingId);
}

TEST(ParseCriteoLineTest, NegativeIntegersAndHexOfZero) {
  CriteoExample e;
  ASSERT_TRUE(ParseCriteoLine(WithField(2, "-2"), &e).ok());
  EXPECT_EQ(e.integers[1], -2);
  ASSERT_TRUE(ParseCriteoLine(WithField(14, "00000000"), &e).ok());
  EXPECT_EQ(e.categories[0], 1);  // distinct from kCriteoMissingId
  ASSERT_TRUE(ParseCriteoLine(WithField(39, "FFFFFFFF"), &e).ok());
  EXPECT_EQ(e.categories[25], int64_t{1} << 32);
}

TEST(ParseCriteoLineTest, LineEndsAreIgnored) {
  CriteoExample plain, lf, crlf;
  ASSERT_TRUE(ParseCriteoLine(GoodLine(), &plain).ok());
  ASSERT_TRUE(ParseCriteoLine(GoodLine() + "\n", &lf).ok());
  ASSERT_TRUE(ParseCriteoLine(GoodLine() + "\r\n", &crlf).ok());
  EXPECT_EQ(crlf.categories, plain.categories);
  EXPECT_EQ(lf.categories, plain.categories);
}

// The error of parsing `line`, "" when it parses.
std::string ErrorOf(const std::string& line) {
  CriteoExample e;
  const absl::Status s = ParseCriteoLine(line, &e);
  if (s.ok()) return "";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.message());
}

TEST(ParseCriteoLineTest, ErrorsNameTheField) {
  EXPECT_EQ(ErrorOf(WithField(0, "2")), "field 1 (label): \"2\" is not a label (0 or 1)");
  EXPECT_EQ(ErrorOf(WithField(0, "")), "field 1 (label): \"\" is not a label (0 or 1)");
  EXPECT_EQ(ErrorOf(WithField(4, "12x")), "field 5 (I4): \"12x\" is not an integer in int64 range");
  EXPECT_EQ(ErrorOf(WithField(4, " 12")), "field 5 (I4): \" 12\" is not an integer in int64 range");
  EXPECT_EQ(ErrorOf(WithField(13, "99999999999999999999")),
            "field 14 (I13): \"99999999999999999999\" is not an integer in int64 range");
  EXPECT_EQ(ErrorOf(WithField(14, "68fd1e6g")), "field 15 (C1): \"68fd1e6g\" is not 8 hex digits");
  EXPECT_EQ(ErrorOf(WithField(39, "68fd1e6")), "field 40 (C26): \"68fd1e6\" is not 8 hex digits");
  EXPECT_EQ(ErrorOf(WithField(20, "0x12345678")),
            "field 21 (C7): \"0x12345678\" is not 8 hex digits");
  // A carriage return inside the line is not a line end.
  EXPECT_EQ(ErrorOf(WithField(5, "1\r")),
            "field 6 (I5): \"1\\r\" is not an integer in int64 range");
}

TEST(ParseCriteoLineTest, WrongFieldCountIsRefused) {
  const std::string line = GoodLine();
  EXPECT_EQ(ErrorOf(line.substr(0, line.rfind('\t'))),
            "the line has 39 tab-separated fields, expected 40 (label, I1..I13, C1..C26)");
  EXPECT_EQ(ErrorOf(line + "\t"),
            "the line has 41 tab-separated fields, expected 40 (label, I1..I13, C1..C26)");
  EXPECT_EQ(ErrorOf(""), "field 1 (label): \"\" is not a label (0 or 1)");
}

TEST(AppendCriteoLineTest, RoundTrips) {
  for (const std::string& line :
       {GoodLine(), WithField(2, "-3"), WithField(3, ""), WithField(20, ""),
        WithField(5, "-9223372036854775808"), WithField(30, "ffffffff")}) {
    CriteoExample e;
    ASSERT_TRUE(ParseCriteoLine(line, &e).ok()) << line;
    std::string out;
    AppendCriteoLine(e, &out);
    EXPECT_EQ(out, line + "\n");
  }
}

// A history field (criteo.json's "history"): up to that many ids after
// C26, oldest first; an empty field is no history. It round-trips, and a
// bad id, too many ids or a missing field are refused naming it.
TEST(ParseCriteoLineTest, HistoryField) {
  CriteoExample e;
  ASSERT_TRUE(ParseCriteoLine(GoodLine() + "\t0000000a,FFFFFFFF,0000000a", &e, 1, 4).ok());
  ASSERT_EQ(e.history_length, 3);
  EXPECT_EQ(e.history[0], 0xa + 1);
  EXPECT_EQ(e.history[1], int64_t{0xffffffff} + 1);
  EXPECT_EQ(e.history[2], 0xa + 1);
  EXPECT_EQ(e.categories[25], 0xd9 + 1);
  std::string out;
  AppendCriteoLine(e, &out, 1, 4);
  EXPECT_EQ(out, GoodLine() + "\t0000000a,ffffffff,0000000a\n");
  ASSERT_TRUE(ParseCriteoLine(GoodLine() + "\t", &e, 1, 4).ok());
  EXPECT_EQ(e.history_length, 0);
  out.clear();
  AppendCriteoLine(e, &out, 1, 4);
  EXPECT_EQ(out, GoodLine() + "\t\n");
  // Two labels, then the history.
  std::vector<std::string> fields = absl::StrSplit(GoodLine(), '\t');
  fields.insert(fields.begin() + 1, "0");
  ASSERT_TRUE(ParseCriteoLine(absl::StrJoin(fields, "\t") + "\t00000001", &e, 2, 1).ok());
  EXPECT_EQ(e.history_length, 1);
  EXPECT_EQ(e.history[0], 2);

  const struct {
    std::string line;
    std::string expect;
  } bad[] = {
      {GoodLine() + "\t0000000a,0000000b,0000000c,0000000d,0000000e",
       "field 41 (history): \"0000000a,0000000b,0000000c,0000000d,0000000e\" is not at most 4 "
       "ids (criteo.json's \"history\")"},
      {GoodLine() + "\t0000000a,,0000000b",
       "field 41 (history): \"0000000a,,0000000b\" is not comma-separated ids of 8 hex digits "
       "(\"\" is not one)"},
      {GoodLine() + "\t0000000a,xyz",
       "is not comma-separated ids of 8 hex digits (\"xyz\" is not one)"},
      {GoodLine(),
       "the line has 40 tab-separated fields, expected 41 (label, I1..I13, C1..C26, "
       "history)"},
  };
  for (const auto& c : bad) {
    const absl::Status st = ParseCriteoLine(c.line, &e, 1, 4);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << c.line;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st;
  }
  // Without a history the field is one too many.
  EXPECT_FALSE(ParseCriteoLine(GoodLine() + "\t0000000a", &e).ok());
}

TEST(CriteoIntegerTransformTest, LogOnePlusClippedAtZero) {
  EXPECT_EQ(CriteoIntegerTransform(0), 0.0f);
  EXPECT_FLOAT_EQ(CriteoIntegerTransform(1), std::log(2.0f));
  EXPECT_FLOAT_EQ(CriteoIntegerTransform(1382), std::log(1383.0f));
  EXPECT_EQ(CriteoIntegerTransform(-1), 0.0f);
  EXPECT_EQ(CriteoIntegerTransform(-2), 0.0f);
}

TEST(CriteoHashTest, StableAndSeparatesColumns) {
  // The values are part of the contract: models hashed with them stay valid.
  EXPECT_EQ(CriteoFeatureKey(0, 0), 0u);  // the finalizer fixes 0
  EXPECT_EQ(CriteoFeatureKey(0, 1), 0x5692161d100b05e5ULL);
  EXPECT_NE(CriteoFeatureKey(0, 1), CriteoFeatureKey(1, 1));
  EXPECT_NE(CriteoFeatureKey(0, kCriteoMissingId), CriteoFeatureKey(1, kCriteoMissingId));
  // The same ids in every column: 26 * 1000 distinct keys.
  std::vector<uint64_t> keys;
  for (int f = 0; f < 26; ++f) {
    for (int64_t id = 0; id < 1000; ++id) keys.push_back(CriteoFeatureKey(f, id));
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::unique(keys.begin(), keys.end()), keys.end());
}

TEST(CriteoHashTest, BucketsAreInRangeAndSpread) {
  constexpr uint64_t kBuckets = 1000;
  std::vector<int> counts(kBuckets);
  for (int f = 0; f < 26; ++f) {
    for (int64_t id = 1; id <= 10000; ++id) {
      const uint64_t b = CriteoBucket(f, id, kBuckets);
      ASSERT_LT(b, kBuckets);
      ++counts[b];
    }
  }
  // 260 per bucket on average; a fair hash stays well within 160..360.
  EXPECT_GT(*std::min_element(counts.begin(), counts.end()), 160);
  EXPECT_LT(*std::max_element(counts.begin(), counts.end()), 360);
  EXPECT_EQ(CriteoBucket(3, 77, 1), 0u);
}

TEST(CriteoReaderTest, ReadsEveryLineAndTheLastWithoutNewline) {
  const std::string path = TempPath("reader_ok.txt");
  testing::WriteAll(path, GoodLine() + "\n" + WithField(0, "0") + "\r\n" + WithField(2, "-1"));
  absl::StatusOr<std::vector<CriteoExample>> examples = ReadCriteoFile(path);
  ASSERT_TRUE(examples.ok()) << examples.status();
  ASSERT_EQ(examples->size(), 3u);
  EXPECT_EQ((*examples)[0].label, 1.0f);
  EXPECT_EQ((*examples)[1].label, 0.0f);
  EXPECT_EQ((*examples)[2].integers[1], -1);
}

TEST(CriteoReaderTest, EmptyFileHasNoExamples) {
  const std::string path = TempPath("reader_empty.txt");
  testing::WriteAll(path, "");
  absl::StatusOr<std::vector<CriteoExample>> examples = ReadCriteoFile(path);
  ASSERT_TRUE(examples.ok()) << examples.status();
  EXPECT_TRUE(examples->empty());
}

TEST(CriteoReaderTest, ErrorNamesFileAndLine) {
  const std::string path = TempPath("reader_bad.txt");
  testing::WriteAll(path, GoodLine() + "\n" + GoodLine() + "\n" + WithField(7, "seven") + "\n" +
                              GoodLine() + "\n");
  absl::StatusOr<std::unique_ptr<CriteoReader>> reader = CriteoReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  CriteoExample e;
  EXPECT_TRUE(*(*reader)->Next(&e));
  EXPECT_TRUE(*(*reader)->Next(&e));
  absl::StatusOr<bool> third = (*reader)->Next(&e);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().message(),
            path + ":3: field 8 (I7): \"seven\" is not an integer in int64 range");
  EXPECT_EQ((*reader)->line_number(), 3);
  EXPECT_EQ((*reader)->Next(&e).status(), third.status());  // sticky
  EXPECT_EQ(ReadCriteoFile(path).status(), third.status());
}

TEST(CriteoReaderTest, MissingFileIsNotFound) {
  const absl::Status s = ReadCriteoFile(TempPath("no_such_file.txt")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("no_such_file.txt"), std::string::npos) << s;
}

// Writes `text` gzip-compressed to `path`.
void WriteGzip(const std::string& path, const std::string& text) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, text.data(), text.size()), static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

TEST(CriteoReaderTest, ReadsGzipAcrossChunks) {
  // Over 2 MiB of text, so that lines straddle the reader's 1 MiB chunks.
  std::string text;
  int lines = 0;
  while (text.size() < (size_t{5} << 20) / 2) {
    text += WithField(1, std::to_string(lines)) + "\n";
    ++lines;
  }
  const std::string path = TempPath("reader.txt.gz");
  WriteGzip(path, text);
  absl::StatusOr<std::vector<CriteoExample>> examples = ReadCriteoFile(path);
  ASSERT_TRUE(examples.ok()) << examples.status();
  ASSERT_EQ(static_cast<int>(examples->size()), lines);
  for (int i = 0; i < lines; ++i) ASSERT_EQ((*examples)[i].integers[0], i);
}

TEST(CriteoReaderTest, GzipErrorNamesLine) {
  const std::string path = TempPath("reader_bad.txt.gz");
  WriteGzip(path, GoodLine() + "\n" + GoodLine() + "\n" + WithField(0, "yes") + "\n");
  const absl::Status s = ReadCriteoFile(path).status();
  EXPECT_EQ(s.message(), path + ":3: field 1 (label): \"yes\" is not a label (0 or 1)");
}

TEST(CriteoReaderTest, TruncatedGzipIsAnError) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += WithField(1, std::to_string(i)) + "\n";
  const std::string path = TempPath("reader_cut.txt.gz");
  WriteGzip(path, text);
  const std::string bytes = testing::ReadAll(path);
  testing::WriteAll(path, bytes.substr(0, bytes.size() / 2));
  const absl::Status s = ReadCriteoFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
  EXPECT_EQ(s.message().rfind(path + ":", 0), 0u) << s;
}

}  // namespace
}  // namespace pscluster
