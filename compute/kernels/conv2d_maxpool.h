// Conv2D (+ ReLU) followed by MaxPool2D, fused for the first layer of a CNN
// whose full-resolution conv output is the largest activation of the model:
// the fused kernels never write it. Forward computes each pooling window's
// conv outputs in registers and keeps only the max and its position;
// backward forms the filter gradient straight from the pooled gradient.
//
// Results equal MaxPool2D{Forward,Backward} composed with
// Conv2D{Forward,BackwardFilter} (compute/kernels/conv2d.h, maxpool2d.h) up
// to float summation order. No input gradient: meant for the first layer.
#ifndef PSCLUSTER_COMPUTE_KERNELS_CONV2D_MAXPOOL_H_
#define PSCLUSTER_COMPUTE_KERNELS_CONV2D_MAXPOOL_H_

#include <cstdint>

#include "compute/kernels/conv2d.h"
#include "compute/kernels/device.h"

namespace pscluster {
namespace kernels {

// pooled = maxpool_pool(act(conv(x, w) + b)), act ReLU when `relu`; pooled
// and argmax are laid out as MaxPool2DForward's y and argmax for an input of
// conv shape s's output.
template <typename Device>
struct Conv2DMaxPoolForward;

template <>
struct Conv2DMaxPoolForward<CpuDevice> {
  // Whether this device has a fused kernel for the shape; when not, use the
  // unfused kernels. (CPU: 3x3 kernels on one input channel, 2x2 pooling,
  // out_c a multiple of 8, an AVX2 build.)
  static bool Supports(const Conv2DShape& s, int pool);
  void operator()(const CpuDevice& d, const Conv2DShape& s, int pool,
                  const float* x, const float* w, const float* b, bool relu,
                  float* pooled, int32_t* argmax) const;
};

// Given dpooled = dLoss/d(pooled) with the ReLU gradient already applied
// (zero where pooled <= 0; see ReluGrad) and the forward's argmax:
// dw, db = the conv filter and bias gradients, added to with `accumulate`.
template <typename Device>
struct Conv2DMaxPoolBackwardFilter;

template <>
struct Conv2DMaxPoolBackwardFilter<CpuDevice> {
  static bool Supports(const Conv2DShape& s, int pool) {
    return Conv2DMaxPoolForward<CpuDevice>::Supports(s, pool);
  }
  void operator()(const CpuDevice& d, const Conv2DShape& s, int pool,
                  const float* x, const float* dpooled, const int32_t* argmax,
                  bool accumulate, float* dw, float* db) const;
};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_CONV2D_MAXPOOL_H_
