#include "compute/kernels/dot.h"

#include <cmath>

namespace pscluster {
namespace kernels {
namespace {

// Keras 3's L2 normalisation of one example's `d` values: the factor
// min(1 / |x|, 1e7) (ops.normalize with epsilon 1e-7), and whether it is
// clamped (then a constant: its gradient is the factor alone).
float InverseNorm(int d, const float* x, bool* clamped) {
  double squares = 0;
  for (int c = 0; c < d; ++c) squares += double{x[c]} * x[c];
  const double inverse = squares > 0 ? 1.0 / std::sqrt(squares) : HUGE_VAL;
  *clamped = !(inverse < 1e7);
  return static_cast<float>(*clamped ? 1e7 : inverse);
}

}  // namespace

void DotForward(int n, int d, bool normalize, const float* a, const float* b, float* y) {
  for (int r = 0; r < n; ++r, a += d, b += d) {
    double sum = 0;
    for (int c = 0; c < d; ++c) sum += double{a[c]} * b[c];
    bool clamped = false;
    y[r] = static_cast<float>(
        normalize ? sum * InverseNorm(d, a, &clamped) * InverseNorm(d, b, &clamped) : sum);
  }
}

// The gradient at Dot's input `a` (the other is `b`): gy b, or with
// `normalize` gy |a|^-1 (b^ - y a^) where a^, b^ are the unit vectors and y
// their cosine (gy |a|^-1 b^ where a's factor is clamped).
void DotBackward(int n, int d, bool normalize, const float* a, const float* b, const float* gy,
                 float* ga) {
  for (int r = 0; r < n; ++r, a += d, b += d, ga += d) {
    if (!normalize) {
      for (int c = 0; c < d; ++c) ga[c] = gy[r] * b[c];
      continue;
    }
    bool a_clamped = false, b_clamped = false;
    const float ia = InverseNorm(d, a, &a_clamped), ib = InverseNorm(d, b, &b_clamped);
    double sum = 0;
    for (int c = 0; c < d; ++c) sum += double{a[c]} * b[c];
    const float y = a_clamped ? 0.0f : static_cast<float>(sum * ia * ib);
    for (int c = 0; c < d; ++c) ga[c] = gy[r] * ia * (b[c] * ib - y * a[c] * ia);
  }
}

}  // namespace kernels
}  // namespace pscluster
