#include "compute/kernels/layer_norm.h"

#include <cmath>
#include <cstring>

namespace pscluster {
namespace kernels {

void LayerNormForward(int64_t rows, int c, const float* x, const float* gamma, const float* beta,
                      float epsilon, float* mean, float* rstd, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * c;
    double sum = 0.0;
    for (int k = 0; k < c; ++k) sum += in[k];
    const double m = sum / c;
    double sq = 0.0;
    for (int k = 0; k < c; ++k) sq += (in[k] - m) * (in[k] - m);
    const float mf = static_cast<float>(m);
    const float inv = static_cast<float>(1.0 / std::sqrt(sq / c + epsilon));
    mean[r] = mf;
    rstd[r] = inv;
    float* out = y + r * c;
    for (int k = 0; k < c; ++k) {
      const float xhat = (in[k] - mf) * inv;
      out[k] = xhat * (gamma != nullptr ? gamma[k] : 1.0f) + (beta != nullptr ? beta[k] : 0.0f);
    }
  }
}

void LayerNormBackward(int64_t rows, int c, const float* x, const float* dy, const float* mean,
                       const float* rstd, const float* gamma, float* dgamma, float* dbeta,
                       float* dx) {
  if (dgamma != nullptr) std::memset(dgamma, 0, sizeof(float) * c);
  if (dbeta != nullptr) std::memset(dbeta, 0, sizeof(float) * c);
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * c;
    const float* d = dy + r * c;
    double sum_g = 0.0, sum_gx = 0.0;
    for (int k = 0; k < c; ++k) {
      const float xhat = (in[k] - mean[r]) * rstd[r];
      const float g = d[k] * (gamma != nullptr ? gamma[k] : 1.0f);
      sum_g += g;
      sum_gx += static_cast<double>(g) * xhat;
      if (dgamma != nullptr) dgamma[k] += d[k] * xhat;
      if (dbeta != nullptr) dbeta[k] += d[k];
    }
    if (dx == nullptr) continue;
    const float mean_g = static_cast<float>(sum_g / c), mean_gx = static_cast<float>(sum_gx / c);
    for (int k = 0; k < c; ++k) {
      const float xhat = (in[k] - mean[r]) * rstd[r];
      const float g = d[k] * (gamma != nullptr ? gamma[k] : 1.0f);
      dx[r * c + k] = rstd[r] * (g - mean_g - xhat * mean_gx);
    }
  }
}

}  // namespace kernels
}  // namespace pscluster
