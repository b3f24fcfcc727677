#include "compute/kernels/batch_norm.h"

#include <cmath>
#include <memory>

namespace pscluster {
namespace kernels {
namespace {

// Per-channel float factors: on the stack for up to kStack channels.
class ChannelScratch {
 public:
  explicit ChannelScratch(int channels) {
    if (channels > kStack) heap_.reset(new float[channels]);
  }
  float& operator[](int c) { return data()[c]; }
  float* data() { return heap_ ? heap_.get() : stack_; }

 private:
  static constexpr int kStack = 1024;
  float stack_[kStack];
  std::unique_ptr<float[]> heap_;
};

}  // namespace

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
  ChannelScratch a(s.channels), b(s.channels);
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
  // 1/sqrt(var + eps) once per channel, not per element: the same values,
  // and the row loop vectorises.
  ChannelScratch inv(s.channels);
  for (int c = 0; c < s.channels; ++c) inv[c] = 1.0f / std::sqrt(var[c] + epsilon);
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* in = x + r * s.channels;
    const float* g = dy + r * s.channels;
    for (int c = 0; c < s.channels; ++c) {
      sum_dy[c] += g[c];
      sum_dy_xhat[c] += static_cast<double>(g[c]) * ((in[c] - mean[c]) * inv[c]);
    }
  }
}

void BatchNormBackwardInput<CpuDevice>::operator()(
    const CpuDevice&, const BatchNormShape& s, const float* x, const float* dy, const float* mean,
    const float* var, const float* gamma, float epsilon, const double* sum_dy,
    const double* sum_dy_xhat, int64_t total_rows, float* dx) const {
  const double inv_n = 1.0 / static_cast<double>(total_rows);
  // The per-channel factors once (the same float values the element loop
  // computed before), so the row loop is loads, fmas and a store.
  ChannelScratch inv(s.channels), scale(s.channels), mean_dy(s.channels),
      mean_dy_xhat(s.channels);
  for (int c = 0; c < s.channels; ++c) {
    inv[c] = 1.0f / std::sqrt(var[c] + epsilon);
    scale[c] = (gamma != nullptr ? gamma[c] : 1.0f) * inv[c];
    mean_dy[c] = static_cast<float>(sum_dy[c] * inv_n);
    mean_dy_xhat[c] = static_cast<float>(sum_dy_xhat[c] * inv_n);
  }
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* in = x + r * s.channels;
    const float* g = dy + r * s.channels;
    float* out = dx + r * s.channels;
    for (int c = 0; c < s.channels; ++c) {
      const float xhat = (in[c] - mean[c]) * inv[c];
      out[c] = scale[c] * (g[c] - mean_dy[c] - xhat * mean_dy_xhat[c]);
    }
  }
}

}  // namespace kernels
}  // namespace pscluster
