// Batch normalization over the channel (last) axis of NHWC activations,
// Keras semantics: in training y = gamma * (x - mean) / sqrt(var + eps) +
// beta with the batch's per-channel mean and *biased* variance (mean of
// squared deviations, as Keras 3's ops.moments); in inference the same with
// the moving mean and variance. A layer is [rows, channels] row-major with
// rows = batch * height * width. gamma and beta may be null (Keras
// scale=False / center=False): 1 and 0.
//
// The statistics need the whole batch, which the CPU network splits across
// threads, so the CPU side comes in parts that a caller combines: partial
// per-channel sums (double) over a slice of rows, then the elementwise
// passes that use the combined values. The GPU side (gpu_kernels.h) may
// fuse them; its results must match these within float rounding.
#ifndef PSCLUSTER_COMPUTE_KERNELS_BATCH_NORM_H_
#define PSCLUSTER_COMPUTE_KERNELS_BATCH_NORM_H_

#include <cstdint>

#include "compute/kernels/device.h"

namespace pscluster {
namespace kernels {

struct BatchNormShape {
  int64_t rows = 0;  // examples * height * width of this slice
  int channels = 0;
};

// sum[c] += sum_r x[r, c]; sum_sq[c] += sum_r x[r, c]^2 (double).
template <typename Device>
struct BatchNormSums;

template <>
struct BatchNormSums<CpuDevice> {
  void operator()(const CpuDevice& d, const BatchNormShape& s, const float* x,
                  double* sum, double* sum_sq) const;
};

// y[r, c] = gamma[c] * (x[r, c] - mean[c]) / sqrt(var[c] + epsilon) + beta[c].
// y may equal x (in place).
template <typename Device>
struct BatchNormForward;

template <>
struct BatchNormForward<CpuDevice> {
  void operator()(const CpuDevice& d, const BatchNormShape& s, const float* x,
                  const float* mean, const float* var, const float* gamma,
                  const float* beta, float epsilon, float* y) const;
};

// The backward pass's reductions over a slice, added to (double):
// sum_dy[c] += sum_r dy[r, c];
// sum_dy_xhat[c] += sum_r dy[r, c] * (x[r, c] - mean[c]) / sqrt(var[c] + eps).
// Over the whole batch these are dbeta and dgamma.
template <typename Device>
struct BatchNormGradSums;

template <>
struct BatchNormGradSums<CpuDevice> {
  void operator()(const CpuDevice& d, const BatchNormShape& s, const float* x,
                  const float* dy, const float* mean, const float* var,
                  float epsilon, double* sum_dy, double* sum_dy_xhat) const;
};

// dx (overwritten) of training-mode batch normalization, given the whole
// batch's sums from BatchNormGradSums and its row count `total_rows`:
// dx = gamma * inv_std * (dy - sum_dy / N - xhat * sum_dy_xhat / N).
template <typename Device>
struct BatchNormBackwardInput;

template <>
struct BatchNormBackwardInput<CpuDevice> {
  void operator()(const CpuDevice& d, const BatchNormShape& s, const float* x,
                  const float* dy, const float* mean, const float* var,
                  const float* gamma, float epsilon, const double* sum_dy,
                  const double* sum_dy_xhat, int64_t total_rows,
                  float* dx) const;
};

// BatchNormalization whose output goes only through a ReLU (Keras:
// BatchNormalization then Activation('relu')), on the CPU in the passes of
// the normalisation alone, for a caller that keeps only the ReLU's output r
// and gets dr, the gradient at r. The results are those of the separate
// layers to the bit: r = max(y, 0) of BatchNormForward's y; the gradient
// sums and dx are BatchNormGradSums and BatchNormBackwardInput of
// dy = (r > 0 ? dr : 0), ActivationGrad's ReLU gradient. r may equal x in
// the forward; dx may equal dr.
void BatchNormReluForward(const BatchNormShape& s, const float* x, const float* mean,
                          const float* var, const float* gamma, const float* beta, float epsilon,
                          float* r);
void BatchNormReluGradSums(const BatchNormShape& s, const float* x, const float* r,
                           const float* dr, const float* mean, const float* var, float epsilon,
                           double* sum_dy, double* sum_dy_xhat);
void BatchNormReluBackwardInput(const BatchNormShape& s, const float* x, const float* r,
                                const float* dr, const float* mean, const float* var,
                                const float* gamma, float epsilon, const double* sum_dy,
                                const double* sum_dy_xhat, int64_t total_rows, float* dx);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_BATCH_NORM_H_
