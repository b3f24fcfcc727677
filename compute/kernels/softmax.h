// Keras's softmax over the last axis as a layer of its own (the Softmax
// layer, a gate's softmax activation) on the CPU: each row of `width`
// values, y = exp(x - max) / sum, and its gradient
// gx = y (gy - sum(gy y)). Stateless functions; sums in double.
#ifndef PSCLUSTER_COMPUTE_KERNELS_SOFTMAX_H_
#define PSCLUSTER_COMPUTE_KERNELS_SOFTMAX_H_

#include <cstdint>

namespace pscluster {
namespace kernels {

// y [rows, width] from x [rows, width].
void SoftmaxRowsForward(int64_t rows, int width, const float* x, float* y);

// gx [rows, width] from the forward's output y and gy.
void SoftmaxRowsBackward(int64_t rows, int width, const float* y, const float* gy, float* gx);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_SOFTMAX_H_
