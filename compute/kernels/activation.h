// Element-wise activations other than the ReLU fused into the bias kernel
// (bias_activation.h): sigmoid and tanh, in place, and their gradients from
// the forward output y. ReLU is here too, for a standalone Keras
// Activation('relu') / ReLU layer. The activations of modern CNNs (gelu,
// swish, elu, leaky_relu, hard_sigmoid) take a parameter and their
// gradients need the forward input: ActivationForwardX / ActivationGradXY.
#ifndef PSCLUSTER_COMPUTE_KERNELS_ACTIVATION_H_
#define PSCLUSTER_COMPUTE_KERNELS_ACTIVATION_H_

#include <cstdint>

#include "compute/kernels/device.h"

namespace pscluster {
namespace kernels {

// Keras semantics; `alpha` is the one parameter some of them take:
//   kGelu       0.5 x (1 + erf(x / sqrt 2)): Keras 3 gelu(approximate=False),
//               its default; Keras 2.x (tf.keras) gelu's default too.
//   kGeluTanh   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))):
//               approximate=True. TensorFlow.js 4.22 has gelu only as
//               activation 'gelu' (the erf form) and 'gelu_new' (tanh form).
//   kSwish      x sigmoid(x): Keras 3 silu/swish, Keras 2 swish, tfjs swish.
//   kElu        x > 0 ? x : alpha (e^x - 1); Keras default alpha 1.0 (tfjs
//               'elu' 1.0; its ELU layer alpha 1.0).
//   kLeakyRelu  x > 0 ? x : alpha x. The defaults differ: Keras 3 LeakyReLU
//               layer negative_slope 0.3, Keras 3 activation 'leaky_relu'
//               0.2, Keras 2 LeakyReLU alpha 0.3 (tf.nn.leaky_relu 0.2),
//               tfjs LeakyReLU layer alpha 0.3 (tf.leakyRelu 0.2).
//   kHardSigmoid clip(alpha x + 0.5, 0, 1). The slope differs: Keras 3
//               (relu6(x + 3) / 6) alpha = 1/6; Keras 2 and tfjs
//               (clip(0.2 x + 0.5, 0, 1)) alpha = 0.2.
// relu, sigmoid and tanh ignore alpha.
enum class ActivationFn {
  kRelu,
  kSigmoid,
  kTanh,
  kGelu,
  kGeluTanh,
  kSwish,
  kElu,
  kLeakyRelu,
  kHardSigmoid,
};

// Whether f's gradient is a function of its output alone (ActivationGrad
// computes it); the others need ActivationGradXY.
inline bool ActivationGradFromOutput(ActivationFn f) {
  return f == ActivationFn::kRelu || f == ActivationFn::kSigmoid || f == ActivationFn::kTanh;
}

// y[i] = f(x[i]) for i < n; x may equal y. Every ActivationFn.
void ActivationForwardX(int64_t n, ActivationFn f, float alpha, const float* x, float* y);
// dx[i] = dy[i] * f'(x[i]) from the forward's input x and output y; dx may
// equal dy. Every ActivationFn.
void ActivationGradXY(int64_t n, ActivationFn f, float alpha, const float* x, const float* y,
                      const float* dy, float* dx);

// y[i] = f(y[i]) for i < n, in place. relu, sigmoid and tanh only: the
// others (which take alpha) write NaN here; ActivationForwardX runs them.
template <typename Device>
struct ActivationForward;

template <>
struct ActivationForward<CpuDevice> {
  void operator()(const CpuDevice& d, int64_t n, ActivationFn f,
                  float* y) const;
};

// dy[i] *= f'(z[i]) written in terms of y = f(z): relu y > 0 (0 at z == 0),
// sigmoid y (1 - y), tanh 1 - y^2. In place. relu, sigmoid and tanh only:
// the others write NaN here; ActivationGradXY runs them.
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
