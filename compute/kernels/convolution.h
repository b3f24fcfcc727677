// Conv2D on the CPU with any kernel height and width, strides, dilation
// and "same" padding: im2col + GEMM (ConvGeneral*), and the same
// convolution with its columns built tile by tile (Conv*: implicit GEMM,
// Winograd for 3x3). NHWC activations, Keras HWIO kernels, WindowShape's
// geometry (window.h). The built-in CNN's shapes (stride 1, "valid",
// square) keep their fused kernels in conv2d.h; DepthwiseConv2D is in
// depthwise_convolution.h; parallel_convolution.h holds the device versions.
// Stateless functions; each call works on its own arguments.
#ifndef PSCLUSTER_COMPUTE_KERNELS_CONVOLUTION_H_
#define PSCLUSTER_COMPUTE_KERNELS_CONVOLUTION_H_

#include <cstdint>

#include "compute/kernels/window.h"

namespace pscluster {
namespace kernels {

// columns [out_pixels, patch_size]: each output pixel's receptive field,
// zeros where it falls into the padding.
void Im2ColGeneral(const WindowShape& s, const float* x, float* columns);
// dx += col2im(dcolumns) (dx must be initialised by the caller).
void Col2ImGeneral(const WindowShape& s, const float* dcolumns, float* dx);

// y [out_pixels, out_c] = columns * w + b (b may be null); fills `columns`.
void ConvGeneralForward(const WindowShape& s, const float* x, const float* w, const float* b,
                        float* columns, float* y);
// From dy [out_pixels, out_c] and the forward's columns: dw (= or += with
// `accumulate`), db (same; may be null) and, when dx is not null, dx
// (overwritten) through `dcolumns` scratch of the columns' size.
void ConvGeneralBackward(const WindowShape& s, const float* columns, const float* w,
                         const float* dy, bool accumulate, float* dw, float* db, float* dcolumns,
                         float* dx);

// The same convolution with its columns private: each tile of output
// pixels' columns is built in `scratch` (ConvScratchFloats(s) floats, a few
// hundred KiB: it stays in L2) and used at once, and the backward builds
// them again from x. Nothing the size of the whole im2col is written or
// read back, which on a 28x28x16 layer at batch 128 is 58 MB a step each
// way. y is ConvGeneralForward's to the bit (the same tiles in the same
// order); the gradients may round differently from ConvGeneralBackward's
// (its dcolumns can be too small for a tile of the flipped-window input
// gradient, and where SmallGemm does not run the weight gradient is summed
// here tile by tile).
int64_t ConvScratchFloats(const WindowShape& s);
// y [out_pixels, out_c] = conv(x, w) + b (b may be null). Where `sums` is
// not null (2 * out_c doubles), y's per-channel sums and sums of squares
// are added to sums[0, out_c) and sums[out_c, 2 * out_c), image by image
// while y's rows are in cache: a BatchNormalization reading y needs no pass
// of its own.
void ConvForward(const WindowShape& s, const float* x, const float* w, const float* b,
                 float* scratch, float* y, double* sums);
// dw and db (= or += with `accumulate`; db may be null) and, when dx is not
// null, dx (overwritten), from the forward's input x and dy.
void ConvBackward(const WindowShape& s, const float* x, const float* w, const float* dy,
                  bool accumulate, float* dw, float* db, float* scratch, float* dx);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_CONVOLUTION_H_
