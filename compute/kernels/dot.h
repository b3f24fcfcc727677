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

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_DOT_H_
