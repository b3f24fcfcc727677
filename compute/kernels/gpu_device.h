// The CUDA device tag for the layer kernels (compute/kernels/gpu_kernels.h)
// and the error texts of CUDA and cuBLAS calls. CUDA builds only.
#ifndef PSCLUSTER_COMPUTE_KERNELS_GPU_DEVICE_H_
#define PSCLUSTER_COMPUTE_KERNELS_GPU_DEVICE_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "compute/kernels/kernel_errors.h"

namespace pscluster {
namespace kernels {

// Kernels on a GpuDevice are queued on `stream` and return at once; GEMMs go
// through `blas`, a cuBLAS handle bound to that stream. Their pointers are
// device memory. A failed launch or cuBLAS call is recorded in *errors
// (the first one wins); a fault while a kernel runs shows at the next call
// that waits for the stream, which the owner checks. Everything here is
// borrowed from the owner (compute/cuda_backend.cc), which keeps it alive
// while work is queued and uses it from one thread at a time.
struct GpuDevice {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  KernelErrors* errors = nullptr;
};

// "<call>: <CUDA's description> (<error name>)", e.g.
// "cudaMalloc: out of memory (cudaErrorMemoryAllocation)".
std::string CudaErrorMessage(const std::string& call, cudaError_t error);

// "<call>: <cuBLAS's description> (<status name>)".
std::string CublasErrorMessage(const std::string& call, cublasStatus_t status);

// Records a failed call in d.errors; no-op on success.
inline void CheckCuda(const GpuDevice& d, cudaError_t error, const char* call) {
  if (error != cudaSuccess) d.errors->Record(CudaErrorMessage(call, error));
}
inline void CheckCublas(const GpuDevice& d, cublasStatus_t status,
                        const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    d.errors->Record(CublasErrorMessage(call, status));
  }
}

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_GPU_DEVICE_H_
