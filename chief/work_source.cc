#include "chief/work_source.h"

#include "absl/strings/str_cat.h"
#include "chief/strategy.h"

namespace pscluster {
namespace {

absl::Status NotThisStrategy(const char* call, Strategy strategy) {
  return absl::FailedPreconditionError(absl::StrCat(call,
                                                    " is for --strategy=", StrategyName(strategy),
                                                    "; this run's chief plans the other strategy"));
}

}  // namespace

absl::StatusOr<WorkResponse> WorkSource::GetWork(const WorkRequest&, absl::Time) {
  return NotThisStrategy("GetWork", PARAMETER_SERVER);
}

absl::StatusOr<RingWorkResponse> WorkSource::RingWork(const RingWorkRequest&, absl::Time) {
  return NotThisStrategy("RingWork", MULTI_WORKER_MIRRORED);
}

absl::StatusOr<ShardState> WorkSource::GetReplica(const ReplicaRequest&) {
  return NotThisStrategy("GetReplica", MULTI_WORKER_MIRRORED);
}

absl::StatusOr<PlacementResponse> WorkSource::GetPlacement() {
  return NotThisStrategy("GetPlacement", PARAMETER_SERVER);
}

}  // namespace pscluster
