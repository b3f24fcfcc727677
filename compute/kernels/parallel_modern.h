// modern_layers.h's layers and activation.h's parameterised activations as
// data-parallel algorithms over parallel_kernels.h's executors, for
// parallel_general.h's GeneralKernels: the same code runs on CUDA
// (gpu_kernels.cu) and on the host (emulated_device.cc). Same math and
// layouts as the CPU side; as in parallel_general.h every element functor
// writes only its own output (a LayerNormalization row functor its own row),
// scatters are gathers, and sums over rows go through BiasGrad's fixed
// order: no atomics, the same bits every run.
#ifndef PSCLUSTER_COMPUTE_KERNELS_PARALLEL_MODERN_H_
#define PSCLUSTER_COMPUTE_KERNELS_PARALLEL_MODERN_H_

#include <math.h>

#include <cstdint>

#include "compute/kernels/activation.h"
#include "compute/kernels/activation_math.h"
#include "compute/kernels/general_layers.h"
#include "compute/kernels/modern_layers.h"
#include "compute/kernels/parallel_kernels.h"

namespace pscluster {
namespace kernels {
namespace parallel {

// A convolution window with dilation (general_layers.h's WindowShape).
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

// y = f(x) with alpha; x may equal y.
struct ActivationForwardXFn {
  ActivationFn f;
  float alpha;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = ActivationValue(f, alpha, x[i]);
  }
};

// dx = dy * f'(x) from x and y = f(x); dx may equal dy.
struct ActivationGradXYFn {
  ActivationFn f;
  float alpha;
  const float* x;
  const float* y;
  const float* dy;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    dx[i] = dy[i] * ActivationSlope(f, alpha, x[i], y[i]);
  }
};

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

// A row's mean and 1 / sqrt(biased variance + epsilon), in double as the
// CPU's. One call per row.
struct LayerNormStatsFn {
  int channels;
  float epsilon;
  const float* x;
  float* mean;
  float* rstd;
  template <typename I>
  PSCLUSTER_HD void operator()(I r) const {
    const float* in = x + static_cast<int64_t>(r) * channels;
    double sum = 0.0;
    for (int k = 0; k < channels; ++k) sum += in[k];
    const double m = sum / channels;
    double sq = 0.0;
    for (int k = 0; k < channels; ++k) sq += (in[k] - m) * (in[k] - m);
    mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(1.0 / sqrt(sq / channels + epsilon));
  }
};

// y = (x - mean) rstd gamma + beta (gamma, beta may be null). Per element.
struct LayerNormApplyFn {
  int channels;
  const float* x;
  const float* mean;
  const float* rstd;
  const float* gamma;
  const float* beta;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const int64_t r = i / static_cast<I>(channels);
    const float xhat = (x[i] - mean[r]) * rstd[r];
    y[i] = xhat * (gamma != nullptr ? gamma[c] : 1.0f) + (beta != nullptr ? beta[c] : 0.0f);
  }
};

// t = dy * xhat, the summands of dgamma. Per element.
struct LayerNormGammaTermsFn {
  int channels;
  const float* x;
  const float* dy;
  const float* mean;
  const float* rstd;
  float* t;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int64_t r = i / static_cast<I>(channels);
    t[i] = dy[i] * ((x[i] - mean[r]) * rstd[r]);
  }
};

// dx of one row: rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma,
// the row's sums in double. One call per row; writes that row of dx.
struct LayerNormBackwardRowFn {
  int channels;
  const float* x;
  const float* dy;
  const float* mean;
  const float* rstd;
  const float* gamma;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I r) const {
    const int64_t base = static_cast<int64_t>(r) * channels;
    const float m = mean[r], inv = rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int k = 0; k < channels; ++k) {
      const float g = dy[base + k] * (gamma != nullptr ? gamma[k] : 1.0f);
      sum_g += g;
      sum_gx += static_cast<double>(g) * ((x[base + k] - m) * inv);
    }
    const float mean_g = static_cast<float>(sum_g / channels);
    const float mean_gx = static_cast<float>(sum_gx / channels);
    for (int k = 0; k < channels; ++k) {
      const float g = dy[base + k] * (gamma != nullptr ? gamma[k] : 1.0f);
      dx[base + k] = inv * (g - mean_g - ((x[base + k] - m) * inv) * mean_gx);
    }
  }
};

// y = x * scale + offset; x may equal y.
struct RescaleFn {
  float scale, offset;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = x[i] * scale + offset;
  }
};

// t = l1 |w| + l2 w^2 (the loss's summands), or, with `grad`, dw += l1
// sign(w) + 2 l2 w.
struct RegularizerFn {
  float l1, l2;
  bool grad;
  const float* w;
  float* out;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const float v = w[i];
    if (grad) {
      const float sign = v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : 0.0f;
      out[i] += l1 * sign + 2.0f * l2 * v;
    } else {
      out[i] = l1 * fabsf(v) + l2 * (v * v);
    }
  }
};

// ---- Algorithms (GeneralKernels' methods of the same names) ----------------

// Floats of workspace.
inline int64_t DepthwiseBackwardWorkspace(const WindowShape& s) {
  const int64_t groups = (s.out_pixels() + kDepthwiseGroup - 1) / kDepthwiseGroup;
  const int64_t entries = int64_t{s.window_h} * s.window_w * s.out_c;
  const int64_t a = BiasGradWorkspace(groups, static_cast<int>(entries));
  const int64_t b = BiasGradWorkspace(s.out_pixels(), s.out_c);
  return groups * entries + (a > b ? a : b);
}
inline int64_t LayerNormBackwardWorkspace(int64_t rows, int channels) {
  return rows * channels + BiasGradWorkspace(rows, channels);
}
inline int64_t RegularizerLossWorkspace(int64_t n) { return n + BiasGradWorkspace(n, 1); }

template <typename Exec>
void ActivationForwardX(const Exec& e, int64_t n, ActivationFn f, float alpha, const float* x,
                        float* y) {
  e.ForEach("ActivationX", n, ActivationForwardXFn{f, alpha, x, y});
}

template <typename Exec>
void ActivationGradXY(const Exec& e, int64_t n, ActivationFn f, float alpha, const float* x,
                      const float* y, const float* dy, float* dx) {
  e.ForEach("ActivationGradXY", n, ActivationGradXYFn{f, alpha, x, y, dy, dx});
}

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

template <typename Exec>
void LayerNormForward(const Exec& e, int64_t rows, int channels, const float* x, const float* gamma,
                      const float* beta, float epsilon, float* mean, float* rstd, float* y) {
  e.ForEach("LayerNormStats", rows, LayerNormStatsFn{channels, epsilon, x, mean, rstd});
  e.ForEach("LayerNorm", rows * channels,
            LayerNormApplyFn{channels, x, mean, rstd, gamma, beta, y});
}

// `workspace`: LayerNormBackwardWorkspace(rows, channels) floats.
template <typename Exec>
void LayerNormBackward(const Exec& e, int64_t rows, int channels, const float* x, const float* dy,
                       const float* mean, const float* rstd, const float* gamma, float* dgamma,
                       float* dbeta, float* dx, float* workspace) {
  float* terms = workspace;
  float* sums = workspace + rows * channels;
  if (dgamma != nullptr) {
    e.ForEach("LayerNormGammaTerms", rows * channels,
              LayerNormGammaTermsFn{channels, x, dy, mean, rstd, terms});
    BiasGrad(e, rows, channels, terms, false, dgamma, sums);
  }
  if (dbeta != nullptr) BiasGrad(e, rows, channels, dy, false, dbeta, sums);
  if (dx != nullptr) {
    e.ForEach("LayerNormBackwardInput", rows,
              LayerNormBackwardRowFn{channels, x, dy, mean, rstd, gamma, dx});
  }
}

template <typename Exec>
void Rescale(const Exec& e, int64_t n, float scale, float offset, const float* x, float* y) {
  e.ForEach("Rescale", n, RescaleFn{scale, offset, x, y});
}

// *loss (device memory) = l1 sum |w| + l2 sum w^2, summed in BiasGrad's
// fixed order (float). `workspace`: RegularizerLossWorkspace(n) floats.
template <typename Exec>
void RegularizerLoss(const Exec& e, int64_t n, float l1, float l2, const float* w, float* loss,
                     float* workspace) {
  e.ForEach("RegularizerTerms", n, RegularizerFn{l1, l2, false, w, workspace});
  BiasGrad(e, n, 1, workspace, false, loss, workspace + n);
}

template <typename Exec>
void RegularizerGrad(const Exec& e, int64_t n, float l1, float l2, const float* w, float* dw) {
  e.ForEach("RegularizerGrad", n, RegularizerFn{l1, l2, true, w, dw});
}

}  // namespace parallel
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_PARALLEL_MODERN_H_
