// The general layers of Keras models (compute/kernels/general_layers.h,
// batch_norm.h, activation.h, dropout.h) as data-parallel algorithms over
// parallel_kernels.h's executors: the same code runs on CUDA
// (gpu_kernels.cu) and, one element at a time, on the host
// (emulated_device.cc), where tests compare it with the CPU kernels.
// Same math, layouts and Keras semantics as the CPU side: NHWC
// activations, HWIO kernels, Keras's split of "same" padding, padded cells
// that never win a max and do not count in an average, BatchNormalization
// with the batch's biased variance, Dropout masks from dropout.h.
//
// As in parallel_kernels.h every element functor writes only its own
// output and nothing uses atomics: scatters of the CPU side (col2im, the
// pooling gradients) are gathers here, and per-channel reductions are
// summed in fixed groups of rows, then the groups in order, in double. So
// results are the same from run to run, and match the CPU's to rounding.
#ifndef PSCLUSTER_COMPUTE_KERNELS_PARALLEL_GENERAL_H_
#define PSCLUSTER_COMPUTE_KERNELS_PARALLEL_GENERAL_H_

#include <math.h>

#include <cstdint>

#include "compute/kernels/activation.h"
#include "compute/kernels/dropout.h"
#include "compute/kernels/general_device.h"
#include "compute/kernels/general_layers.h"
#include "compute/kernels/loss_head.h"
#include "compute/kernels/parallel_kernels.h"
#include "compute/kernels/parallel_modern.h"

namespace pscluster {
namespace kernels {
namespace parallel {

// ---- Element functors ------------------------------------------------------

// y[r, c] += b[c] over a row-major [rows, cols] matrix.
struct AddBiasFn {
  const float* b;
  int cols;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const { y[i] += b[i % static_cast<I>(cols)];
  }
};

struct CopyFn {
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = x[i];
  }
};

// y[i] += alpha * x[i]: a graph's sums (Add, Subtract, Average) and a
// gradient added to one another consumer already wrote.
struct AxpyFn {
  float alpha;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] += alpha * x[i];
  }
};

// y[i] = alpha * x[i]; x may equal y.
struct ScaleFn {
  float alpha;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = alpha * x[i];
  }
};

// y[i] = a[i] * b[i] (Multiply); any of them may alias.
struct MultiplyFn {
  const float* a;
  const float* b;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = a[i] * b[i];
  }
};

// dst[r, c] = src[r, c] for c < width over rows of the given strides:
// Concatenate's channel blocks, forward and back.
struct CopyColumnsFn {
  int width;
  const float* src;
  int src_stride;
  float* dst;
  int dst_stride;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const I r = i / static_cast<I>(width), c = i % static_cast<I>(width);
    dst[int64_t{r} * dst_stride + c] = src[int64_t{r} * src_stride + c];
  }
};

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

// y = f(x); x may equal y.
struct ActivationForwardFn {
  ActivationFn f;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const float v = x[i];
    switch (f) {
      case ActivationFn::kRelu:
        y[i] = v > 0.0f ? v : 0.0f;
        break;
      case ActivationFn::kSigmoid:
        y[i] = 1.0f / (1.0f + expf(-v));
        break;
      case ActivationFn::kTanh:
        y[i] = tanhf(v);
        break;
      default:  // ActivationForwardX's (activation.h)
        y[i] = NAN;
        break;
    }
  }
};

// dx = dy * f'(z) in terms of y = f(z), as activation.h; dx may equal dy.
struct ActivationGradFn {
  ActivationFn f;
  const float* y;
  const float* dy;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const float v = y[i];
    switch (f) {
      case ActivationFn::kRelu:
        dx[i] = v > 0.0f ? dy[i] : 0.0f;
        break;
      case ActivationFn::kSigmoid:
        dx[i] = dy[i] * (v * (1.0f - v));
        break;
      case ActivationFn::kTanh:
        dx[i] = dy[i] * (1.0f - v * v);
        break;
      default:  // ActivationGradXY's (activation.h)
        dx[i] = NAN;
        break;
    }
  }
};

// y[i] = keeps(first + i) ? x[i] * scale : 0 (dropout.h's mask).
struct DropoutFn {
  int64_t first;
  uint64_t key;
  uint32_t threshold;
  float scale;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = DropoutKeeps(key, first + i, threshold) ? x[i] * scale : 0.0f;
  }
};

// Rows per group of a per-channel reduction.
constexpr int64_t kChannelGroup = 256;

inline int64_t ChannelGroups(int64_t rows) {
  return (rows + kChannelGroup - 1) / kChannelGroup;
}

// Per (group g, channel c), over the group's rows r of [rows, channels]:
// out_a[g, c] = sum of x[r, c] and out_b[g, c] = sum of x[r, c]^2 (the
// batch statistics), or, with dy, sum of dy[r, c] and of dy[r, c] *
// (x[r, c] - mean[c]) * inv_std[c] (the backward's sums). In double.
struct ChannelSumsFn {
  int64_t rows;
  int channels;
  const float* x;
  const float* dy;    // null: the statistics
  const float* mean;  // with dy
  const float* var;   // with dy
  float epsilon;
  double* out_a;
  double* out_b;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const int64_t g = i / static_cast<I>(channels);
    const int64_t end =
        (g + 1) * kChannelGroup < rows ? (g + 1) * kChannelGroup : rows;
    double a = 0.0, b = 0.0;
    if (dy == nullptr) {
      for (int64_t r = g * kChannelGroup; r < end; ++r) {
        const double v = x[r * channels + c];
        a += v;
        b += v * v;
      }
    } else {
      const float inv = 1.0f / sqrtf(var[c] + epsilon);
      for (int64_t r = g * kChannelGroup; r < end; ++r) {
        const float d = dy[r * channels + c];
        a += d;
        b += static_cast<double>(d) * ((x[r * channels + c] - mean[c]) * inv);
      }
    }
    out_a[i] = a;
    out_b[i] = b;
  }
};

// Per channel: the groups' sums in order. With `statistics`, mean[c] and
// the biased variance var[c] (floats) from the sums of x and x^2 over
// `rows`; else sum_a[c], sum_b[c] (double) and, where not null, dgamma =
// sum_b and dbeta = sum_a as floats. One call per channel.
struct ChannelTotalsFn {
  int64_t groups;
  int channels;
  double rows;
  bool statistics;
  const double* part_a;
  const double* part_b;
  float* mean;     // statistics
  float* var;      // statistics
  double* sum_a;   // gradient sums
  double* sum_b;   // gradient sums
  float* dgamma;   // may be null
  float* dbeta;    // may be null
  template <typename I>
  PSCLUSTER_HD void operator()(I c) const {
    double a = 0.0, b = 0.0;
    for (int64_t g = 0; g < groups; ++g) {
      a += part_a[g * channels + c];
      b += part_b[g * channels + c];
    }
    if (statistics) {
      const double m = a / rows;
      const double v = b / rows - m * m;
      mean[c] = static_cast<float>(m);
      var[c] = static_cast<float>(v > 0.0 ? v : 0.0);
    } else {
      sum_a[c] = a;
      sum_b[c] = b;
      if (dgamma != nullptr) dgamma[c] = static_cast<float>(b);
      if (dbeta != nullptr) dbeta[c] = static_cast<float>(a);
    }
  }
};

// Per-group partial sums, fewer groups: out_a[h, c] = the sum of in_a[g, c]
// over g in [h * 64, min(groups, (h + 1) * 64)), in order, and the same for
// b (in double). One call per (h, c), c fastest. A channel's thousands of
// groups are summed by many threads, a level at a time, rather than by one
// (which took a third of a batch-8192 vgg_fashion step on an H100). 64
// (kSumFan) groups per call.
struct GroupSumsFn {
  int64_t groups;
  int channels;
  const double* in_a;
  const double* in_b;
  double* out_a;
  double* out_b;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const int64_t h = i / static_cast<I>(channels);
    const int64_t end = (h + 1) * kSumFan < groups ? (h + 1) * kSumFan : groups;
    double a = 0.0, b = 0.0;
    for (int64_t g = h * kSumFan; g < end; ++g) {
      a += in_a[g * channels + c];
      b += in_b[g * channels + c];
    }
    out_a[i] = a;
    out_b[i] = b;
  }
};

// y = gamma * (x - mean) / sqrt(var + eps) + beta, computed as x * a + b
// like the CPU kernel. y may equal x.
struct BatchNormForwardFn {
  int channels;
  const float* x;
  const float* mean;
  const float* var;
  const float* gamma;  // may be null: 1
  const float* beta;   // may be null: 0
  float epsilon;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const float inv = 1.0f / sqrtf(var[c] + epsilon);
    const float a = (gamma != nullptr ? gamma[c] : 1.0f) * inv;
    const float b = (beta != nullptr ? beta[c] : 0.0f) - mean[c] * a;
    y[i] = x[i] * a + b;
  }
};

// BatchNormBackwardInput<CpuDevice>'s formula, per element.
struct BatchNormBackwardInputFn {
  int channels;
  const float* x;
  const float* dy;
  const float* mean;
  const float* var;
  const float* gamma;  // may be null
  float epsilon;
  const double* sum_dy;
  const double* sum_dy_xhat;
  double inv_n;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const float inv = 1.0f / sqrtf(var[c] + epsilon);
    const float xhat = (x[i] - mean[c]) * inv;
    const float scale = (gamma != nullptr ? gamma[c] : 1.0f) * inv;
    dx[i] = scale * (dy[i] - static_cast<float>(sum_dy[c] * inv_n) -
                     xhat * static_cast<float>(sum_dy_xhat[c] * inv_n));
  }
};

// ---- Layer algorithms ------------------------------------------------------

// Floats of workspace: the convolution's backward needs dcolumns and the
// bias gradient's partial sums; Dense's the partial sums.
inline int64_t ConvGeneralBackwardWorkspace(const WindowShape& s) {
  return s.out_pixels() * s.patch_size() +
         BiasGradWorkspace(s.out_pixels(), s.out_c);
}
inline int64_t DenseGeneralBackwardWorkspace(int batch, int out) {
  return BiasGradWorkspace(batch, out);
}
// Bytes of workspace of the batch-normalization passes over `rows` rows:
// the groups' partial sums, the per-channel totals, then the levels of
// partial sums (double).
inline int64_t BatchNormWorkspaceBytes(int64_t rows, int channels) {
  const int64_t groups = ChannelGroups(rows);
  return (2 * groups + 2 + 2 * PartialSumsSize(groups)) * channels *
         static_cast<int64_t>(sizeof(double));
}

// Sums [groups, channels] partial pairs (*a, *b) level by level into
// `scratch` (2 * PartialSumsSize(groups) * channels doubles) until at most
// kSumFan groups are left; points *a and *b at them and returns how many.
template <typename Exec>
int64_t ReduceGroups(const Exec& e, int64_t groups, int channels,
                     const double** a, const double** b, double* scratch) {
  while (groups > kSumFan) {
    const int64_t fewer = (groups + kSumFan - 1) / kSumFan;
    double* out_a = scratch;
    double* out_b = scratch + fewer * channels;
    e.ForEach("BatchNormGroupSums", fewer * channels,
              GroupSumsFn{groups, channels, *a, *b, out_a, out_b});
    *a = out_a;
    *b = out_b;
    scratch = out_b + fewer * channels;
    groups = fewer;
  }
  return groups;
}

// ConvGeneralForward's contract (general_layers.h); b may be null.
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

// y [batch, out] = x w (+ b); b may be null.
template <typename Exec>
void DenseGeneralForward(const Exec& e, int batch, int in, int out,
                         const float* x, const float* w, const float* b,
                         float* y) {
  Gemm(e, false, false, batch, out, in, 1.0f, x, in, w, out, 0.0f, y, out);
  if (b != nullptr) {
    e.ForEach("AddBias", int64_t{batch} * out, AddBiasFn{b, out, y});
  }
}

// dw = x^T dy, db = column sums of dy (may be null), dx = dy w^T (may be
// null). `workspace`: DenseGeneralBackwardWorkspace(batch, out) floats.
template <typename Exec>
void DenseGeneralBackward(const Exec& e, int batch, int in, int out,
                          const float* x, const float* w, const float* dy,
                          float* dw, float* db, float* dx, float* workspace) {
  Gemm(e, true, false, in, out, batch, 1.0f, x, in, dy, out, 0.0f, dw, out);
  if (db != nullptr) BiasGrad(e, batch, out, dy, false, db, workspace);
  if (dx != nullptr) {
    Gemm(e, false, true, batch, in, out, 1.0f, dy, out, w, out, 0.0f, dx, in);
  }
}

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
void ActivationForward(const Exec& e, int64_t n, ActivationFn f,
                       const float* x, float* y) {
  e.ForEach("Activation", n, ActivationForwardFn{f, x, y});
}

template <typename Exec>
void ActivationGrad(const Exec& e, int64_t n, ActivationFn f, const float* y,
                    const float* dy, float* dx) {
  e.ForEach("ActivationGrad", n, ActivationGradFn{f, y, dy, dx});
}

template <typename Exec>
void Copy(const Exec& e, int64_t n, const float* x, float* y) {
  e.ForEach("Copy", n, CopyFn{x, y});
}

template <typename Exec>
void Axpy(const Exec& e, int64_t n, float alpha, const float* x, float* y) {
  e.ForEach("Axpy", n, AxpyFn{alpha, x, y});
}

template <typename Exec>
void Scale(const Exec& e, int64_t n, float alpha, const float* x, float* y) {
  e.ForEach("Scale", n, ScaleFn{alpha, x, y});
}

template <typename Exec>
void Multiply(const Exec& e, int64_t n, const float* a, const float* b, float* y) {
  e.ForEach("Multiply", n, MultiplyFn{a, b, y});
}

template <typename Exec>
void CopyColumns(const Exec& e, int64_t rows, int width, const float* src, int src_stride,
                 float* dst, int dst_stride) {
  e.ForEach("CopyColumns", rows * width, CopyColumnsFn{width, src, src_stride, dst, dst_stride});
}

// DropoutForward/Backward's contract (the same function both ways).
template <typename Exec>
void Dropout(const Exec& e, const DropoutShape& s, const float* x, float* y) {
  e.ForEach("Dropout", s.n,
            DropoutFn{s.first, s.key, DropoutThreshold(s.rate),
                      1.0f / (1.0f - s.rate), x, y});
}

// Training-mode batch normalization over [rows, channels]: the batch's
// mean and biased variance into batch_mean / batch_var (device floats),
// then y (may equal x). `workspace`: BatchNormWorkspaceBytes bytes.
template <typename Exec>
void BatchNormTraining(const Exec& e, int64_t rows, int channels,
                       const float* x, const float* gamma, const float* beta,
                       float epsilon, float* batch_mean, float* batch_var,
                       float* y, void* workspace) {
  const int64_t groups = ChannelGroups(rows);
  double* part_a = static_cast<double*>(workspace);
  double* part_b = part_a + groups * channels;
  double* scratch = part_b + groups * channels + 2 * channels;
  e.ForEach("BatchNormSums", groups * channels,
            ChannelSumsFn{rows, channels, x, nullptr, nullptr, nullptr, 0.0f,
                          part_a, part_b});
  const double* a = part_a;
  const double* b = part_b;
  const int64_t left = ReduceGroups(e, groups, channels, &a, &b, scratch);
  e.ForEach("BatchNormStatistics", channels,
            ChannelTotalsFn{left, channels, static_cast<double>(rows), true, a,
                            b, batch_mean, batch_var, nullptr, nullptr, nullptr,
                            nullptr});
  e.ForEach("BatchNorm", rows * channels,
            BatchNormForwardFn{channels, x, batch_mean, batch_var, gamma, beta,
                               epsilon, y});
}

// Inference-mode batch normalization with the given (moving) statistics.
template <typename Exec>
void BatchNormInference(const Exec& e, int64_t rows, int channels,
                        const float* x, const float* mean, const float* var,
                        const float* gamma, const float* beta, float epsilon,
                        float* y) {
  e.ForEach("BatchNorm", rows * channels,
            BatchNormForwardFn{channels, x, mean, var, gamma, beta, epsilon,
                               y});
}

// The training-mode backward: dgamma and dbeta (either may be null), and dx
// when not null, from the forward's input x and its batch statistics.
template <typename Exec>
void BatchNormBackward(const Exec& e, int64_t rows, int channels,
                       const float* x, const float* dy, const float* mean,
                       const float* var, const float* gamma, float epsilon,
                       float* dgamma, float* dbeta, float* dx,
                       void* workspace) {
  const int64_t groups = ChannelGroups(rows);
  double* part_a = static_cast<double*>(workspace);
  double* part_b = part_a + groups * channels;
  double* sum_dy = part_b + groups * channels;
  double* sum_dy_xhat = sum_dy + channels;
  double* scratch = sum_dy_xhat + channels;
  e.ForEach("BatchNormGradSums", groups * channels,
            ChannelSumsFn{rows, channels, x, dy, mean, var, epsilon, part_a,
                          part_b});
  const double* a = part_a;
  const double* b = part_b;
  const int64_t left = ReduceGroups(e, groups, channels, &a, &b, scratch);
  e.ForEach("BatchNormGradTotals", channels,
            ChannelTotalsFn{left, channels, static_cast<double>(rows), false,
                            a, b, nullptr, nullptr, sum_dy, sum_dy_xhat,
                            dgamma, dbeta});
  if (dx != nullptr) {
    e.ForEach("BatchNormBackwardInput", rows * channels,
              BatchNormBackwardInputFn{channels, x, dy, mean, var, gamma,
                                       epsilon, sum_dy, sum_dy_xhat,
                                       1.0 / static_cast<double>(rows), dx});
  }
}

// GeneralKernels on an executor: what MakeGpuGeneralKernels and
// MakeEmulatedGeneralKernels return. Holds the executor by value.
template <typename Exec>
class ExecGeneralKernels final : public GeneralKernels {
 public:
  explicit ExecGeneralKernels(const Exec& e) : e_(e) {}

  void ConvForward(const WindowShape& s, const float* x, const float* w,
                   const float* b, float* columns, float* y) const override {
    parallel::ConvGeneralForward(e_, s, x, w, b, columns, y);
  }
  void ConvBackward(const WindowShape& s, const float* columns, const float* w,
                    const float* dy, float* dw, float* db, float* dx,
                    float* workspace) const override {
    parallel::ConvGeneralBackward(e_, s, columns, w, dy, dw, db, dx, workspace);
  }
  void DenseForward(int batch, int in, int out, const float* x, const float* w,
                    const float* b, float* y) const override {
    parallel::DenseGeneralForward(e_, batch, in, out, x, w, b, y);
  }
  void DenseBackward(int batch, int in, int out, const float* x,
                     const float* w, const float* dy, float* dw, float* db,
                     float* dx, float* workspace) const override {
    parallel::DenseGeneralBackward(e_, batch, in, out, x, w, dy, dw, db, dx, workspace);
  }
  void MaxPoolForward(const WindowShape& s, const float* x, float* y,
                      int32_t* argmax) const override {
    parallel::MaxPoolGeneralForward(e_, s, x, y, argmax);
  }
  void MaxPoolBackward(const WindowShape& s, const float* dy,
                       const int32_t* argmax, float* dx) const override {
    parallel::MaxPoolGeneralBackward(e_, s, dy, argmax, dx);
  }
  void AvgPoolForward(const WindowShape& s, const float* x,
                      float* y) const override {
    parallel::AvgPoolGeneralForward(e_, s, x, y);
  }
  void AvgPoolBackward(const WindowShape& s, const float* dy,
                       float* dx) const override {
    parallel::AvgPoolGeneralBackward(e_, s, dy, dx);
  }
  void GlobalAvgPoolForward(int batch, int pixels, int channels,
                            const float* x, float* y) const override {
    parallel::GlobalAvgPoolForward(e_, batch, pixels, channels, x, y);
  }
  void GlobalAvgPoolBackward(int batch, int pixels, int channels,
                             const float* dy, float* dx) const override {
    parallel::GlobalAvgPoolBackward(e_, batch, pixels, channels, dy, dx);
  }
  void ActivationForward(int64_t n, ActivationFn f, const float* x,
                         float* y) const override {
    parallel::ActivationForward(e_, n, f, x, y);
  }
  void ActivationGrad(int64_t n, ActivationFn f, const float* y,
                      const float* dy, float* dx) const override {
    parallel::ActivationGrad(e_, n, f, y, dy, dx);
  }
  void Copy(int64_t n, const float* x, float* y) const override {
    parallel::Copy(e_, n, x, y);
  }
  void Axpy(int64_t n, float alpha, const float* x, float* y) const override {
    parallel::Axpy(e_, n, alpha, x, y);
  }
  void Scale(int64_t n, float alpha, const float* x, float* y) const override {
    parallel::Scale(e_, n, alpha, x, y);
  }
  void Multiply(int64_t n, const float* a, const float* b, float* y) const override {
    parallel::Multiply(e_, n, a, b, y);
  }
  void CopyColumns(int64_t rows, int width, const float* src, int src_stride, float* dst,
                   int dst_stride) const override {
    parallel::CopyColumns(e_, rows, width, src, src_stride, dst, dst_stride);
  }
  void Dropout(const DropoutShape& s, const float* x, float* y) const override {
    parallel::Dropout(e_, s, x, y);
  }
  void BatchNormTraining(int64_t rows, int channels, const float* x,
                         const float* gamma, const float* beta, float epsilon,
                         float* batch_mean, float* batch_var, float* y,
                         void* workspace) const override {
    parallel::BatchNormTraining(e_, rows, channels, x, gamma, beta, epsilon,
                                batch_mean, batch_var, y, workspace);
  }
  void BatchNormInference(int64_t rows, int channels, const float* x,
                          const float* mean, const float* var,
                          const float* gamma, const float* beta, float epsilon,
                          float* y) const override {
    parallel::BatchNormInference(e_, rows, channels, x, mean, var, gamma, beta,
                                 epsilon, y);
  }
  void BatchNormBackward(int64_t rows, int channels, const float* x,
                         const float* dy, const float* mean, const float* var,
                         const float* gamma, float epsilon, float* dgamma,
                         float* dbeta, float* dx,
                         void* workspace) const override {
    parallel::BatchNormBackward(e_, rows, channels, x, dy, mean, var, gamma,
                                epsilon, dgamma, dbeta, dx, workspace);
  }
  void ActivationForwardX(int64_t n, ActivationFn f, float alpha, const float* x,
                          float* y) const override {
    parallel::ActivationForwardX(e_, n, f, alpha, x, y);
  }
  void ActivationGradXY(int64_t n, ActivationFn f, float alpha, const float* x, const float* y,
                        const float* dy, float* dx) const override {
    parallel::ActivationGradXY(e_, n, f, alpha, x, y, dy, dx);
  }
  void ZeroPad2DForward(const PaddingShape& s, const float* x, float* y) const override {
    parallel::ZeroPad2DForward(e_, s, x, y);
  }
  void ZeroPad2DBackward(const PaddingShape& s, const float* dy, float* dx) const override {
    parallel::ZeroPad2DBackward(e_, s, dy, dx);
  }
  void DepthwiseConvForward(const WindowShape& s, const float* x, const float* w,
                            const float* b, float* y) const override {
    parallel::DepthwiseConvForward(e_, s, x, w, b, y);
  }
  void DepthwiseConvBackward(const WindowShape& s, const float* x, const float* w,
                             const float* dy, float* dw, float* db, float* dx,
                             float* workspace) const override {
    parallel::DepthwiseConvBackward(e_, s, x, w, dy, dw, db, dx, workspace);
  }
  void GlobalMaxPoolForward(int batch, int pixels, int channels, const float* x, float* y,
                            float* count) const override {
    parallel::GlobalMaxPoolForward(e_, batch, pixels, channels, x, y, count);
  }
  void GlobalMaxPoolBackward(int batch, int pixels, int channels, const float* x,
                             const float* y, const float* count, const float* dy,
                             float* dx) const override {
    parallel::GlobalMaxPoolBackward(e_, batch, pixels, channels, x, y, count, dy, dx);
  }
  void LayerNormForward(int64_t rows, int channels, const float* x, const float* gamma,
                        const float* beta, float epsilon, float* mean, float* rstd,
                        float* y) const override {
    parallel::LayerNormForward(e_, rows, channels, x, gamma, beta, epsilon, mean, rstd, y);
  }
  void LayerNormBackward(int64_t rows, int channels, const float* x, const float* dy,
                         const float* mean, const float* rstd, const float* gamma, float* dgamma,
                         float* dbeta, float* dx, float* workspace) const override {
    parallel::LayerNormBackward(e_, rows, channels, x, dy, mean, rstd, gamma, dgamma, dbeta, dx,
                                workspace);
  }
  void Rescale(int64_t n, float scale, float offset, const float* x, float* y) const override {
    parallel::Rescale(e_, n, scale, offset, x, y);
  }
  void RegularizerLoss(int64_t n, float l1, float l2, const float* w, float* loss,
                       float* workspace) const override {
    parallel::RegularizerLoss(e_, n, l1, l2, w, loss, workspace);
  }
  void RegularizerGrad(int64_t n, float l1, float l2, const float* w,
                       float* dw) const override {
    parallel::RegularizerGrad(e_, n, l1, l2, w, dw);
  }
  void LossHead(LossKind loss, int batch, int outputs, const float* out, const float* targets,
                float grad_scale, float* grad, float* probability, double* loss_sum, int* right,
                void* workspace) const override {
    kernels::LossHead(e_, loss, batch, outputs, out, targets, grad_scale, grad, probability,
                      loss_sum, right, workspace);
  }

 private:
  const Exec e_;
};

}  // namespace parallel
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_PARALLEL_GENERAL_H_
