// window.h's WindowShape as the device kernels walk it, over
// parallel_kernels.h's executors: a window's origin, the output windows
// that hold an input cell (the gathers that replace the CPU's scatters),
// the cells of a window inside the input, with and without dilation.
// Used by parallel_convolution.h and parallel_pooling.h; compiled by nvcc
// too (PSCLUSTER_HD). Plain values and pure functions: safe from any thread.
#ifndef PSCLUSTER_COMPUTE_KERNELS_PARALLEL_WINDOW_H_
#define PSCLUSTER_COMPUTE_KERNELS_PARALLEL_WINDOW_H_

#include <cstdint>

#include "compute/kernels/parallel_kernels.h"
#include "compute/kernels/window.h"

namespace pscluster {
namespace kernels {
namespace parallel {

// ---- Element functors ------------------------------------------------------

// The output pixel's window origin in the input (may be negative: padding).
struct WindowGeometry {
  int in_h, in_w, in_c, window_h, window_w, stride_h, stride_w, pad_top,
      pad_left, out_h, out_w;
  int dilation_h, dilation_w;  // convolutions only; pooling ignores them
};

inline WindowGeometry Geometry(const WindowShape& s) {
  return WindowGeometry{s.in_h,     s.in_w,     s.in_c,     s.window_h,
                        s.window_w, s.stride_h, s.stride_w, s.pad_top,
                        s.pad_left, s.out_h,    s.out_w,    s.dilation_h,
                        s.dilation_w};
}

// The output rows (or columns) whose window covers input row `in` along
// one axis: those o with o * stride - pad <= in < o * stride - pad + window,
// clipped to [0, out). Empty when *first > *last.
PSCLUSTER_HD inline void Covering(int in, int window, int stride, int pad,
                                  int out, int* first, int* last) {
  const int shifted = in + pad;  // o * stride <= shifted < o * stride + window
  const int lo = shifted - window + 1;
  *first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  *last = shifted / stride;
  if (*last > out - 1) *last = out - 1;
}

// Element i of an NHWC tensor [batch, height, width, channels].
struct Pixel {
  int64_t n;
  int y, x, c;
};
// In I's arithmetic (parallel_kernels.h: uint32_t where it fits).
template <typename I>
PSCLUSTER_HD inline Pixel Unflatten(I i, int height, int width, int channels) {
  Pixel p;
  p.c = static_cast<int>(i % static_cast<I>(channels));
  I t = i / static_cast<I>(channels);
  p.x = static_cast<int>(t % static_cast<I>(width));
  t /= static_cast<I>(width);
  p.y = static_cast<int>(t % static_cast<I>(height));
  p.n = t / static_cast<I>(height);
  return p;
}

// Calls f(p, oh, ow, k) for every output window holding input element i
// (of any channel): p = (n * out_h + oh) * out_w + ow the output pixel,
// k = kh * window_w + kw the input's cell in that window. In (oh, ow) order.
template <typename I, typename F>
PSCLUSTER_HD void ForWindowsHolding(const WindowGeometry& g, I i, const F& f) {
  const Pixel px = Unflatten(i, g.in_h, g.in_w, g.in_c);
  int oh0, oh1, ow0, ow1;
  Covering(px.y, g.window_h, g.stride_h, g.pad_top, g.out_h, &oh0, &oh1);
  Covering(px.x, g.window_w, g.stride_w, g.pad_left, g.out_w, &ow0, &ow1);
  for (int oh = oh0; oh <= oh1; ++oh) {
    const int kh = px.y + g.pad_top - oh * g.stride_h;
    for (int ow = ow0; ow <= ow1; ++ow) {
      const int kw = px.x + g.pad_left - ow * g.stride_w;
      f((px.n * g.out_h + oh) * g.out_w + ow, oh, ow, kh * g.window_w + kw);
    }
  }
}

// Calls f(v, k) for every cell of output element i's window (of its
// channel) that lies inside the input: v its value in x, k = kh * window_w
// + kw its place in the window. In row-major window order.
template <typename I, typename F>
PSCLUSTER_HD void ForCellsInside(const WindowGeometry& g, const float* x, I i, const F& f) {
  const Pixel px = Unflatten(i, g.out_h, g.out_w, g.in_c);
  for (int kh = 0; kh < g.window_h; ++kh) {
    const int ih = px.y * g.stride_h - g.pad_top + kh;
    if (ih < 0 || ih >= g.in_h) continue;
    for (int kw = 0; kw < g.window_w; ++kw) {
      const int iw = px.x * g.stride_w - g.pad_left + kw;
      if (iw < 0 || iw >= g.in_w) continue;
      f(x[((px.n * g.in_h + ih) * g.in_w + iw) * g.in_c + px.c], kh * g.window_w + kw);
    }
  }
}

// A convolution window with dilation (window.h's WindowShape).
struct DilatedGeometry {
  int in_h, in_w, in_c, window_h, window_w, stride_h, stride_w, pad_top, pad_left, out_h, out_w,
      out_c, dilation_h, dilation_w;
};

inline DilatedGeometry Dilated(const WindowShape& s) {
  return DilatedGeometry{s.in_h,     s.in_w,     s.in_c,       s.window_h,  s.window_w,
                         s.stride_h, s.stride_w, s.pad_top,    s.pad_left,  s.out_h,
                         s.out_w,    s.out_c,    s.dilation_h, s.dilation_w};
}

// Calls f(p, k) for every output pixel p = (n * out_h + oh) * out_w + ow
// whose dilated window holds input pixel (n, ih, iw), k = kh * window_w +
// kw its cell there; in (oh, ow) order, as the CPU's scatter adds them.
template <typename G, typename F>
PSCLUSTER_HD void ForDilatedWindowsHolding(const G& g, int64_t n, int ih, int iw, const F& f) {
  for (int kh = g.window_h - 1; kh >= 0; --kh) {
    const int th = ih + g.pad_top - kh * g.dilation_h;
    if (th < 0 || th % g.stride_h != 0 || th / g.stride_h >= g.out_h) continue;
    const int oh = th / g.stride_h;
    for (int kw = g.window_w - 1; kw >= 0; --kw) {
      const int tw = iw + g.pad_left - kw * g.dilation_w;
      if (tw < 0 || tw % g.stride_w != 0 || tw / g.stride_w >= g.out_w) continue;
      f((n * g.out_h + oh) * g.out_w + tw / g.stride_w, kh * g.window_w + kw);
    }
  }
}

}  // namespace parallel
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_PARALLEL_WINDOW_H_
