// TFRecordSource: a split of tf.train.Example records in TFRecord files, read
// on demand so that memory stays bounded however large the data. The data
// folder describes itself in "<dir>/tfrecord_schema.json":
//
//   {"image": "image", "label": "label", "shape": [28, 28, 1]}
//
// "image" names a bytes_list feature of one value holding H*W*C uint8 pixels
// (scaled by 1/255, as for IDX) or a float_list of H*W*C values (taken as
// they are); "label" names an int64_list feature of one class index.
// "train" and "test" (optional) are the file-name prefixes of each split,
// "train" and "test" by default: a split is every "<dir>/<prefix>*.tfrecord"
// in name order, e.g. train-00000-of-00004.tfrecord ... train-00003-of-00004.
//
// Open indexes every record (16 bytes each, model/tfrecord_index.h) by
// walking the length headers; Gather reads just the records asked for with
// pread, checks both CRCs and decodes each Example then. A worker thus holds
// the index plus the chunk it trains on. The order of training is
// ChunkReader's: a full seeded permutation of all records of the split each
// epoch (stronger than TensorFlow's shuffle buffer, which only mixes a
// window).
//
// Gather is const and thread-safe (pread on fds held open until
// destruction).
#ifndef PSCLUSTER_MODEL_TFRECORD_SOURCE_H_
#define PSCLUSTER_MODEL_TFRECORD_SOURCE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/example_source.h"
#include "model/idx_dataset.h"
#include "model/tfrecord_index.h"

namespace pscluster {

inline constexpr char kTFRecordSchemaFile[] = "tfrecord_schema.json";

struct TFRecordSchema {
  std::string image = "image", label = "label";
  int height = 0, width = 0, channels = 0;
  std::string train_prefix = "train", test_prefix = "test";
};

// Whether `dir` holds TFRecord data (has a tfrecord_schema.json).
bool IsTFRecordFolder(const std::string& dir);

// The schema in `dir`; InvalidArgument naming the file and the bad key.
absl::StatusOr<TFRecordSchema> ReadTFRecordSchema(const std::string& dir);

// The split's files, in name order; NotFound naming the pattern when none.
absl::StatusOr<std::vector<std::string>> TFRecordSplitFiles(const std::string& dir,
                                                            const TFRecordSchema& schema,
                                                            Split split);

class TFRecordSource : public ExampleSource {
 public:
  // Reads the schema, opens and indexes the split's files. NotFound or
  // InvalidArgument for a missing or bad schema or no files; DataLoss
  // naming the file and record for a bad header (length CRC, truncation).
  static absl::StatusOr<std::unique_ptr<TFRecordSource>> Open(const std::string& dir,
                                                              Split split);
  ~TFRecordSource() override;

  int count() const override { return static_cast<int>(index_.size()); }
  int height() const override { return schema_.height; }
  int width() const override { return schema_.width; }
  int channels() const override { return schema_.channels; }
  int targets_per_example() const override { return 1; }

  // DataLoss "FILE: record N (byte offset O): WHAT" for a bad data CRC, a
  // file cut short since Open, bytes that are not an Example, a missing
  // image or label feature, an image of the wrong size or kind, a label
  // that is not one int64 in [0, 2^24) or fails the target check.
  absl::Status Gather(const int32_t* indices, int n, float* images,
                      float* targets) const override;

  // The bytes the index holds (16 a record).
  size_t index_bytes() const { return index_.capacity() * sizeof(TFRecordRef); }
  const std::vector<std::string>& files() const { return files_; }

 private:
  TFRecordSource(TFRecordSchema schema, std::vector<std::string> files)
      : schema_(std::move(schema)), files_(std::move(files)) {}
  absl::Status DecodeOne(int32_t index, std::string* buffer, float* image,
                         float* target) const;

  const TFRecordSchema schema_;
  const std::vector<std::string> files_;
  std::vector<int> fds_;               // one per file, set by Open
  std::vector<TFRecordRef> index_;     // every record, files in order
  std::vector<int64_t> first_record_;  // per file: the index of its record 0
};

// The whole split in memory (for the evaluator's and chief's test sets).
absl::StatusOr<Dataset> LoadTFRecordDataset(const std::string& dir, Split split);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_TFRECORD_SOURCE_H_
