// 2-D convolution, "valid" padding, stride 1, NHWC activations and a Keras
// HWIO kernel [kernel, kernel, in_c, out_c], which read row-major is the
// [kernel * kernel * in_c, out_c] matrix that multiplies im2col patches.
//
// CPU strategy: single-channel inputs (the first layer) use direct,
// register-blocked kernels; the rest use im2col + one sgemm per call for the
// forward pass and the filter gradient. The input gradient adds each tap's
// product straight into dx (AVX2, in_c a multiple of 8), else runs a GEMM
// into a column matrix and col2im. Kernels that need scratch say how much
// with WorkspaceSize(shape) (in floats); the caller owns it, so nothing
// allocates per call.
#ifndef PSCLUSTER_COMPUTE_KERNELS_CONV2D_H_
#define PSCLUSTER_COMPUTE_KERNELS_CONV2D_H_

#include <cstdint>

#include "compute/kernels/device.h"

namespace pscluster {
namespace kernels {

struct Conv2DShape {
  int batch = 0;
  int in_h = 0;
  int in_w = 0;
  int in_c = 0;
  int kernel = 0;  // square kernel side
  int out_c = 0;

  int out_h() const { return in_h - kernel + 1; }
  int out_w() const { return in_w - kernel + 1; }
  // Rows and columns of the im2col matrix.
  int64_t out_pixels() const {
    return static_cast<int64_t>(batch) * out_h() * out_w();
  }
  int patch_size() const { return kernel * kernel * in_c; }
};

// y = act(conv(x, w) + b), act ReLU when `relu`, else the identity.
// x: [batch, in_h, in_w, in_c]; y: [batch, out_h, out_w, out_c].
// On the im2col path `workspace` is left holding im2col(x), which
// Conv2DBackwardFilter can reuse (its `columns_ready`).
template <typename Device>
struct Conv2DForward;

template <>
struct Conv2DForward<CpuDevice> {
  static int64_t WorkspaceSize(const Conv2DShape& s);
  void operator()(const CpuDevice& d, const Conv2DShape& s, const float* x,
                  const float* w, const float* b, bool relu, float* y,
                  float* workspace) const;
};

// Given dy = dLoss/d(pre-activation output): dw = sum over output pixels of
// patch(x) (x) dy, db = sum of dy over pixels. With `accumulate`, dw and db
// are added to. `columns_ready` says `workspace` still holds im2col(x) from
// a Conv2DForward on the same x and shape, so it is not rebuilt.
template <typename Device>
struct Conv2DBackwardFilter;

template <>
struct Conv2DBackwardFilter<CpuDevice> {
  static int64_t WorkspaceSize(const Conv2DShape& s);
  void operator()(const CpuDevice& d, const Conv2DShape& s, const float* x,
                  const float* dy, bool accumulate, bool columns_ready,
                  float* dw, float* db, float* workspace) const;
};

// dx = dLoss/dx (overwritten) from dy = dLoss/d(pre-activation output).
// Clobbers `workspace` (and with it any columns a forward left there).
template <typename Device>
struct Conv2DBackwardInput;

template <>
struct Conv2DBackwardInput<CpuDevice> {
  static int64_t WorkspaceSize(const Conv2DShape& s);
  void operator()(const CpuDevice& d, const Conv2DShape& s, const float* w,
                  const float* dy, float* dx, float* workspace) const;
};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_CONV2D_H_
