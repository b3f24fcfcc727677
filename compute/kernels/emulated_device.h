// EmulatedGpuDevice runs the GPU backend's layer algorithms
// (compute/kernels/parallel_kernels.h) on the host: every element functor
// call in turn (in reverse order, as nothing may depend on the order), and
// GEMMs through a plain column-major reference that rejects the arguments
// cuBLAS rejects. It has the same kernel specialisations, with the same
// signatures, as GpuDevice (compute/kernels/gpu_kernels.h), so that tests on
// machines without a GPU check the GPU code path's indexing, GEMM
// transpositions and workspace layouts against the CPU kernels, and
// compute/fused_device_engine.h runs on it unchanged. Tests only: slow.
#ifndef PSCLUSTER_COMPUTE_KERNELS_EMULATED_DEVICE_H_
#define PSCLUSTER_COMPUTE_KERNELS_EMULATED_DEVICE_H_

#include <cstdint>
#include <memory>

#include "compute/kernels/bias_activation.h"
#include "compute/kernels/conv2d.h"
#include "compute/kernels/dense.h"
#include "compute/kernels/graph_kernels.h"
#include "compute/kernels/kernel_errors.h"
#include "compute/kernels/maxpool2d.h"
#include "compute/kernels/softmax_xent.h"

namespace pscluster {
namespace kernels {

// Pointers are host memory; kernels finish before they return. Rejected
// GEMMs are recorded in *errors, which the caller owns.
struct EmulatedGpuDevice {
  KernelErrors* errors = nullptr;
};

template <>
struct BiasActivationForward<EmulatedGpuDevice> {
  void operator()(const EmulatedGpuDevice& d, int64_t rows, int cols,
                  const float* bias, bool relu, float* y) const;
};

template <>
struct BiasGrad<EmulatedGpuDevice> {
  static int64_t WorkspaceSize(int64_t rows, int cols);
  void operator()(const EmulatedGpuDevice& d, int64_t rows, int cols,
                  const float* dy, bool accumulate, float* db,
                  float* workspace) const;
};

template <>
struct ReluGrad<EmulatedGpuDevice> {
  void operator()(const EmulatedGpuDevice& d, int64_t n, const float* y,
                  float* dy) const;
};

template <>
struct DenseForward<EmulatedGpuDevice> {
  void operator()(const EmulatedGpuDevice& d, const DenseShape& s,
                  const float* x, const float* w, const float* b, bool relu,
                  float* y) const;
};

template <>
struct DenseBackward<EmulatedGpuDevice> {
  static int64_t WorkspaceSize(const DenseShape& s);
  void operator()(const EmulatedGpuDevice& d, const DenseShape& s,
                  const float* x, const float* w, const float* dy,
                  bool accumulate, float* dw, float* db, float* dx,
                  float* workspace) const;
};

template <>
struct Conv2DForward<EmulatedGpuDevice> {
  static int64_t WorkspaceSize(const Conv2DShape& s);
  void operator()(const EmulatedGpuDevice& d, const Conv2DShape& s,
                  const float* x, const float* w, const float* b, bool relu,
                  float* y, float* workspace) const;
};

template <>
struct Conv2DBackwardFilter<EmulatedGpuDevice> {
  static int64_t WorkspaceSize(const Conv2DShape& s);
  void operator()(const EmulatedGpuDevice& d, const Conv2DShape& s,
                  const float* x, const float* dy, bool accumulate,
                  bool columns_ready, float* dw, float* db,
                  float* workspace) const;
};

template <>
struct Conv2DBackwardInput<EmulatedGpuDevice> {
  static int64_t WorkspaceSize(const Conv2DShape& s);
  void operator()(const EmulatedGpuDevice& d, const Conv2DShape& s,
                  const float* w, const float* dy, float* dx,
                  float* workspace) const;
};

template <>
struct MaxPool2DForward<EmulatedGpuDevice> {
  void operator()(const EmulatedGpuDevice& d, const MaxPool2DShape& s,
                  const float* x, float* y, int32_t* argmax) const;
};

template <>
struct MaxPool2DBackward<EmulatedGpuDevice> {
  void operator()(const EmulatedGpuDevice& d, const MaxPool2DShape& s,
                  const float* dy, const int32_t* argmax, float* dx,
                  const float* relu_y = nullptr) const;
};

template <>
struct SoftmaxCrossEntropy<EmulatedGpuDevice> {
  static int64_t WorkspaceBytes(int batch);
  void operator()(const EmulatedGpuDevice& d, int batch, int classes,
                  const float* logits, const float* labels, float grad_scale,
                  float* dlogits, double* loss_sum, int* correct,
                  void* workspace) const;
};

// The graph engine's kernels (graph_kernels.h) on `d`, which is copied.
std::unique_ptr<GraphKernels> MakeEmulatedGraphKernels(
    const EmulatedGpuDevice& d);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_EMULATED_DEVICE_H_
