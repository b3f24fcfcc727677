// A float64 convolution straight from its definition, plain or depthwise,
// with strides, dilation and padding: the reference convolution_test.cc and
// depthwise_convolution_test.cc check the CPU kernels against; and the
// WindowShapes the kernel tests build (graph_kernels_conformance.h's too).
// testonly; stateless.
#ifndef PSCLUSTER_COMPUTE_KERNELS_TESTING_CONV_REFERENCE_H_
#define PSCLUSTER_COMPUTE_KERNELS_TESTING_CONV_REFERENCE_H_

#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "compute/kernels/window.h"

namespace pscluster {
namespace kernels {
namespace testing {

// A convolution (groups = 1) or depthwise convolution (out_c = in_c * dm)
// over WindowShape s with dilation, straight from the definition.
std::vector<double> ConvRef(const WindowShape& s, bool depthwise, const Tensors& in);

// Keras's window ("same" or "valid") over [batch, h, w, c] with a kh x kw
// kernel, strides and dilations.
WindowShape DilatedWindowShape(int batch, int h, int w, int c, int kh, int kw, int stride_h,
                               int stride_w, int dilation_h, int dilation_w, bool same,
                               int out_c);

// The same with one stride; a dilation above 1 is `dilation` along rows
// and dilation - 1 along columns.
WindowShape ConvShape(int batch, int h, int w, int c, int kh, int kw, int stride, int dilation,
                      bool same, int out_c);

}  // namespace testing
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_TESTING_CONV_REFERENCE_H_
