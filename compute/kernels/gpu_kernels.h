// GpuDevice specialisations of every layer kernel the CPU backend has
// (bias_activation.h, dense.h, conv2d.h, maxpool2d.h, softmax_xent.h), with
// the CPU contracts except that:
//   - pointers are device memory and the work is queued on the device's
//     stream (compute/kernels/gpu_device.h);
//   - kernels that reduce over rows (bias gradients) take a caller-owned
//     workspace, sized by their WorkspaceSize (floats);
//   - MaxPool2DBackward can fuse the gradient of the ReLU below it;
//   - SoftmaxCrossEntropy writes *loss_sum and *correct to device memory.
// There is no fused conv + pool kernel: the GPU runs the pair unfused.
// Implemented in gpu_kernels.cu over compute/kernels/parallel_kernels.h:
// GEMMs through cuBLAS (fp32, no TF32), the rest as our own kernels.
// CUDA builds only.
#ifndef PSCLUSTER_COMPUTE_KERNELS_GPU_KERNELS_H_
#define PSCLUSTER_COMPUTE_KERNELS_GPU_KERNELS_H_

#include <cstdint>
#include <memory>

#include "compute/kernels/bias_activation.h"
#include "compute/kernels/conv2d.h"
#include "compute/kernels/dense.h"
#include "compute/kernels/gpu_device.h"
#include "compute/kernels/graph_kernels.h"
#include "compute/kernels/maxpool2d.h"
#include "compute/kernels/softmax_xent.h"

namespace pscluster {
namespace kernels {

template <>
struct BiasActivationForward<GpuDevice> {
  void operator()(const GpuDevice& d, int64_t rows, int cols, const float* bias,
                  bool relu, float* y) const;
};

template <>
struct BiasGrad<GpuDevice> {
  static int64_t WorkspaceSize(int64_t rows, int cols);
  void operator()(const GpuDevice& d, int64_t rows, int cols, const float* dy,
                  bool accumulate, float* db, float* workspace) const;
};

template <>
struct ReluGrad<GpuDevice> {
  void operator()(const GpuDevice& d, int64_t n, const float* y,
                  float* dy) const;
};

template <>
struct DenseForward<GpuDevice> {
  void operator()(const GpuDevice& d, const DenseShape& s, const float* x,
                  const float* w, const float* b, bool relu, float* y) const;
};

template <>
struct DenseBackward<GpuDevice> {
  static int64_t WorkspaceSize(const DenseShape& s);
  void operator()(const GpuDevice& d, const DenseShape& s, const float* x,
                  const float* w, const float* dy, bool accumulate, float* dw,
                  float* db, float* dx, float* workspace) const;
};

template <>
struct Conv2DForward<GpuDevice> {
  static int64_t WorkspaceSize(const Conv2DShape& s);
  void operator()(const GpuDevice& d, const Conv2DShape& s, const float* x,
                  const float* w, const float* b, bool relu, float* y,
                  float* workspace) const;
};

template <>
struct Conv2DBackwardFilter<GpuDevice> {
  static int64_t WorkspaceSize(const Conv2DShape& s);
  void operator()(const GpuDevice& d, const Conv2DShape& s, const float* x,
                  const float* dy, bool accumulate, bool columns_ready,
                  float* dw, float* db, float* workspace) const;
};

template <>
struct Conv2DBackwardInput<GpuDevice> {
  static int64_t WorkspaceSize(const Conv2DShape& s);
  void operator()(const GpuDevice& d, const Conv2DShape& s, const float* w,
                  const float* dy, float* dx, float* workspace) const;
};

template <>
struct MaxPool2DForward<GpuDevice> {
  void operator()(const GpuDevice& d, const MaxPool2DShape& s, const float* x,
                  float* y, int32_t* argmax) const;
};

// With `relu_y` (the pooled output y), also the gradient of a ReLU whose
// output the pool read: dx is 0 where y <= 0 (one pass instead of two).
template <>
struct MaxPool2DBackward<GpuDevice> {
  void operator()(const GpuDevice& d, const MaxPool2DShape& s, const float* dy,
                  const int32_t* argmax, float* dx,
                  const float* relu_y = nullptr) const;
};

template <>
struct SoftmaxCrossEntropy<GpuDevice> {
  // Bytes (not floats) of workspace, aligned for double.
  static int64_t WorkspaceBytes(int batch);
  void operator()(const GpuDevice& d, int batch, int classes,
                  const float* logits, const float* labels, float grad_scale,
                  float* dlogits, double* loss_sum, int* correct,
                  void* workspace) const;
};

// Whether this binary holds kernels the current CUDA device can run:
// cudaSuccess, or the error (cudaErrorNoKernelImageForDevice, ...) to report.
cudaError_t GpuKernelsLoadable();

// The graph engine's kernels (graph_kernels.h) on `d`, which is copied:
// its stream, cuBLAS handle and error sink must outlive the result.
std::unique_ptr<GraphKernels> MakeGpuGraphKernels(const GpuDevice& d);

// The compute capabilities the kernels were built for ("90", "80,90").
const char* GpuKernelArchs();

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_GPU_KERNELS_H_
