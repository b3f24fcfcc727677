// The CPU compute backend: ComputeBackend over the CPU CpuNetwork
// (compute/cpu_network.h). Threading and ownership as CpuNetwork's.
#ifndef PSCLUSTER_COMPUTE_CPU_BACKEND_H_
#define PSCLUSTER_COMPUTE_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "compute/compute_backend.h"
#include "model/model_spec.h"

namespace pscluster {

// InvalidArgument as CpuNetwork::Create (options out of range, a spec the
// kernels cannot run).
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCpuBackend(
    const ModelSpec& spec, int max_batch, int num_threads, uint64_t seed = 0);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_CPU_BACKEND_H_
