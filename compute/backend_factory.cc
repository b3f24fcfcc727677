#include "compute/backend_factory.h"

#include "common/bad_input.h"

#include "absl/strings/str_cat.h"
#include "compute/cpu_backend.h"

#ifdef PSCLUSTER_WITH_CUDA
#include "compute/cuda_backend.h"
#endif

namespace pscluster {

bool BuiltWithCuda() {
#ifdef PSCLUSTER_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int CudaDevicesAvailable(std::string* why_none) {
#ifdef PSCLUSTER_WITH_CUDA
  return CudaDeviceCount(why_none);
#else
  *why_none =
      "this binary was built without CUDA (no nvcc at build time, or "
      "PSCLUSTER_CUDA=0)";
  return 0;
#endif
}

absl::StatusOr<ResolvedDevice> ResolveDevice(const DeviceChoice& requested) {
  ResolvedDevice r;
  if (requested.kind == DeviceChoice::Kind::kCpu) {
    r.device = requested;
    r.reason = "requested";
    return r;
  }
  std::string why_none;
  const int count = CudaDevicesAvailable(&why_none);
  if (requested.kind == DeviceChoice::Kind::kAuto) {
    if (count > 0) {
      r.device.kind = DeviceChoice::Kind::kCuda;
      r.device.ordinal = 0;
      r.reason = absl::StrCat("auto: the CUDA driver reports ", count,
                              count == 1 ? " device" : " devices");
    } else {
      r.device.kind = DeviceChoice::Kind::kCpu;
      r.reason = absl::StrCat("auto: no GPU: ", why_none);
    }
    return r;
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(requested.ToString(), " cannot be used: ", why_none));
  }
  if (requested.ordinal >= count) {
    const std::string have =
        count == 1
            ? "1 device (cuda:0)"
            : absl::StrCat(count, " devices (cuda:0 to cuda:", count - 1, ")");
    return absl::FailedPreconditionError(
        absl::StrCat(requested.ToString(),
                     " does not exist: the CUDA driver reports ", have));
  }
  r.device = requested;
  r.reason = absl::StrCat("requested; the CUDA driver reports ", count,
                          count == 1 ? " device" : " devices");
  return r;
}

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateBackend(
    const ModelSpec& spec, const BackendOptions& options) {
  absl::StatusOr<ResolvedDevice> resolved = ResolveDevice(options.device);
  if (!resolved.ok()) return resolved.status();
  if (resolved->device.kind == DeviceChoice::Kind::kCpu) {
    return CreateCpuBackend(spec, options.max_batch, options.num_threads, options.seed);
  }
#ifdef PSCLUSTER_WITH_CUDA
  absl::StatusOr<std::unique_ptr<ComputeBackend>> cuda =
      CreateCudaBackend(spec, options.max_batch, resolved->device.ordinal, options.seed);
  // A layer the GPU does not run (an Embedding's mask, Attention, LSTM...):
  // no restart changes that.
  if (absl::IsInvalidArgument(cuda.status())) return MarkBadInput(cuda.status());
  return cuda;
#else
  // ResolveDevice refuses CUDA devices in this build.
  return absl::FailedPreconditionError("built without CUDA");
#endif
}

absl::Status CheckGpuRunsModel(const ModelSpec& spec) {
#ifdef PSCLUSTER_WITH_CUDA
  return CudaBackendRunsModel(spec);
#else
  std::string why;
  CudaDevicesAvailable(&why);
  return absl::FailedPreconditionError(why);
#endif
}

}  // namespace pscluster
