// Softmax cross-entropy with class-index labels (floats holding integers),
// the fused engine's loss head (compute/kernels/loss_head.h has every loss).
#ifndef PSCLUSTER_COMPUTE_KERNELS_SOFTMAX_XENT_H_
#define PSCLUSTER_COMPUTE_KERNELS_SOFTMAX_XENT_H_

#include <cstdint>

#include "compute/kernels/device.h"

namespace pscluster {
namespace kernels {

// For each row r of logits [batch, classes] with label l = labels[r]
// (precondition: l < classes; the caller validates):
//   loss_r = log(sum_j exp(logits[r, j])) - logits[r, l]
//   row r is correct when l is its first largest logit.
// Writes *loss_sum = sum_r loss_r (in double) and *correct = number correct.
// Unless dlogits is null, writes
//   dlogits[r, j] = grad_scale * (softmax(logits[r])[j] - [j == l]),
// so grad_scale = 1 / total_batch gives the gradient of the mean loss.
template <typename Device>
struct SoftmaxCrossEntropy;

template <>
struct SoftmaxCrossEntropy<CpuDevice> {
  void operator()(const CpuDevice& d, int batch, int classes,
                  const float* logits, const float* labels, float grad_scale,
                  float* dlogits, double* loss_sum, int* correct) const;
};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_SOFTMAX_XENT_H_
