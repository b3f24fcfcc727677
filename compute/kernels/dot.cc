#include "compute/kernels/dot.h"

#include <cmath>
#include <cstdint>

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

// Element (i, c) of X (i < m, c < k) and (c, j) of Y (c < k, j < n) in
// x's and y's own layouts.
float XAt(const BatchedDotShape& s, const float* x, int i, int c) {
  return s.axis_x == 2 ? x[int64_t{i} * s.cols_x + c] : x[int64_t{c} * s.cols_x + i];
}
float YAt(const BatchedDotShape& s, const float* y, int c, int j) {
  return s.axis_y == 1 ? y[int64_t{c} * s.cols_y + j] : y[int64_t{j} * s.cols_y + c];
}

}  // namespace

void BatchedDotForward(int examples, const BatchedDotShape& s, const float* x, const float* y,
                       float* out) {
  const int m = s.m(), k = s.k(), n = s.n();
  const int64_t xs = int64_t{s.rows_x} * s.cols_x, ys = int64_t{s.rows_y} * s.cols_y;
  for (int r = 0; r < examples; ++r) {
    const float* xr = x + r * xs;
    const float* yr = y + r * ys;
    float* o = out + int64_t{r} * m * n;
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double sum = 0;
        for (int c = 0; c < k; ++c) sum += double{XAt(s, xr, i, c)} * YAt(s, yr, c, j);
        o[int64_t{i} * n + j] = static_cast<float>(sum);
      }
    }
  }
}

void BatchedDotBackward(int examples, const BatchedDotShape& s, int which, const float* x,
                        const float* y, const float* gout, float* g) {
  const int m = s.m(), k = s.k(), n = s.n();
  const int64_t xs = int64_t{s.rows_x} * s.cols_x, ys = int64_t{s.rows_y} * s.cols_y;
  for (int r = 0; r < examples; ++r) {
    const float* xr = x + r * xs;
    const float* yr = y + r * ys;
    const float* go = gout + int64_t{r} * m * n;
    if (which == 0) {  // gX = gout Y^T, [m, k], written in x's layout
      float* gx = g + r * xs;
      for (int i = 0; i < m; ++i) {
        for (int c = 0; c < k; ++c) {
          double sum = 0;
          for (int j = 0; j < n; ++j) sum += double{go[int64_t{i} * n + j]} * YAt(s, yr, c, j);
          const int64_t at = s.axis_x == 2 ? int64_t{i} * s.cols_x + c : int64_t{c} * s.cols_x + i;
          gx[at] = static_cast<float>(sum);
        }
      }
    } else {  // gY = X^T gout, [k, n], written in y's layout
      float* gy = g + r * ys;
      for (int c = 0; c < k; ++c) {
        for (int j = 0; j < n; ++j) {
          double sum = 0;
          for (int i = 0; i < m; ++i) sum += double{XAt(s, xr, i, c)} * go[int64_t{i} * n + j];
          const int64_t at = s.axis_y == 1 ? int64_t{c} * s.cols_y + j : int64_t{j} * s.cols_y + c;
          gy[at] = static_cast<float>(sum);
        }
      }
    }
  }
}

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
