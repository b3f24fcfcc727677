#include "compute/kernels/maxpool2d.h"

#include <algorithm>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace pscluster {
namespace kernels {

void MaxPool2DForward<CpuDevice>::operator()(const CpuDevice&,
                                             const MaxPool2DShape& s,
                                             const float* x, float* y,
                                             int32_t* argmax) const {
  const int p = s.pool, c_n = s.channels;
  const int64_t row_stride = static_cast<int64_t>(s.in_w) * c_n;
  for (int n = 0; n < s.batch; ++n) {
    for (int i = 0; i < s.out_h(); ++i) {
      for (int j = 0; j < s.out_w(); ++j) {
        // Window origin in x and the output element for channel 0.
        const float* win =
            x +
            ((static_cast<int64_t>(n) * s.in_h + i * p) * s.in_w + j * p) * c_n;
        const int64_t o =
            ((static_cast<int64_t>(n) * s.out_h() + i) * s.out_w() + j) * c_n;
        int c = 0;
#if defined(__AVX2__)
        for (; c + 8 <= c_n; c += 8) {
          __m256 best = _mm256_loadu_ps(win + c);
          __m256i best_at = _mm256_setzero_si256();
          for (int dh = 0; dh < p; ++dh) {
            for (int dw = 0; dw < p; ++dw) {
              if (dh == 0 && dw == 0) continue;
              const __m256 v =
                  _mm256_loadu_ps(win + dh * row_stride + dw * c_n + c);
              // Strictly greater, so the first maximum wins ties.
              const __m256 gt = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
              best = _mm256_blendv_ps(best, v, gt);
              best_at =
                  _mm256_blendv_epi8(best_at, _mm256_set1_epi32(dh * p + dw),
                                     _mm256_castps_si256(gt));
            }
          }
          _mm256_storeu_ps(y + o + c, best);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(argmax + o + c),
                              best_at);
        }
#endif
        for (; c < c_n; ++c) {
          float best = win[c];
          int32_t best_at = 0;
          for (int dh = 0; dh < p; ++dh) {
            for (int dw = 0; dw < p; ++dw) {
              const float v = win[dh * row_stride + dw * c_n + c];
              if (v > best) {
                best = v;
                best_at = dh * p + dw;
              }
            }
          }
          y[o + c] = best;
          argmax[o + c] = best_at;
        }
      }
    }
  }
}

void MaxPool2DBackward<CpuDevice>::operator()(const CpuDevice&,
                                              const MaxPool2DShape& s,
                                              const float* dy,
                                              const int32_t* argmax,
                                              float* dx) const {
  const int p = s.pool, c_n = s.channels;
  const int64_t row_stride = static_cast<int64_t>(s.in_w) * c_n;
  const int covered_w = s.out_w() * p;  // columns inside some window
  for (int n = 0; n < s.batch; ++n) {
    float* dxn = dx + static_cast<int64_t>(n) * s.in_h * row_stride;
    for (int i = 0; i < s.out_h(); ++i) {
      for (int j = 0; j < s.out_w(); ++j) {
        float* win = dxn + (static_cast<int64_t>(i) * p * s.in_w + j * p) * c_n;
        const int64_t o =
            ((static_cast<int64_t>(n) * s.out_h() + i) * s.out_w() + j) * c_n;
        int c = 0;
#if defined(__AVX2__)
        // Every window element is written: dy where it won, else 0.
        for (; c + 8 <= c_n; c += 8) {
          const __m256 g = _mm256_loadu_ps(dy + o + c);
          const __m256i at = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(argmax + o + c));
          for (int dh = 0; dh < p; ++dh) {
            for (int dw = 0; dw < p; ++dw) {
              const __m256i hit =
                  _mm256_cmpeq_epi32(at, _mm256_set1_epi32(dh * p + dw));
              _mm256_storeu_ps(win + dh * row_stride + dw * c_n + c,
                               _mm256_and_ps(g, _mm256_castsi256_ps(hit)));
            }
          }
        }
#endif
        for (; c < c_n; ++c) {
          for (int dh = 0; dh < p; ++dh) {
            for (int dw = 0; dw < p; ++dw) {
              win[dh * row_stride + dw * c_n + c] =
                  argmax[o + c] == dh * p + dw ? dy[o + c] : 0.0f;
            }
          }
        }
      }
      // Columns to the right of the last window in these rows.
      if (covered_w < s.in_w) {
        for (int dh = 0; dh < p; ++dh) {
          float* tail = dxn + (static_cast<int64_t>(i) * p + dh) * row_stride +
                        static_cast<int64_t>(covered_w) * c_n;
          std::fill(tail, tail + static_cast<int64_t>(s.in_w - covered_w) * c_n,
                    0.0f);
        }
      }
    }
    // Rows below the last window.
    std::fill(dxn + static_cast<int64_t>(s.out_h()) * p * row_stride,
              dxn + static_cast<int64_t>(s.in_h) * row_stride, 0.0f);
  }
}

}  // namespace kernels
}  // namespace pscluster
