// A folder of Criteo click logs as training data (docs/criteo.md, "Training
// on Criteo data"): <dir>/train.txt and <dir>/test.txt, either also as
// .txt.gz, and optionally <dir>/criteo.json, {"buckets": B} or {"ids":
// "int64"}. Each example is 39 values, the inputs of a model taking
// `dense` [13] and `ids` [26] in that order:
//   CriteoIntegerTransform(I_k) for k = 1..13 (an empty field: 0), then
//   with buckets, CriteoBucket(c, C_c's id, B) for c = 0..25 (an empty
//   field has its own row per feature), a row of an Embedding of input_dim
//   B <= 2^24, exact in a float32; with int64 ids, CriteoInt64Id(c, C_c's
//   id), every (feature, value) its own id below 2^63, for a chief given
//   --embedding_unbounded, as Dataset::ids (0 among the floats),
// and one target, the 0/1 label. With a history ({"history": L}, buckets
// only), 1 + L values more: the item's (C1's) row, then the history's ids'
// rows, each 1 + CriteoBucket(kCriteoItemFeature, id, B), 0 for an empty
// C1 and for the steps past the history's end: the rows of an Embedding
// of input_dim B + 1 with mask_zero, shared by the item and its history.
// The split is read whole into memory (156 bytes an example; with int64
// ids, 364; with a history, 4 (1 + L) more).
//
// Plain functions: thread-safe.
#ifndef PSCLUSTER_MODEL_CRITEO_DATASET_H_
#define PSCLUSTER_MODEL_CRITEO_DATASET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/criteo.h"
#include "model/idx_dataset.h"

namespace pscluster {

inline constexpr char kCriteoConfigFile[] = "criteo.json";
inline constexpr int64_t kCriteoDefaultBuckets = 1000000;
inline constexpr int64_t kCriteoMaxBuckets = int64_t{1} << 24;
// ReadCriteoBuckets's answer for {"ids": "int64"}.
inline constexpr int64_t kCriteoInt64Ids = 0;
inline constexpr int kCriteoExampleValues = kCriteoIntegerFeatures + kCriteoCategoricalFeatures;

// Whether `dir` is a folder holding train.txt, test.txt, or either .gz.
bool IsCriteoFolder(const std::string& dir);

// criteo.json's text for `buckets` rows a table: {"buckets": B}, or
// {"ids": "int64"} for kCriteoInt64Ids; with `labels` 2, "labels": 2 too;
// with `history` L > 0, "history": L.
std::string CriteoConfigJson(int64_t buckets, int labels = 1, int history = 0);

// What criteo.json says.
struct CriteoConfig {
  int64_t buckets = kCriteoDefaultBuckets;  // kCriteoInt64Ids for {"ids": "int64"}
  // Label columns a line starts with: 1 (the click), or 2 (the click, then
  // a conversion that followed it: data for two tasks, whose models have
  // two outputs trained on the two labels in turn).
  int labels = 1;
  // The history field's most ids (kCriteoMaxHistory at most); 0: lines
  // have no history field.
  int history = 0;
};

// criteo.json's config, the defaults when the file is absent.
// InvalidArgument naming the file for bad JSON, neither "buckets" nor
// "ids" or both, a non-integer "buckets" or one outside [1, 2^24], "ids"
// other than "int64", "labels" other than 1 or 2, or "history" outside
// [1, kCriteoMaxHistory] or given with int64 ids.
absl::StatusOr<CriteoConfig> ReadCriteoConfig(const std::string& dir);

// ReadCriteoConfig's buckets.
absl::StatusOr<int64_t> ReadCriteoBuckets(const std::string& dir);

// The split's file: <dir>/train.txt, else <dir>/train.txt.gz (test alike).
// NotFound naming both when neither is there.
absl::StatusOr<std::string> CriteoSplitFile(const std::string& dir, Split split);

// The start-up check: criteo.json (when there) is valid and the split's
// file is there and readable; the lines are not read.
absl::Status CheckCriteoFiles(const std::string& dir, Split split);

// The int64 id of (feature, id): CriteoFeatureKey's upper 63 bits, so
// that it is >= 0 (two of the 26 x 2^56 pairs share one with probability
// about n^2 / 2^64 for n distinct pairs).
int64_t CriteoInt64Id(int feature, int64_t id);

// Writes `example`'s 39 values (as above) to values[0..39), and with
// `history` L > 0 the item's and the history's L rows after them; with
// kCriteoInt64Ids, the 26 ids to ids[0..26) and 0 to their values.
void CriteoExampleValues(const CriteoExample& example, int64_t buckets, float* values,
                         int64_t* ids = nullptr, int history = 0);

// The values an example of data with `history` (criteo.json's) has.
inline int CriteoValuesPerExample(int history) {
  return kCriteoExampleValues + (history > 0 ? 1 + history : 0);
}

// The whole split as a 1 x 1 x 39 Dataset with one target an example (two
// with criteo.json's "labels": 2: the click, the conversion).
// Errors as CheckCriteoFiles's, and the reader's naming the file and line
// ("DIR/train.txt:3: field 5 (I4): ..."); InvalidArgument for an empty
// file or more than 2^31 - 1 lines.
absl::StatusOr<Dataset> LoadCriteoDataset(const std::string& dir, Split split);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_CRITEO_DATASET_H_
