// The names of the strategies (proto/coordination.proto Strategy; the
// chief's --strategy, and the "strategy" of a checkpoint's metadata):
// parameter_server and multi_worker_mirrored. Plain functions.
#ifndef PSCLUSTER_CHIEF_STRATEGY_H_
#define PSCLUSTER_CHIEF_STRATEGY_H_

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "proto/coordination.pb.h"

namespace pscluster {

inline const char* StrategyName(Strategy s) {
  return s == MULTI_WORKER_MIRRORED ? "multi_worker_mirrored" : "parameter_server";
}

// The flag's name (empty means parameter_server); InvalidArgument naming
// the value and the choices otherwise.
inline absl::StatusOr<Strategy> ParseStrategy(absl::string_view name) {
  for (Strategy s : {PARAMETER_SERVER, MULTI_WORKER_MIRRORED}) {
    if (name == StrategyName(s)) return s;
  }
  if (name.empty()) return PARAMETER_SERVER;
  return absl::InvalidArgumentError(absl::StrCat("strategy '", name, "' is not one of ",
                                                 StrategyName(PARAMETER_SERVER), ", ",
                                                 StrategyName(MULTI_WORKER_MIRRORED)));
}

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_STRATEGY_H_
