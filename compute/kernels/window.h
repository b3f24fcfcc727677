// The geometry of the windowed layers (convolutions and pooling) over NHWC
// activations, and Keras's rule for their output size and padding: "same"
// padding split as Keras splits it (the odd row or column at the bottom or
// right). convolution.h, depthwise_convolution.h, pooling.h and winograd.h
// take a WindowShape; parallel_window.h walks it on a data-parallel device.
// Plain values and stateless functions: safe from any thread.
#ifndef PSCLUSTER_COMPUTE_KERNELS_WINDOW_H_
#define PSCLUSTER_COMPUTE_KERNELS_WINDOW_H_

#include <cstdint>

namespace pscluster {
namespace kernels {

// The geometry of a windowed layer (convolution or pooling) over NHWC.
struct WindowShape {
  int batch = 0;
  int in_h = 0, in_w = 0, in_c = 0;
  int window_h = 0, window_w = 0;
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0;  // the bottom/right padding is implied
  int out_h = 0, out_w = 0;
  int out_c = 0;  // convolution: filters; pooling: in_c
  // Convolutions only (pooling ignores them): the window's cells are
  // dilation apart in the input, so it spans (window - 1) * dilation + 1.
  int dilation_h = 1, dilation_w = 1;

  int64_t out_pixels() const { return int64_t{batch} * out_h * out_w; }
  int64_t patch_size() const { return int64_t{window_h} * window_w * in_c; }
};

// Keras's output size and leading padding along one axis.
void KerasWindow(int in, int window, int stride, bool same, int* out, int* pad_before);
// The same for a dilated window (TensorFlow's rule: the dilated span is the
// window). Stride > 1 with dilation > 1 is refused by TensorFlow's
// tf.nn.convolution (under Keras 2 and Keras 3's TensorFlow backend) and by
// TensorFlow.js ("Either strides or dilations must be 1"), so a model parser
// should refuse it; these kernels compute it all the same.
void KerasDilatedWindow(int in, int window, int stride, int dilation, bool same, int* out,
                        int* pad_before);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_WINDOW_H_
