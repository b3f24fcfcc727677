// A mark on an absl::Status saying that the task's input (its flags, the
// model it was given for its device) cannot work, whatever the status's
// code: a daemon's main exits with kExitBadInput (common/exit_codes.h) for
// it, so that no launcher starts the task again to fail the same way.
#ifndef PSCLUSTER_COMMON_BAD_INPUT_H_
#define PSCLUSTER_COMMON_BAD_INPUT_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

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

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_BAD_INPUT_H_
