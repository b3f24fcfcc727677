// Whole files: reading one into memory, and replacing one so that a crash
// leaves either the old or the new contents, never a mix. Errors name the
// file and the failed step ("cannot fsync /runs/x.tmp: ..."). Plain
// functions; one path must have one writer at a time.
#ifndef PSCLUSTER_COMMON_FILE_IO_H_
#define PSCLUSTER_COMMON_FILE_IO_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pscluster {

// The file's bytes.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Writes the concatenation of `pieces` to path + ".tmp", fsyncs it, renames
// it over `path` and fsyncs the directory (best effort). On error `path` is
// as it was and the temporary file is gone. The pieces are written from
// where they are: no copy of the whole contents is made.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::vector<std::string_view>& pieces);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_FILE_IO_H_
