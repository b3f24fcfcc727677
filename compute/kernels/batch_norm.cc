#include "compute/kernels/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

namespace pscluster {
namespace kernels {
namespace {

// Per-channel values: on the stack for up to kStack channels. Local, so
// the compiler knows they alias nothing the caller passed.
template <typename T>
class ChannelScratch {
 public:
  explicit ChannelScratch(int channels, T fill = T()) {
    if (channels > kStack) heap_.reset(new T[channels]);
    std::fill(data(), data() + channels, fill);
  }
  T& operator[](int c) { return data()[c]; }
  T* data() { return heap_ ? heap_.get() : stack_; }

 private:
  static constexpr int kStack = 1024;
  T stack_[kStack];
  std::unique_ptr<T[]> heap_;
};

// y = gamma (x - mean) / sqrt(var + eps) + beta, then max(y, 0) with kRelu
// (ActivationForward's ReLU on the same float y).
template <bool kRelu>
void Forward(const BatchNormShape& s, const float* x, const float* mean, const float* var,
             const float* gamma, const float* beta, float epsilon, float* y) {
  // y = x * a + b per channel.
  ChannelScratch<float> a(s.channels), b(s.channels);
  for (int c = 0; c < s.channels; ++c) {
    const float inv = 1.0f / std::sqrt(var[c] + epsilon);
    a[c] = (gamma != nullptr ? gamma[c] : 1.0f) * inv;
    b[c] = (beta != nullptr ? beta[c] : 0.0f) - mean[c] * a[c];
  }
  const float* a_c = a.data();
  const float* b_c = b.data();
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* in = x + r * s.channels;
    float* out = y + r * s.channels;
    for (int c = 0; c < s.channels; ++c) {
      const float v = in[c] * a_c[c] + b_c[c];
      out[c] = kRelu ? (v > 0.0f ? v : 0.0f) : v;
    }
  }
}

// The gradient reaching the normalisation's output: dy itself, or, with a
// ReLU after it whose output is r, dy where r > 0 and 0 elsewhere (the
// ReLU gradient ActivationGrad applies).
template <bool kRelu>
inline float MaskedGrad(const float* r, const float* dy, int64_t i) {
  if constexpr (kRelu) {
    // r[i] > 0 ? dy[i] : +0 as a bit mask: GCC 12 keeps the select a branch
    // in the sums' loop, and a mask vectorises.
    uint32_t g;
    std::memcpy(&g, dy + i, sizeof(g));
    g &= 0u - static_cast<uint32_t>(r[i] > 0.0f);
    float out;
    std::memcpy(&out, &g, sizeof(out));
    return out;
  } else {
    return dy[i];
  }
}

template <bool kRelu>
void GradSums(const BatchNormShape& s, const float* x, const float* r, const float* dy,
              const float* mean, const float* var, float epsilon, double* sum_dy,
              double* sum_dy_xhat) {
  // 1/sqrt(var + eps) once per channel, not per element: the same values,
  // and the row loop vectorises.
  ChannelScratch<float> inv(s.channels);
  for (int c = 0; c < s.channels; ++c) inv[c] = 1.0f / std::sqrt(var[c] + epsilon);
  // The sums in local doubles (the caller's two arrays might alias, which
  // kept this loop scalar), added in the same order as before.
  ChannelScratch<double> gsum_buf(s.channels, 0.0), gxsum_buf(s.channels, 0.0);
  double* gsum = gsum_buf.data();
  double* gxsum = gxsum_buf.data();
  const float* inv_c = inv.data();
  for (int64_t row = 0; row < s.rows; ++row) {
    const int64_t at = row * s.channels;
    const float* in = x + at;
    for (int c = 0; c < s.channels; ++c) {
      const float g = MaskedGrad<kRelu>(r, dy, at + c);
      gsum[c] += g;
      gxsum[c] += static_cast<double>(g) * ((in[c] - mean[c]) * inv_c[c]);
    }
  }
  for (int c = 0; c < s.channels; ++c) {
    sum_dy[c] += gsum[c];
    sum_dy_xhat[c] += gxsum[c];
  }
}

template <bool kRelu>
void BackwardInput(const BatchNormShape& s, const float* x, const float* r, const float* dy,
                   const float* mean, const float* var, const float* gamma, float epsilon,
                   const double* sum_dy, const double* sum_dy_xhat, int64_t total_rows,
                   float* dx) {
  const double inv_n = 1.0 / static_cast<double>(total_rows);
  // The per-channel factors once (the same float values the element loop
  // computed before), so the row loop is loads, fmas and a store.
  ChannelScratch<float> inv(s.channels), scale(s.channels), mean_dy(s.channels),
      mean_dy_xhat(s.channels);
  for (int c = 0; c < s.channels; ++c) {
    inv[c] = 1.0f / std::sqrt(var[c] + epsilon);
    scale[c] = (gamma != nullptr ? gamma[c] : 1.0f) * inv[c];
    mean_dy[c] = static_cast<float>(sum_dy[c] * inv_n);
    mean_dy_xhat[c] = static_cast<float>(sum_dy_xhat[c] * inv_n);
  }
  const float* inv_c = inv.data();
  const float* scale_c = scale.data();
  const float* mean_dy_c = mean_dy.data();
  const float* mean_dy_xhat_c = mean_dy_xhat.data();
  for (int64_t row = 0; row < s.rows; ++row) {
    const int64_t at = row * s.channels;
    const float* in = x + at;
    float* out = dx + at;
    for (int c = 0; c < s.channels; ++c) {
      const float g = MaskedGrad<kRelu>(r, dy, at + c);
      const float xhat = (in[c] - mean[c]) * inv_c[c];
      out[c] = scale_c[c] * (g - mean_dy_c[c] - xhat * mean_dy_xhat_c[c]);
    }
  }
}

}  // namespace

void BatchNormSums<CpuDevice>::operator()(const CpuDevice&, const BatchNormShape& s,
                                          const float* x, double* sum, double* sum_sq) const {
  ChannelScratch<double> local_buf(s.channels, 0.0), local_sq_buf(s.channels, 0.0);
  double* local = local_buf.data();
  double* local_sq = local_sq_buf.data();
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* row = x + r * s.channels;
    for (int c = 0; c < s.channels; ++c) {
      const double v = row[c];
      local[c] += v;
      local_sq[c] += v * v;
    }
  }
  for (int c = 0; c < s.channels; ++c) {
    sum[c] += local[c];
    sum_sq[c] += local_sq[c];
  }
}

void BatchNormForward<CpuDevice>::operator()(const CpuDevice&, const BatchNormShape& s,
                                             const float* x, const float* mean, const float* var,
                                             const float* gamma, const float* beta, float epsilon,
                                             float* y) const {
  Forward<false>(s, x, mean, var, gamma, beta, epsilon, y);
}

void BatchNormGradSums<CpuDevice>::operator()(const CpuDevice&, const BatchNormShape& s,
                                              const float* x, const float* dy, const float* mean,
                                              const float* var, float epsilon, double* sum_dy,
                                              double* sum_dy_xhat) const {
  GradSums<false>(s, x, nullptr, dy, mean, var, epsilon, sum_dy, sum_dy_xhat);
}

void BatchNormBackwardInput<CpuDevice>::operator()(
    const CpuDevice&, const BatchNormShape& s, const float* x, const float* dy, const float* mean,
    const float* var, const float* gamma, float epsilon, const double* sum_dy,
    const double* sum_dy_xhat, int64_t total_rows, float* dx) const {
  BackwardInput<false>(s, x, nullptr, dy, mean, var, gamma, epsilon, sum_dy, sum_dy_xhat,
                       total_rows, dx);
}

void BatchNormReluForward(const BatchNormShape& s, const float* x, const float* mean,
                          const float* var, const float* gamma, const float* beta, float epsilon,
                          float* r) {
  Forward<true>(s, x, mean, var, gamma, beta, epsilon, r);
}

void BatchNormReluGradSums(const BatchNormShape& s, const float* x, const float* r,
                           const float* dr, const float* mean, const float* var, float epsilon,
                           double* sum_dy, double* sum_dy_xhat) {
  GradSums<true>(s, x, r, dr, mean, var, epsilon, sum_dy, sum_dy_xhat);
}

void BatchNormReluBackwardInput(const BatchNormShape& s, const float* x, const float* r,
                                const float* dr, const float* mean, const float* var,
                                const float* gamma, float epsilon, const double* sum_dy,
                                const double* sum_dy_xhat, int64_t total_rows, float* dx) {
  BackwardInput<true>(s, x, r, dr, mean, var, gamma, epsilon, sum_dy, sum_dy_xhat, total_rows,
                      dx);
}

}  // namespace kernels
}  // namespace pscluster
