// The GpuDevice layer kernels: parallel_kernels.h's algorithms on a CUDA
// executor (one grid-stride kernel per element functor, cuBLAS sgemm).
#include <algorithm>
#include <memory>
#include <string>

#include "compute/kernels/gpu_kernels.h"
#include "compute/kernels/parallel_graph_kernels.h"
#include "compute/kernels/parallel_kernels.h"

#ifndef PSCLUSTER_CUDA_ARCHS
#define PSCLUSTER_CUDA_ARCHS "unknown"
#endif

namespace pscluster {
namespace kernels {
namespace {

constexpr int kThreadsPerBlock = 256;
// Enough blocks to fill any current GPU; larger ranges loop (grid stride).
constexpr int64_t kMaxBlocks = 1 << 16;

// I: uint32_t below parallel::kNarrowIndexLimit (no wrap: n + stride <
// 2^32), else int64_t.
template <typename I, typename F>
__global__ void __launch_bounds__(kThreadsPerBlock)
    ForEachKernel(I n, F f) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    f(i);
  }
}

__global__ void ProbeKernel() {}

// parallel_kernels.h's executor on a GpuDevice; holds a copy of it (its
// stream, handle and error sink stay the owner's).
class CudaExec {
 public:
  explicit CudaExec(const GpuDevice& d) : d_(d) {}

  template <typename F>
  void ForEach(const char* what, int64_t n, const F& f) const {
    if (n <= 0) return;
    const int64_t blocks = std::min<int64_t>(
        (n + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks);
    if (parallel::NarrowIndex(n)) {
      ForEachKernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0,
                      d_.stream>>>(static_cast<uint32_t>(n), f);
    } else {
      ForEachKernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0,
                      d_.stream>>>(n, f);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      d_.errors->Record(
          CudaErrorMessage(std::string(what) + " kernel launch", e));
    }
  }

  void Gemm(const parallel::ColumnMajorGemm& g) const {
    const cublasStatus_t s =
        cublasSgemm(d_.blas, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                    g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k,
                    &g.alpha, g.a, g.lda, g.b, g.ldb, &g.beta, g.c, g.ldc);
    if (s != CUBLAS_STATUS_SUCCESS) {
      d_.errors->Record(CublasErrorMessage(
          "cublasSgemm(m=" + std::to_string(g.m) +
              ", n=" + std::to_string(g.n) + ", k=" + std::to_string(g.k) + ")",
          s));
    }
  }

 private:
  const GpuDevice d_;
};

}  // namespace

void BiasActivationForward<GpuDevice>::operator()(const GpuDevice& d,
                                                  int64_t rows, int cols,
                                                  const float* bias, bool relu,
                                                  float* y) const {
  parallel::BiasActivationForward(CudaExec(d), rows, cols, bias, relu, y);
}

int64_t BiasGrad<GpuDevice>::WorkspaceSize(int64_t rows, int cols) {
  return parallel::BiasGradWorkspace(rows, cols);
}

void BiasGrad<GpuDevice>::operator()(const GpuDevice& d, int64_t rows, int cols,
                                     const float* dy, bool accumulate,
                                     float* db, float* workspace) const {
  parallel::BiasGrad(CudaExec(d), rows, cols, dy, accumulate, db, workspace);
}

void ReluGrad<GpuDevice>::operator()(const GpuDevice& d, int64_t n,
                                     const float* y, float* dy) const {
  parallel::ReluGrad(CudaExec(d), n, y, dy);
}

void DenseForward<GpuDevice>::operator()(const GpuDevice& d,
                                         const DenseShape& s, const float* x,
                                         const float* w, const float* b,
                                         bool relu, float* y) const {
  parallel::DenseForward(CudaExec(d), s, x, w, b, relu, y);
}

int64_t DenseBackward<GpuDevice>::WorkspaceSize(const DenseShape& s) {
  return parallel::DenseBackwardWorkspace(s);
}

void DenseBackward<GpuDevice>::operator()(const GpuDevice& d,
                                          const DenseShape& s, const float* x,
                                          const float* w, const float* dy,
                                          bool accumulate, float* dw, float* db,
                                          float* dx, float* workspace) const {
  parallel::DenseBackward(CudaExec(d), s, x, w, dy, accumulate, dw, db, dx,
                          workspace);
}

int64_t Conv2DForward<GpuDevice>::WorkspaceSize(const Conv2DShape& s) {
  return parallel::Conv2DForwardWorkspace(s);
}

void Conv2DForward<GpuDevice>::operator()(const GpuDevice& d,
                                          const Conv2DShape& s, const float* x,
                                          const float* w, const float* b,
                                          bool relu, float* y,
                                          float* workspace) const {
  parallel::Conv2DForward(CudaExec(d), s, x, w, b, relu, y, workspace);
}

int64_t Conv2DBackwardFilter<GpuDevice>::WorkspaceSize(const Conv2DShape& s) {
  return parallel::Conv2DBackwardFilterWorkspace(s);
}

void Conv2DBackwardFilter<GpuDevice>::operator()(
    const GpuDevice& d, const Conv2DShape& s, const float* x, const float* dy,
    bool accumulate, bool columns_ready, float* dw, float* db,
    float* workspace) const {
  parallel::Conv2DBackwardFilter(CudaExec(d), s, x, dy, accumulate,
                                 columns_ready, dw, db, workspace);
}

int64_t Conv2DBackwardInput<GpuDevice>::WorkspaceSize(const Conv2DShape& s) {
  return parallel::Conv2DBackwardInputWorkspace(s);
}

void Conv2DBackwardInput<GpuDevice>::operator()(const GpuDevice& d,
                                                const Conv2DShape& s,
                                                const float* w, const float* dy,
                                                float* dx,
                                                float* workspace) const {
  parallel::Conv2DBackwardInput(CudaExec(d), s, w, dy, dx, workspace);
}

void MaxPool2DForward<GpuDevice>::operator()(const GpuDevice& d,
                                             const MaxPool2DShape& s,
                                             const float* x, float* y,
                                             int32_t* argmax) const {
  parallel::MaxPool2DForward(CudaExec(d), s, x, y, argmax);
}

void MaxPool2DBackward<GpuDevice>::operator()(const GpuDevice& d,
                                              const MaxPool2DShape& s,
                                              const float* dy,
                                              const int32_t* argmax, float* dx,
                                              const float* relu_y) const {
  parallel::MaxPool2DBackward(CudaExec(d), s, dy, argmax, relu_y, dx);
}

int64_t SoftmaxCrossEntropy<GpuDevice>::WorkspaceBytes(int batch) {
  return parallel::SoftmaxWorkspaceBytes(batch);
}

void SoftmaxCrossEntropy<GpuDevice>::operator()(
    const GpuDevice& d, int batch, int classes, const float* logits,
    const float* labels, float grad_scale, float* dlogits, double* loss_sum,
    int* correct, void* workspace) const {
  parallel::SoftmaxCrossEntropy(CudaExec(d), batch, classes, logits, labels,
                                grad_scale, dlogits, loss_sum, correct,
                                workspace);
}

cudaError_t GpuKernelsLoadable() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, ProbeKernel);
}

const char* GpuKernelArchs() { return PSCLUSTER_CUDA_ARCHS; }

std::unique_ptr<GraphKernels> MakeGpuGraphKernels(const GpuDevice& d) {
  return std::make_unique<parallel::ExecGraphKernels<CudaExec>>(CudaExec(d));
}

}  // namespace kernels
}  // namespace pscluster
