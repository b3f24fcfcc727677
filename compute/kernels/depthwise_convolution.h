// DepthwiseConv2D on the CPU, and the pieces of SeparableConv2D (a
// depthwise step, then convolution.h's 1x1 convolution on PointwiseShape):
// Keras semantics, NHWC activations, dilation, "same" padding.
// parallel_convolution.h holds the device versions, tested against these.
// Stateless functions; each call works on its own arguments.
#ifndef PSCLUSTER_COMPUTE_KERNELS_DEPTHWISE_CONVOLUTION_H_
#define PSCLUSTER_COMPUTE_KERNELS_DEPTHWISE_CONVOLUTION_H_

#include "compute/kernels/window.h"

namespace pscluster {
namespace kernels {

// DepthwiseConv2D over a WindowShape whose out_c is in_c * depth_multiplier
// (and whose dilation is the layer's dilation_rate): kernel [window_h,
// window_w, in_c, depth_multiplier] (Keras's layout), output channel
// ci * depth_multiplier + m from input channel ci, bias [out_c] (may be
// null). y [out_pixels, out_c].
void DepthwiseConvForward(const WindowShape& s, const float* x, const float* w, const float* b,
                          float* y);
// dw (overwritten, the kernel's shape), db (overwritten; may be null) and dx
// (overwritten; may be null) from the forward's x and dy [out_pixels, out_c].
void DepthwiseConvBackward(const WindowShape& s, const float* x, const float* w, const float* dy,
                           float* dw, float* db, float* dx);

// SeparableConv2D is DepthwiseConv2D without bias (its depthwise_kernel)
// then a 1x1 convolution with bias (its pointwise_kernel [1, 1, in_c *
// depth_multiplier, filters], the layer's bias): the pointwise step's shape
// on the depthwise step's output. Its kernel [in_c * dm, filters] is a
// Dense kernel over out_pixels rows, so either ConvGeneral* or a Dense
// kernel with batch = out_pixels() runs it.
WindowShape PointwiseShape(const WindowShape& depthwise, int filters);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_DEPTHWISE_CONVOLUTION_H_
