// pooling.h's layers as data-parallel algorithms over parallel_kernels.h's
// executors: MaxPooling2D and AveragePooling2D with any window, stride and
// padding, GlobalAveragePooling2D and GlobalMaxPooling2D. The same code
// runs on CUDA (gpu_kernels.cu) and on the host (emulated_device.cc).
// Padded cells never win a max and do not count in an average; the
// gradients are gathers (one call per input element), so nothing uses
// atomics and results are the same from run to run.
// Stateless templates: thread-safety is the executor's.
#ifndef PSCLUSTER_COMPUTE_KERNELS_PARALLEL_POOLING_H_
#define PSCLUSTER_COMPUTE_KERNELS_PARALLEL_POOLING_H_

#include <cstdint>

#include "compute/kernels/parallel_kernels.h"
#include "compute/kernels/parallel_window.h"
#include "compute/kernels/window.h"

namespace pscluster {
namespace kernels {
namespace parallel {

// ---- Element functors ------------------------------------------------------

// Max pooling: y = the largest cell of the window inside the input (the
// first one on ties, in row-major window order, as the CPU kernel), argmax
// = its place in the window kh * window_w + kw, or -1 (and y = 0) when the
// window holds only padding. One call per output element.
struct MaxPoolGeneralForwardFn {
  WindowGeometry g;
  const float* x;
  float* y;
  int32_t* argmax;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    float best = 0.0f;
    int32_t at = -1;
    ForCellsInside(g, x, i, [&](float v, int k) {
      if (at < 0 || v > best) {
        best = v;
        at = k;
      }
    });
    y[i] = best;
    argmax[i] = at;
  }
};

// dx[n, ih, iw, c] = the sum of dy over the windows this cell won. One call
// per input element.
struct MaxPoolGeneralBackwardFn {
  WindowGeometry g;
  const float* dy;
  const int32_t* argmax;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(g.in_c));
    float sum = 0.0f;
    ForWindowsHolding(g, i, [&](int64_t p, int, int, int k) {
      const int64_t o = p * g.in_c + c;
      if (argmax[o] == k) sum += dy[o];
    });
    dx[i] = sum;
  }
};

// The number of the window's cells inside the input (average pooling's
// divisor: the padding does not count).
PSCLUSTER_HD inline int CellsInside(const WindowGeometry& g, int oh, int ow) {
  const int h0 = oh * g.stride_h - g.pad_top, w0 = ow * g.stride_w - g.pad_left;
  const int h1 = h0 + g.window_h, w1 = w0 + g.window_w;
  const int rows = (h1 < g.in_h ? h1 : g.in_h) - (h0 > 0 ? h0 : 0);
  const int cols = (w1 < g.in_w ? w1 : g.in_w) - (w0 > 0 ? w0 : 0);
  return rows > 0 && cols > 0 ? rows * cols : 0;
}

// Average pooling over the window's cells inside the input (0 when none).
// One call per output element.
struct AvgPoolGeneralForwardFn {
  WindowGeometry g;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    float sum = 0.0f;
    ForCellsInside(g, x, i, [&](float v, int) { sum += v; });
    const Pixel px = Unflatten(i, g.out_h, g.out_w, g.in_c);
    const int count = CellsInside(g, px.y, px.x);
    y[i] = count > 0 ? sum * (1.0f / count) : 0.0f;
  }
};

// dx[n, ih, iw, c] = the sum over the windows covering it of dy / count.
// One call per input element.
struct AvgPoolGeneralBackwardFn {
  WindowGeometry g;
  const float* dy;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(g.in_c));
    float sum = 0.0f;
    // A window holding this cell counts at least it: no division by 0.
    ForWindowsHolding(g, i, [&](int64_t p, int oh, int ow, int) {
      sum += dy[p * g.in_c + c] * (1.0f / CellsInside(g, oh, ow));
    });
    dx[i] = sum;
  }
};

// y[n, c] = the mean of x[n, :, c] over `pixels`. One call per output.
struct GlobalAvgPoolForwardFn {
  int pixels, channels;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const int64_t n = i / static_cast<I>(channels);
    const float* in = x + n * pixels * channels + c;
    float sum = 0.0f;
    for (int p = 0; p < pixels; ++p) sum += in[int64_t{p} * channels];
    y[i] = sum * (1.0f / pixels);
  }
};

// dx[n, p, c] = dy[n, c] / pixels. One call per input element.
struct GlobalAvgPoolBackwardFn {
  int pixels, channels;
  const float* dy;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const int64_t n = i / (static_cast<I>(pixels) * channels);  // <= i
    dx[i] = dy[n * channels + c] * (1.0f / pixels);
  }
};

// GlobalMaxPooling2D: per (n, c) the max over pixels and how many hold it.
struct GlobalMaxPoolForwardFn {
  int pixels, channels;
  const float* x;
  float* y;
  float* count;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const int64_t n = i / static_cast<I>(channels);
    const float* in = x + n * pixels * channels + c;
    float best = in[0];
    int ties = 1;
    for (int p = 1; p < pixels; ++p) {
      const float v = in[int64_t{p} * channels];
      if (v > best) {
        best = v;
        ties = 1;
      } else if (v == best) {
        ++ties;
      }
    }
    y[i] = best;
    count[i] = static_cast<float>(ties);
  }
};

// dx = dy / count where x is the max, else 0. One call per input element.
struct GlobalMaxPoolBackwardFn {
  int pixels, channels;
  const float* x;
  const float* y;
  const float* count;
  const float* dy;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const int64_t n = i / (static_cast<I>(pixels) * channels);
    const int64_t o = n * channels + c;
    dx[i] = x[i] == y[o] ? dy[o] / count[o] : 0.0f;
  }
};

// ---- Layer algorithms ------------------------------------------------------

template <typename Exec>
void MaxPoolGeneralForward(const Exec& e, const WindowShape& s, const float* x,
                           float* y, int32_t* argmax) {
  e.ForEach("MaxPoolGeneral", s.out_pixels() * s.in_c,
            MaxPoolGeneralForwardFn{Geometry(s), x, y, argmax});
}

template <typename Exec>
void MaxPoolGeneralBackward(const Exec& e, const WindowShape& s,
                            const float* dy, const int32_t* argmax,
                            float* dx) {
  // Windows that tile the input (Keras's default pooling: strides = pool
  // size, "valid", or "same" padding only after): one call per window.
  if (s.stride_h == s.window_h && s.stride_w == s.window_w &&
      s.pad_top == 0 && s.pad_left == 0 && s.out_h >= 1 && s.out_w >= 1) {
    e.ForEach("MaxPoolTiledBackward", s.out_pixels() * s.in_c,
              MaxPoolTiledBackwardFn{s.in_h, s.in_w, s.in_c, s.window_h,
                                     s.window_w, s.out_h, s.out_w, dy, argmax,
                                     nullptr, dx});
    return;
  }
  e.ForEach("MaxPoolGeneralBackward",
            int64_t{s.batch} * s.in_h * s.in_w * s.in_c,
            MaxPoolGeneralBackwardFn{Geometry(s), dy, argmax, dx});
}

template <typename Exec>
void AvgPoolGeneralForward(const Exec& e, const WindowShape& s, const float* x,
                           float* y) {
  e.ForEach("AvgPoolGeneral", s.out_pixels() * s.in_c,
            AvgPoolGeneralForwardFn{Geometry(s), x, y});
}

template <typename Exec>
void AvgPoolGeneralBackward(const Exec& e, const WindowShape& s,
                            const float* dy, float* dx) {
  e.ForEach("AvgPoolGeneralBackward",
            int64_t{s.batch} * s.in_h * s.in_w * s.in_c,
            AvgPoolGeneralBackwardFn{Geometry(s), dy, dx});
}

template <typename Exec>
void GlobalAvgPoolForward(const Exec& e, int batch, int pixels, int channels,
                          const float* x, float* y) {
  e.ForEach("GlobalAvgPool", int64_t{batch} * channels,
            GlobalAvgPoolForwardFn{pixels, channels, x, y});
}

template <typename Exec>
void GlobalAvgPoolBackward(const Exec& e, int batch, int pixels, int channels,
                           const float* dy, float* dx) {
  e.ForEach("GlobalAvgPoolBackward", int64_t{batch} * pixels * channels,
            GlobalAvgPoolBackwardFn{pixels, channels, dy, dx});
}

template <typename Exec>
void GlobalMaxPoolForward(const Exec& e, int batch, int pixels, int channels, const float* x,
                          float* y, float* count) {
  e.ForEach("GlobalMaxPool", int64_t{batch} * channels,
            GlobalMaxPoolForwardFn{pixels, channels, x, y, count});
}

template <typename Exec>
void GlobalMaxPoolBackward(const Exec& e, int batch, int pixels, int channels, const float* x,
                           const float* y, const float* count, const float* dy, float* dx) {
  e.ForEach("GlobalMaxPoolBackward", int64_t{batch} * pixels * channels,
            GlobalMaxPoolBackwardFn{pixels, channels, x, y, count, dy, dx});
}

}  // namespace parallel
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_PARALLEL_POOLING_H_
