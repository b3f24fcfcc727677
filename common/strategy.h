// Who sums the gradients (README "Strategies"; TrainingPlan.strategy):
// the parameter servers, or a ring all-reduce between the workers.
#ifndef PSCLUSTER_COMMON_STRATEGY_H_
#define PSCLUSTER_COMMON_STRATEGY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace pscluster {

enum class Strategy { kParameterServer, kMultiWorkerMirrored };

inline constexpr char kParameterServerStrategy[] = "parameter_server";
inline constexpr char kMirroredStrategy[] = "multi_worker_mirrored";

// The plan's or the flag's name: empty means parameter_server.
// InvalidArgument naming the value and the choices otherwise.
inline absl::StatusOr<Strategy> ParseStrategy(absl::string_view name) {
  if (name.empty() || name == kParameterServerStrategy) return Strategy::kParameterServer;
  if (name == kMirroredStrategy) return Strategy::kMultiWorkerMirrored;
  return absl::InvalidArgumentError(absl::StrCat("strategy '", name, "' is not one of ",
                                                 kParameterServerStrategy, ", ",
                                                 kMirroredStrategy));
}

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_STRATEGY_H_
