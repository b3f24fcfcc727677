// Element-wise activations other than the ReLU fused into the bias kernel
// (bias_activation.h): sigmoid and tanh, in place, and their gradients from
// the forward output y. ReLU is here too, for a standalone Keras
// Activation('relu') / ReLU layer.
#ifndef PSCLUSTER_COMPUTE_KERNELS_ACTIVATION_H_
#define PSCLUSTER_COMPUTE_KERNELS_ACTIVATION_H_

#include <cstdint>

#include "compute/kernels/device.h"

namespace pscluster {
namespace kernels {

enum class ActivationFn { kRelu, kSigmoid, kTanh };

// y[i] = f(y[i]) for i < n, in place.
template <typename Device>
struct ActivationForward;

template <>
struct ActivationForward<CpuDevice> {
  void operator()(const CpuDevice& d, int64_t n, ActivationFn f,
                  float* y) const;
};

// dy[i] *= f'(z[i]) written in terms of y = f(z): relu y > 0 (0 at z == 0),
// sigmoid y (1 - y), tanh 1 - y^2. In place.
template <typename Device>
struct ActivationGrad;

template <>
struct ActivationGrad<CpuDevice> {
  void operator()(const CpuDevice& d, int64_t n, ActivationFn f,
                  const float* y, float* dy) const;
};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_ACTIVATION_H_
