// The CUDA compute backend: ComputeBackend on one GPU, running the model
// through the fused engine (compute/fused_device_engine.h) on the GpuDevice
// kernels (compute/kernels/gpu_kernels.h), or, for models beyond the fused
// engine's layers, through the graph engine (compute/graph_device_engine.h).
// Weights, gradients, activations and workspaces live in device memory
// allocated once at creation; weights and batches reach it through pinned
// host buffers; the batch of the next step is copied on a second stream
// while the current step computes.
//
// CUDA builds only; compute/backend_factory.cc is its one user. Threading as
// ComputeBackend; calls may come from different threads (each call selects
// the backend's device first).
#ifndef PSCLUSTER_COMPUTE_CUDA_BACKEND_H_
#define PSCLUSTER_COMPUTE_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "compute/compute_backend.h"
#include "model/model_spec.h"

namespace pscluster {

// How many CUDA devices the driver reports. On any error (no driver, a
// driver older than the runtime, no GPU) returns 0 and says why in
// *why_none.
int CudaDeviceCount(std::string* why_none);

// "NVIDIA H200, compute capability 9.0, 139.8 GiB", or the error text.
std::string CudaDeviceDescription(int ordinal);

// OK when CreateCudaBackend would run `spec` (every layer, output and mask
// it uses); else InvalidArgument naming the layer the GPU lacks, in
// CreateCudaBackend's words. On the host alone: needs no GPU.
absl::Status CudaBackendRunsModel(const ModelSpec& spec);

// A backend on CUDA device `ordinal` for batches of up to max_batch;
// `seed` (the run's) keys Dropout's masks, as on the CPU.
// FailedPrecondition when the device cannot run this binary's kernels
// (built for other compute capabilities); ResourceExhausted when its memory
// is too small; InvalidArgument for a spec the kernels cannot run; other
// CUDA and cuBLAS failures as Internal, naming the call and CUDA's error.
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(
    const ModelSpec& spec, int max_batch, int ordinal, uint64_t seed);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_CUDA_BACKEND_H_
