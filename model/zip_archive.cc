#include "model/zip_archive.h"

#include <zip.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// "64 MiB", "64 GiB", or the bytes.
std::string Bytes(uint64_t n) {
  if (n >= (uint64_t{1} << 30) && n % (uint64_t{1} << 30) == 0) return absl::StrCat(n >> 30, " GiB");
  if (n >= (uint64_t{1} << 20) && n % (uint64_t{1} << 20) == 0) return absl::StrCat(n >> 20, " MiB");
  return absl::StrCat(n, " bytes");
}

}  // namespace

absl::StatusOr<std::unique_ptr<ZipArchive>> ZipArchive::Open(const std::string& path,
                                                             const char* kind) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &err);
  if (z == nullptr) {
    zip_error_t e;
    zip_error_init_with_code(&e, err);
    const std::string why = zip_error_strerror(&e);
    zip_error_fini(&e);
    if (err == ZIP_ER_NOENT || err == ZIP_ER_OPEN) {
      return absl::NotFoundError(absl::StrCat(path, ": ", why));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": not ", kind, " (zip) archive: ", why));
  }
  return std::unique_ptr<ZipArchive>(new ZipArchive(path, z));
}

ZipArchive::~ZipArchive() { zip_discard(zip_); }

bool ZipArchive::Has(const std::string& name) const {
  zip_stat_t info;
  return zip_stat(zip_, name.c_str(), 0, &info) == 0 && (info.valid & ZIP_STAT_SIZE);
}

bool ZipArchive::HasPrefix(const std::string& prefix) const {
  const zip_int64_t n = zip_get_num_entries(zip_, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(zip_, static_cast<zip_uint64_t>(i), 0);
    if (name != nullptr && std::string(name).rfind(prefix, 0) == 0) return true;
  }
  return false;
}

absl::StatusOr<std::string> ZipArchive::Read(const std::string& name, uint64_t max_bytes) const {
  const std::string where = absl::StrCat(path_, ": ", name);
  zip_stat_t info;
  if (zip_stat(zip_, name.c_str(), 0, &info) != 0 || !(info.valid & ZIP_STAT_SIZE)) {
    return absl::NotFoundError(absl::StrCat(path_, ": no member ", name));
  }
  if (info.size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is ", info.size, " bytes, more than ", Bytes(max_bytes)));
  }
  zip_file_t* f = zip_fopen(zip_, name.c_str(), 0);
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat(where, ": ", zip_strerror(zip_)));
  // The size is the archive's claim: the buffer grows as the bytes come,
  // so a lying header costs only what is there.
  constexpr zip_uint64_t kStep = zip_uint64_t{16} << 20;
  std::string out;
  zip_uint64_t have = 0;
  zip_int64_t r = 0;
  while (have < info.size) {
    out.resize(static_cast<size_t>(std::min(info.size, have + std::max(have, kStep))));
    r = zip_fread(f, out.data() + have, out.size() - have);
    if (r <= 0) break;
    have += static_cast<zip_uint64_t>(r);
  }
  absl::Status st;
  if (r < 0) {
    st = absl::InvalidArgumentError(absl::StrCat(where, ": unreadable: ", zip_file_strerror(f)));
  } else if (have != info.size) {
    st = absl::InvalidArgumentError(absl::StrCat(where, ": unreadable: it ends after ", have,
                                                 " of the ", info.size,
                                                 " bytes its zip header claims"));
  }
  zip_fclose(f);
  if (!st.ok()) return st;
  out.resize(have);
  return out;
}

}  // namespace pscluster
