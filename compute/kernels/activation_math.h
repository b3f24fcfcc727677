// The element-wise activations' formulas, once for the CPU (activation.cc)
// and the device algorithms (parallel_elementwise.h, compiled by nvcc too):
// the value f(x) and the slope f'(x) from the forward input x and output y.
// float math from <math.h>, which both compilers provide.
#ifndef PSCLUSTER_COMPUTE_KERNELS_ACTIVATION_MATH_H_
#define PSCLUSTER_COMPUTE_KERNELS_ACTIVATION_MATH_H_

#include <math.h>

#include "compute/kernels/activation.h"

#if defined(__CUDACC__)
#define PSCLUSTER_ACTIVATION_HD __host__ __device__
#else
#define PSCLUSTER_ACTIVATION_HD
#endif

namespace pscluster {
namespace kernels {

// sqrt(2 / pi), 1 / sqrt(2), 1 / sqrt(2 pi) and the tanh form's cubic term.
constexpr float kGeluTanhScale = 0.7978845608028654f;
constexpr float kGeluTanhCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

PSCLUSTER_ACTIVATION_HD inline float ActivationValue(ActivationFn f, float alpha, float x) {
  switch (f) {
    case ActivationFn::kRelu:
      return x > 0.0f ? x : 0.0f;
    case ActivationFn::kSigmoid:
      return 1.0f / (1.0f + expf(-x));
    case ActivationFn::kTanh:
      return tanhf(x);
    case ActivationFn::kGelu:
      return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
    case ActivationFn::kGeluTanh:
      return 0.5f * x * (1.0f + tanhf(kGeluTanhScale * (x + kGeluTanhCubic * x * x * x)));
    case ActivationFn::kSwish:
      return x / (1.0f + expf(-x));
    case ActivationFn::kElu:
      return x > 0.0f ? x : alpha * expm1f(x);
    case ActivationFn::kLeakyRelu:
      return x > 0.0f ? x : alpha * x;
    case ActivationFn::kHardSigmoid: {
      const float v = alpha * x + 0.5f;
      return v <= 0.0f ? 0.0f : v >= 1.0f ? 1.0f : v;
    }
  }
  return x;
}

// f'(x), from the forward's input x and output y = f(x). At a kink the
// slope TensorFlow's gradient takes: relu, elu, leaky_relu 0/alpha side at
// x == 0 (relu from y > 0); hard_sigmoid 0 where clipped, at the ends too.
PSCLUSTER_ACTIVATION_HD inline float ActivationSlope(ActivationFn f, float alpha, float x,
                                                     float y) {
  switch (f) {
    case ActivationFn::kRelu:
      return y > 0.0f ? 1.0f : 0.0f;
    case ActivationFn::kSigmoid:
      return y * (1.0f - y);
    case ActivationFn::kTanh:
      return 1.0f - y * y;
    case ActivationFn::kGelu:
      return 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
    case ActivationFn::kGeluTanh: {
      const float x2 = x * x;
      const float t = tanhf(kGeluTanhScale * (x + kGeluTanhCubic * x2 * x));
      return 0.5f * (1.0f + t) +
             0.5f * x * (1.0f - t * t) * kGeluTanhScale * (1.0f + 3.0f * kGeluTanhCubic * x2);
    }
    case ActivationFn::kSwish: {
      const float s = 1.0f / (1.0f + expf(-x));
      return s * (1.0f + x * (1.0f - s));
    }
    case ActivationFn::kElu:
      return x > 0.0f ? 1.0f : y + alpha;
    case ActivationFn::kLeakyRelu:
      return x > 0.0f ? 1.0f : alpha;
    case ActivationFn::kHardSigmoid: {
      const float v = alpha * x + 0.5f;
      return v > 0.0f && v < 1.0f ? alpha : 0.0f;
    }
  }
  return 0.0f;
}

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_ACTIVATION_MATH_H_
