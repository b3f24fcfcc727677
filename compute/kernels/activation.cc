#include "compute/kernels/activation.h"

#include <cmath>
#include <limits>

#include "compute/kernels/activation_math.h"

namespace pscluster {
namespace kernels {

void ActivationForward<CpuDevice>::operator()(const CpuDevice&, int64_t n, ActivationFn f,
                                              float* y) const {
  switch (f) {
    case ActivationFn::kRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
      break;
    case ActivationFn::kSigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-y[i]));
      break;
    case ActivationFn::kTanh:
      for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(y[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) y[i] = std::numeric_limits<float>::quiet_NaN();
      break;
  }
}

void ActivationGrad<CpuDevice>::operator()(const CpuDevice&, int64_t n, ActivationFn f,
                                           const float* y, float* dy) const {
  switch (f) {
    case ActivationFn::kRelu:
      for (int64_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
      break;
    case ActivationFn::kSigmoid:
      for (int64_t i = 0; i < n; ++i) dy[i] *= y[i] * (1.0f - y[i]);
      break;
    case ActivationFn::kTanh:
      for (int64_t i = 0; i < n; ++i) dy[i] *= 1.0f - y[i] * y[i];
      break;
    default:
      for (int64_t i = 0; i < n; ++i) dy[i] = std::numeric_limits<float>::quiet_NaN();
      break;
  }
}

void ActivationForwardX(int64_t n, ActivationFn f, float alpha, const float* x, float* y) {
  if (f == ActivationFn::kRelu) {  // a loop of its own, which vectorises
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = ActivationValue(f, alpha, x[i]);
}

void ActivationGradXY(int64_t n, ActivationFn f, float alpha, const float* x, const float* y,
                      const float* dy, float* dx) {
  if (f == ActivationFn::kRelu) {  // ActivationGrad's select, out of place
    for (int64_t i = 0; i < n; ++i) {
      const float g = dy[i];  // read unconditionally, so the select vectorises
      dx[i] = y[i] > 0.0f ? g : 0.0f;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * ActivationSlope(f, alpha, x[i], y[i]);
}

}  // namespace kernels
}  // namespace pscluster
