// TFRecord framing, the container of TensorBoard event files (and of
// TensorFlow's .tfrecord data files). Each record is
//
//   uint64 length            little-endian
//   uint32 masked_crc32c(length bytes)
//   byte   data[length]
//   uint32 masked_crc32c(data)
//
// with the masking of common/crc32c.h. Pure functions: safe to call from
// any thread.
#ifndef PSCLUSTER_COMMON_TFRECORD_H_
#define PSCLUSTER_COMMON_TFRECORD_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pscluster {

// Framing bytes around each record's data: length, its CRC, the data's CRC.
inline constexpr size_t kTFRecordOverhead = 8 + 4 + 4;

// Appends one framed record holding `data` to `*out`.
void AppendTFRecord(std::string_view data, std::string* out);

// Splits `contents` into its records, verifying both CRCs of each. Errors
// are DataLoss naming `source` (e.g. the file's path), the byte offset of
// the bad record and what is wrong: a length or data CRC mismatch, or a
// record cut short (a file still being written can end in a partial record).
absl::StatusOr<std::vector<std::string>> ParseTFRecords(
    std::string_view contents, std::string_view source);

// Reads the file at `path` and parses it as above. NotFound or
// PermissionDenied etc. naming the path when it cannot be read.
absl::StatusOr<std::vector<std::string>> ReadTFRecordFile(
    const std::string& path);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_TFRECORD_H_
