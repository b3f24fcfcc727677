// LayerNormalization on the CPU over the last axis, forward and backward,
// in Keras's semantics (BatchNormalization is batch_norm.h).
// parallel_normalization.h holds the device version, tested against this.
// Stateless functions; each call works on its own arguments.
#ifndef PSCLUSTER_COMPUTE_KERNELS_LAYER_NORM_H_
#define PSCLUSTER_COMPUTE_KERNELS_LAYER_NORM_H_

#include <cstdint>

namespace pscluster {
namespace kernels {

// LayerNormalization over the last axis of [rows, c] (axis=-1: the channels
// of an NHWC tensor, rows = batch * h * w; the features of a 2-D one):
// y = (x - mean) / sqrt(var + epsilon) * gamma + beta with each row's mean
// and biased variance; gamma (scale=False) and beta (center=False) may be
// null. Writes each row's mean and 1/sqrt(var + epsilon) for the backward.
void LayerNormForward(int64_t rows, int c, const float* x, const float* gamma, const float* beta,
                      float epsilon, float* mean, float* rstd, float* y);
// dgamma, dbeta (overwritten; either may be null) and dx (overwritten; may
// be null) from the forward's x, mean and rstd.
void LayerNormBackward(int64_t rows, int c, const float* x, const float* dy, const float* mean,
                       const float* rstd, const float* gamma, float* dgamma, float* dbeta,
                       float* dx);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_LAYER_NORM_H_
