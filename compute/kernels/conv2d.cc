#include "compute/kernels/conv2d.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "compute/kernels/bias_activation.h"
#include "compute/kernels/cpu_blas.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define PSCLUSTER_CONV_AVX2 1
#endif

namespace pscluster {
namespace kernels {
namespace {

// Single-channel inputs have patches of only kernel^2 elements, too short a
// GEMM depth for BLAS to run well; those go through the direct kernels.
bool UsesDirectPath(const Conv2DShape& s) { return s.in_c == 1; }

// cols[p, (kh * k + kw) * in_c + ci] = x[n, oh + kh, ow + kw, ci] for output
// pixel p = (n, oh, ow). Each (p, kh) segment is contiguous in both.
void Im2Col(const Conv2DShape& s, const float* x, float* cols) {
  const int k = s.kernel, oh_n = s.out_h(), ow_n = s.out_w();
  const int64_t seg = static_cast<int64_t>(k) * s.in_c;
  float* out = cols;
  for (int n = 0; n < s.batch; ++n) {
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        for (int kh = 0; kh < k; ++kh) {
          const float* src =
              x + ((static_cast<int64_t>(n) * s.in_h + oh + kh) * s.in_w + ow) *
                      s.in_c;
          std::memcpy(out, src, seg * sizeof(float));
          out += seg;
        }
      }
    }
  }
}

// dst[i] += src[i] for i < n.
inline void AddTo(const float* src, int64_t n, float* dst) {
  int64_t i = 0;
#if defined(PSCLUSTER_CONV_AVX2)
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i),
                                            _mm256_loadu_ps(src + i)));
  }
#endif
  for (; i < n; ++i) dst[i] += src[i];
}

// The adjoint of Im2Col: dx = 0, then every column segment is added back to
// the input window it was copied from.
void Col2Im(const Conv2DShape& s, const float* cols, float* dx) {
  const int k = s.kernel, oh_n = s.out_h(), ow_n = s.out_w();
  const int64_t seg = static_cast<int64_t>(k) * s.in_c;
  std::fill(dx, dx + static_cast<int64_t>(s.batch) * s.in_h * s.in_w * s.in_c,
            0.0f);
  const float* in = cols;
  for (int n = 0; n < s.batch; ++n) {
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        for (int kh = 0; kh < k; ++kh) {
          float* dst =
              dx +
              ((static_cast<int64_t>(n) * s.in_h + oh + kh) * s.in_w + ow) *
                  s.in_c;
          AddTo(in, seg, dst);
          in += seg;
        }
      }
    }
  }
}

// ---- Direct kernels for in_c == 1 ----------------------------------------

// Scalar reference for one output pixel and channels [c0, c1).
void DirectForwardPixelScalar(const Conv2DShape& s, const float* x_at,
                              const float* w, const float* b, bool relu, int c0,
                              int c1, float* y_at) {
  for (int c = c0; c < c1; ++c) {
    float acc = b[c];
    for (int kh = 0; kh < s.kernel; ++kh) {
      for (int kw = 0; kw < s.kernel; ++kw) {
        acc += x_at[kh * s.in_w + kw] * w[(kh * s.kernel + kw) * s.out_c + c];
      }
    }
    y_at[c] = relu ? std::max(acc, 0.0f) : acc;
  }
}

#if defined(PSCLUSTER_CONV_AVX2)
// P adjacent output pixels of one row times 8 * NV channels, held in
// P * NV accumulators. x_at: input at the first pixel's window origin;
// w, b, y_at: already offset to the first channel of the block.
template <int P, int NV>
inline void DirectForwardTile(const Conv2DShape& s, const float* x_at,
                              const float* w, const float* b, bool relu,
                              float* y_at) {
  __m256 acc[P][NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const __m256 bias = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[p][v] = bias;
  }
  for (int kh = 0; kh < s.kernel; ++kh) {
    for (int kw = 0; kw < s.kernel; ++kw) {
      const float* wp = w + (kh * s.kernel + kw) * s.out_c;
      const float* xp = x_at + kh * s.in_w + kw;
      __m256 wv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) wv[v] = _mm256_loadu_ps(wp + 8 * v);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const __m256 xv = _mm256_broadcast_ss(xp + p);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
          acc[p][v] = _mm256_fmadd_ps(xv, wv[v], acc[p][v]);
        }
      }
    }
  }
  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const __m256 out = relu ? _mm256_max_ps(acc[p][v], zero) : acc[p][v];
      _mm256_storeu_ps(y_at + p * s.out_c + 8 * v, out);
    }
  }
}

// Runs DirectForwardTile over `pixels` (< 6) pixels via the right template.
template <int NV>
void DirectForwardTail(int pixels, const Conv2DShape& s, const float* x_at,
                       const float* w, const float* b, bool relu, float* y_at) {
  switch (pixels) {
    case 1:
      return DirectForwardTile<1, NV>(s, x_at, w, b, relu, y_at);
    case 2:
      return DirectForwardTile<2, NV>(s, x_at, w, b, relu, y_at);
    case 3:
      return DirectForwardTile<3, NV>(s, x_at, w, b, relu, y_at);
    case 4:
      return DirectForwardTile<4, NV>(s, x_at, w, b, relu, y_at);
    case 5:
      return DirectForwardTile<5, NV>(s, x_at, w, b, relu, y_at);
  }
}

// One output row [ow_n pixels] of channels [c0, c0 + 8 * NV).
template <int NV>
void DirectForwardRow(const Conv2DShape& s, const float* x_row, const float* w,
                      const float* b, bool relu, int c0, float* y_row) {
  constexpr int kP = 6;
  const int ow_n = s.out_w();
  int ow = 0;
  for (; ow + kP <= ow_n; ow += kP) {
    DirectForwardTile<kP, NV>(s, x_row + ow, w + c0, b + c0, relu,
                              y_row + ow * s.out_c + c0);
  }
  if (ow < ow_n) {
    DirectForwardTail<NV>(ow_n - ow, s, x_row + ow, w + c0, b + c0, relu,
                          y_row + ow * s.out_c + c0);
  }
}
#endif  // PSCLUSTER_CONV_AVX2

void DirectForward(const Conv2DShape& s, const float* x, const float* w,
                   const float* b, bool relu, float* y) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  for (int n = 0; n < s.batch; ++n) {
    const float* xn = x + static_cast<int64_t>(n) * s.in_h * s.in_w;
    float* yn = y + static_cast<int64_t>(n) * oh_n * ow_n * s.out_c;
    for (int oh = 0; oh < oh_n; ++oh) {
      const float* x_row = xn + oh * s.in_w;
      float* y_row = yn + static_cast<int64_t>(oh) * ow_n * s.out_c;
      int c = 0;
#if defined(PSCLUSTER_CONV_AVX2)
      for (; c + 16 <= s.out_c; c += 16) {
        DirectForwardRow<2>(s, x_row, w, b, relu, c, y_row);
      }
      for (; c + 8 <= s.out_c; c += 8) {
        DirectForwardRow<1>(s, x_row, w, b, relu, c, y_row);
      }
#endif
      if (c < s.out_c) {
        for (int ow = 0; ow < ow_n; ++ow) {
          DirectForwardPixelScalar(s, x_row + ow, w, b, relu, c, s.out_c,
                                   y_row + ow * s.out_c);
        }
      }
    }
  }
}

#if defined(PSCLUSTER_CONV_AVX2)
// dw rows for T taps (tap t at input offset tap_offset[t] from the window
// origin, weight row tap_row[t]) times 8 * NV channels from c0, summed over
// all output pixels of all images. Accumulates into dw.
template <int T, int NV>
void DirectFilterTile(const Conv2DShape& s, const float* x, const float* dy,
                      const int* tap_offset, const int* tap_row, int c0,
                      float* dw) {
  __m256 acc[T][NV];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[t][v] = _mm256_setzero_ps();
  }
  const int oh_n = s.out_h(), ow_n = s.out_w();
  for (int n = 0; n < s.batch; ++n) {
    const float* xn = x + static_cast<int64_t>(n) * s.in_h * s.in_w;
    const float* dyn =
        dy + static_cast<int64_t>(n) * oh_n * ow_n * s.out_c + c0;
    for (int oh = 0; oh < oh_n; ++oh) {
      const float* x_row = xn + oh * s.in_w;
      const float* dy_row = dyn + static_cast<int64_t>(oh) * ow_n * s.out_c;
      for (int ow = 0; ow < ow_n; ++ow) {
        __m256 g[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
          g[v] = _mm256_loadu_ps(dy_row + ow * s.out_c + 8 * v);
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m256 xv = _mm256_broadcast_ss(x_row + ow + tap_offset[t]);
#pragma GCC unroll 8
          for (int v = 0; v < NV; ++v) {
            acc[t][v] = _mm256_fmadd_ps(xv, g[v], acc[t][v]);
          }
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    float* row = dw + tap_row[t] * s.out_c + c0;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      _mm256_storeu_ps(row + 8 * v,
                       _mm256_add_ps(_mm256_loadu_ps(row + 8 * v), acc[t][v]));
    }
  }
}

template <int NV>
void DirectFilterTaps(int taps, const Conv2DShape& s, const float* x,
                      const float* dy, const int* tap_offset,
                      const int* tap_row, int c0, float* dw) {
  switch (taps) {
    case 1:
      return DirectFilterTile<1, NV>(s, x, dy, tap_offset, tap_row, c0, dw);
    case 2:
      return DirectFilterTile<2, NV>(s, x, dy, tap_offset, tap_row, c0, dw);
    case 3:
      return DirectFilterTile<3, NV>(s, x, dy, tap_offset, tap_row, c0, dw);
    case 4:
      return DirectFilterTile<4, NV>(s, x, dy, tap_offset, tap_row, c0, dw);
    case 5:
      return DirectFilterTile<5, NV>(s, x, dy, tap_offset, tap_row, c0, dw);
    case 6:
      return DirectFilterTile<6, NV>(s, x, dy, tap_offset, tap_row, c0, dw);
  }
}
#endif  // PSCLUSTER_CONV_AVX2

// dw += sum over pixels of x-patch (x) dy, for in_c == 1.
void DirectFilter(const Conv2DShape& s, const float* x, const float* dy,
                  float* dw) {
  const int k = s.kernel, taps = k * k;
  int c = 0;
#if defined(PSCLUSTER_CONV_AVX2)
  // Taps in groups of up to 6 with 16 channels: 12 accumulators + 2 dy
  // vectors + 1 broadcast fit the 16 ymm registers.
  constexpr int kTapBlock = 6;
  int tap_offset[kTapBlock], tap_row[kTapBlock];
  auto run = [&](auto nv_tag, int c0) {
    constexpr int kNV = decltype(nv_tag)::value;
    for (int t0 = 0; t0 < taps; t0 += kTapBlock) {
      const int count = std::min(kTapBlock, taps - t0);
      for (int i = 0; i < count; ++i) {
        const int t = t0 + i;
        tap_offset[i] = (t / k) * s.in_w + t % k;
        tap_row[i] = t;
      }
      DirectFilterTaps<kNV>(count, s, x, dy, tap_offset, tap_row, c0, dw);
    }
  };
  for (; c + 16 <= s.out_c; c += 16) run(std::integral_constant<int, 2>(), c);
  for (; c + 8 <= s.out_c; c += 8) run(std::integral_constant<int, 1>(), c);
#endif
  if (c == s.out_c) return;
  const int oh_n = s.out_h(), ow_n = s.out_w();
  for (int n = 0; n < s.batch; ++n) {
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        const float* x_at =
            x + (static_cast<int64_t>(n) * s.in_h + oh) * s.in_w + ow;
        const float* g =
            dy + ((static_cast<int64_t>(n) * oh_n + oh) * ow_n + ow) * s.out_c;
        for (int t = 0; t < taps; ++t) {
          const float xv = x_at[(t / k) * s.in_w + t % k];
          for (int cc = c; cc < s.out_c; ++cc)
            dw[t * s.out_c + cc] += xv * g[cc];
        }
      }
    }
  }
}

// ---- Input gradient without a column matrix -----------------------------

// The scatter kernel needs whole 8-channel input vectors.
bool UsesScatterInputGrad(const Conv2DShape& s) {
#if defined(PSCLUSTER_CONV_AVX2)
  return s.in_c % 8 == 0;
#else
  return false;
#endif
}

#if defined(PSCLUSTER_CONV_AVX2)
// For P adjacent output pixels of one row (dy_at: the first one's gradient)
// and one tap: acc[p] = dy[p] * wt_tap (an [out_c, in_c] matrix, offset to
// the channel block), added into dx at the pixels that tap reads (dx_at:
// the first one's, offset to the channel block).
template <int P, int NV>
inline void ScatterTile(int out_c, int in_c, const float* dy_at,
                        const float* wt_tap, float* dx_at) {
  __m256 acc[P][NV];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[p][v] = _mm256_setzero_ps();
  }
  for (int co = 0; co < out_c; ++co) {
    __m256 wv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      wv[v] = _mm256_loadu_ps(wt_tap + co * in_c + 8 * v);
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const __m256 g = _mm256_broadcast_ss(dy_at + p * out_c + co);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v)
        acc[p][v] = _mm256_fmadd_ps(g, wv[v], acc[p][v]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      float* out = dx_at + p * in_c + 8 * v;
      _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), acc[p][v]));
    }
  }
}

template <int NV>
void ScatterTail(int pixels, int out_c, int in_c, const float* dy_at,
                 const float* wt_tap, float* dx_at) {
  switch (pixels) {
    case 1:
      return ScatterTile<1, NV>(out_c, in_c, dy_at, wt_tap, dx_at);
    case 2:
      return ScatterTile<2, NV>(out_c, in_c, dy_at, wt_tap, dx_at);
    case 3:
      return ScatterTile<3, NV>(out_c, in_c, dy_at, wt_tap, dx_at);
    case 4:
      return ScatterTile<4, NV>(out_c, in_c, dy_at, wt_tap, dx_at);
    case 5:
      return ScatterTile<5, NV>(out_c, in_c, dy_at, wt_tap, dx_at);
  }
}

// All output pixels for one tap and the channel block [c0, c0 + 8 * NV).
template <int NV>
void ScatterTap(const Conv2DShape& s, const float* dy, const float* wt_tap,
                int kh, int kw, int c0, float* dx) {
  constexpr int kP = 6;
  const int oh_n = s.out_h(), ow_n = s.out_w();
  for (int n = 0; n < s.batch; ++n) {
    for (int oh = 0; oh < oh_n; ++oh) {
      const float* dy_row =
          dy + ((static_cast<int64_t>(n) * oh_n + oh) * ow_n) * s.out_c;
      float* dx_row =
          dx +
          ((static_cast<int64_t>(n) * s.in_h + oh + kh) * s.in_w + kw) *
              s.in_c +
          c0;
      int ow = 0;
      for (; ow + kP <= ow_n; ow += kP) {
        ScatterTile<kP, NV>(s.out_c, s.in_c, dy_row + ow * s.out_c, wt_tap + c0,
                            dx_row + ow * s.in_c);
      }
      if (ow < ow_n) {
        ScatterTail<NV>(ow_n - ow, s.out_c, s.in_c, dy_row + ow * s.out_c,
                        wt_tap + c0, dx_row + ow * s.in_c);
      }
    }
  }
}
#endif  // PSCLUSTER_CONV_AVX2

// dx = sum over taps of dy * w[tap]^T, each tap's product added straight
// into the input pixels it came from. `wt` receives w transposed per tap,
// [taps, out_c, in_c], so the inner loop reads contiguous input channels.
void ScatterInputGrad(const Conv2DShape& s, const float* w, const float* dy,
                      float* dx, float* wt) {
  const int taps = s.kernel * s.kernel;
  for (int t = 0; t < taps; ++t) {
    for (int ci = 0; ci < s.in_c; ++ci) {
      for (int co = 0; co < s.out_c; ++co) {
        wt[(static_cast<int64_t>(t) * s.out_c + co) * s.in_c + ci] =
            w[(static_cast<int64_t>(t) * s.in_c + ci) * s.out_c + co];
      }
    }
  }
  std::fill(dx, dx + static_cast<int64_t>(s.batch) * s.in_h * s.in_w * s.in_c,
            0.0f);
#if defined(PSCLUSTER_CONV_AVX2)
  // Channel block outermost, then tap: that tap's block of wt (out_c x 16
  // floats) stays in L1 while every pixel streams past it.
  for (int c0 = 0; c0 < s.in_c; c0 += 16) {
    for (int t = 0; t < taps; ++t) {
      const float* wt_tap = wt + static_cast<int64_t>(t) * s.out_c * s.in_c;
      if (c0 + 16 <= s.in_c) {
        ScatterTap<2>(s, dy, wt_tap, t / s.kernel, t % s.kernel, c0, dx);
      } else {
        ScatterTap<1>(s, dy, wt_tap, t / s.kernel, t % s.kernel, c0, dx);
      }
    }
  }
#endif
}

}  // namespace

int64_t Conv2DForward<CpuDevice>::WorkspaceSize(const Conv2DShape& s) {
  return UsesDirectPath(s) ? 0 : s.out_pixels() * s.patch_size();
}

void Conv2DForward<CpuDevice>::operator()(const CpuDevice& d,
                                          const Conv2DShape& s, const float* x,
                                          const float* w, const float* b,
                                          bool relu, float* y,
                                          float* workspace) const {
  if (UsesDirectPath(s)) {
    DirectForward(s, x, w, b, relu, y);
    return;
  }
  const int64_t m = s.out_pixels();
  const int k = s.patch_size();
  Im2Col(s, x, workspace);
  CpuGemm(false, false, static_cast<int>(m), s.out_c, k, 1.0f, workspace, k, w,
          s.out_c, 0.0f, y, s.out_c);
  BiasActivationForward<CpuDevice>()(d, m, s.out_c, b, relu, y);
}

int64_t Conv2DBackwardFilter<CpuDevice>::WorkspaceSize(const Conv2DShape& s) {
  return Conv2DForward<CpuDevice>::WorkspaceSize(s);
}

void Conv2DBackwardFilter<CpuDevice>::operator()(
    const CpuDevice& d, const Conv2DShape& s, const float* x, const float* dy,
    bool accumulate, bool columns_ready, float* dw, float* db,
    float* workspace) const {
  const int64_t m = s.out_pixels();
  const int k = s.patch_size();
  BiasGrad<CpuDevice>()(d, m, s.out_c, dy, accumulate, db);
  if (UsesDirectPath(s)) {
    if (!accumulate)
      std::fill(dw, dw + static_cast<int64_t>(k) * s.out_c, 0.0f);
    DirectFilter(s, x, dy, dw);
    return;
  }
  if (!columns_ready) Im2Col(s, x, workspace);
  // dw[k, out_c] (+)= cols^T[k, m] * dy[m, out_c].
  CpuGemm(true, false, k, s.out_c, static_cast<int>(m), 1.0f, workspace, k, dy,
          s.out_c, accumulate ? 1.0f : 0.0f, dw, s.out_c);
}

int64_t Conv2DBackwardInput<CpuDevice>::WorkspaceSize(const Conv2DShape& s) {
  if (UsesScatterInputGrad(s)) {
    return static_cast<int64_t>(s.patch_size()) * s.out_c;
  }
  return s.out_pixels() * s.patch_size();
}

void Conv2DBackwardInput<CpuDevice>::operator()(const CpuDevice&,
                                                const Conv2DShape& s,
                                                const float* w, const float* dy,
                                                float* dx,
                                                float* workspace) const {
  if (UsesScatterInputGrad(s)) {
    ScatterInputGrad(s, w, dy, dx, workspace);
    return;
  }
  const int64_t m = s.out_pixels();
  const int k = s.patch_size();
  // dcols[m, k] = dy[m, out_c] * w^T[out_c, k], then scattered back.
  CpuGemm(false, true, static_cast<int>(m), k, s.out_c, 1.0f, dy, s.out_c, w,
          s.out_c, 0.0f, workspace, k);
  Col2Im(s, workspace, dx);
}

}  // namespace kernels
}  // namespace pscluster
