// The layers of modern Keras CNNs beyond general_layers.h, on the CPU:
// ZeroPadding2D, DepthwiseConv2D (and the pieces of SeparableConv2D),
// GlobalMaxPooling2D, LayerNormalization over the last axis, Rescaling and
// the L1/L2 kernel regularizers. Keras semantics, NHWC activations; the
// device versions (parallel_modern.h) are tested against these.
// Stateless functions; each call works on its own arguments.
#ifndef PSCLUSTER_COMPUTE_KERNELS_MODERN_LAYERS_H_
#define PSCLUSTER_COMPUTE_KERNELS_MODERN_LAYERS_H_

#include <cstdint>

#include "compute/kernels/general_layers.h"

namespace pscluster {
namespace kernels {

// ZeroPadding2D's ((top, bottom), (left, right)) around [batch, in_h, in_w, c].
struct PaddingShape {
  int batch = 0, in_h = 0, in_w = 0, channels = 0;
  int top = 0, bottom = 0, left = 0, right = 0;

  int out_h() const { return in_h + top + bottom; }
  int out_w() const { return in_w + left + right; }
};

// y [batch, out_h, out_w, c]: x inside, 0 around.
void ZeroPad2DForward(const PaddingShape& s, const float* x, float* y);
// dx (overwritten) = dy's inside.
void ZeroPad2DBackward(const PaddingShape& s, const float* dy, float* dx);

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

// GlobalMaxPooling2D: y [batch, c] = the max of x [batch, pixels, c] over
// pixels, and count [batch, c] = how many pixels hold it (as a float).
void GlobalMaxPoolForward(int batch, int pixels, int c, const float* x, float* y, float* count);
// dx (overwritten) = dy / count at every pixel equal to the max, 0
// elsewhere: TensorFlow's gradient of reduce_max (Keras's layer) splits it
// among ties, where MaxPooling2D's gives it to the first.
void GlobalMaxPoolBackward(int batch, int pixels, int c, const float* x, const float* y,
                           const float* count, const float* dy, float* dx);

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

// Rescaling: y = x * scale + offset (x may equal y); dx = dy * scale.
void RescaleForward(int64_t n, float scale, float offset, const float* x, float* y);
void RescaleBackward(int64_t n, float scale, const float* dy, float* dx);

// Keras's L1L2 regularizer on the n weights w: the loss term l1 sum |w| +
// l2 sum w^2 (keras.regularizers.L2() is l2 = 0.01 and adds 0.01 sum w^2,
// with no 1/2), in double, and its gradient dw += l1 sign(w) + 2 l2 w
// (sign(0) = 0, as TensorFlow's).
double RegularizerLoss(int64_t n, float l1, float l2, const float* w);
void RegularizerGrad(int64_t n, float l1, float l2, const float* w, float* dw);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_MODERN_LAYERS_H_
