// Reading TFRecord files without holding them: an index of where each
// record sits, built by walking the length headers only (12 bytes read per
// record, the data skipped), and the reading of one record by pread with
// both CRCs checked (the framing of common/tfrecord.h, whose writer makes
// them). Plain functions: safe to call from any thread on any fd.
#ifndef PSCLUSTER_MODEL_TFRECORD_INDEX_H_
#define PSCLUSTER_MODEL_TFRECORD_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pscluster {

// Where one record's framing starts, and its data length: 16 bytes a record.
struct TFRecordRef {
  uint64_t offset = 0;  // of the length field
  uint32_t length = 0;  // of the data
  uint32_t file = 0;    // the caller's file number
};
static_assert(sizeof(TFRecordRef) == 16, "the index holds 16 bytes a record");

// Appends a ref for each record of the open file `fd` (named `path` in
// errors), tagged `file`. Checks each length's CRC and that each record is
// whole; DataLoss "PATH: record N (byte offset O): WHAT" otherwise (a bad
// length CRC, a record cut short, a data length over 2^31). Data CRCs are
// checked when a record is read. An empty file has no records.
absl::Status IndexTFRecordFile(int fd, const std::string& path, uint32_t file,
                               std::vector<TFRecordRef>* out);

// Reads the record at `ref` of `fd` into *data, checking both CRCs again;
// DataLoss "PATH: record N (byte offset O): WHAT" when one does not match or
// the file has become shorter. `record` is only for the message.
absl::Status ReadTFRecordAt(int fd, const std::string& path, const TFRecordRef& ref,
                            int64_t record, std::string* data);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_TFRECORD_INDEX_H_
