#include "compute/kernels/convolution.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "compute/kernels/batch_norm.h"
#include "compute/kernels/cpu_blas.h"
#include "compute/kernels/small_gemm.h"
#include "compute/kernels/winograd.h"

namespace pscluster {
namespace kernels {

namespace {

// The convolution's GEMMs run over tiles of this many bytes of columns, so
// that a tile written by im2col (forward) or by the column-gradient GEMM
// (backward) is still in L2 when it is read (2 MiB per core here).
constexpr int64_t kTileBytes = 512 * 1024;

int64_t TileRows(const WindowShape& s) {
  const int64_t rows =
      kTileBytes / std::max<int64_t>(static_cast<int64_t>(sizeof(float)) * s.patch_size(), 1);
  return std::max<int64_t>(rows, 32);
}

// Whether the convolution reads its input pixel by pixel as it is (a 1x1
// window, stride 1, no padding): then columns are x and dcolumns are dx.
bool IsPointwise(const WindowShape& s) {
  return s.window_h == 1 && s.window_w == 1 && s.stride_h == 1 && s.stride_w == 1 &&
         s.pad_top == 0 && s.pad_left == 0 && s.out_h == s.in_h && s.out_w == s.in_w;
}

// Output pixel p's coordinates.
struct Pixel {
  int n, oh, ow;
};
Pixel PixelAt(const WindowShape& s, int64_t p) {
  const int64_t per_image = int64_t{s.out_h} * s.out_w;
  const int n = static_cast<int>(p / per_image);
  const int64_t r = p % per_image;
  return {n, static_cast<int>(r / s.out_w), static_cast<int>(r % s.out_w)};
}

// The output pixel after *at, in (n, oh, ow) order.
inline void Advance(const WindowShape& s, Pixel* at) {
  if (++at->ow == s.out_w) {
    at->ow = 0;
    if (++at->oh == s.out_h) {
      at->oh = 0;
      ++at->n;
    }
  }
}

// Im2ColGeneral for output pixels [p0, p1): columns holds their rows only.
void Im2ColRows(const WindowShape& s, const float* x, int64_t p0, int64_t p1, float* columns) {
  if (p0 >= p1) return;  // also no output pixels at all (PixelAt divides by them)
  const int c = s.in_c;
  float* col = columns;
  Pixel at = PixelAt(s, p0);
  for (int64_t p = p0; p < p1; ++p) {
    const float* image = x + int64_t{at.n} * s.in_h * s.in_w * c;
    const int iw0 = at.ow * s.stride_w - s.pad_left;
    const int iw_last = iw0 + (s.window_w - 1) * s.dilation_w;
    // A window row wholly inside the input with undilated columns is one
    // contiguous run of window_w * c floats.
    const bool row_inside = s.dilation_w == 1 && iw0 >= 0 && iw_last < s.in_w;
    for (int kh = 0; kh < s.window_h; ++kh) {
      const int ih = at.oh * s.stride_h - s.pad_top + kh * s.dilation_h;
      if (ih < 0 || ih >= s.in_h) {
        std::memset(col, 0, sizeof(float) * s.window_w * c);
        col += s.window_w * c;
        continue;
      }
      const float* in_row = image + int64_t{ih} * s.in_w * c;
      if (row_inside) {
        std::memcpy(col, in_row + int64_t{iw0} * c, sizeof(float) * s.window_w * c);
        col += s.window_w * c;
        continue;
      }
      for (int kw = 0; kw < s.window_w; ++kw) {
        const int iw = iw0 + kw * s.dilation_w;
        if (iw < 0 || iw >= s.in_w) {
          std::memset(col, 0, c * sizeof(float));
        } else {
          std::memcpy(col, in_row + int64_t{iw} * c, c * sizeof(float));
        }
        col += c;
      }
    }
    Advance(s, &at);
  }
}

// Col2ImGeneral for output pixels [p0, p1): dcolumns holds their rows only.
void Col2ImRows(const WindowShape& s, const float* dcolumns, int64_t p0, int64_t p1, float* dx) {
  if (p0 >= p1) return;
  const int c = s.in_c;
  const float* col = dcolumns;
  Pixel at = PixelAt(s, p0);
  for (int64_t p = p0; p < p1; ++p) {
    float* image = dx + int64_t{at.n} * s.in_h * s.in_w * c;
    for (int kh = 0; kh < s.window_h; ++kh) {
      const int ih = at.oh * s.stride_h - s.pad_top + kh * s.dilation_h;
      if (ih < 0 || ih >= s.in_h) {
        col += s.window_w * c;
        continue;
      }
      for (int kw = 0; kw < s.window_w; ++kw) {
        const int iw = at.ow * s.stride_w - s.pad_left + kw * s.dilation_w;
        if (iw >= 0 && iw < s.in_w) {
          float* to = image + (int64_t{ih} * s.in_w + iw) * c;
          for (int i = 0; i < c; ++i) to[i] += col[i];
        }
        col += c;
      }
    }
    Advance(s, &at);
  }
}

// The convolution whose output is a stride-1 convolution's input gradient:
// over dy, padded so that every input pixel sees each window cell that read
// it, with the window flipped and in and out channels swapped.
WindowShape InputGradShape(const WindowShape& s) {
  WindowShape t;  // dy -> dx
  t.batch = s.batch;
  t.in_h = s.out_h;
  t.in_w = s.out_w;
  t.in_c = s.out_c;
  t.window_h = s.window_h;
  t.window_w = s.window_w;
  t.dilation_h = s.dilation_h;
  t.dilation_w = s.dilation_w;
  t.pad_top = (s.window_h - 1) * s.dilation_h - s.pad_top;
  t.pad_left = (s.window_w - 1) * s.dilation_w - s.pad_left;
  t.out_h = s.in_h;
  t.out_w = s.in_w;
  t.out_c = s.in_c;
  return t;
}

// The kernel of InputGradShape(s)'s convolution: flipped[(kh, kw, co), ci] =
// w[(window_h-1-kh, window_w-1-kw, ci), co].
std::vector<float> FlippedKernel(const WindowShape& s, const float* w) {
  std::vector<float> flipped(s.patch_size() * s.out_c);
  for (int kh = 0; kh < s.window_h; ++kh) {
    for (int kw = 0; kw < s.window_w; ++kw) {
      const int64_t from = (int64_t{s.window_h - 1 - kh} * s.window_w + (s.window_w - 1 - kw));
      const int64_t to = int64_t{kh} * s.window_w + kw;
      for (int ci = 0; ci < s.in_c; ++ci) {
        for (int co = 0; co < s.out_c; ++co) {
          flipped[(to * s.out_c + co) * s.in_c + ci] = w[(from * s.in_c + ci) * s.out_c + co];
        }
      }
    }
  }
  return flipped;
}

// A stride-1 convolution's input gradient computed as that convolution
// (InputGradShape), tile by tile of input pixels: dy's columns in the first
// rows of `dcolumns` (dcolumns_floats long), one GEMM straight into dx (no
// zeroing, no scatter-add). Returns false, having done nothing, where it
// does not apply: a stride, SmallGemm unavailable or in_c not a multiple of
// 16, or dcolumns too small for a useful tile.
bool InputGradAsConvolution(const WindowShape& s, const float* w, const float* dy,
                            float* dcolumns, int64_t dcolumns_floats, float* dx) {
  if (s.stride_h != 1 || s.stride_w != 1 || s.in_c % 16 != 0 || !SmallGemmAvailable()) {
    return false;
  }
  const WindowShape t = InputGradShape(s);
  const int64_t m = t.out_pixels();
  const int64_t k = t.patch_size();
  const int64_t capacity = dcolumns_floats / std::max<int64_t>(k, 1);
  const int64_t tile = std::min(TileRows(t), capacity);
  if (tile < std::min<int64_t>(m, 32)) return false;
  const std::vector<float> flipped = FlippedKernel(s, w);
  for (int64_t p0 = 0; p0 < m; p0 += tile) {
    const int rows = static_cast<int>(std::min(tile, m - p0));
    Im2ColRows(t, dy, p0, p0 + rows, dcolumns);
    SmallGemm(rows, s.in_c, static_cast<int>(k), dcolumns, k, 1, flipped.data(), s.in_c, false,
              dx + p0 * s.in_c, s.in_c);
  }
  return true;
}

}  // namespace

void Im2ColGeneral(const WindowShape& s, const float* x, float* columns) {
  Im2ColRows(s, x, 0, s.out_pixels(), columns);
}

void Col2ImGeneral(const WindowShape& s, const float* dcolumns, float* dx) {
  Col2ImRows(s, dcolumns, 0, s.out_pixels(), dx);
}

namespace {

// The forward for output pixels [p0, p0 + rows): their columns written to
// `col` (or, pointwise, read from x where `col` is null), y's rows from one
// GEMM.
void ForwardTile(const WindowShape& s, const float* x, const float* w, const float* b,
                 int64_t p0, int rows, float* col, float* y) {
  const int k = static_cast<int>(s.patch_size());
  const float* a = col;
  if (IsPointwise(s)) {  // the columns are x's rows; the GEMM reads x
    a = x + p0 * k;
    if (col != nullptr) std::memcpy(col, a, sizeof(float) * rows * k);
  } else {
    Im2ColRows(s, x, p0, p0 + rows, col);
  }
  float* out = y + p0 * s.out_c;
  if (!SmallGemm(rows, s.out_c, k, a, k, 1, w, s.out_c, false, out, s.out_c)) {
    CpuGemm(false, false, rows, s.out_c, k, 1.0f, a, k, w, s.out_c, 0.0f, out, s.out_c);
  }
  if (b != nullptr) {
    for (int r = 0; r < rows; ++r) {
      float* row = out + int64_t{r} * s.out_c;
      for (int o = 0; o < s.out_c; ++o) row[o] += b[o];
    }
  }
}

// db (= or +=) the sums of dy's columns.
void BiasGrads(const WindowShape& s, const float* dy, bool accumulate, float* db) {
  if (!accumulate) std::fill(db, db + s.out_c, 0.0f);
  const int64_t m = s.out_pixels();
  for (int64_t p = 0; p < m; ++p) {
    const float* row = dy + p * s.out_c;
    for (int o = 0; o < s.out_c; ++o) db[o] += row[o];
  }
}

// dw [k, out_c] (+)= columns^T dy and db (+)= dy's column sums, where
// `columns` holds the whole im2col or, when null, each tile's columns are
// built again from x into `scratch` (TileRows(s) rows).
void WeightGrads(const WindowShape& s, const float* x, const float* columns, const float* dy,
                 bool accumulate, float* dw, float* db, float* scratch) {
  const int64_t m = s.out_pixels();
  const int k = static_cast<int>(s.patch_size());
  const int64_t tile = TileRows(s);
  const bool pointwise = IsPointwise(s);
  auto tile_columns = [&](int64_t p0, int rows) -> const float* {
    if (columns != nullptr) return columns + p0 * k;
    if (pointwise) return x + p0 * k;
    Im2ColRows(s, x, p0, p0 + rows, scratch);
    return scratch;
  };
  // Without packing where SmallGemm runs: dw's transpose dy^T columns, tile
  // by tile of pixels (summed in float across tiles), so that each step
  // reads a contiguous run of a columns row and broadcasts dy's adjacent
  // channels.
  if (SmallGemmAvailable() && k % 16 == 0 && m > 0) {
    std::vector<float> dwt(int64_t{k} * s.out_c);
    for (int64_t p0 = 0; p0 < m; p0 += tile) {
      const int rows = static_cast<int>(std::min(tile, m - p0));
      SmallGemm(s.out_c, k, rows, dy + p0 * s.out_c, 1, s.out_c, tile_columns(p0, rows), k,
                p0 > 0, dwt.data(), k);
    }
    for (int i = 0; i < k; ++i) {
      float* row = dw + int64_t{i} * s.out_c;
      for (int o = 0; o < s.out_c; ++o) {
        const float v = dwt[int64_t{o} * k + i];
        row[o] = accumulate ? row[o] + v : v;
      }
    }
  } else if (columns != nullptr || pointwise) {
    CpuGemm(true, false, k, s.out_c, static_cast<int>(m), 1.0f, tile_columns(0, 0), k, dy,
            s.out_c, accumulate ? 1.0f : 0.0f, dw, s.out_c);
  } else {
    if (!accumulate) std::fill(dw, dw + int64_t{k} * s.out_c, 0.0f);
    for (int64_t p0 = 0; p0 < m; p0 += tile) {
      const int rows = static_cast<int>(std::min(tile, m - p0));
      CpuGemm(true, false, k, s.out_c, rows, 1.0f, tile_columns(p0, rows), k, dy + p0 * s.out_c,
              s.out_c, 1.0f, dw, s.out_c);
    }
  }
  if (db != nullptr) BiasGrads(s, dy, accumulate, db);
}

// dx (overwritten) from dy, tile by tile through `scratch`, which holds
// `scratch_floats` floats (at least TileRows(s) columns rows).
void InputGrads(const WindowShape& s, const float* w, const float* dy, float* scratch,
                int64_t scratch_floats, float* dx) {
  const int64_t m = s.out_pixels();
  const int k = static_cast<int>(s.patch_size());
  const int64_t tile = TileRows(s);
  // dcolumns = dy w^T; SmallGemm reads w^T as a row-major [out_c, k].
  const bool small = SmallGemmAvailable() && k % 16 == 0;
  std::vector<float> wt(small ? int64_t{k} * s.out_c : 0);
  for (int i = 0; small && i < k; ++i) {
    for (int o = 0; o < s.out_c; ++o) wt[int64_t{o} * k + i] = w[int64_t{i} * s.out_c + o];
  }
  auto column_grads = [&](int64_t p0, int rows, float* out) {
    const float* g = dy + p0 * s.out_c;
    if (!small || !SmallGemm(rows, k, s.out_c, g, s.out_c, 1, wt.data(), k, false, out, k)) {
      CpuGemm(false, true, rows, k, s.out_c, 1.0f, g, s.out_c, w, s.out_c, 0.0f, out, k);
    }
  };
  if (IsPointwise(s)) {  // dx = dy w^T, row for row
    column_grads(0, static_cast<int>(m), dx);
    return;
  }
  if (InputGradAsConvolution(s, w, dy, scratch, scratch_floats, dx)) return;
  // Tile by tile: dcolumns' rows = dy's rows w^T, scattered back while they
  // are in cache.
  std::fill(dx, dx + int64_t{s.batch} * s.in_h * s.in_w * s.in_c, 0.0f);
  for (int64_t p0 = 0; p0 < m; p0 += tile) {
    const int rows = static_cast<int>(std::min(tile, m - p0));
    column_grads(p0, rows, scratch);
    Col2ImRows(s, scratch, p0, p0 + rows, dx);
  }
}

}  // namespace

void ConvGeneralForward(const WindowShape& s, const float* x, const float* w, const float* b,
                        float* columns, float* y) {
  const int64_t m = s.out_pixels();
  const int64_t tile = TileRows(s);
  for (int64_t p0 = 0; p0 < m; p0 += tile) {
    const int rows = static_cast<int>(std::min(tile, m - p0));
    ForwardTile(s, x, w, b, p0, rows, columns + p0 * s.patch_size(), y);
  }
}

void ConvGeneralBackward(const WindowShape& s, const float* columns, const float* w,
                         const float* dy, bool accumulate, float* dw, float* db, float* dcolumns,
                         float* dx) {
  WeightGrads(s, nullptr, columns, dy, accumulate, dw, db, nullptr);
  if (dx != nullptr) InputGrads(s, w, dy, dcolumns, s.out_pixels() * s.patch_size(), dx);
}

namespace {

// The implicit convolution: the GEMMs read the input where it lies, one
// window row (window_w * in_c contiguous floats) per run of their reduction
// (small_gemm.h's StridedOperands), so that no columns are written at all.
// Nothing is padded either: window rows above or below the input are left
// out of the reduction, and the few output pixels whose window crosses the
// left or right border (one a side for a 3x3 "same" window) read the part
// of each window row inside the input, alone.

// Window rows [lo, hi) of an output row whose window starts at input row
// `first` lie inside the input; likewise for window columns.
struct Span {
  int lo, hi;
};
Span Inside(int first, int window, int dilation, int in) {
  int lo = 0;
  while (lo < window && first + lo * dilation < 0) ++lo;
  int hi = window;
  while (hi > lo && first + (hi - 1) * dilation >= in) --hi;
  return {lo, hi};
}

// Output columns [lo, hi) whose whole window row lies inside the input
// (dilation_w is 1).
Span InteriorColumns(const WindowShape& s) {
  int lo = 0;
  while (lo < s.out_w && lo * s.stride_w - s.pad_left < 0) ++lo;
  int hi = s.out_w;
  while (hi > lo && (hi - 1) * s.stride_w - s.pad_left + s.window_w > s.in_w) --hi;
  return {lo, hi};
}

bool ImplicitApplies(const WindowShape& s) {
  return SmallGemmAvailable() && s.out_c % 16 == 0 && s.dilation_w == 1 && s.out_pixels() > 0 &&
         !IsPointwise(s);
}

// sums[0, c) and sums[c, 2c) += the per-channel sums and sums of squares
// of `rows` rows of y.
void AddSums(int64_t rows, int c, const float* y, double* sums) {
  BatchNormSums<CpuDevice>()(CpuDevice(), {rows, c}, y, sums, sums + c);
}

// y = conv(x, w) + b (b may be null), one output row at a time; `sums` as
// ConvForward's.
void ImplicitForward(const WindowShape& s, const float* x, const float* w, const float* b,
                     float* y, double* sums) {
  const int c = s.in_c;
  const int64_t run = int64_t{s.window_w} * c;  // a window row's floats
  const Span interior = InteriorColumns(s);
  StridedOperands op;
  op.a_outer = int64_t{s.dilation_h} * s.in_w * c;
  op.ldb = s.out_c;
  op.b_outer = run * s.out_c;
  // Output rows [full.lo, full.hi) have every window row inside the input.
  Span full = {0, s.out_h};
  while (full.lo < s.out_h &&
         Inside(full.lo * s.stride_h - s.pad_top, s.window_h, s.dilation_h, s.in_h).lo > 0) {
    ++full.lo;
  }
  while (full.hi > full.lo && Inside((full.hi - 1) * s.stride_h - s.pad_top, s.window_h,
                                     s.dilation_h, s.in_h).hi < s.window_h) {
    --full.hi;
  }
  const int64_t out_row = int64_t{s.out_w} * s.out_c;
  for (int n = 0; n < s.batch; ++n) {
    float* image = y + int64_t{n} * s.out_h * out_row;
    // `count` pixels from (oh, ow), along the row or `down` the column,
    // whose window rows `rows` and columns `cols` are inside the input.
    auto pixels = [&](int oh, int ow, int count, bool down, Span rows, Span cols) {
      const bool inside = rows.hi > rows.lo && cols.hi > cols.lo;
      op.k_outer = inside ? rows.hi - rows.lo : 0;
      op.k_inner = inside ? (cols.hi - cols.lo) * c : 0;
      const int ih = oh * s.stride_h - s.pad_top + rows.lo * s.dilation_h;
      const int iw = ow * s.stride_w - s.pad_left + cols.lo;
      op.a = !inside ? x : x + ((int64_t{n} * s.in_h + ih) * s.in_w + iw) * c;
      op.a_row = down ? int64_t{s.stride_h} * s.in_w * c : int64_t{s.stride_w} * c;
      op.b = !inside ? w : w + (rows.lo * run + int64_t{cols.lo} * c) * s.out_c;
      SmallGemmStrided(count, s.out_c, op, false, image + oh * out_row + int64_t{ow} * s.out_c,
                       down ? static_cast<int>(out_row) : s.out_c);
    };
    const Span all_columns = {0, s.window_w};
    for (int oh = 0; oh < s.out_h; ++oh) {  // the pixels whose window rows are whole
      const Span rows = Inside(oh * s.stride_h - s.pad_top, s.window_h, s.dilation_h, s.in_h);
      if (interior.hi > interior.lo) {
        pixels(oh, interior.lo, interior.hi - interior.lo, false, rows, all_columns);
      }
    }
    // A border column's pixels: down the rows whose window rows are all
    // inside at once (a pixel alone is a GEMM of one row), then the others.
    for (int ow = 0; ow < s.out_w; ++ow) {
      if (ow >= interior.lo && ow < interior.hi) continue;
      const Span cols = Inside(ow * s.stride_w - s.pad_left, s.window_w, 1, s.in_w);
      if (full.hi > full.lo) {
        pixels(full.lo, ow, full.hi - full.lo, true, {0, s.window_h}, cols);
      }
      for (int oh = 0; oh < s.out_h; ++oh) {
        if (oh >= full.lo && oh < full.hi) continue;
        pixels(oh, ow, 1, false,
               Inside(oh * s.stride_h - s.pad_top, s.window_h, s.dilation_h, s.in_h), cols);
      }
    }
    for (int64_t p = 0; b != nullptr && p < int64_t{s.out_h} * s.out_w; ++p) {
      float* row = image + p * s.out_c;
      for (int o = 0; o < s.out_c; ++o) row[o] += b[o];
    }
    if (sums != nullptr) {
      const int64_t pixels = int64_t{s.out_h} * s.out_w;
      AddSums(pixels, s.out_c, y + n * pixels * s.out_c, sums);
    }
  }
}

// dw^T [out_c, patch] = dy^T times x's windows, image by image and window
// row by window row: the reduction runs over the output pixels whose
// window row kh lies inside the input, reading it where it lies; the
// border columns' pixels add their inside part alone. Needs in_c % 16 == 0.
void ImplicitWeightGradT(const WindowShape& s, const float* x, const float* dy, float* dwt) {
  const int c = s.in_c;
  const int run = s.window_w * c;
  const int k = static_cast<int>(s.patch_size());
  const Span interior = InteriorColumns(s);
  std::fill(dwt, dwt + int64_t{k} * s.out_c, 0.0f);
  StridedOperands op;
  op.a_row = 1;
  for (int n = 0; n < s.batch; ++n) {
    for (int kh = 0; kh < s.window_h; ++kh) {
      // Output rows [oh_lo, oh_hi) read input row oh * stride - pad_top + kh * dilation.
      int oh_lo = 0, oh_hi = s.out_h;
      while (oh_lo < s.out_h && oh_lo * s.stride_h - s.pad_top + kh * s.dilation_h < 0) ++oh_lo;
      while (oh_hi > oh_lo &&
             (oh_hi - 1) * s.stride_h - s.pad_top + kh * s.dilation_h >= s.in_h) {
        --oh_hi;
      }
      if (oh_hi <= oh_lo) continue;
      const int ih_lo = oh_lo * s.stride_h - s.pad_top + kh * s.dilation_h;
      const float* dy_rows = dy + ((int64_t{n} * s.out_h + oh_lo) * s.out_w) * s.out_c;
      const float* x_rows = x + (int64_t{n} * s.in_h + ih_lo) * s.in_w * c;
      if (interior.hi > interior.lo) {  // rows of pixels, each reading a whole window row
        op.k_outer = oh_hi - oh_lo;
        op.k_inner = interior.hi - interior.lo;
        op.a = dy_rows + int64_t{interior.lo} * s.out_c;
        op.a_col = s.out_c;
        op.a_outer = int64_t{s.out_w} * s.out_c;
        op.b = x_rows + int64_t{interior.lo * s.stride_w - s.pad_left} * c;
        op.ldb = int64_t{s.stride_w} * c;
        op.b_outer = int64_t{s.stride_h} * s.in_w * c;
        SmallGemmStrided(s.out_c, run, op, true, dwt + int64_t{kh} * run, k);
      }
      for (int ow = 0; ow < s.out_w; ++ow) {  // a border column's pixels, down the rows
        if (ow >= interior.lo && ow < interior.hi) continue;
        const int iw0 = ow * s.stride_w - s.pad_left;
        const Span cols = Inside(iw0, s.window_w, 1, s.in_w);
        if (cols.hi <= cols.lo) continue;
        op.k_outer = 1;
        op.k_inner = oh_hi - oh_lo;
        op.a = dy_rows + int64_t{ow} * s.out_c;
        op.a_col = int64_t{s.out_w} * s.out_c;
        op.a_outer = 0;
        op.b = x_rows + int64_t{iw0 + cols.lo} * c;
        op.ldb = int64_t{s.stride_h} * s.in_w * c;
        op.b_outer = 0;
        SmallGemmStrided(s.out_c, (cols.hi - cols.lo) * c, op, true,
                         dwt + int64_t{kh} * run + int64_t{cols.lo} * c, k);
      }
    }
  }
}

}  // namespace

int64_t ConvScratchFloats(const WindowShape& s) {
  const int64_t forward = std::min(TileRows(s), s.out_pixels()) * s.patch_size();
  const WindowShape t = InputGradShape(s);
  const int64_t input_grad = std::min(TileRows(t), t.out_pixels()) * t.patch_size();
  return std::max<int64_t>(
      {forward, input_grad, WinogradScratchFloats(s), WinogradScratchFloats(t), 1});
}

void ConvForward(const WindowShape& s, const float* x, const float* w, const float* b,
                 float* scratch, float* y, double* sums) {
  if (WinogradApplies(s)) {
    WinogradConv3x3(s, x, w, b, scratch, y, sums);
    return;
  }
  if (ImplicitApplies(s)) {
    ImplicitForward(s, x, w, b, y, sums);
    return;
  }
  const int64_t m = s.out_pixels();
  const int64_t tile = TileRows(s);
  const bool pointwise = IsPointwise(s);
  for (int64_t p0 = 0; p0 < m; p0 += tile) {
    const int rows = static_cast<int>(std::min(tile, m - p0));
    ForwardTile(s, x, w, b, p0, rows, pointwise ? nullptr : scratch, y);
    if (sums != nullptr) AddSums(rows, s.out_c, y + p0 * s.out_c, sums);
  }
}

void ConvBackward(const WindowShape& s, const float* x, const float* w, const float* dy,
                  bool accumulate, float* dw, float* db, float* scratch, float* dx) {
  const int k = static_cast<int>(s.patch_size());
  if (ImplicitApplies(s) && s.in_c % 16 == 0) {
    std::vector<float> dwt(int64_t{k} * s.out_c);
    ImplicitWeightGradT(s, x, dy, dwt.data());
    for (int i = 0; i < k; ++i) {
      float* row = dw + int64_t{i} * s.out_c;
      for (int o = 0; o < s.out_c; ++o) {
        const float v = dwt[int64_t{o} * k + i];
        row[o] = accumulate ? row[o] + v : v;
      }
    }
    if (db != nullptr) BiasGrads(s, dy, accumulate, db);
  } else {
    WeightGrads(s, x, nullptr, dy, accumulate, dw, db, scratch);
  }
  if (dx == nullptr) return;
  const WindowShape t = InputGradShape(s);
  if (s.stride_h == 1 && s.stride_w == 1 && WinogradApplies(t)) {
    WinogradConv3x3(t, dy, FlippedKernel(s, w).data(), nullptr, scratch, dx, nullptr);
    return;
  }
  if (s.stride_h == 1 && s.stride_w == 1 && ImplicitApplies(t)) {
    ImplicitForward(t, dy, FlippedKernel(s, w).data(), nullptr, dx, nullptr);
    return;
  }
  InputGrads(s, w, dy, scratch, ConvScratchFloats(s), dx);
}

}  // namespace kernels
}  // namespace pscluster
