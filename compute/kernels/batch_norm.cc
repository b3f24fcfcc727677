#include "compute/kernels/batch_norm.h"

#include <immintrin.h>

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

// Eight channels' floats of two per-element quantities.
struct EightPair {
  __m256 a, b;
};

// sum_a[c] += the sum over rows of a(r, c) and sum_ab[c] += that of
// a(r, c) * b(r, c), in doubles; eight(r, c) gives channels [c, c + 8) and
// one(r, c, &a, &b) a single channel (the last channels % 8). The rows run
// in tiles that stay in L1 while each block of eight channels is summed in
// registers, two rows into separate accumulators: the additions wait on
// nothing but each other's results (adding each row into arrays in memory
// ran at the speed of store-to-load forwarding, about a third of this).
template <typename Eight, typename One>
void PairSums(int64_t rows, int channels, Eight eight, One one, double* sum_a, double* sum_ab) {
  constexpr int64_t kTileRows = 64;
  ChannelScratch<double> sa_buf(channels, 0.0), sab_buf(channels, 0.0);
  double* sa = sa_buf.data();
  double* sab = sab_buf.data();
  const int vector_end = channels - channels % 8;
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int64_t r1 = std::min(rows, r0 + kTileRows);
    for (int c = 0; c < vector_end; c += 8) {
      __m256d a_lo[2], a_hi[2], ab_lo[2], ab_hi[2];
      for (int u = 0; u < 2; ++u) {
        a_lo[u] = a_hi[u] = ab_lo[u] = ab_hi[u] = _mm256_setzero_pd();
      }
      auto add = [&](int u, int64_t r) {
        const EightPair e = eight(r, c);
        const __m256d alo = _mm256_cvtps_pd(_mm256_castps256_ps128(e.a));
        const __m256d ahi = _mm256_cvtps_pd(_mm256_extractf128_ps(e.a, 1));
        const __m256d blo = _mm256_cvtps_pd(_mm256_castps256_ps128(e.b));
        const __m256d bhi = _mm256_cvtps_pd(_mm256_extractf128_ps(e.b, 1));
        a_lo[u] = _mm256_add_pd(a_lo[u], alo);
        a_hi[u] = _mm256_add_pd(a_hi[u], ahi);
        ab_lo[u] = _mm256_fmadd_pd(alo, blo, ab_lo[u]);
        ab_hi[u] = _mm256_fmadd_pd(ahi, bhi, ab_hi[u]);
      };
      int64_t r = r0;
      for (; r + 2 <= r1; r += 2) {
        add(0, r);
        add(1, r + 1);
      }
      if (r < r1) add(0, r);
      _mm256_storeu_pd(sa + c, _mm256_add_pd(_mm256_loadu_pd(sa + c),
                                             _mm256_add_pd(a_lo[0], a_lo[1])));
      _mm256_storeu_pd(sa + c + 4, _mm256_add_pd(_mm256_loadu_pd(sa + c + 4),
                                                 _mm256_add_pd(a_hi[0], a_hi[1])));
      _mm256_storeu_pd(sab + c, _mm256_add_pd(_mm256_loadu_pd(sab + c),
                                              _mm256_add_pd(ab_lo[0], ab_lo[1])));
      _mm256_storeu_pd(sab + c + 4, _mm256_add_pd(_mm256_loadu_pd(sab + c + 4),
                                                  _mm256_add_pd(ab_hi[0], ab_hi[1])));
    }
    for (int c = vector_end; c < channels; ++c) {
      for (int64_t r = r0; r < r1; ++r) {
        float a, b;
        one(r, c, &a, &b);
        sa[c] += a;
        sab[c] += static_cast<double>(a) * b;
      }
    }
  }
  for (int c = 0; c < channels; ++c) {
    sum_a[c] += sa[c];
    sum_ab[c] += sab[c];
  }
}

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
  const float* inv_c = inv.data();
  auto eight = [&](int64_t row, int c) {
    const int64_t at = row * s.channels + c;
    __m256 g = _mm256_loadu_ps(dy + at);
    if constexpr (kRelu) {  // dy where r > 0, +0 elsewhere (MaskedGrad)
      g = _mm256_and_ps(g, _mm256_cmp_ps(_mm256_loadu_ps(r + at), _mm256_setzero_ps(),
                                         _CMP_GT_OQ));
    }
    const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + at),
                                                    _mm256_loadu_ps(mean + c)),
                                      _mm256_loadu_ps(inv_c + c));
    return EightPair{g, xhat};
  };
  auto one = [&](int64_t row, int c, float* g, float* xhat) {
    const int64_t at = row * s.channels + c;
    *g = MaskedGrad<kRelu>(r, dy, at);
    *xhat = (x[at] - mean[c]) * inv_c[c];
  };
  PairSums(s.rows, s.channels, eight, one, sum_dy, sum_dy_xhat);
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
  auto eight = [&](int64_t row, int c) {
    const __m256 v = _mm256_loadu_ps(x + row * s.channels + c);
    return EightPair{v, v};
  };
  auto one = [&](int64_t row, int c, float* a, float* b) { *a = *b = x[row * s.channels + c]; };
  PairSums(s.rows, s.channels, eight, one, sum, sum_sq);
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
