// Keras's reshaping layers that move data, on the CPU: ZeroPadding2D around
// NHWC activations (Flatten is a no-op on NHWC rows). parallel_reshaping.h
// holds the device version, tested against this.
// Stateless functions; each call works on its own arguments.
#ifndef PSCLUSTER_COMPUTE_KERNELS_RESHAPING_H_
#define PSCLUSTER_COMPUTE_KERNELS_RESHAPING_H_

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

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_RESHAPING_H_
