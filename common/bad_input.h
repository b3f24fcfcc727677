// A mark on an absl::Status saying that the task's input (its flags, the
// model it was given for its device) cannot work, whatever the status's
// code: a daemon's main exits with kExitBadInput (common/exit_codes.h) for
// it, so that no launcher starts the task again to fail the same way.
#ifndef PSCLUSTER_COMMON_BAD_INPUT_H_
#define PSCLUSTER_COMMON_BAD_INPUT_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "common/exit_codes.h"

namespace pscluster {

inline constexpr absl::string_view kBadInputPayload = "type.pscluster/bad_input";

// `s` (not OK) marked as bad input.
inline absl::Status MarkBadInput(absl::Status s) {
  s.SetPayload(kBadInputPayload, absl::Cord("1"));
  return s;
}

inline bool IsBadInput(const absl::Status& s) {
  return s.GetPayload(kBadInputPayload).has_value();
}

// The exit code of a task that failed with `s` (not OK): bad input (2) and
// data that does not fit the model (DataLoss, 4) are final; anything else
// may pass with a restart (1).
inline int ExitCodeOfFailure(const absl::Status& s) {
  if (IsBadInput(s)) return kExitBadInput;
  return absl::IsDataLoss(s) ? kExitBadData : kExitError;
}

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_BAD_INPUT_H_
