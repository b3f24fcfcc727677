// The --device flag of the worker and evaluator mains: parses and resolves
// it (auto picks a GPU when the driver reports one), exiting with code 2 and
// a message naming the value when it cannot be honoured. For mains only.
#ifndef PSCLUSTER_COMPUTE_DEVICE_FLAG_H_
#define PSCLUSTER_COMPUTE_DEVICE_FLAG_H_

#include <string>

#include "compute/backend_factory.h"

namespace pscluster {

ResolvedDevice ResolveDeviceFlagOrExit(const std::string& flag_value);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_DEVICE_FLAG_H_
