#include "model/criteo.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace pscluster {
namespace {

constexpr size_t kChunk = size_t{1} << 20;
constexpr size_t kMaxLine = size_t{1} << 20;
constexpr char kHexDigits[] = "0123456789abcdef";

// "field 5 (I4)" for 0-based column `column` of a line of `labels` label
// columns: 1-based like the columns of the file, with the name the Criteo
// documentation gives the column.
std::string FieldName(int column, int labels) {
  const std::string field = absl::StrCat("field ", column + 1);
  if (column == 0) return field + " (label)";
  if (column < labels) return absl::StrCat(field, " (label ", column + 1, ")");
  const int feature = column - labels;  // 0..38, then the history
  if (feature < kCriteoIntegerFeatures) return absl::StrCat(field, " (I", feature + 1, ")");
  if (feature == kCriteoIntegerFeatures + kCriteoCategoricalFeatures) return field + " (history)";
  return absl::StrCat(field, " (C", feature - kCriteoIntegerFeatures + 1, ")");
}

absl::Status BadField(int column, int labels, absl::string_view text, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(FieldName(column, labels), ": \"", absl::CEscape(text), "\" is not ", what));
}

bool IsDecimal(absl::string_view text) {
  if (!text.empty() && text[0] == '-') text.remove_prefix(1);
  return !text.empty() && std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 8 hex digits as an id (their value + 1); -1 when `text` is not that.
int64_t HexId(absl::string_view text) {
  if (text.size() != 8) return -1;
  int64_t value = 0;
  for (char ch : text) {
    const int digit = HexValue(ch);
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value + 1;
}

// The history field (column `column`): up to `history` comma-separated ids.
absl::Status ParseHistory(int column, int labels, int history, absl::string_view text,
                          CriteoExample* example) {
  if (text.empty()) return absl::OkStatus();
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const absl::string_view id = text.substr(
        start, comma == absl::string_view::npos ? absl::string_view::npos : comma - start);
    if (example->history_length == history) {
      return BadField(column, labels, text,
                      absl::StrCat("at most ", history, " ids (criteo.json's \"history\")"));
    }
    const int64_t value = HexId(id);
    if (value < 0) {
      return BadField(column, labels, text,
                      absl::StrCat("comma-separated ids of 8 hex digits (\"", absl::CEscape(id),
                                   "\" is not one)"));
    }
    example->history[example->history_length++] = value;
    if (comma == absl::string_view::npos) return absl::OkStatus();
    start = comma + 1;
  }
}

// Column `column` (0-based) of a line of `labels` label columns: the
// labels, then I1..I13, then C1..C26.
absl::Status ParseField(int column, int labels, absl::string_view text, CriteoExample* example) {
  if (column < labels) {
    if (text != "0" && text != "1") return BadField(column, labels, text, "a label (0 or 1)");
    (column == 0 ? example->label : example->label2) = text == "1" ? 1.0f : 0.0f;
    return absl::OkStatus();
  }
  const int field = column - labels + 1;  // 1..13 I1..I13, then C1..C26
  auto bad = [&](absl::string_view what) { return BadField(column, labels, text, what); };
  if (field <= kCriteoIntegerFeatures) {
    const int i = field - 1;
    if (text.empty()) return absl::OkStatus();  // missing: 0, bit clear
    int64_t value = 0;
    if (!IsDecimal(text) || !absl::SimpleAtoi(text, &value)) {
      return bad("an integer in int64 range");
    }
    example->integers[i] = value;
    example->integer_present |= 1u << i;
    return absl::OkStatus();
  }
  const int c = field - 1 - kCriteoIntegerFeatures;
  if (text.empty()) return absl::OkStatus();  // missing: kCriteoMissingId
  const int64_t id = HexId(text);
  if (id < 0) return bad("8 hex digits");
  example->categories[c] = id;
  return absl::OkStatus();
}

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

absl::Status ParseCriteoLine(absl::string_view line, CriteoExample* example, int labels,
                             int history) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  *example = CriteoExample();
  const int features = kCriteoFields - 1 + labels;
  const int fields = features + (history > 0 ? 1 : 0);
  int field = 0;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    const size_t end = tab == absl::string_view::npos ? line.size() : tab;
    const absl::string_view text = line.substr(start, end - start);
    if (field < features) {
      if (absl::Status s = ParseField(field, labels, text, example); !s.ok()) return s;
    } else if (field < fields) {
      if (absl::Status s = ParseHistory(field, labels, history, text, example); !s.ok()) return s;
    }
    ++field;
    if (tab == absl::string_view::npos) break;
    start = tab + 1;
  }
  if (field != fields) {
    return absl::InvalidArgumentError(
        absl::StrCat("the line has ", field, " tab-separated fields, expected ", fields,
                     labels == 1 ? " (label, I1..I13, C1..C26" : " (2 labels, I1..I13, C1..C26",
                     history > 0 ? ", history)" : ")"));
  }
  return absl::OkStatus();
}

void AppendCriteoLine(const CriteoExample& example, std::string* out, int labels, int history) {
  // Longest line: 2 labels, 13 int64s of 20 characters, 26 ids of 8, 41
  // tabs, the history's ids of 8 and their commas, "\n".
  char line[2 + kCriteoIntegerFeatures * 20 + kCriteoCategoricalFeatures * 8 + 42 +
            kCriteoMaxHistory * 9];
  char* p = line;
  *p++ = example.label >= 0.5f ? '1' : '0';
  if (labels == 2) {
    *p++ = '\t';
    *p++ = example.label2 >= 0.5f ? '1' : '0';
  }
  for (int i = 0; i < kCriteoIntegerFeatures; ++i) {
    *p++ = '\t';
    if (!example.has_integer(i)) continue;
    const absl::AlphaNum digits(example.integers[i]);
    p = std::copy(digits.data(), digits.data() + digits.size(), p);
  }
  for (int64_t id : example.categories) {
    *p++ = '\t';
    if (id == kCriteoMissingId) continue;
    const uint32_t hash = static_cast<uint32_t>(id - 1);
    for (int shift = 28; shift >= 0; shift -= 4) *p++ = kHexDigits[(hash >> shift) & 0xf];
  }
  if (history > 0) {
    *p++ = '\t';
    for (int k = 0; k < std::min(example.history_length, history); ++k) {
      if (k > 0) *p++ = ',';
      const uint32_t hash = static_cast<uint32_t>(example.history[k] - 1);
      for (int shift = 28; shift >= 0; shift -= 4) *p++ = kHexDigits[(hash >> shift) & 0xf];
    }
  }
  *p++ = '\n';
  out->append(line, p);
}

float CriteoIntegerTransform(int64_t x) {
  return static_cast<float>(std::log1p(static_cast<double>(std::max<int64_t>(x, 0))));
}

uint64_t CriteoFeatureKey(int feature, int64_t id) {
  return Mix64(static_cast<uint64_t>(id) ^ (static_cast<uint64_t>(feature) << 56));
}

uint64_t CriteoBucket(int feature, int64_t id, uint64_t buckets) {
  const unsigned __int128 wide = static_cast<unsigned __int128>(CriteoFeatureKey(feature, id));
  return static_cast<uint64_t>((wide * buckets) >> 64);
}

void CriteoReader::GzCloser::operator()(gzFile_s* file) const { gzclose(file); }

CriteoReader::CriteoReader(std::string path, gzFile_s* file, int labels, int history)
    : path_(std::move(path)), file_(file), labels_(labels), history_(history) {}

CriteoReader::~CriteoReader() = default;

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(const std::string& path,
                                                                 int labels, int history) {
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return ErrnoStatus(errno != 0 ? errno : ENOMEM, "cannot open " + path);
  gzbuffer(file, kChunk);
  return std::unique_ptr<CriteoReader>(new CriteoReader(path, file, labels, history));
}

absl::Status CriteoReader::Fill() {
  if (begin_ > 0) {
    buffer_.erase(0, begin_);
    begin_ = 0;
  }
  const size_t old_size = buffer_.size();
  buffer_.resize(old_size + kChunk);
  const int got = gzread(file_.get(), &buffer_[old_size], static_cast<unsigned>(kChunk));
  buffer_.resize(old_size + std::max(got, 0));
  int errnum = Z_OK;
  const char* message = gzerror(file_.get(), &errnum);
  // Z_BUF_ERROR is zlib's "unexpected end of file" in a gzip stream.
  if (got < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
    if (errnum == Z_ERRNO) return ErrnoStatus(errno, "cannot read " + path_);
    // gzerror's text starts with the path; keep only the reason.
    std::string reason = message;
    if (reason.rfind(path_ + ": ", 0) == 0) reason = reason.substr(path_.size() + 2);
    if (errnum == Z_BUF_ERROR) reason += " (the gzip file is truncated)";
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": corrupt gzip data after line ", line_number_, ": ", reason));
  }
  if (got == 0) at_end_ = true;
  return absl::OkStatus();
}

absl::StatusOr<bool> CriteoReader::Next(CriteoExample* example) {
  if (!error_.ok()) return error_;
  size_t newline = buffer_.find('\n', begin_);
  while (newline == std::string::npos && !at_end_) {
    if (buffer_.size() - begin_ > kMaxLine) {
      error_ = absl::InvalidArgumentError(
          absl::StrCat(path_, ":", line_number_ + 1, ": line longer than ", kMaxLine, " bytes"));
      return error_;
    }
    const size_t searched = buffer_.size() - begin_;
    if (absl::Status s = Fill(); !s.ok()) {
      error_ = s;
      return error_;
    }
    newline = buffer_.find('\n', begin_ + searched);
  }
  if (newline == std::string::npos) {
    if (begin_ == buffer_.size()) return false;
    newline = buffer_.size();  // a last line without "\n"
  }
  const absl::string_view line(buffer_.data() + begin_, newline - begin_);
  begin_ = std::min(newline + 1, buffer_.size());
  ++line_number_;
  if (absl::Status s = ParseCriteoLine(line, example, labels_, history_); !s.ok()) {
    error_ = absl::Status(s.code(), absl::StrCat(path_, ":", line_number_, ": ", s.message()));
    return error_;
  }
  return true;
}

absl::StatusOr<std::vector<CriteoExample>> ReadCriteoFile(const std::string& path, int labels,
                                                          int history) {
  absl::StatusOr<std::unique_ptr<CriteoReader>> reader = CriteoReader::Open(path, labels, history);
  if (!reader.ok()) return reader.status();
  std::vector<CriteoExample> examples;
  CriteoExample example;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&example);
    if (!more.ok()) return more.status();
    if (!*more) return examples;
    examples.push_back(example);
  }
}

}  // namespace pscluster
