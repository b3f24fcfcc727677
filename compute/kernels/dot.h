// Keras's Dot of two flat inputs on the CPU: each example's inner product
// of its two [d] vectors, or with `normalize` their cosine (Keras 3's
// ops.normalize: each vector times min(1 / |x|, 1e7)), and the gradient at
// either input. Stateless functions; sums in double.
#ifndef PSCLUSTER_COMPUTE_KERNELS_DOT_H_
#define PSCLUSTER_COMPUTE_KERNELS_DOT_H_

namespace pscluster {
namespace kernels {

// y[r] = a[r] . b[r] for r < n (a, b: [n, d]), or the cosine.
void DotForward(int n, int d, bool normalize, const float* a, const float* b, float* y);

// ga = the gradient at input `a` (the other is `b`) from gy [n]: gy b, or
// with `normalize` gy |a|^-1 (b^ - y a^), a^ and b^ the unit vectors and y
// their cosine (gy |a|^-1 b^ where a's factor is clamped at 1e7).
void DotBackward(int n, int d, bool normalize, const float* a, const float* b, const float* gy,
                 float* ga);

// Keras's Dot of two [steps, features] sequences (rank-3 tensors, a batched
// matrix product): x [rows_x, cols_x] and y [rows_y, cols_y] per example,
// contracted along x's axis `axis_x` and y's `axis_y` (1: the steps, 2:
// the features): out [m, n] = X Y where X is x (axis 2) or x^T (axis 1),
// [m, k], and Y is y (axis 1) or y^T (axis 2), [k, n].
struct BatchedDotShape {
  int rows_x = 0, cols_x = 0, rows_y = 0, cols_y = 0;
  int axis_x = 2, axis_y = 2;
  int m() const { return axis_x == 2 ? rows_x : cols_x; }
  int k() const { return axis_x == 2 ? cols_x : rows_x; }
  int n() const { return axis_y == 1 ? cols_y : rows_y; }
};

// out [n_examples, m, n] from x and y.
void BatchedDotForward(int examples, const BatchedDotShape& s, const float* x, const float* y,
                       float* out);

// The gradient at x (which == 0) or at y (which == 1) from gout.
void BatchedDotBackward(int examples, const BatchedDotShape& s, int which, const float* x,
                        const float* y, const float* gout, float* g);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_DOT_H_
