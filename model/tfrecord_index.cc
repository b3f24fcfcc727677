#include "model/tfrecord_index.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"

namespace pscluster {
namespace {

constexpr uint64_t kHeader = 12;  // uint64 length, masked CRC of it
constexpr uint64_t kFooter = 4;   // masked CRC of the data

uint32_t Load32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint64_t Load64(const char* p) {
  return (uint64_t{Load32(p + 4)} << 32) | Load32(p);
}

absl::Status Bad(const std::string& path, int64_t record, uint64_t offset,
                 const std::string& what) {
  return absl::DataLossError(
      absl::StrCat(path, ": record ", record, " (byte offset ", offset, "): ", what));
}

// Reads exactly n bytes at `offset`, or says how many it got.
absl::Status PreadFully(int fd, const std::string& path, char* buf, size_t n, uint64_t offset,
                        size_t* got) {
  *got = 0;
  while (*got < n) {
    const ssize_t r = pread(fd, buf + *got, n - *got, static_cast<off_t>(offset + *got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrCat(path, ": read at byte offset ", offset + *got,
                                              " failed: ", std::strerror(errno)));
    }
    if (r == 0) break;
    *got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status IndexTFRecordFile(int fd, const std::string& path, uint32_t file,
                               std::vector<TFRecordRef>* out) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t offset = 0;
  for (int64_t record = 0; offset < size; ++record) {
    if (size - offset < kHeader) {
      return Bad(path, record, offset,
                 absl::StrCat("truncated: ", size - offset,
                              " bytes left, a record's header takes 12"));
    }
    char header[kHeader];
    size_t got = 0;
    if (absl::Status s = PreadFully(fd, path, header, kHeader, offset, &got); !s.ok()) return s;
    if (got != kHeader) return Bad(path, record, offset, "truncated header (the file shrank)");
    const uint64_t length = Load64(header);
    const uint32_t crc = crc32c::Unmask(Load32(header + 8));
    if (crc != crc32c::Value(header, 8)) {
      return Bad(path, record, offset,
                 absl::StrCat("bad length CRC (length field reads ", length, ")"));
    }
    if (length > (uint64_t{1} << 31)) {
      return Bad(path, record, offset, absl::StrCat("data length ", length, " is over 2^31"));
    }
    if (size - offset - kHeader < length + kFooter) {
      return Bad(path, record, offset,
                 absl::StrCat("truncated: the header announces ", length, " data bytes + 4 CRC, ",
                              size - offset - kHeader, " bytes are left"));
    }
    out->push_back(TFRecordRef{offset, static_cast<uint32_t>(length), file});
    offset += kHeader + length + kFooter;
  }
  return absl::OkStatus();
}

absl::Status ReadTFRecordAt(int fd, const std::string& path, const TFRecordRef& ref,
                            int64_t record, std::string* data) {
  const size_t total = kHeader + ref.length + kFooter;
  data->resize(total);
  size_t got = 0;
  if (absl::Status s = PreadFully(fd, path, data->data(), total, ref.offset, &got); !s.ok()) {
    return s;
  }
  if (got != total) {
    return Bad(path, record, ref.offset,
               absl::StrCat("truncated: ", got, " of ", total, " bytes (the file shrank)"));
  }
  const char* p = data->data();
  if (crc32c::Unmask(Load32(p + 8)) != crc32c::Value(p, 8) || Load64(p) != ref.length) {
    return Bad(path, record, ref.offset, "bad length CRC (the file changed since it was indexed)");
  }
  const uint32_t stored = crc32c::Unmask(Load32(p + kHeader + ref.length));
  const uint32_t actual = crc32c::Value(p + kHeader, ref.length);
  if (stored != actual) {
    return Bad(path, record, ref.offset,
               absl::StrCat("bad data CRC over its ", ref.length, " bytes"));
  }
  data->erase(0, kHeader);
  data->resize(ref.length);
  return absl::OkStatus();
}

}  // namespace pscluster
