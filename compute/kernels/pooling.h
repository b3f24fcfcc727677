// Pooling on the CPU: MaxPooling2D and AveragePooling2D with any window,
// stride and padding, GlobalAveragePooling2D and GlobalMaxPooling2D. NHWC
// activations, Keras semantics (padded cells never win a max and do not
// count in an average). The built-in CNN's tiling max pooling keeps its
// fused kernels in maxpool2d.h; parallel_pooling.h holds the device
// versions, tested against these.
// Stateless functions; each call works on its own arguments.
#ifndef PSCLUSTER_COMPUTE_KERNELS_POOLING_H_
#define PSCLUSTER_COMPUTE_KERNELS_POOLING_H_

#include <cstdint>

#include "compute/kernels/step_mask.h"
#include "compute/kernels/window.h"

namespace pscluster {
namespace kernels {

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

// GlobalAveragePooling1D under an Embedding's mask, as Keras 3 computes
// it: y [batch, c] = each example's sum of x over the pixels (steps) whose
// id (`ids`, [batch, pixels]) is not `padding` (StepMask), over their count (no such
// step: 0 / 0, NaN, as Keras). Back: dy / count at the steps counted, 0 at
// the padded ones.
void MaskedGlobalAvgPoolForward(int batch, int pixels, int c, const float* ids, int padding,
                                const float* x, float* y);
void MaskedGlobalAvgPoolBackward(int batch, int pixels, int c, const float* ids, int padding,
                                 const float* dy, float* dx);

// GlobalMaxPooling2D: y [batch, c] = the max of x [batch, pixels, c] over
// pixels, and count [batch, c] = how many pixels hold it (as a float).
void GlobalMaxPoolForward(int batch, int pixels, int c, const float* x, float* y, float* count);
// dx (overwritten) = dy / count at every pixel equal to the max, 0
// elsewhere: TensorFlow's gradient of reduce_max (Keras's layer) splits it
// among ties, where MaxPooling2D's gives it to the first.
void GlobalMaxPoolBackward(int batch, int pixels, int c, const float* x, const float* y,
                           const float* count, const float* dy, float* dx);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_POOLING_H_
