// The layers of Keras models beyond the built-in CNN, on the CPU: Conv2D with
// any kernel height and width, strides and "same" padding (im2col + one
// sgemm), max and average pooling with any window, stride and padding, and
// global average pooling. NHWC activations, Keras HWIO kernels, zero
// padding split as Keras splits it (the odd row or column at the bottom or
// right). The fast path's shapes (stride 1, "valid", square) keep their faster
// kernels in conv2d.h and maxpool2d.h; these are the general path.
// Stateless functions; each call works on its own arguments.
#ifndef PSCLUSTER_COMPUTE_KERNELS_GENERAL_LAYERS_H_
#define PSCLUSTER_COMPUTE_KERNELS_GENERAL_LAYERS_H_

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

// Max pooling; padded cells never win. argmax holds the winner's index in
// x (n * in_h * in_w * c + ...), or -1 when a window holds only padding.
void MaxPoolGeneralForward(const WindowShape& s, const float* x, float* y, int64_t* argmax);
// dx (overwritten) gets every dy added at its window's winner.
void MaxPoolGeneralBackward(const WindowShape& s, const float* dy, const int64_t* argmax,
                            float* dx);
// Average over the window's cells inside the input (Keras/TF "same"
// average pooling does not count the padding).
void AvgPoolGeneralForward(const WindowShape& s, const float* x, float* y);
void AvgPoolGeneralBackward(const WindowShape& s, const float* dy, float* dx);

// y [batch, c] = the mean of x [batch, pixels, c] over pixels, and back.
void GlobalAvgPoolForward(int batch, int pixels, int c, const float* x, float* y);
void GlobalAvgPoolBackward(int batch, int pixels, int c, const float* dy, float* dx);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_GENERAL_LAYERS_H_
