#include "compute/kernels/bias_activation.h"

#include <algorithm>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace pscluster {
namespace kernels {

void BiasActivationForward<CpuDevice>::operator()(const CpuDevice&,
                                                  int64_t rows, int cols,
                                                  const float* bias, bool relu,
                                                  float* y) const {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * cols;
    int c = 0;
#if defined(__AVX2__)
    const __m256 zero = _mm256_setzero_ps();
    for (; c + 8 <= cols; c += 8) {
      __m256 v =
          _mm256_add_ps(_mm256_loadu_ps(row + c), _mm256_loadu_ps(bias + c));
      if (relu) v = _mm256_max_ps(v, zero);
      _mm256_storeu_ps(row + c, v);
    }
#endif
    for (; c < cols; ++c) {
      const float v = row[c] + bias[c];
      row[c] = relu ? std::max(v, 0.0f) : v;
    }
  }
}

void BiasGrad<CpuDevice>::operator()(const CpuDevice&, int64_t rows, int cols,
                                     const float* dy, bool accumulate,
                                     float* db) const {
  if (!accumulate) std::fill(db, db + cols, 0.0f);
  int c = 0;
#if defined(__AVX2__)
  // Four rows at a time into independent accumulators, 8 channels wide.
  for (; c + 8 <= cols; c += 8) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      s0 = _mm256_add_ps(s0, _mm256_loadu_ps(dy + (r + 0) * cols + c));
      s1 = _mm256_add_ps(s1, _mm256_loadu_ps(dy + (r + 1) * cols + c));
      s2 = _mm256_add_ps(s2, _mm256_loadu_ps(dy + (r + 2) * cols + c));
      s3 = _mm256_add_ps(s3, _mm256_loadu_ps(dy + (r + 3) * cols + c));
    }
    for (; r < rows; ++r) {
      s0 = _mm256_add_ps(s0, _mm256_loadu_ps(dy + r * cols + c));
    }
    const __m256 sum =
        _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    _mm256_storeu_ps(db + c, _mm256_add_ps(_mm256_loadu_ps(db + c), sum));
  }
#endif
  for (; c < cols; ++c) {
    float sum = 0.0f;
    for (int64_t r = 0; r < rows; ++r) sum += dy[r * cols + c];
    db[c] += sum;
  }
}

void ReluGrad<CpuDevice>::operator()(const CpuDevice&, int64_t n,
                                     const float* y, float* dy) const {
  int64_t i = 0;
#if defined(__AVX2__)
  const __m256 zero = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 mask = _mm256_cmp_ps(_mm256_loadu_ps(y + i), zero, _CMP_GT_OQ);
    _mm256_storeu_ps(dy + i, _mm256_and_ps(_mm256_loadu_ps(dy + i), mask));
  }
#endif
  for (; i < n; ++i) {
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
  }
}

}  // namespace kernels
}  // namespace pscluster
