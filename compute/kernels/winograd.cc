#include "compute/kernels/winograd.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/kernels/batch_norm.h"
#include "compute/kernels/small_gemm.h"

namespace pscluster {
namespace kernels {
namespace {

// The build targets x86-64-v3 (AVX2); the transforms use AVX-512 after
// WinogradApplies (through SmallGemmAvailable) has checked the CPU.
#define PSC_AVX512 __attribute__((target("avx512f")))

// Tiles of 2x2 output pixels, the padded input they read, and how many are
// transformed and multiplied together.
struct Geometry {
  int tiles_h, tiles_w;  // per image
  int h, w;              // the padded image: each tile reads 4x4 of it
  int64_t tiles;         // over the batch
  int chunk;             // tiles per round of transform, GEMM, transform
  // Floats from one of the 16 positions of a tile to the next in the
  // transformed inputs and in the products: a round's tiles and a cache
  // line more, so that the 16 positions a tile writes or reads do not all
  // fall in one set of the L1 cache (16 KiB apart they would).
  int64_t v_stride, m_stride;
};

Geometry GeometryOf(const WindowShape& s) {
  Geometry g;
  g.tiles_h = (s.out_h + 1) / 2;
  g.tiles_w = (s.out_w + 1) / 2;
  g.h = 2 * g.tiles_h + 2;
  g.w = 2 * g.tiles_w + 2;
  g.tiles = int64_t{s.batch} * g.tiles_h * g.tiles_w;
  // A round's transformed inputs and its products, 16 * chunk * channels
  // floats each, 256 KiB at most: they stay in L2 between the passes.
  g.chunk = std::max(16, 65536 / (16 * std::max(s.in_c, s.out_c)));
  g.v_stride = int64_t{g.chunk} * s.in_c + 16;
  g.m_stride = int64_t{g.chunk} * s.out_c + 16;
  return g;
}

// Where the scratch's parts start.
struct Parts {
  float* padded;  // [batch, h, w, in_c]
  float* u;       // [16, in_c, out_c]: the transformed kernel
  float* v;       // 16 x [chunk, in_c], v_stride apart: the transformed tiles
  float* m;       // 16 x [chunk, out_c], m_stride apart: their products with u
};

int64_t PaddedSize(const WindowShape& s, const Geometry& g) {
  return int64_t{s.batch} * g.h * g.w * s.in_c;
}

Parts PartsOf(const WindowShape& s, const Geometry& g, float* scratch) {
  Parts p;
  p.padded = scratch;
  p.u = p.padded + PaddedSize(s, g);
  p.v = p.u + 16 * int64_t{s.in_c} * s.out_c;
  p.m = p.v + 16 * g.v_stride;
  return p;
}

// x with its zero padding: input pixel (ih, iw) at (ih + pad_top, iw +
// pad_left) of an image of g.h rows of g.w pixels.
void Pad(const WindowShape& s, const Geometry& g, const float* x, float* padded) {
  const int c = s.in_c;
  const int copied = std::max(std::min(s.in_w, g.w - s.pad_left), 0);
  const int right = g.w - s.pad_left - copied;
  float* to = padded;
  for (int n = 0; n < s.batch; ++n) {
    for (int r = 0; r < g.h; ++r, to += int64_t{g.w} * c) {
      const int ih = r - s.pad_top;
      if (ih < 0 || ih >= s.in_h) {
        std::memset(to, 0, sizeof(float) * g.w * c);
        continue;
      }
      const float* from = x + (int64_t{n} * s.in_h + ih) * s.in_w * c;
      std::memset(to, 0, sizeof(float) * s.pad_left * c);
      std::memcpy(to + int64_t{s.pad_left} * c, from, sizeof(float) * copied * c);
      std::memset(to + int64_t{s.pad_left + copied} * c, 0, sizeof(float) * right * c);
    }
  }
}

// u[i][j] = (G g G^T)[i][j] for each (ci, co), G = [1 0 0; .5 .5 .5;
// .5 -.5 .5; 0 0 1], g the 3x3 window of w (HWIO).
void TransformKernel(const WindowShape& s, const float* w, float* u) {
  const int ci_n = s.in_c, co_n = s.out_c;
  for (int ci = 0; ci < ci_n; ++ci) {
    for (int co = 0; co < co_n; ++co) {
      float g[3][3];
      for (int kh = 0; kh < 3; ++kh) {
        for (int kw = 0; kw < 3; ++kw) {
          g[kh][kw] = w[((kh * 3 + kw) * int64_t{ci_n} + ci) * co_n + co];
        }
      }
      float t[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        t[0][j] = g[0][j];
        t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
        t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
        t[3][j] = g[2][j];
      }
      for (int i = 0; i < 4; ++i) {
        const float row[4] = {t[i][0], 0.5f * (t[i][0] + t[i][1] + t[i][2]),
                              0.5f * (t[i][0] - t[i][1] + t[i][2]), t[i][2]};
        for (int j = 0; j < 4; ++j) u[((i * 4 + j) * int64_t{ci_n} + ci) * co_n + co] = row[j];
      }
    }
  }
}

// The tile after (n, th, tw), in the output's order.
inline void NextTile(const Geometry& g, int* n, int* th, int* tw) {
  if (++*tw == g.tiles_w) {
    *tw = 0;
    if (++*th == g.tiles_h) {
      *th = 0;
      ++*n;
    }
  }
}

// v[pos][t] = (B^T d B)[pos] for the round's tiles, 16 channels at a time,
// B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], d a tile's 4x4 inputs.
PSC_AVX512 void TransformInputs(const WindowShape& s, const Geometry& g, const float* padded,
                                int n, int th, int tw, int count, float* v) {
  const int c = s.in_c;
  const int64_t pos_stride = g.v_stride;
  for (int t = 0; t < count; ++t, NextTile(g, &n, &th, &tw)) {
    const float* tile = padded + ((int64_t{n} * g.h + 2 * th) * g.w + 2 * tw) * c;
    for (int cv = 0; cv < c; cv += 16) {
      __m512 e[4][4];
      for (int j = 0; j < 4; ++j) {
        const __m512 d0 = _mm512_loadu_ps(tile + (0 * int64_t{g.w} + j) * c + cv);
        const __m512 d1 = _mm512_loadu_ps(tile + (1 * int64_t{g.w} + j) * c + cv);
        const __m512 d2 = _mm512_loadu_ps(tile + (2 * int64_t{g.w} + j) * c + cv);
        const __m512 d3 = _mm512_loadu_ps(tile + (3 * int64_t{g.w} + j) * c + cv);
        e[0][j] = _mm512_sub_ps(d0, d2);
        e[1][j] = _mm512_add_ps(d1, d2);
        e[2][j] = _mm512_sub_ps(d2, d1);
        e[3][j] = _mm512_sub_ps(d1, d3);
      }
      float* out = v + int64_t{t} * c + cv;
      for (int i = 0; i < 4; ++i) {
        _mm512_storeu_ps(out + (i * 4 + 0) * pos_stride, _mm512_sub_ps(e[i][0], e[i][2]));
        _mm512_storeu_ps(out + (i * 4 + 1) * pos_stride, _mm512_add_ps(e[i][1], e[i][2]));
        _mm512_storeu_ps(out + (i * 4 + 2) * pos_stride, _mm512_sub_ps(e[i][2], e[i][1]));
        _mm512_storeu_ps(out + (i * 4 + 3) * pos_stride, _mm512_sub_ps(e[i][1], e[i][3]));
      }
    }
  }
}

// y's 2x2 blocks = A^T m A + b for the round's tiles, A^T = [1 1 1 0;
// 0 1 -1 -1]; pixels past the output's last row or column are dropped.
PSC_AVX512 void TransformOutputs(const WindowShape& s, const Geometry& g, const float* m,
                                 const float* b, int n, int th, int tw, int count, float* y) {
  const int k = s.out_c;
  const int64_t pos_stride = g.m_stride;
  for (int t = 0; t < count; ++t, NextTile(g, &n, &th, &tw)) {
    const float* prod = m + int64_t{t} * k;
    const int oh = 2 * th, ow = 2 * tw;
    const bool full_h = oh + 1 < s.out_h, full_w = ow + 1 < s.out_w;
    float* out = y + ((int64_t{n} * s.out_h + oh) * s.out_w + ow) * k;
    for (int kv = 0; kv < k; kv += 16) {
      __m512 a0[4], a1[4];
      for (int j = 0; j < 4; ++j) {
        const __m512 m0 = _mm512_loadu_ps(prod + (0 * 4 + j) * pos_stride + kv);
        const __m512 m1 = _mm512_loadu_ps(prod + (1 * 4 + j) * pos_stride + kv);
        const __m512 m2 = _mm512_loadu_ps(prod + (2 * 4 + j) * pos_stride + kv);
        const __m512 m3 = _mm512_loadu_ps(prod + (3 * 4 + j) * pos_stride + kv);
        a0[j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
        a1[j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
      }
      const __m512 bias = b != nullptr ? _mm512_loadu_ps(b + kv) : _mm512_setzero_ps();
      const __m512 y00 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0[0], a0[1]), a0[2]), bias);
      const __m512 y01 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(a0[1], a0[2]), a0[3]), bias);
      const __m512 y10 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a1[0], a1[1]), a1[2]), bias);
      const __m512 y11 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(a1[1], a1[2]), a1[3]), bias);
      _mm512_storeu_ps(out + kv, y00);
      if (full_w) _mm512_storeu_ps(out + k + kv, y01);
      if (full_h) {
        float* below = out + int64_t{s.out_w} * k;
        _mm512_storeu_ps(below + kv, y10);
        if (full_w) _mm512_storeu_ps(below + k + kv, y11);
      }
    }
  }
}

}  // namespace

bool WinogradApplies(const WindowShape& s) {
  return SmallGemmAvailable() && s.window_h == 3 && s.window_w == 3 && s.stride_h == 1 &&
         s.stride_w == 1 && s.dilation_h == 1 && s.dilation_w == 1 && s.in_c % 16 == 0 &&
         s.out_c % 16 == 0 && s.in_c >= 32 && s.out_c >= 32 && s.out_pixels() > 0;
}

int64_t WinogradScratchFloats(const WindowShape& s) {
  if (!WinogradApplies(s)) return 0;
  const Geometry g = GeometryOf(s);
  return PaddedSize(s, g) + 16 * int64_t{s.in_c} * s.out_c + 16 * (g.v_stride + g.m_stride);
}

void WinogradConv3x3(const WindowShape& s, const float* x, const float* w, const float* b,
                     float* scratch, float* y, double* sums) {
  const Geometry g = GeometryOf(s);
  const Parts p = PartsOf(s, g, scratch);
  Pad(s, g, x, p.padded);
  TransformKernel(s, w, p.u);
  int n = 0, th = 0, tw = 0, summed = 0;
  for (int64_t t0 = 0; t0 < g.tiles; t0 += g.chunk) {
    const int count = static_cast<int>(std::min<int64_t>(g.chunk, g.tiles - t0));
    TransformInputs(s, g, p.padded, n, th, tw, count, p.v);
    for (int pos = 0; pos < 16; ++pos) {
      SmallGemm(count, s.out_c, s.in_c, p.v + pos * g.v_stride, s.in_c, 1,
                p.u + pos * int64_t{s.in_c} * s.out_c, s.out_c, false, p.m + pos * g.m_stride,
                s.out_c);
    }
    TransformOutputs(s, g, p.m, b, n, th, tw, count, y);
    for (int i = 0; i < count; ++i) NextTile(g, &n, &th, &tw);
    // The images this round finished, while their outputs are in cache.
    const int finished = t0 + count == g.tiles ? s.batch : n;
    for (; sums != nullptr && summed < finished; ++summed) {
      const int64_t pixels = int64_t{s.out_h} * s.out_w;
      BatchNormSums<CpuDevice>()(CpuDevice(), {pixels, s.out_c}, y + summed * pixels * s.out_c,
                                 sums, sums + s.out_c);
    }
  }
}

}  // namespace kernels
}  // namespace pscluster
