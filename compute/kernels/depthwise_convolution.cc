#include "compute/kernels/depthwise_convolution.h"

#include <cstring>

namespace pscluster {
namespace kernels {

namespace {

// Calls f(x_offset, w_offset_base, y_offset) for every (output pixel, window
// cell inside the input) of a depthwise convolution: x_offset is the input
// pixel's first channel, w_offset_base the cell's first kernel entry (of
// in_c * dm), y_offset the output pixel's first channel.
template <typename F>
void ForDepthwiseTaps(const WindowShape& s, const F& f) {
  const int64_t oc = s.out_c;
  for (int n = 0; n < s.batch; ++n) {
    for (int oh = 0; oh < s.out_h; ++oh) {
      for (int ow = 0; ow < s.out_w; ++ow) {
        const int64_t yo = ((int64_t{n} * s.out_h + oh) * s.out_w + ow) * oc;
        for (int kh = 0; kh < s.window_h; ++kh) {
          const int ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
          if (ih < 0 || ih >= s.in_h) continue;
          for (int kw = 0; kw < s.window_w; ++kw) {
            const int iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
            if (iw < 0 || iw >= s.in_w) continue;
            f(((int64_t{n} * s.in_h + ih) * s.in_w + iw) * s.in_c,
              (int64_t{kh} * s.window_w + kw) * oc, yo);
          }
        }
      }
    }
  }
}

}  // namespace

void DepthwiseConvForward(const WindowShape& s, const float* x, const float* w, const float* b,
                          float* y) {
  const int dm = s.out_c / s.in_c;
  const int64_t total = s.out_pixels() * s.out_c;
  for (int64_t i = 0; i < total; ++i) y[i] = b != nullptr ? b[i % s.out_c] : 0.0f;
  ForDepthwiseTaps(s, [&](int64_t xo, int64_t wo, int64_t yo) {
    for (int ci = 0; ci < s.in_c; ++ci) {
      const float v = x[xo + ci];
      for (int m = 0; m < dm; ++m) y[yo + ci * dm + m] += v * w[wo + ci * dm + m];
    }
  });
}

void DepthwiseConvBackward(const WindowShape& s, const float* x, const float* w, const float* dy,
                           float* dw, float* db, float* dx) {
  const int dm = s.out_c / s.in_c;
  std::memset(dw, 0, sizeof(float) * int64_t{s.window_h} * s.window_w * s.out_c);
  if (db != nullptr) {
    std::memset(db, 0, sizeof(float) * s.out_c);
    const int64_t pixels = s.out_pixels();
    for (int64_t p = 0; p < pixels; ++p) {
      for (int o = 0; o < s.out_c; ++o) db[o] += dy[p * s.out_c + o];
    }
  }
  if (dx != nullptr) {
    std::memset(dx, 0, sizeof(float) * int64_t{s.batch} * s.in_h * s.in_w * s.in_c);
  }
  ForDepthwiseTaps(s, [&](int64_t xo, int64_t wo, int64_t yo) {
    for (int ci = 0; ci < s.in_c; ++ci) {
      float back = 0.0f;
      for (int m = 0; m < dm; ++m) {
        const float d = dy[yo + ci * dm + m];
        dw[wo + ci * dm + m] += x[xo + ci] * d;
        back += w[wo + ci * dm + m] * d;
      }
      if (dx != nullptr) dx[xo + ci] += back;
    }
  });
}

WindowShape PointwiseShape(const WindowShape& depthwise, int filters) {
  WindowShape p;
  p.batch = depthwise.batch;
  p.in_h = p.out_h = depthwise.out_h;
  p.in_w = p.out_w = depthwise.out_w;
  p.in_c = depthwise.out_c;
  p.window_h = p.window_w = 1;
  p.out_c = filters;
  return p;
}

}  // namespace kernels
}  // namespace pscluster
