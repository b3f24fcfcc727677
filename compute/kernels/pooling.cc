#include "compute/kernels/pooling.h"

#include <algorithm>
#include <limits>

namespace pscluster {
namespace kernels {

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

void MaskedGlobalAvgPoolForward(int batch, int pixels, int c, const float* ids, int padding,
                                const float* x, float* y) {
  const StepMask mask{ids, padding};
  for (int n = 0; n < batch; ++n) {
    float* out = y + int64_t{n} * c;
    std::fill(out, out + c, 0.0f);
    int count = 0;
    for (int p = 0; p < pixels; ++p) {
      if (mask.masked(n, pixels, p)) continue;
      ++count;
      const float* row = x + (int64_t{n} * pixels + p) * c;
      for (int ch = 0; ch < c; ++ch) out[ch] += row[ch];
    }
    const float total = static_cast<float>(count);
    for (int ch = 0; ch < c; ++ch) out[ch] /= total;
  }
}

void MaskedGlobalAvgPoolBackward(int batch, int pixels, int c, const float* ids, int padding,
                                 const float* dy, float* dx) {
  const StepMask mask{ids, padding};
  for (int n = 0; n < batch; ++n) {
    int count = 0;
    for (int p = 0; p < pixels; ++p) count += !mask.masked(n, pixels, p);
    const float total = static_cast<float>(count);
    for (int p = 0; p < pixels; ++p) {
      float* row = dx + (int64_t{n} * pixels + p) * c;
      const bool kept = !mask.masked(n, pixels, p);
      for (int ch = 0; ch < c; ++ch) row[ch] = kept ? dy[int64_t{n} * c + ch] / total : 0.0f;
    }
  }
}

void GlobalMaxPoolForward(int batch, int pixels, int c, const float* x, float* y, float* count) {
  for (int n = 0; n < batch; ++n) {
    for (int k = 0; k < c; ++k) {
      const float* in = x + int64_t{n} * pixels * c + k;
      float best = in[0];
      int ties = 1;
      for (int p = 1; p < pixels; ++p) {
        const float v = in[int64_t{p} * c];
        if (v > best) {
          best = v;
          ties = 1;
        } else if (v == best) {
          ++ties;
        }
      }
      y[int64_t{n} * c + k] = best;
      count[int64_t{n} * c + k] = static_cast<float>(ties);
    }
  }
}

void GlobalMaxPoolBackward(int batch, int pixels, int c, const float* x, const float* y,
                           const float* count, const float* dy, float* dx) {
  for (int n = 0; n < batch; ++n) {
    for (int p = 0; p < pixels; ++p) {
      for (int k = 0; k < c; ++k) {
        const int64_t i = (int64_t{n} * pixels + p) * c + k, o = int64_t{n} * c + k;
        dx[i] = x[i] == y[o] ? dy[o] / count[o] : 0.0f;
      }
    }
  }
}

}  // namespace kernels
}  // namespace pscluster
