#include "common/tfrecord.h"

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/file_io.h"

namespace pscluster {
namespace {

void PutLE(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i)
    out->push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t GetLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  }
  return v;
}

}  // namespace

void AppendTFRecord(std::string_view data, std::string* out) {
  out->reserve(out->size() + kTFRecordOverhead + data.size());
  const size_t length_at = out->size();
  PutLE(data.size(), 8, out);
  PutLE(crc32c::Mask(crc32c::Value(out->data() + length_at, 8)), 4, out);
  out->append(data.data(), data.size());
  PutLE(crc32c::Mask(crc32c::Value(data)), 4, out);
}

absl::StatusOr<std::vector<std::string>> ParseTFRecords(
    std::string_view contents, std::string_view source_view) {
  // Debian's absl::string_view does not convert from std::string_view.
  const std::string source(source_view);
  std::vector<std::string> records;
  size_t offset = 0;
  while (offset < contents.size()) {
    const size_t left = contents.size() - offset;
    const char* p = contents.data() + offset;
    if (left < 12) {
      return absl::DataLossError(absl::StrCat(
          source, ": record at offset ", offset, " is truncated: ", left,
          " bytes left, a record header needs 12"));
    }
    const uint32_t length_crc = static_cast<uint32_t>(GetLE(p + 8, 4));
    const uint32_t expected_length_crc = crc32c::Mask(crc32c::Value(p, 8));
    if (length_crc != expected_length_crc) {
      return absl::DataLossError(absl::StrCat(
          source, ": record at offset ", offset,
          ": length CRC mismatch (stored 0x", absl::Hex(length_crc),
          ", computed 0x", absl::Hex(expected_length_crc), ")"));
    }
    const uint64_t length = GetLE(p, 8);
    if (length > left - 12 || left - 12 - length < 4) {
      return absl::DataLossError(absl::StrCat(
          source, ": record at offset ", offset, " is truncated: length ",
          length, " needs ", length + 4, " more bytes, ", left - 12, " left"));
    }
    std::string_view data(p + 12, length);
    const uint32_t data_crc = static_cast<uint32_t>(GetLE(p + 12 + length, 4));
    const uint32_t expected_data_crc = crc32c::Mask(crc32c::Value(data));
    if (data_crc != expected_data_crc) {
      return absl::DataLossError(
          absl::StrCat(source, ": record at offset ", offset,
                       ": data CRC mismatch (stored 0x", absl::Hex(data_crc),
                       ", computed 0x", absl::Hex(expected_data_crc),
                       ", length ", length, ")"));
    }
    records.emplace_back(data);
    offset += kTFRecordOverhead + length;
  }
  return records;
}

absl::StatusOr<std::vector<std::string>> ReadTFRecordFile(
    const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
  if (!contents.ok()) return contents.status();
  return ParseTFRecords(*contents, path);
}

}  // namespace pscluster
