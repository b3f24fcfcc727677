// Keras's L1/L2 kernel regularizers on the CPU: the loss term and its
// gradient. parallel_elementwise.h holds the device versions, tested
// against these.
// Stateless functions; each call works on its own arguments.
#ifndef PSCLUSTER_COMPUTE_KERNELS_REGULARIZER_H_
#define PSCLUSTER_COMPUTE_KERNELS_REGULARIZER_H_

#include <cstdint>

namespace pscluster {
namespace kernels {

// Keras's L1L2 regularizer on the n weights w: the loss term l1 sum |w| +
// l2 sum w^2 (keras.regularizers.L2() is l2 = 0.01 and adds 0.01 sum w^2,
// with no 1/2), in double, and its gradient dw += l1 sign(w) + 2 l2 w
// (sign(0) = 0, as TensorFlow's).
double RegularizerLoss(int64_t n, float l1, float l2, const float* w);
void RegularizerGrad(int64_t n, float l1, float l2, const float* w, float* dw);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_REGULARIZER_H_
