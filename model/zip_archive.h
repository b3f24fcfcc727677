// ZipArchive: the members of a zip archive a user gives us: a .keras model
// (config.json, model.weights.h5) or an .npz of arrays. libzip reads it;
// this class adds what every caller needs against archives whose headers
// lie: a member's buffer grows as its bytes arrive (16 MiB ahead at most),
// never to the size its header claims, and every error names the archive
// and the member. One open archive; not thread-safe (libzip's handle is
// not).
#ifndef PSCLUSTER_MODEL_ZIP_ARCHIVE_H_
#define PSCLUSTER_MODEL_ZIP_ARCHIVE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct zip;

namespace pscluster {

class ZipArchive {
 public:
  // Opens `path` read-only. NotFound "<path>: <why>" when it cannot be
  // opened (missing, unreadable); InvalidArgument "<path>: not <kind> (zip)
  // archive: <why>" when it is no zip archive, `kind` naming what was
  // expected ("a .keras", "an .npz").
  static absl::StatusOr<std::unique_ptr<ZipArchive>> Open(const std::string& path,
                                                         const char* kind);
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  // Whether the archive holds a member `name` whose size its header gives.
  bool Has(const std::string& name) const;

  // Whether a member's name starts with `prefix`.
  bool HasPrefix(const std::string& prefix) const;

  // The bytes of member `name`. NotFound "<path>: no member <name>" when it
  // is absent (callers that know what the member is for say so first, with
  // Has); InvalidArgument naming the path and the member when its header
  // claims more than `max_bytes`, when it cannot be opened or read, or when
  // it ends before the size its header claims.
  absl::StatusOr<std::string> Read(const std::string& name, uint64_t max_bytes) const;

 private:
  ZipArchive(std::string path, struct zip* z) : path_(std::move(path)), zip_(z) {}

  std::string path_;
  struct zip* zip_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_ZIP_ARCHIVE_H_
