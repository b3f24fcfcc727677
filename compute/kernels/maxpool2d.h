// Max pooling over square windows with stride equal to the window, NHWC.
// Rows and columns that do not fill a whole window are dropped (Keras
// "valid"), so out = in / pool, rounded down.
#ifndef PSCLUSTER_COMPUTE_KERNELS_MAXPOOL2D_H_
#define PSCLUSTER_COMPUTE_KERNELS_MAXPOOL2D_H_

#include <cstdint>

#include "compute/kernels/device.h"

namespace pscluster {
namespace kernels {

struct MaxPool2DShape {
  int batch = 0;
  int in_h = 0;
  int in_w = 0;
  int channels = 0;
  int pool = 0;  // window side and stride

  int out_h() const { return in_h / pool; }
  int out_w() const { return in_w / pool; }
  int64_t out_size() const {
    return static_cast<int64_t>(batch) * out_h() * out_w() * channels;
  }
};

// y[n, i, j, c] = max over the window of x; argmax[same index] = the
// winner's position in the window, dh * pool + dw (the first one on ties).
template <typename Device>
struct MaxPool2DForward;

template <>
struct MaxPool2DForward<CpuDevice> {
  void operator()(const CpuDevice& d, const MaxPool2DShape& s, const float* x,
                  float* y, int32_t* argmax) const;
};

// dx (overwritten, [batch, in_h, in_w, channels]) routes each dy to its
// window's argmax and is zero elsewhere, including the dropped edges.
template <typename Device>
struct MaxPool2DBackward;

template <>
struct MaxPool2DBackward<CpuDevice> {
  void operator()(const CpuDevice& d, const MaxPool2DShape& s, const float* dy,
                  const int32_t* argmax, float* dx) const;
};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_MAXPOOL2D_H_
