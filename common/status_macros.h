// Returning an error early, as TensorFlow's TF_RETURN_IF_ERROR and
// abseil's internal macros do, where the plain form would only repeat it:
//
//   PSCLUSTER_RETURN_IF_ERROR(store_->Init(config, values, &already));
//
// is `if (absl::Status s = ...; !s.ok()) return s;`. The status comes back
// as it was (its message unchanged); a caller that adds context to it
// writes the `if` out. For functions returning absl::Status or
// absl::StatusOr.
#ifndef PSCLUSTER_COMMON_STATUS_MACROS_H_
#define PSCLUSTER_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"

#define PSCLUSTER_RETURN_IF_ERROR(expr)                                    \
  do {                                                                     \
    if (::absl::Status pscluster_status_ = (expr); !pscluster_status_.ok()) { \
      return pscluster_status_;                                            \
    }                                                                      \
  } while (false)

#endif  // PSCLUSTER_COMMON_STATUS_MACROS_H_
