#include "compute/kernels/batch_norm.h"

#include <cmath>
#include <memory>

namespace pscluster {
namespace kernels {

void BatchNormSums<CpuDevice>::operator()(const CpuDevice&, const BatchNormShape& s,
                                          const float* x, double* sum, double* sum_sq) const {
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* row = x + r * s.channels;
    for (int c = 0; c < s.channels; ++c) {
      const double v = row[c];
      sum[c] += v;
      sum_sq[c] += v * v;
    }
  }
}

void BatchNormForward<CpuDevice>::operator()(const CpuDevice&, const BatchNormShape& s,
                                             const float* x, const float* mean, const float* var,
                                             const float* gamma, const float* beta, float epsilon,
                                             float* y) const {
  // y = x * a + b per channel.
  constexpr int kMaxStack = 1024;
  float a_stack[kMaxStack], b_stack[kMaxStack];
  std::unique_ptr<float[]> heap;
  float* a = a_stack;
  float* b = b_stack;
  if (s.channels > kMaxStack) {
    heap.reset(new float[2 * s.channels]);
    a = heap.get();
    b = heap.get() + s.channels;
  }
  for (int c = 0; c < s.channels; ++c) {
    const float inv = 1.0f / std::sqrt(var[c] + epsilon);
    a[c] = (gamma != nullptr ? gamma[c] : 1.0f) * inv;
    b[c] = (beta != nullptr ? beta[c] : 0.0f) - mean[c] * a[c];
  }
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* in = x + r * s.channels;
    float* out = y + r * s.channels;
    for (int c = 0; c < s.channels; ++c) out[c] = in[c] * a[c] + b[c];
  }
}

void BatchNormGradSums<CpuDevice>::operator()(const CpuDevice&, const BatchNormShape& s,
                                              const float* x, const float* dy, const float* mean,
                                              const float* var, float epsilon, double* sum_dy,
                                              double* sum_dy_xhat) const {
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* in = x + r * s.channels;
    const float* g = dy + r * s.channels;
    for (int c = 0; c < s.channels; ++c) {
      const float inv = 1.0f / std::sqrt(var[c] + epsilon);
      sum_dy[c] += g[c];
      sum_dy_xhat[c] += static_cast<double>(g[c]) * ((in[c] - mean[c]) * inv);
    }
  }
}

void BatchNormBackwardInput<CpuDevice>::operator()(
    const CpuDevice&, const BatchNormShape& s, const float* x, const float* dy, const float* mean,
    const float* var, const float* gamma, float epsilon, const double* sum_dy,
    const double* sum_dy_xhat, int64_t total_rows, float* dx) const {
  const double inv_n = 1.0 / static_cast<double>(total_rows);
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* in = x + r * s.channels;
    const float* g = dy + r * s.channels;
    float* out = dx + r * s.channels;
    for (int c = 0; c < s.channels; ++c) {
      const float inv = 1.0f / std::sqrt(var[c] + epsilon);
      const float xhat = (in[c] - mean[c]) * inv;
      const float scale = (gamma != nullptr ? gamma[c] : 1.0f) * inv;
      out[c] = scale * (g[c] - static_cast<float>(sum_dy[c] * inv_n) -
                        xhat * static_cast<float>(sum_dy_xhat[c] * inv_n));
    }
  }
}

}  // namespace kernels
}  // namespace pscluster
