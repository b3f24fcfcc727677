// The convolution family as data-parallel algorithms over
// parallel_kernels.h's executors: convolution.h's im2col + GEMM Conv2D
// (any window, stride, dilation, padding) and depthwise_convolution.h's
// DepthwiseConv2D. The same code runs on CUDA (gpu_kernels.cu) and, one
// element at a time, on the host (emulated_device.cc), where tests compare
// it with the CPU kernels. As everywhere in parallel_kernels.h, every
// element functor writes only its own output, scatters (col2im, the input
// gradients) are gathers, and sums over rows go through BiasGrad's fixed
// order: no atomics, the same bits every run. Workspaces are the caller's.
// Stateless templates: thread-safety is the executor's.
#ifndef PSCLUSTER_COMPUTE_KERNELS_PARALLEL_CONVOLUTION_H_
#define PSCLUSTER_COMPUTE_KERNELS_PARALLEL_CONVOLUTION_H_

#include <cstdint>

#include "compute/kernels/parallel_kernels.h"
#include "compute/kernels/parallel_window.h"
#include "compute/kernels/window.h"

namespace pscluster {
namespace kernels {
namespace parallel {

// ---- Element functors ------------------------------------------------------

// Im2ColGeneral as a gather: columns[p, (kh * window_w + kw) * in_c + ci] =
// x[n, oh * stride_h - pad_top + kh, ow * stride_w - pad_left + kw, ci] for
// output pixel p = (n, oh, ow), 0 in the padding. One call per element.
struct Im2ColGeneralFn {
  WindowGeometry g;
  const float* x;
  float* columns;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const I patch = static_cast<I>(g.window_h) * g.window_w * g.in_c;  // <= n
    const I p = i / patch;
    const int q = static_cast<int>(i - p * patch);
    const int kh = q / (g.window_w * g.in_c);
    const int r = q - kh * g.window_w * g.in_c;
    const int kw = r / g.in_c;
    const int ci = r - kw * g.in_c;
    const int ow = static_cast<int>(p % static_cast<I>(g.out_w));
    const I t = p / static_cast<I>(g.out_w);
    const int oh = static_cast<int>(t % static_cast<I>(g.out_h));
    const int64_t n = t / static_cast<I>(g.out_h);
    const int ih = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
    const int iw = ow * g.stride_w - g.pad_left + kw * g.dilation_w;
    columns[i] = ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w
                     ? 0.0f
                     : x[((n * g.in_h + ih) * g.in_w + iw) * g.in_c + ci];
  }
};

// The adjoint of Im2ColGeneralFn: dx[n, ih, iw, ci] = the sum of every
// column entry copied from it. One call per element of dx.
struct Col2ImGeneralFn {
  WindowGeometry g;
  const float* dcolumns;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int64_t patch = int64_t{g.window_h} * g.window_w * g.in_c;
    const int c = static_cast<int>(i % static_cast<I>(g.in_c));
    float sum = 0.0f;
    if (g.dilation_h == 1 && g.dilation_w == 1) {
      ForWindowsHolding(g, i, [&](int64_t p, int, int, int k) {
        sum += dcolumns[p * patch + int64_t{k} * g.in_c + c];
      });
    } else {
      const Pixel px = Unflatten(i, g.in_h, g.in_w, g.in_c);
      ForDilatedWindowsHolding(g, px.n, px.y, px.x, [&](int64_t p, int k) {
        sum += dcolumns[p * patch + int64_t{k} * g.in_c + c];
      });
    }
    dx[i] = sum;
  }
};

// Depthwise convolution, one call per output element [out_pixels, out_c].
struct DepthwiseForwardFn {
  DilatedGeometry g;
  const float* x;
  const float* w;
  const float* b;  // may be null
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int oc = static_cast<int>(i % static_cast<I>(g.out_c));
    const int ci = oc / (g.out_c / g.in_c);
    I t = i / static_cast<I>(g.out_c);
    const int ow = static_cast<int>(t % static_cast<I>(g.out_w));
    t /= static_cast<I>(g.out_w);
    const int oh = static_cast<int>(t % static_cast<I>(g.out_h));
    const int64_t n = t / static_cast<I>(g.out_h);
    float sum = b != nullptr ? b[oc] : 0.0f;
    for (int kh = 0; kh < g.window_h; ++kh) {
      const int ih = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
      if (ih < 0 || ih >= g.in_h) continue;
      for (int kw = 0; kw < g.window_w; ++kw) {
        const int iw = ow * g.stride_w - g.pad_left + kw * g.dilation_w;
        if (iw < 0 || iw >= g.in_w) continue;
        sum += x[((n * g.in_h + ih) * g.in_w + iw) * g.in_c + ci] *
               w[(int64_t{kh} * g.window_w + kw) * g.out_c + oc];
      }
    }
    y[i] = sum;
  }
};

// dx[n, ih, iw, ci] = the sum over the windows holding it and the channel's
// multipliers m of dy * w. One call per input element.
struct DepthwiseBackwardInputFn {
  DilatedGeometry g;
  const float* w;
  const float* dy;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int dm = g.out_c / g.in_c;
    const int ci = static_cast<int>(i % static_cast<I>(g.in_c));
    I t = i / static_cast<I>(g.in_c);
    const int iw = static_cast<int>(t % static_cast<I>(g.in_w));
    t /= static_cast<I>(g.in_w);
    const int ih = static_cast<int>(t % static_cast<I>(g.in_h));
    const int64_t n = t / static_cast<I>(g.in_h);
    float sum = 0.0f;
    ForDilatedWindowsHolding(g, n, ih, iw, [&](int64_t p, int k) {
      for (int m = 0; m < dm; ++m) {
        const int oc = ci * dm + m;
        sum += dy[p * g.out_c + oc] * w[int64_t{k} * g.out_c + oc];
      }
    });
    dx[i] = sum;
  }
};

// Output pixels per group of the depthwise kernel gradient's partial sums.
constexpr int64_t kDepthwiseGroup = 256;

// partial[grp, j] = the sum over group grp's output pixels of x * dy for
// kernel entry j = (kh * window_w + kw) * out_c + oc. One call per (grp, j),
// j fastest.
struct DepthwiseFilterPartialFn {
  DilatedGeometry g;
  int64_t pixels;
  const float* x;
  const float* dy;
  float* partial;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int64_t entries = int64_t{g.window_h} * g.window_w * g.out_c;
    const int64_t j = static_cast<int64_t>(i) % entries;
    const int64_t grp = static_cast<int64_t>(i) / entries;
    const int oc = static_cast<int>(j % g.out_c);
    const int k = static_cast<int>(j / g.out_c);
    const int kh = k / g.window_w, kw = k % g.window_w;
    const int ci = oc / (g.out_c / g.in_c);
    const int64_t end = (grp + 1) * kDepthwiseGroup < pixels ? (grp + 1) * kDepthwiseGroup : pixels;
    float sum = 0.0f;
    for (int64_t p = grp * kDepthwiseGroup; p < end; ++p) {
      const int ow = static_cast<int>(p % g.out_w);
      const int64_t t = p / g.out_w;
      const int oh = static_cast<int>(t % g.out_h);
      const int64_t n = t / g.out_h;
      const int ih = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
      const int iw = ow * g.stride_w - g.pad_left + kw * g.dilation_w;
      if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) continue;
      sum += x[((n * g.in_h + ih) * g.in_w + iw) * g.in_c + ci] * dy[p * g.out_c + oc];
    }
    partial[i] = sum;
  }
};

// ---- Layer algorithms ------------------------------------------------------

// Floats of workspace: the convolution's backward needs dcolumns and the
// bias gradient's partial sums.
inline int64_t ConvGeneralBackwardWorkspace(const WindowShape& s) {
  return s.out_pixels() * s.patch_size() +
         BiasGradWorkspace(s.out_pixels(), s.out_c);
}

inline int64_t DepthwiseBackwardWorkspace(const WindowShape& s) {
  const int64_t groups = (s.out_pixels() + kDepthwiseGroup - 1) / kDepthwiseGroup;
  const int64_t entries = int64_t{s.window_h} * s.window_w * s.out_c;
  const int64_t a = BiasGradWorkspace(groups, static_cast<int>(entries));
  const int64_t b = BiasGradWorkspace(s.out_pixels(), s.out_c);
  return groups * entries + (a > b ? a : b);
}

// ConvGeneralForward's contract (convolution.h); b may be null.
template <typename Exec>
void ConvGeneralForward(const Exec& e, const WindowShape& s, const float* x,
                        const float* w, const float* b, float* columns,
                        float* y) {
  const int64_t m = s.out_pixels();
  const int k = static_cast<int>(s.patch_size());
  e.ForEach("Im2ColGeneral", m * k, Im2ColGeneralFn{Geometry(s), x, columns});
  Gemm(e, false, false, static_cast<int>(m), s.out_c, k, 1.0f, columns, k, w,
       s.out_c, 0.0f, y, s.out_c);
  if (b != nullptr) e.ForEach("AddBias", m * s.out_c, AddBiasFn{b, s.out_c, y});
}

// ConvGeneralBackward's contract with accumulate = false; db and dx may be
// null. `workspace`: ConvGeneralBackwardWorkspace(s) floats.
template <typename Exec>
void ConvGeneralBackward(const Exec& e, const WindowShape& s,
                         const float* columns, const float* w, const float* dy,
                         float* dw, float* db, float* dx, float* workspace) {
  const int64_t m = s.out_pixels();
  const int k = static_cast<int>(s.patch_size());
  Gemm(e, true, false, k, s.out_c, static_cast<int>(m), 1.0f, columns, k, dy,
       s.out_c, 0.0f, dw, s.out_c);
  float* dcolumns = workspace;
  if (db != nullptr) BiasGrad(e, m, s.out_c, dy, false, db, dcolumns + m * k);
  if (dx == nullptr) return;
  Gemm(e, false, true, static_cast<int>(m), k, s.out_c, 1.0f, dy, s.out_c, w,
       s.out_c, 0.0f, dcolumns, k);
  e.ForEach("Col2ImGeneral", int64_t{s.batch} * s.in_h * s.in_w * s.in_c,
            Col2ImGeneralFn{Geometry(s), dcolumns, dx});
}

template <typename Exec>
void DepthwiseConvForward(const Exec& e, const WindowShape& s, const float* x, const float* w,
                          const float* b, float* y) {
  e.ForEach("DepthwiseConv", s.out_pixels() * s.out_c, DepthwiseForwardFn{Dilated(s), x, w, b, y});
}

// `workspace`: DepthwiseBackwardWorkspace(s) floats.
template <typename Exec>
void DepthwiseConvBackward(const Exec& e, const WindowShape& s, const float* x, const float* w,
                           const float* dy, float* dw, float* db, float* dx, float* workspace) {
  const int64_t pixels = s.out_pixels();
  const int64_t groups = (pixels + kDepthwiseGroup - 1) / kDepthwiseGroup;
  const int entries = static_cast<int>(int64_t{s.window_h} * s.window_w * s.out_c);
  float* partial = workspace;
  float* sums = workspace + groups * entries;
  e.ForEach("DepthwiseFilterPartial", groups * entries,
            DepthwiseFilterPartialFn{Dilated(s), pixels, x, dy, partial});
  BiasGrad(e, groups, entries, partial, false, dw, sums);
  if (db != nullptr) BiasGrad(e, pixels, s.out_c, dy, false, db, sums);
  if (dx != nullptr) {
    e.ForEach("DepthwiseBackwardInput", int64_t{s.batch} * s.in_h * s.in_w * s.in_c,
              DepthwiseBackwardInputFn{Dilated(s), w, dy, dx});
  }
}

}  // namespace parallel
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_PARALLEL_CONVOLUTION_H_
