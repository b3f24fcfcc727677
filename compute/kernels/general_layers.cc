#include "compute/kernels/general_layers.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "compute/kernels/cpu_blas.h"

namespace pscluster {
namespace kernels {

void KerasWindow(int in, int window, int stride, bool same, int* out, int* pad_before) {
  if (same) {
    *out = (in + stride - 1) / stride;
    const int total = std::max((*out - 1) * stride + window - in, 0);
    *pad_before = total / 2;
  } else {
    *out = in < window ? 0 : (in - window) / stride + 1;
    *pad_before = 0;
  }
}

void KerasDilatedWindow(int in, int window, int stride, int dilation, bool same, int* out,
                        int* pad_before) {
  KerasWindow(in, (window - 1) * dilation + 1, stride, same, out, pad_before);
}

void Im2ColGeneral(const WindowShape& s, const float* x, float* columns) {
  const int c = s.in_c;
  float* col = columns;
  for (int n = 0; n < s.batch; ++n) {
    const float* image = x + int64_t{n} * s.in_h * s.in_w * c;
    for (int oh = 0; oh < s.out_h; ++oh) {
      for (int ow = 0; ow < s.out_w; ++ow) {
        for (int kh = 0; kh < s.window_h; ++kh) {
          const int ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
          for (int kw = 0; kw < s.window_w; ++kw) {
            const int iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
            if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) {
              std::memset(col, 0, c * sizeof(float));
            } else {
              std::memcpy(col, image + (int64_t{ih} * s.in_w + iw) * c, c * sizeof(float));
            }
            col += c;
          }
        }
      }
    }
  }
}

void Col2ImGeneral(const WindowShape& s, const float* dcolumns, float* dx) {
  const int c = s.in_c;
  const float* col = dcolumns;
  for (int n = 0; n < s.batch; ++n) {
    float* image = dx + int64_t{n} * s.in_h * s.in_w * c;
    for (int oh = 0; oh < s.out_h; ++oh) {
      for (int ow = 0; ow < s.out_w; ++ow) {
        for (int kh = 0; kh < s.window_h; ++kh) {
          const int ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
          for (int kw = 0; kw < s.window_w; ++kw) {
            const int iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
            if (ih >= 0 && ih < s.in_h && iw >= 0 && iw < s.in_w) {
              float* to = image + (int64_t{ih} * s.in_w + iw) * c;
              for (int i = 0; i < c; ++i) to[i] += col[i];
            }
            col += c;
          }
        }
      }
    }
  }
}

void ConvGeneralForward(const WindowShape& s, const float* x, const float* w, const float* b,
                        float* columns, float* y) {
  Im2ColGeneral(s, x, columns);
  const int m = static_cast<int>(s.out_pixels());
  const int k = static_cast<int>(s.patch_size());
  CpuGemm(false, false, m, s.out_c, k, 1.0f, columns, k, w, s.out_c, 0.0f, y, s.out_c);
  if (b != nullptr) {
    for (int64_t p = 0; p < m; ++p) {
      float* row = y + p * s.out_c;
      for (int o = 0; o < s.out_c; ++o) row[o] += b[o];
    }
  }
}

void ConvGeneralBackward(const WindowShape& s, const float* columns, const float* w,
                         const float* dy, bool accumulate, float* dw, float* db, float* dcolumns,
                         float* dx) {
  const int m = static_cast<int>(s.out_pixels());
  const int k = static_cast<int>(s.patch_size());
  // dw [k, out_c] (+)= columns^T dy.
  CpuGemm(true, false, k, s.out_c, m, 1.0f, columns, k, dy, s.out_c, accumulate ? 1.0f : 0.0f,
          dw, s.out_c);
  if (db != nullptr) {
    if (!accumulate) std::fill(db, db + s.out_c, 0.0f);
    for (int64_t p = 0; p < m; ++p) {
      const float* row = dy + p * s.out_c;
      for (int o = 0; o < s.out_c; ++o) db[o] += row[o];
    }
  }
  if (dx == nullptr) return;
  // dcolumns [m, k] = dy w^T, then scattered back.
  CpuGemm(false, true, m, k, s.out_c, 1.0f, dy, s.out_c, w, s.out_c, 0.0f, dcolumns, k);
  std::fill(dx, dx + int64_t{s.batch} * s.in_h * s.in_w * s.in_c, 0.0f);
  Col2ImGeneral(s, dcolumns, dx);
}

void MaxPoolGeneralForward(const WindowShape& s, const float* x, float* y, int64_t* argmax) {
  const int c = s.in_c;
  for (int n = 0; n < s.batch; ++n) {
    const int64_t base = int64_t{n} * s.in_h * s.in_w * c;
    for (int oh = 0; oh < s.out_h; ++oh) {
      for (int ow = 0; ow < s.out_w; ++ow) {
        const int64_t out = ((int64_t{n} * s.out_h + oh) * s.out_w + ow) * c;
        for (int ch = 0; ch < c; ++ch) {
          float best = -std::numeric_limits<float>::infinity();
          int64_t at = -1;
          for (int kh = 0; kh < s.window_h; ++kh) {
            const int ih = oh * s.stride_h - s.pad_top + kh;
            if (ih < 0 || ih >= s.in_h) continue;
            for (int kw = 0; kw < s.window_w; ++kw) {
              const int iw = ow * s.stride_w - s.pad_left + kw;
              if (iw < 0 || iw >= s.in_w) continue;
              const int64_t i = base + (int64_t{ih} * s.in_w + iw) * c + ch;
              if (at < 0 || x[i] > best) {
                best = x[i];
                at = i;
              }
            }
          }
          y[out + ch] = at < 0 ? 0.0f : best;
          argmax[out + ch] = at;
        }
      }
    }
  }
}

void MaxPoolGeneralBackward(const WindowShape& s, const float* dy, const int64_t* argmax,
                            float* dx) {
  std::fill(dx, dx + int64_t{s.batch} * s.in_h * s.in_w * s.in_c, 0.0f);
  const int64_t n = s.out_pixels() * s.in_c;
  for (int64_t i = 0; i < n; ++i) {
    if (argmax[i] >= 0) dx[argmax[i]] += dy[i];
  }
}

namespace {

// Calls f(input offset of the window's (ih, iw) cell, channel 0) for each
// cell of output pixel (n, oh, ow) inside the input; returns their count.
template <typename F>
int ForWindow(const WindowShape& s, int n, int oh, int ow, F f) {
  int count = 0;
  for (int kh = 0; kh < s.window_h; ++kh) {
    const int ih = oh * s.stride_h - s.pad_top + kh;
    if (ih < 0 || ih >= s.in_h) continue;
    for (int kw = 0; kw < s.window_w; ++kw) {
      const int iw = ow * s.stride_w - s.pad_left + kw;
      if (iw < 0 || iw >= s.in_w) continue;
      f(((int64_t{n} * s.in_h + ih) * s.in_w + iw) * s.in_c);
      ++count;
    }
  }
  return count;
}

}  // namespace

void AvgPoolGeneralForward(const WindowShape& s, const float* x, float* y) {
  const int c = s.in_c;
  for (int n = 0; n < s.batch; ++n) {
    for (int oh = 0; oh < s.out_h; ++oh) {
      for (int ow = 0; ow < s.out_w; ++ow) {
        float* out = y + ((int64_t{n} * s.out_h + oh) * s.out_w + ow) * c;
        std::fill(out, out + c, 0.0f);
        const int count = ForWindow(s, n, oh, ow, [&](int64_t at) {
          for (int ch = 0; ch < c; ++ch) out[ch] += x[at + ch];
        });
        const float inv = count > 0 ? 1.0f / count : 0.0f;
        for (int ch = 0; ch < c; ++ch) out[ch] *= inv;
      }
    }
  }
}

void AvgPoolGeneralBackward(const WindowShape& s, const float* dy, float* dx) {
  const int c = s.in_c;
  std::fill(dx, dx + int64_t{s.batch} * s.in_h * s.in_w * c, 0.0f);
  for (int n = 0; n < s.batch; ++n) {
    for (int oh = 0; oh < s.out_h; ++oh) {
      for (int ow = 0; ow < s.out_w; ++ow) {
        const float* g = dy + ((int64_t{n} * s.out_h + oh) * s.out_w + ow) * c;
        const int count = ForWindow(s, n, oh, ow, [](int64_t) {});
        if (count == 0) continue;
        const float inv = 1.0f / count;
        ForWindow(s, n, oh, ow, [&](int64_t at) {
          for (int ch = 0; ch < c; ++ch) dx[at + ch] += g[ch] * inv;
        });
      }
    }
  }
}

void GlobalAvgPoolForward(int batch, int pixels, int c, const float* x, float* y) {
  const float inv = 1.0f / pixels;
  for (int n = 0; n < batch; ++n) {
    float* out = y + int64_t{n} * c;
    std::fill(out, out + c, 0.0f);
    const float* in = x + int64_t{n} * pixels * c;
    for (int p = 0; p < pixels; ++p) {
      for (int ch = 0; ch < c; ++ch) out[ch] += in[int64_t{p} * c + ch];
    }
    for (int ch = 0; ch < c; ++ch) out[ch] *= inv;
  }
}

void GlobalAvgPoolBackward(int batch, int pixels, int c, const float* dy, float* dx) {
  const float inv = 1.0f / pixels;
  for (int n = 0; n < batch; ++n) {
    const float* g = dy + int64_t{n} * c;
    float* out = dx + int64_t{n} * pixels * c;
    for (int p = 0; p < pixels; ++p) {
      for (int ch = 0; ch < c; ++ch) out[int64_t{p} * c + ch] = g[ch] * inv;
    }
  }
}

}  // namespace kernels
}  // namespace pscluster
