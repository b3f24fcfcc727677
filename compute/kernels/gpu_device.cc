#include "compute/kernels/gpu_device.h"

namespace pscluster {
namespace kernels {

std::string CudaErrorMessage(const std::string& call, cudaError_t error) {
  return call + ": " + cudaGetErrorString(error) + " (" +
         cudaGetErrorName(error) + ")";
}

std::string CublasErrorMessage(const std::string& call, cublasStatus_t status) {
  return call + ": " + cublasGetStatusString(status) + " (" +
         cublasGetStatusName(status) + ")";
}

}  // namespace kernels
}  // namespace pscluster
