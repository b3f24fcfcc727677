#include "compute/device_flag.h"

#include "common/daemon.h"
#include "compute/device_choice.h"

namespace pscluster {

ResolvedDevice ResolveDeviceFlagOrExit(const std::string& flag_value) {
  absl::StatusOr<DeviceChoice> device = ParseDevice(flag_value);
  if (!device.ok()) {
    ExitWithUsageError("--device=" + flag_value + ": " + std::string(device.status().message()));
  }
  absl::StatusOr<ResolvedDevice> resolved = ResolveDevice(*device);
  if (!resolved.ok()) {
    ExitWithUsageError("--device=" + flag_value + ": " +
                       std::string(resolved.status().message()));
  }
  return *std::move(resolved);
}

}  // namespace pscluster
