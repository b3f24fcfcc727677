#include "compute/kernels/activation.h"

#include <cmath>

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
  }
}

}  // namespace kernels
}  // namespace pscluster
