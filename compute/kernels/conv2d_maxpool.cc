#include "compute/kernels/conv2d_maxpool.h"

#include <algorithm>

#include "compute/kernels/bias_activation.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define PSCLUSTER_CONV_POOL_AVX2 1
#endif

namespace pscluster {
namespace kernels {
namespace {

// The supported geometry: a 3x3 kernel under a 2x2 window reads a 4x4 patch
// of the single-channel input.
constexpr int kK = 3;
constexpr int kP = 2;
constexpr int kPatch = kK + kP - 1;

}  // namespace

bool Conv2DMaxPoolForward<CpuDevice>::Supports(const Conv2DShape& s, int pool) {
#if defined(PSCLUSTER_CONV_POOL_AVX2)
  return s.in_c == 1 && s.kernel == kK && pool == kP && s.out_c % 8 == 0 &&
         s.out_h() >= kP && s.out_w() >= kP;
#else
  (void)s;
  (void)pool;
  return false;
#endif
}

#if defined(PSCLUSTER_CONV_POOL_AVX2)

void Conv2DMaxPoolForward<CpuDevice>::operator()(
    const CpuDevice&, const Conv2DShape& s, int, const float* x, const float* w,
    const float* b, bool relu, float* pooled, int32_t* argmax) const {
  const int ph = s.out_h() / kP, pw = s.out_w() / kP;
  const __m256 zero = _mm256_setzero_ps();
  // 8 output channels at a time: their 9 weight vectors stay in registers
  // while every pooling window of every image streams past.
  for (int c0 = 0; c0 < s.out_c; c0 += 8) {
    __m256 wv[kK * kK];
    for (int t = 0; t < kK * kK; ++t)
      wv[t] = _mm256_loadu_ps(w + t * s.out_c + c0);
    const __m256 bias = _mm256_loadu_ps(b + c0);
    for (int n = 0; n < s.batch; ++n) {
      const float* xn = x + static_cast<int64_t>(n) * s.in_h * s.in_w;
      for (int i = 0; i < ph; ++i) {
        for (int j = 0; j < pw; ++j) {
          const float* patch = xn + (kP * i) * s.in_w + kP * j;
          // acc[q]: conv output at window position q = dh * 2 + dw.
          __m256 acc[kP * kP] = {bias, bias, bias, bias};
#pragma GCC unroll 4
          for (int r = 0; r < kPatch; ++r) {
#pragma GCC unroll 4
            for (int c = 0; c < kPatch; ++c) {
              const __m256 v = _mm256_broadcast_ss(patch + r * s.in_w + c);
              // Input (r, c) meets tap (r - dh, c - dw) of position (dh, dw).
#pragma GCC unroll 2
              for (int dh = 0; dh < kP; ++dh) {
#pragma GCC unroll 2
                for (int dw = 0; dw < kP; ++dw) {
                  const int kh = r - dh, kw = c - dw;
                  if (kh < 0 || kh >= kK || kw < 0 || kw >= kK) continue;
                  acc[dh * kP + dw] =
                      _mm256_fmadd_ps(v, wv[kh * kK + kw], acc[dh * kP + dw]);
                }
              }
            }
          }
          // Max over the window, first position winning ties.
          __m256 best = relu ? _mm256_max_ps(acc[0], zero) : acc[0];
          __m256i best_at = _mm256_setzero_si256();
#pragma GCC unroll 4
          for (int q = 1; q < kP * kP; ++q) {
            const __m256 v = relu ? _mm256_max_ps(acc[q], zero) : acc[q];
            const __m256 gt = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
            best = _mm256_blendv_ps(best, v, gt);
            best_at = _mm256_blendv_epi8(best_at, _mm256_set1_epi32(q),
                                         _mm256_castps_si256(gt));
          }
          const int64_t o =
              ((static_cast<int64_t>(n) * ph + i) * pw + j) * s.out_c + c0;
          _mm256_storeu_ps(pooled + o, best);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(argmax + o), best_at);
        }
      }
    }
  }
}

void Conv2DMaxPoolBackwardFilter<CpuDevice>::operator()(
    const CpuDevice& d, const Conv2DShape& s, int, const float* x,
    const float* dpooled, const int32_t* argmax, bool accumulate, float* dw,
    float* db) const {
  const int ph = s.out_h() / kP, pw = s.out_w() / kP;
  // Each pooled gradient reaches exactly one conv output, so the bias
  // gradient is the plain sum of the pooled gradients.
  BiasGrad<CpuDevice>()(d, static_cast<int64_t>(s.batch) * ph * pw, s.out_c,
                        dpooled, accumulate, db);
  for (int c0 = 0; c0 < s.out_c; c0 += 8) {
    __m256 acc[kK * kK];  // dw rows (taps) for these 8 channels
    for (int t = 0; t < kK * kK; ++t) acc[t] = _mm256_setzero_ps();
    for (int n = 0; n < s.batch; ++n) {
      const float* xn = x + static_cast<int64_t>(n) * s.in_h * s.in_w;
      for (int i = 0; i < ph; ++i) {
        for (int j = 0; j < pw; ++j) {
          const int64_t o =
              ((static_cast<int64_t>(n) * ph + i) * pw + j) * s.out_c + c0;
          const __m256 g = _mm256_loadu_ps(dpooled + o);
          const __m256i at =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(argmax + o));
          // gq[q]: the gradient of the conv output at window position q,
          // non-zero only in the channels where q won.
          __m256 gq[kP * kP];
#pragma GCC unroll 4
          for (int q = 0; q < kP * kP; ++q) {
            gq[q] = _mm256_and_ps(g, _mm256_castsi256_ps(_mm256_cmpeq_epi32(
                                         at, _mm256_set1_epi32(q))));
          }
          const float* patch = xn + (kP * i) * s.in_w + kP * j;
#pragma GCC unroll 4
          for (int r = 0; r < kPatch; ++r) {
#pragma GCC unroll 4
            for (int c = 0; c < kPatch; ++c) {
              const __m256 v = _mm256_broadcast_ss(patch + r * s.in_w + c);
#pragma GCC unroll 2
              for (int dh = 0; dh < kP; ++dh) {
#pragma GCC unroll 2
                for (int dwp = 0; dwp < kP; ++dwp) {
                  const int kh = r - dh, kw = c - dwp;
                  if (kh < 0 || kh >= kK || kw < 0 || kw >= kK) continue;
                  acc[kh * kK + kw] =
                      _mm256_fmadd_ps(v, gq[dh * kP + dwp], acc[kh * kK + kw]);
                }
              }
            }
          }
        }
      }
    }
    for (int t = 0; t < kK * kK; ++t) {
      float* row = dw + t * s.out_c + c0;
      const __m256 prior =
          accumulate ? _mm256_loadu_ps(row) : _mm256_setzero_ps();
      _mm256_storeu_ps(row, _mm256_add_ps(prior, acc[t]));
    }
  }
}

#else  // !PSCLUSTER_CONV_POOL_AVX2: Supports() is false, never called.

void Conv2DMaxPoolForward<CpuDevice>::operator()(const CpuDevice&,
                                                 const Conv2DShape&, int,
                                                 const float*, const float*,
                                                 const float*, bool, float*,
                                                 int32_t*) const {}

void Conv2DMaxPoolBackwardFilter<CpuDevice>::operator()(
    const CpuDevice&, const Conv2DShape&, int, const float*, const float*,
    const int32_t*, bool, float*, float*) const {}

#endif  // PSCLUSTER_CONV_POOL_AVX2

}  // namespace kernels
}  // namespace pscluster
