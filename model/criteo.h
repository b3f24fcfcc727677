// Criteo click logs (the Display Advertising Challenge's train.txt): one
// example a line, 40 tab-separated fields: the label (0 or 1), 13 integer
// features I1..I13 (decimal, possibly negative) and 26 categorical features
// C1..C26 (8 hex digits, a hash of the category), any of the 39 features
// possibly empty. docs/criteo.md describes the format, the representation
// below and the synthetic data of model/criteo_synth.h.
//
// Plain functions and one reader; the functions are thread-safe, a
// CriteoReader is used by one thread at a time and owns its file.
#ifndef PSCLUSTER_MODEL_CRITEO_H_
#define PSCLUSTER_MODEL_CRITEO_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct gzFile_s;  // zlib's file handle (<zlib.h>), kept out of this header

namespace pscluster {

inline constexpr int kCriteoIntegerFeatures = 13;
inline constexpr int kCriteoCategoricalFeatures = 26;
inline constexpr int kCriteoFields = 1 + kCriteoIntegerFeatures + kCriteoCategoricalFeatures;

// The id of an empty categorical field. A written id is its 8 hex digits'
// value plus one (1 .. 2^32), so every id is distinct from it and
// reversible to the text.
inline constexpr int64_t kCriteoMissingId = 0;

// At most this many label columns start a line: the click, and in data of
// two tasks (criteo.json's "labels": 2, criteo_synth --conversions) the
// conversion that followed it.
inline constexpr int kCriteoMaxLabels = 2;

// Data with behaviour sequences (criteo.json's "history": L, criteo_synth
// --history): after C26, one more field, the ids of the items the user
// acted on before, oldest first, as 8 hex digits each, comma-separated (an
// empty field: none), at most L <= kCriteoMaxHistory of them. The items are
// C1's (kCriteoItemFeature): the ad shown is an item too, so a model can
// compare it with the history (DIN's target attention).
inline constexpr int kCriteoMaxHistory = 64;
inline constexpr int kCriteoItemFeature = 0;

// One parsed line.
struct CriteoExample {
  float label = 0;  // 0 or 1
  float label2 = 0;  // the second label column's, in lines of two (0 or 1)
  // I1..I13 as written; 0 where the field is empty (see has_integer).
  std::array<int64_t, kCriteoIntegerFeatures> integers{};
  // Bit i set: I(i+1) was given. Empty fields are common in real logs.
  uint32_t integer_present = 0;
  // C1..C26: the hex value + 1, or kCriteoMissingId where the field is empty.
  std::array<int64_t, kCriteoCategoricalFeatures> categories{};
  // The history's ids (hash + 1, as categories), oldest first: the first
  // history_length are set.
  int history_length = 0;
  std::array<int64_t, kCriteoMaxHistory> history{};

  bool has_integer(int i) const { return (integer_present >> i) & 1u; }
};

// Parses one line (a trailing "\n", "\r\n" or "\r" is ignored) into
// *example. InvalidArgument naming the field and its text on a wrong field
// count, a label other than 0 or 1, an integer that is not [-]digits in
// int64 range, or a categorical field that is not exactly 8 hex digits
// (either case). Callers prefix where the line came from. *example is
// unspecified after an error.
//
// `labels` (1 or kCriteoMaxLabels): label columns before I1, the second
// going to label2. `history` (0: none; else at most kCriteoMaxHistory):
// the history field's most ids; more, or one that is not 8 hex digits, is
// refused naming the field and the id.
absl::Status ParseCriteoLine(absl::string_view line, CriteoExample* example, int labels = 1,
                             int history = 0);

// Appends `example` as one line, "\n"-terminated, in the form
// ParseCriteoLine reads back to the same example (hex digits lowercase).
// Ids must be kCriteoMissingId or in [1, 2^32].
// With `labels` 2, label2 follows label; with `history` > 0, the history
// field ends the line (its first history_length ids).
void AppendCriteoLine(const CriteoExample& example, std::string* out, int labels = 1,
                      int history = 0);

// The dense input CTR models take for integer feature x: log(1 + x) for
// x >= 0. Negative values (real logs have -1, -2, -3 in I2) are clipped to
// 0 first, so they count as 0. Callers choose what an empty field is
// (usually also 0).
float CriteoIntegerTransform(int64_t x);

// A stable 64-bit key per (feature index 0..25, id): the splitmix64
// finalizer (z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27;
// z *= 0x94d049bb133111eb; z ^= z >> 31) of id XOR (feature << 56). The
// finalizer is a bijection, so two pairs with ids below 2^56 (every parsed
// id) never share a key: the same id in two columns does not collide.
uint64_t CriteoFeatureKey(int feature, int64_t id);

// The row of a table of `buckets` rows (> 0) for (feature, id): the key
// scaled into [0, buckets) by its high bits ((key * buckets) >> 64). Pairs
// collide only through this reduction. kCriteoMissingId has a row of its
// own per feature, like any id; skip it where a missing field should add
// nothing.
uint64_t CriteoBucket(int feature, int64_t id, uint64_t buckets);

// Reads examples one line at a time from a plain-text or gzip file (zlib
// passes plain text through, so either works under any name). Errors name
// the file and the line: "data/train.txt:3: field 5 (I4): ...".
class CriteoReader {
 public:
  // NotFound etc. naming the file when it cannot be opened.
  // `labels`: label columns a line starts with; `history`: the history
  // field's most ids, 0 for lines without it (ParseCriteoLine).
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Open(const std::string& path, int labels = 1,
                                                            int history = 0);
  ~CriteoReader();
  CriteoReader(const CriteoReader&) = delete;
  CriteoReader& operator=(const CriteoReader&) = delete;

  // Parses the next line into *example: true, or false at the end of the
  // file. An error (a bad line, a line over 1 MiB, corrupt gzip data) ends
  // the reading: later calls return it again.
  absl::StatusOr<bool> Next(CriteoExample* example);

  // The 1-based number of the line Next read last (0 before the first).
  int64_t line_number() const { return line_number_; }

 private:
  struct GzCloser {
    void operator()(gzFile_s* file) const;
  };
  CriteoReader(std::string path, gzFile_s* file, int labels, int history);
  // Appends up to one chunk of the file to buffer_; sets at_end_ at its end.
  absl::Status Fill();

  const std::string path_;
  std::unique_ptr<gzFile_s, GzCloser> file_;
  const int labels_;
  const int history_;
  std::string buffer_;  // bytes read and not yet parsed start at begin_
  size_t begin_ = 0;
  bool at_end_ = false;
  int64_t line_number_ = 0;
  absl::Status error_;  // sticky
};

// Every example of the file, in order; the first error as Next gives it.
absl::StatusOr<std::vector<CriteoExample>> ReadCriteoFile(const std::string& path, int labels = 1,
                                                          int history = 0);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_CRITEO_H_
