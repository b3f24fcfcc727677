// reshaping.h's ZeroPadding2D as a data-parallel algorithm over
// parallel_kernels.h's executors, forward (one call per output element)
// and back (one per input element). The same code runs on CUDA
// (gpu_kernels.cu) and on the host (emulated_device.cc).
// Stateless templates: thread-safety is the executor's.
#ifndef PSCLUSTER_COMPUTE_KERNELS_PARALLEL_RESHAPING_H_
#define PSCLUSTER_COMPUTE_KERNELS_PARALLEL_RESHAPING_H_

#include <cstdint>

#include "compute/kernels/parallel_kernels.h"
#include "compute/kernels/reshaping.h"

namespace pscluster {
namespace kernels {
namespace parallel {

// ---- Element functors ------------------------------------------------------

// ZeroPadding2D forward (one call per output element, `forward`) or back
// (one per input element): the inside is the same pixel shifted by (top,
// left).
struct ZeroPad2DFn {
  PaddingShape s;
  bool forward;
  const float* from;
  float* to;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int oh = s.in_h + s.top + s.bottom, ow = s.in_w + s.left + s.right;
    const int h_size = forward ? oh : s.in_h, w_size = forward ? ow : s.in_w;
    const int c = static_cast<int>(i % static_cast<I>(s.channels));
    I t = i / static_cast<I>(s.channels);
    const int w = static_cast<int>(t % static_cast<I>(w_size));
    t /= static_cast<I>(w_size);
    const int h = static_cast<int>(t % static_cast<I>(h_size));
    const int64_t n = t / static_cast<I>(h_size);
    if (forward) {
      const int ih = h - s.top, iw = w - s.left;
      to[i] = ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w
                  ? 0.0f
                  : from[((n * s.in_h + ih) * s.in_w + iw) * s.channels + c];
    } else {
      to[i] = from[((n * oh + h + s.top) * ow + w + s.left) * s.channels + c];
    }
  }
};

// ---- Layer algorithms ------------------------------------------------------

template <typename Exec>
void ZeroPad2DForward(const Exec& e, const PaddingShape& s, const float* x, float* y) {
  e.ForEach("ZeroPad2D", int64_t{s.batch} * s.out_h() * s.out_w() * s.channels,
            ZeroPad2DFn{s, true, x, y});
}

template <typename Exec>
void ZeroPad2DBackward(const Exec& e, const PaddingShape& s, const float* dy, float* dx) {
  e.ForEach("ZeroPad2DBackward", int64_t{s.batch} * s.in_h * s.in_w * s.channels,
            ZeroPad2DFn{s, false, dy, dx});
}

}  // namespace parallel
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_PARALLEL_RESHAPING_H_
