// The CPU compute backend: ComputeBackend over the CPU Network
// (worker/network.h). Threading and ownership as Network's.
#ifndef PSCLUSTER_WORKER_CPU_BACKEND_H_
#define PSCLUSTER_WORKER_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "worker/compute_backend.h"

namespace pscluster {

// InvalidArgument as Network::Create (options out of range, a spec the
// kernels cannot run).
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCpuBackend(
    const ModelSpec& spec, int max_batch, int num_threads, uint64_t seed = 0);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CPU_BACKEND_H_
