#include "compute/kernels/regularizer.h"

#include <cmath>

namespace pscluster {
namespace kernels {

double RegularizerLoss(int64_t n, float l1, float l2, const float* w) {
  double abs_sum = 0.0, sq_sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    abs_sum += std::fabs(w[i]);
    sq_sum += static_cast<double>(w[i]) * w[i];
  }
  return l1 * abs_sum + l2 * sq_sum;
}

void RegularizerGrad(int64_t n, float l1, float l2, const float* w, float* dw) {
  for (int64_t i = 0; i < n; ++i) {
    const float sign = w[i] > 0.0f ? 1.0f : w[i] < 0.0f ? -1.0f : 0.0f;
    dw[i] += l1 * sign + 2.0f * l2 * w[i];
  }
}

}  // namespace kernels
}  // namespace pscluster
