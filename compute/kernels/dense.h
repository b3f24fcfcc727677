// Fully connected layer, Keras layout: kernel [in, out] row-major, bias
// [out]; activations [batch, in] -> [batch, out] row-major.
#ifndef PSCLUSTER_COMPUTE_KERNELS_DENSE_H_
#define PSCLUSTER_COMPUTE_KERNELS_DENSE_H_

#include "compute/kernels/device.h"

namespace pscluster {
namespace kernels {

struct DenseShape {
  int batch = 0;
  int in = 0;   // input features
  int out = 0;  // output units
};

// y = act(x * w + b), act ReLU when `relu`, else the identity.
template <typename Device>
struct DenseForward;

template <>
struct DenseForward<CpuDevice> {
  void operator()(const CpuDevice& d, const DenseShape& s, const float* x,
                  const float* w, const float* b, bool relu, float* y) const;
};

// Given dy = dLoss/d(pre-activation output) (apply ReluGrad first for a ReLU
// layer): dw = x^T dy, db = column sums of dy, dx = dy w^T. With
// `accumulate`, dw and db are added to instead of overwritten (for summing
// over micro-batches); dx is always overwritten and skipped when null.
template <typename Device>
struct DenseBackward;

template <>
struct DenseBackward<CpuDevice> {
  void operator()(const CpuDevice& d, const DenseShape& s, const float* x,
                  const float* w, const float* dy, bool accumulate, float* dw,
                  float* db, float* dx) const;
};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_DENSE_H_
