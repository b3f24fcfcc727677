// Layer algorithms for data-parallel devices, written once over an executor
// so that the same code runs on CUDA (compute/kernels/gpu_kernels.cu) and,
// one element at a time, on the host (compute/kernels/emulated_device.h),
// where tests compare it with the CPU kernels on machines without a GPU.
// Same math, shapes and layouts as the CPU kernels (conv2d.h, dense.h, ...).
//
// An executor `Exec` provides
//   template <typename F>
//   void ForEach(const char* what, int64_t n, const F& f) const;
//       calls f(i) for every i in [0, n), in any order, concurrently;
//       `what` names the kernel in error messages. i is a uint32_t when
//       n < kNarrowIndexLimit, else an int64_t (NarrowIndex), so functors
//       take it as a template parameter `I`.
//   void Gemm(const ColumnMajorGemm& g) const;
//       C = alpha * op(A) * op(B) + beta * C in cuBLAS's column-major
//       terms; with beta == 0, C is not read.
// and records failures itself (compute/kernels/kernel_errors.h).
//
// Element functors are plain structs of sizes and pointers, copied to the
// device by value; operator() is __host__ __device__ under nvcc. They split
// their index into coordinates in I (a GPU divides 32-bit integers many
// times faster than 64-bit ones: a 64-bit index made the pooling gradient
// a quarter of a training step) and form addresses in int64_t, since an
// address may lie beyond n (col2im reads a larger matrix than it writes). Each call
// writes only its own output element and no atomics are used, so results
// are the same from run to run. Workspaces are caller-owned device memory.
#ifndef PSCLUSTER_COMPUTE_KERNELS_PARALLEL_KERNELS_H_
#define PSCLUSTER_COMPUTE_KERNELS_PARALLEL_KERNELS_H_

#include <math.h>

#include <cstdint>

#include "compute/kernels/conv2d.h"
#include "compute/kernels/dense.h"
#include "compute/kernels/maxpool2d.h"

#if defined(__CUDACC__)
#define PSCLUSTER_HD __host__ __device__
#else
#define PSCLUSTER_HD
#endif

namespace pscluster {
namespace kernels {
namespace parallel {

// One cuBLAS-style sgemm call, column-major.
struct ColumnMajorGemm {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const float* a = nullptr;
  int lda = 0;
  const float* b = nullptr;
  int ldb = 0;
  float beta = 0.0f;
  float* c = nullptr;
  int ldc = 0;
};

// The column-major call computing the row-major C[m,n] = alpha * op(A)[m,k]
// * op(B)[k,n] + beta * C (CpuGemm's contract): a row-major matrix read
// column-major is its transpose, so C^T = op(B)^T op(A)^T is computed.
inline ColumnMajorGemm RowMajorGemm(bool transpose_a, bool transpose_b, int m,
                                    int n, int k, float alpha, const float* a,
                                    int lda, const float* b, int ldb,
                                    float beta, float* c, int ldc) {
  ColumnMajorGemm g;
  g.trans_a = transpose_b;
  g.trans_b = transpose_a;
  g.m = n;
  g.n = m;
  g.k = k;
  g.alpha = alpha;
  g.a = b;
  g.lda = ldb;
  g.b = a;
  g.ldb = lda;
  g.beta = beta;
  g.c = c;
  g.ldc = ldc;
  return g;
}

// Executors pass indices below this as uint32_t: i + the grid's stride
// stays below 2^32, so a grid-stride loop cannot wrap.
constexpr int64_t kNarrowIndexLimit = int64_t{1} << 31;

// Whether ForEach over n elements passes uint32_t indices.
inline bool NarrowIndex(int64_t n) { return n < kNarrowIndexLimit; }

// ---- Element functors ----------------------------------------------------

struct FillFn {
  float* y;
  float value;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = value;
  }
};

// y[r, c] = act(y[r, c] + bias[c]) over a row-major [rows, cols] matrix.
struct BiasActivationFn {
  const float* bias;
  int cols;
  bool relu;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const float v = y[i] + bias[i % static_cast<I>(cols)];
    y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
  }
};

// y[r, c] += b[c] over a row-major [rows, cols] matrix.
struct AddBiasFn {
  const float* b;
  int cols;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const { y[i] += b[i % static_cast<I>(cols)];
  }
};

// dy[i] = y[i] > 0 ? dy[i] : 0.
struct ReluGradFn {
  const float* y;
  float* dy;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
  }
};

// cols[p, (kh * k + kw) * in_c + ci] = x[n, oh + kh, ow + kw, ci] for output
// pixel p = (n, oh, ow); one call per element of cols.
struct Im2ColFn {
  int in_h, in_w, in_c, k, out_h, out_w;
  const float* x;
  float* cols;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const I patch = static_cast<I>(k) * k * in_c;  // <= n
    const I p = i / patch;
    const int q = static_cast<int>(i - p * patch);
    const int kh = q / (k * in_c);
    const int r = q - kh * k * in_c;
    const int kw = r / in_c;
    const int ci = r - kw * in_c;
    const int ow = static_cast<int>(p % static_cast<I>(out_w));
    const I t = p / static_cast<I>(out_w);
    const int oh = static_cast<int>(t % static_cast<I>(out_h));
    const int64_t n = t / static_cast<I>(out_h);
    cols[i] = x[((n * in_h + oh + kh) * in_w + ow + kw) * in_c + ci];
  }
};

// The adjoint of Im2ColFn as a gather: dx[n, ih, iw, ci] = the sum of every
// column entry copied from it. One call per element of dx.
struct Col2ImFn {
  int in_h, in_w, in_c, k, out_h, out_w;
  const float* cols;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int ci = static_cast<int>(i % static_cast<I>(in_c));
    I t = i / static_cast<I>(in_c);
    const int iw = static_cast<int>(t % static_cast<I>(in_w));
    t /= static_cast<I>(in_w);
    const int ih = static_cast<int>(t % static_cast<I>(in_h));
    const int64_t n = t / static_cast<I>(in_h);
    const int64_t patch = static_cast<int64_t>(k) * k * in_c;
    float sum = 0.0f;
    for (int kh = 0; kh < k; ++kh) {
      const int oh = ih - kh;
      if (oh < 0 || oh >= out_h) continue;
      for (int kw = 0; kw < k; ++kw) {
        const int ow = iw - kw;
        if (ow < 0 || ow >= out_w) continue;
        sum += cols[((n * out_h + oh) * out_w + ow) * patch +
                    (kh * k + kw) * in_c + ci];
      }
    }
    dx[i] = sum;
  }
};

// y = the window's max, argmax = its position dh * pool + dw, the first one
// on ties (as the CPU kernel). One call per output element.
struct MaxPoolForwardFn {
  int in_h, in_w, channels, pool, out_h, out_w;
  const float* x;
  float* y;
  int32_t* argmax;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    I t = i / static_cast<I>(channels);
    const int j = static_cast<int>(t % static_cast<I>(out_w));
    t /= static_cast<I>(out_w);
    const int row = static_cast<int>(t % static_cast<I>(out_h));
    const int64_t n = t / static_cast<I>(out_h);
    const float* win = x +
                       ((n * in_h + static_cast<int64_t>(row) * pool) * in_w +
                        static_cast<int64_t>(j) * pool) *
                           channels +
                       c;
    float best = win[0];
    int32_t best_at = 0;
    for (int dh = 0; dh < pool; ++dh) {
      for (int dw = 0; dw < pool; ++dw) {
        const float v = win[(static_cast<int64_t>(dh) * in_w + dw) * channels];
        if (v > best) {
          best = v;
          best_at = dh * pool + dw;
        }
      }
    }
    y[i] = best;
    argmax[i] = best_at;
  }
};

// The max-pool gradient for windows that tile the input (stride = window,
// no padding before the first): dx = dy at each window's argmax (the index
// the forward pass saved, kh * window_w + kw), 0 elsewhere. One call per
// OUTPUT element: it writes its window's cells, and the last row and column
// of windows also the cells no window covers (0); each input cell is
// written by exactly one call, with a quarter of the index arithmetic of a
// call per input cell for 2x2 windows. With `y` (the pooled output), the
// gradient of a ReLU below is fused in: the winning cell holds y, so dx is
// also 0 where y <= 0, as ReluGradFn would make it.
struct MaxPoolTiledBackwardFn {
  int in_h, in_w, channels, window_h, window_w, out_h, out_w;
  const float* dy;
  const int32_t* argmax;
  const float* y;  // null: no ReLU below
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I o) const {
    const int c = static_cast<int>(o % static_cast<I>(channels));
    I t = o / static_cast<I>(channels);
    const int col = static_cast<int>(t % static_cast<I>(out_w));
    t /= static_cast<I>(out_w);
    const int row = static_cast<int>(t % static_cast<I>(out_h));
    const int64_t n = t / static_cast<I>(out_h);
    const float g = y == nullptr || y[o] > 0.0f ? dy[o] : 0.0f;
    const int at = argmax[o];
    const int h0 = row * window_h, w0 = col * window_w;
    const int h1 = row == out_h - 1 ? in_h : h0 + window_h;
    const int w1 = col == out_w - 1 ? in_w : w0 + window_w;
    for (int h = h0; h < h1; ++h) {
      float* line = dx + ((n * in_h + h) * in_w) * channels + c;
      for (int w = w0; w < w1; ++w) {
        const bool won = h - h0 < window_h && w - w0 < window_w &&
                         (h - h0) * window_w + (w - w0) == at;
        line[static_cast<int64_t>(w) * channels] = won ? g : 0.0f;
      }
    }
  }
};

// Per example r: its loss and whether it is correct, and (unless dlogits is
// null) its row of dlogits; in double like the CPU kernel.
struct SoftmaxRowFn {
  int classes;
  const float* logits;
  const float* labels;
  float grad_scale;
  float* dlogits;
  double* row_loss;
  int32_t* row_correct;
  template <typename I>
  PSCLUSTER_HD void operator()(I r) const {
    const float* z = logits + r * classes;
    const int label = static_cast<int>(labels[r]);
    int best = 0;
    for (int j = 1; j < classes; ++j) {
      if (z[j] > z[best]) best = j;
    }
    row_correct[r] = best == label ? 1 : 0;
    const float zmax = z[best];
    double sum = 0.0;
    for (int j = 0; j < classes; ++j) sum += ::exp(double{z[j]} - zmax);
    row_loss[r] = ::log(sum) - (double{z[label]} - zmax);
    if (dlogits != nullptr) {
      float* g = dlogits + r * classes;
      const double inv = 1.0 / sum;
      for (int j = 0; j < classes; ++j) {
        const double p = ::exp(double{z[j]} - zmax) * inv;
        g[j] = static_cast<float>(grad_scale * (p - (j == label ? 1.0 : 0.0)));
      }
    }
  }
};

// Sums `count` per-example losses and correct flags in groups of `group`,
// in order: loss_out[g] = sum of loss_in over [g * group, min(count,
// (g + 1) * group)), and the same for the flags. One call per group.
struct SoftmaxSumFn {
  int64_t count;
  int64_t group;
  const double* loss_in;
  const int32_t* correct_in;
  double* loss_out;
  int32_t* correct_out;
  template <typename I>
  PSCLUSTER_HD void operator()(I g) const {
    double loss = 0.0;
    int32_t right = 0;
    const int64_t end = (g + 1) * group < count ? (g + 1) * group : count;
    for (int64_t i = g * group; i < end; ++i) {
      loss += loss_in[i];
      right += correct_in[i];
    }
    loss_out[g] = loss;
    correct_out[g] = right;
  }
};

// Terms one call of a level-by-level sum adds (ColumnSumsFn here,
// GroupSumsFn in parallel_normalization.h): n terms become ceil(n / 64)
// partial sums, level after level, until at most 64 are left.
constexpr int64_t kSumFan = 64;

// The partial sums of every level of such a sum over n terms, in all.
inline int64_t PartialSumsSize(int64_t n) {
  int64_t size = 0;
  while (n > kSumFan) {
    n = (n + kSumFan - 1) / kSumFan;
    size += n;
  }
  return size;
}

// out[g, c] = the sum of in[r, c] over the group's rows r in [g * 64,
// min(rows, (g + 1) * 64)), in order, over a row-major [rows, cols] matrix;
// with `accumulate`, added to out. One call per (g, c), c fastest: a warp
// reads consecutive columns of a row.
struct ColumnSumsFn {
  int64_t rows;
  int cols;
  bool accumulate;
  const float* in;
  float* out;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(cols));
    const int64_t g = i / static_cast<I>(cols);
    const int64_t begin = g * kSumFan;
    const int64_t end =
        begin + kSumFan < rows ? begin + kSumFan : rows;
    float sum = 0.0f;
    for (int64_t r = begin; r < end; ++r) sum += in[r * cols + c];
    out[i] = accumulate ? out[i] + sum : sum;
  }
};

// ---- Layer algorithms ------------------------------------------------------

// Row-major GEMM with CpuGemm's contract.
template <typename Exec>
void Gemm(const Exec& e, bool transpose_a, bool transpose_b, int m, int n,
          int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  e.Gemm(RowMajorGemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb,
                      beta, c, ldc));
}

template <typename Exec>
void BiasActivationForward(const Exec& e, int64_t rows, int cols,
                           const float* bias, bool relu, float* y) {
  e.ForEach("BiasActivation", rows * cols,
            BiasActivationFn{bias, cols, relu, y});
}

// Floats of workspace BiasGrad needs: the partial sums of every level.
inline int64_t BiasGradWorkspace(int64_t rows, int cols) {
  return PartialSumsSize(rows) * cols;
}

// db (+)= column sums of dy [rows, cols]: groups of 64 rows summed, then
// groups of 64 of those sums, until one group is left (a fixed order, no
// atomics: the same bits every run).
template <typename Exec>
void BiasGrad(const Exec& e, int64_t rows, int cols, const float* dy,
              bool accumulate, float* db, float* workspace) {
  const float* in = dy;
  int64_t n = rows;
  while (n > kSumFan) {
    const int64_t groups = (n + kSumFan - 1) / kSumFan;
    e.ForEach("ColumnSums", groups * cols,
              ColumnSumsFn{n, cols, false, in, workspace});
    in = workspace;
    workspace += groups * cols;
    n = groups;
  }
  // At most 64 rows left: one group per column.
  e.ForEach("ColumnSums", cols, ColumnSumsFn{n, cols, accumulate, in, db});
}

template <typename Exec>
void ReluGrad(const Exec& e, int64_t n, const float* y, float* dy) {
  e.ForEach("ReluGrad", n, ReluGradFn{y, dy});
}

template <typename Exec>
void DenseForward(const Exec& e, const DenseShape& s, const float* x,
                  const float* w, const float* b, bool relu, float* y) {
  Gemm(e, false, false, s.batch, s.out, s.in, 1.0f, x, s.in, w, s.out, 0.0f, y,
       s.out);
  BiasActivationForward(e, s.batch, s.out, b, relu, y);
}

inline int64_t DenseBackwardWorkspace(const DenseShape& s) {
  return BiasGradWorkspace(s.batch, s.out);
}

// DenseBackward<CpuDevice>'s contract, plus the bias gradient's workspace.
template <typename Exec>
void DenseBackward(const Exec& e, const DenseShape& s, const float* x,
                   const float* w, const float* dy, bool accumulate, float* dw,
                   float* db, float* dx, float* workspace) {
  Gemm(e, true, false, s.in, s.out, s.batch, 1.0f, x, s.in, dy, s.out,
       accumulate ? 1.0f : 0.0f, dw, s.out);
  BiasGrad(e, s.batch, s.out, dy, accumulate, db, workspace);
  if (dx != nullptr) {
    Gemm(e, false, true, s.batch, s.in, s.out, 1.0f, dy, s.out, w, s.out, 0.0f,
         dx, s.in);
  }
}

// The graph engine's Dense (graph_kernels.h): floats of the backward's
// workspace, the bias gradient's partial sums.
inline int64_t DenseGeneralBackwardWorkspace(int batch, int out) {
  return BiasGradWorkspace(batch, out);
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

// Floats of the im2col matrix: the forward workspace; the backward passes
// use the same region (the filter gradient then the bias sums after it).
inline int64_t Conv2DColumns(const Conv2DShape& s) {
  return s.out_pixels() * s.patch_size();
}
inline int64_t Conv2DForwardWorkspace(const Conv2DShape& s) {
  return Conv2DColumns(s);
}
inline int64_t Conv2DBackwardFilterWorkspace(const Conv2DShape& s) {
  return Conv2DColumns(s) + BiasGradWorkspace(s.out_pixels(), s.out_c);
}
inline int64_t Conv2DBackwardInputWorkspace(const Conv2DShape& s) {
  return Conv2DColumns(s);
}

inline Im2ColFn MakeIm2Col(const Conv2DShape& s, const float* x, float* cols) {
  return Im2ColFn{s.in_h,    s.in_w,    s.in_c, s.kernel,
                  s.out_h(), s.out_w(), x,      cols};
}

// Conv2DForward<CpuDevice>'s contract: leaves im2col(x) at the start of
// `workspace`.
template <typename Exec>
void Conv2DForward(const Exec& e, const Conv2DShape& s, const float* x,
                   const float* w, const float* b, bool relu, float* y,
                   float* workspace) {
  const int64_t m = s.out_pixels();
  const int k = s.patch_size();
  e.ForEach("Im2Col", Conv2DColumns(s), MakeIm2Col(s, x, workspace));
  Gemm(e, false, false, static_cast<int>(m), s.out_c, k, 1.0f, workspace, k, w,
       s.out_c, 0.0f, y, s.out_c);
  BiasActivationForward(e, m, s.out_c, b, relu, y);
}

// Conv2DBackwardFilter<CpuDevice>'s contract.
template <typename Exec>
void Conv2DBackwardFilter(const Exec& e, const Conv2DShape& s, const float* x,
                          const float* dy, bool accumulate, bool columns_ready,
                          float* dw, float* db, float* workspace) {
  const int64_t m = s.out_pixels();
  const int k = s.patch_size();
  BiasGrad(e, m, s.out_c, dy, accumulate, db, workspace + Conv2DColumns(s));
  if (!columns_ready) {
    e.ForEach("Im2Col", Conv2DColumns(s), MakeIm2Col(s, x, workspace));
  }
  // dw[k, out_c] (+)= cols^T[k, m] * dy[m, out_c].
  Gemm(e, true, false, k, s.out_c, static_cast<int>(m), 1.0f, workspace, k, dy,
       s.out_c, accumulate ? 1.0f : 0.0f, dw, s.out_c);
}

// Conv2DBackwardInput<CpuDevice>'s contract: dcols = dy * w^T, then col2im.
template <typename Exec>
void Conv2DBackwardInput(const Exec& e, const Conv2DShape& s, const float* w,
                         const float* dy, float* dx, float* workspace) {
  const int64_t m = s.out_pixels();
  const int k = s.patch_size();
  Gemm(e, false, true, static_cast<int>(m), k, s.out_c, 1.0f, dy, s.out_c, w,
       s.out_c, 0.0f, workspace, k);
  e.ForEach("Col2Im", static_cast<int64_t>(s.batch) * s.in_h * s.in_w * s.in_c,
            Col2ImFn{s.in_h, s.in_w, s.in_c, s.kernel, s.out_h(), s.out_w(),
                     workspace, dx});
}

template <typename Exec>
void MaxPool2DForward(const Exec& e, const MaxPool2DShape& s, const float* x,
                      float* y, int32_t* argmax) {
  e.ForEach("MaxPoolForward", s.out_size(),
            MaxPoolForwardFn{s.in_h, s.in_w, s.channels, s.pool, s.out_h(),
                             s.out_w(), x, y, argmax});
}

// `y`: the pooled output when a ReLU below is fused in
// (MaxPoolTiledBackwardFn), else null.
template <typename Exec>
void MaxPool2DBackward(const Exec& e, const MaxPool2DShape& s, const float* dy,
                       const int32_t* argmax, const float* y, float* dx) {
  if (s.out_h() < 1 || s.out_w() < 1) {  // no window: every cell dropped
    e.ForEach("Fill",
              static_cast<int64_t>(s.batch) * s.in_h * s.in_w * s.channels,
              FillFn{dx, 0.0f});
    return;
  }
  e.ForEach("MaxPoolTiledBackward", s.out_size(),
            MaxPoolTiledBackwardFn{s.in_h, s.in_w, s.channels, s.pool, s.pool,
                                   s.out_h(), s.out_w(), dy, argmax, y, dx});
}

// Per-example results are summed in groups of this many, then the groups.
constexpr int kSoftmaxGroup = 32;

inline int64_t SoftmaxGroups(int batch) {
  return (batch + kSoftmaxGroup - 1) / kSoftmaxGroup;
}

// Bytes of workspace SoftmaxCrossEntropy needs: per-example and per-group
// losses (double) and correct flags (int32).
inline int64_t SoftmaxWorkspaceBytes(int batch) {
  const int64_t slots = batch + SoftmaxGroups(batch);
  return slots * static_cast<int64_t>(sizeof(double) + sizeof(int32_t));
}

// SoftmaxCrossEntropy<CpuDevice>'s contract, with *loss_sum and *correct in
// device memory. `workspace`: SoftmaxWorkspaceBytes(batch) bytes, aligned
// for double.
template <typename Exec>
void SoftmaxCrossEntropy(const Exec& e, int batch, int classes,
                         const float* logits, const float* labels,
                         float grad_scale, float* dlogits, double* loss_sum,
                         int* correct, void* workspace) {
  const int64_t groups = SoftmaxGroups(batch);
  double* row_loss = static_cast<double*>(workspace);
  double* group_loss = row_loss + batch;
  int32_t* row_correct = reinterpret_cast<int32_t*>(group_loss + groups);
  int32_t* group_correct = row_correct + batch;
  e.ForEach("SoftmaxRows", batch,
            SoftmaxRowFn{classes, logits, labels, grad_scale, dlogits, row_loss,
                         row_correct});
  e.ForEach("SoftmaxGroupSums", groups,
            SoftmaxSumFn{batch, kSoftmaxGroup, row_loss, row_correct,
                         group_loss, group_correct});
  static_assert(sizeof(int) == sizeof(int32_t), "int is 32 bits");
  e.ForEach("SoftmaxTotals", 1,
            SoftmaxSumFn{groups, groups, group_loss, group_correct, loss_sum,
                         reinterpret_cast<int32_t*>(correct)});
}

}  // namespace parallel
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_PARALLEL_KERNELS_H_
