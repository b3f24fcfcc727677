// A 3x3 stride-1 convolution by Winograd's minimal filtering F(2x2, 3x3)
// (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks",
// 2015): each 2x2 block of output pixels costs 16 products per input and
// output channel pair instead of 36, for a transform of each 4x4 input tile
// and of each 4x4 block of products. NHWC activations, HWIO kernel, Keras's
// padding (window.h's WindowShape). The sums are those of the
// direct convolution reordered through the transforms: equal to float
// rounding, not to the bit.
#ifndef PSCLUSTER_COMPUTE_KERNELS_WINOGRAD_H_
#define PSCLUSTER_COMPUTE_KERNELS_WINOGRAD_H_

#include <cstdint>

#include "compute/kernels/window.h"

namespace pscluster {
namespace kernels {

// Whether WinogradConv3x3 computes s: a 3x3 window, stride 1, no dilation,
// in_c and out_c multiples of 16 and at least 32, at least one output
// pixel, and a CPU with AVX-512F. With 16 channels the transforms and a
// 16-term product per position cost more than the products saved (a 28x28
// layer at batch 128: 4.3 ms against the direct convolution's 3.9; at 32
// channels 2.1 against 2.9, at 64 2.0 against 3.7).
bool WinogradApplies(const WindowShape& s);

// Floats of scratch WinogradConv3x3 needs for s.
int64_t WinogradScratchFloats(const WindowShape& s);

// y [out_pixels, out_c] = conv(x, w) + b (b may be null), where
// WinogradApplies(s); `sums`, where not null, as ConvForward's
// (convolution.h).
void WinogradConv3x3(const WindowShape& s, const float* x, const float* w, const float* b,
                     float* scratch, float* y, double* sums);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_WINOGRAD_H_
