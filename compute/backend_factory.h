// Turns a --device choice into a ComputeBackend (compute/compute_backend.h):
// resolves "auto" on this machine, checks that a requested GPU exists, and
// creates the CPU or the CUDA backend. Whether the CUDA backend is compiled
// in is decided at build time (third_party/cuda/cuda_configure.bzl); this
// file is the only code that knows.
#ifndef PSCLUSTER_COMPUTE_BACKEND_FACTORY_H_
#define PSCLUSTER_COMPUTE_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "compute/compute_backend.h"
#include "compute/device_choice.h"
#include "model/model_spec.h"

namespace pscluster {

// Whether this binary has the CUDA backend.
bool BuiltWithCuda();

// CUDA devices this process can use. 0, saying why in *why_none, when the
// binary was built without CUDA or the driver reports none or fails (no
// driver installed, a driver older than the CUDA runtime, ...).
int CudaDevicesAvailable(std::string* why_none);

struct ResolvedDevice {
  DeviceChoice device;  // kCpu or kCuda
  std::string reason;   // one line for the log: why this device
};

// kCpu: the CPU. kAuto: cuda:0 when CudaDevicesAvailable() > 0, else the
// CPU. kCuda: that device, or FailedPrecondition saying why it cannot be
// used (built without CUDA, no device, an ordinal beyond the devices).
absl::StatusOr<ResolvedDevice> ResolveDevice(const DeviceChoice& requested);

struct BackendOptions {
  DeviceChoice device;  // resolved by CreateBackend when kAuto
  int max_batch = 128;  // largest batch TrainStep/Evaluate accept
  int num_threads = 1;  // CPU backend: threads per step
  uint64_t seed = 0;    // the run's seed (Dropout's masks)
};

// ResolveDevice(options.device), then that backend; errors from either. A
// model the GPU cannot run (a layer it lacks) is InvalidArgument marked as
// bad input (common/bad_input.h: the daemons exit 2).
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateBackend(
    const ModelSpec& spec, const BackendOptions& options);

// OK when a GPU would run `spec` (CreateBackend on a CUDA device would not
// refuse it); else InvalidArgument naming the layer the GPU lacks, or
// FailedPrecondition in a build without CUDA. Needs no GPU: the launcher
// asks it before it places the workers (worker --check_model).
absl::Status CheckGpuRunsModel(const ModelSpec& spec);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_BACKEND_FACTORY_H_
