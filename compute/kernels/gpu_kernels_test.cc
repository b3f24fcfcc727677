// The GpuDevice layer kernels on a real GPU against the CPU kernels
// (kernel_conformance.h). Skips, saying why, where no usable CUDA device is
// present. CUDA builds only.
#include "compute/kernels/gpu_kernels.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "compute/kernels/testing/graph_kernels_conformance.h"
#include "compute/kernels/testing/kernel_conformance.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

// kernel_conformance.h's harness on device 0: its own stream and cuBLAS
// handle; every allocation freed with the harness.
class CudaHarness {
 public:
  using Device = GpuDevice;

  static std::string SkipReason() {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      return "no usable CUDA device: " +
             CudaErrorMessage("cudaGetDeviceCount", e);
    }
    if (count == 0) return "no CUDA device: the driver reports none";
    if (cudaError_t s = cudaSetDevice(0); s != cudaSuccess) {
      return CudaErrorMessage("cudaSetDevice(0)", s);
    }
    if (cudaError_t k = GpuKernelsLoadable(); k != cudaSuccess) {
      return "this binary's kernels (built for compute capability " +
             std::string(GpuKernelArchs()) + ") cannot run on device 0: " +
             CudaErrorMessage("cudaFuncGetAttributes", k);
    }
    return "";
  }

  CudaHarness() {
    device_.errors = &errors_;
    Check(cudaSetDevice(0), "cudaSetDevice");
    Check(cudaStreamCreateWithFlags(&device_.stream, cudaStreamNonBlocking),
          "cudaStreamCreate");
    CheckCublas(device_, cublasCreate(&device_.blas), "cublasCreate");
    if (device_.blas != nullptr) {
      CheckCublas(device_, cublasSetStream(device_.blas, device_.stream),
                  "cublasSetStream");
      CheckCublas(device_, cublasSetMathMode(device_.blas, CUBLAS_DEFAULT_MATH),
                  "cublasSetMathMode");
    }
  }

  ~CudaHarness() {
    if (device_.stream != nullptr) cudaStreamSynchronize(device_.stream);
    for (void* p : blocks_) cudaFree(p);
    if (device_.blas != nullptr) cublasDestroy(device_.blas);
    if (device_.stream != nullptr) cudaStreamDestroy(device_.stream);
  }

  const Device& device() const { return device_; }

  template <typename T>
  T* Upload(const std::vector<T>& host) {
    T* p = Allocate<T>(host.size());
    if (p != nullptr && !host.empty()) {
      Check(cudaMemcpyAsync(p, host.data(), host.size() * sizeof(T),
                            cudaMemcpyHostToDevice, device_.stream),
            "cudaMemcpyAsync (upload)");
      // The host vector may go away before the copy runs.
      Check(cudaStreamSynchronize(device_.stream), "cudaStreamSynchronize");
    }
    return p;
  }

  template <typename T>
  T* Poisoned(int64_t n) {
    T* p = Allocate<T>(n);
    if (p != nullptr) {
      Check(cudaMemsetAsync(p, 0xFF, n * sizeof(T), device_.stream),
            "cudaMemsetAsync (poison)");
    }
    return p;
  }

  template <typename T>
  std::vector<T> Download(const T* p, int64_t n) {
    std::vector<T> host(n);
    if (p != nullptr && n > 0) {
      Check(cudaMemcpyAsync(host.data(), p, n * sizeof(T),
                            cudaMemcpyDeviceToHost, device_.stream),
            "cudaMemcpyAsync (download)");
    }
    Check(cudaStreamSynchronize(device_.stream), "cudaStreamSynchronize");
    return host;
  }

  std::string Errors() {
    Check(cudaStreamSynchronize(device_.stream), "cudaStreamSynchronize");
    return errors_.first();
  }

 private:
  void Check(cudaError_t e, const char* call) { CheckCuda(device_, e, call); }

  template <typename T>
  T* Allocate(int64_t n) {
    void* p = nullptr;
    Check(cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(T)), "cudaMalloc");
    if (p != nullptr) blocks_.push_back(p);
    return static_cast<T*>(p);
  }

  KernelErrors errors_;
  Device device_;
  std::vector<void*> blocks_;  // owned device memory
};

}  // namespace

// graph_kernels_conformance.h's suite reaches the kernels through GraphKernels.
std::unique_ptr<GraphKernels> MakeGraphKernelsFor(const GpuDevice& d) {
  return MakeGpuGraphKernels(d);
}

namespace conformance {
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, KernelConformanceTest,
                               ::testing::Types<CudaHarness>);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, GraphKernelsConformanceTest, ::testing::Types<CudaHarness>);
}  // namespace conformance

}  // namespace kernels
}  // namespace pscluster
