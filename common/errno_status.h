// Turns a failed system call's errno into an absl::Status whose message
// names what was being done: "cannot write /x/model.safetensors: No space
// left on device". Pure function; thread-safe.
#ifndef PSCLUSTER_COMMON_ERRNO_STATUS_H_
#define PSCLUSTER_COMMON_ERRNO_STATUS_H_

#include <string>

#include "absl/status/status.h"

namespace pscluster {

// NotFound, AlreadyExists, PermissionDenied, ResourceExhausted (no space or
// quota), InvalidArgument (a folder where a file was meant), else Unavailable.
absl::Status ErrnoStatus(int err, const std::string& what);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_ERRNO_STATUS_H_
