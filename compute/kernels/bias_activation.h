// Element-wise kernels around the GEMMs: adding a bias with an optional ReLU
// (fused into the conv/dense forward pass), the bias gradient, and the ReLU
// gradient. Matrices are row-major [rows, cols]; `cols` is the channel (or
// unit) dimension that the bias runs along.
#ifndef PSCLUSTER_COMPUTE_KERNELS_BIAS_ACTIVATION_H_
#define PSCLUSTER_COMPUTE_KERNELS_BIAS_ACTIVATION_H_

#include <cstdint>

#include "compute/kernels/device.h"

namespace pscluster {
namespace kernels {

// y[r, c] = act(y[r, c] + bias[c]), in place; act is ReLU or the identity.
template <typename Device>
struct BiasActivationForward;

template <>
struct BiasActivationForward<CpuDevice> {
  void operator()(const CpuDevice& d, int64_t rows, int cols, const float* bias,
                  bool relu, float* y) const;
};

// db[c] = sum_r dy[r, c], or db[c] += ... when `accumulate`.
template <typename Device>
struct BiasGrad;

template <>
struct BiasGrad<CpuDevice> {
  void operator()(const CpuDevice& d, int64_t rows, int cols, const float* dy,
                  bool accumulate, float* db) const;
};

// dy[i] = y[i] > 0 ? dy[i] : 0 for i < n, in place, where y = relu(z) is the
// forward output (so the gradient at z == 0 is taken as 0).
template <typename Device>
struct ReluGrad;

template <>
struct ReluGrad<CpuDevice> {
  void operator()(const CpuDevice& d, int64_t n, const float* y,
                  float* dy) const;
};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_BIAS_ACTIVATION_H_
