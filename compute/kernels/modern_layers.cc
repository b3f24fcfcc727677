#include "compute/kernels/modern_layers.h"

#include <cmath>
#include <cstring>

namespace pscluster {
namespace kernels {

void ZeroPad2DForward(const PaddingShape& s, const float* x, float* y) {
  const int oh = s.out_h(), ow = s.out_w(), c = s.channels;
  std::memset(y, 0, sizeof(float) * int64_t{s.batch} * oh * ow * c);
  for (int n = 0; n < s.batch; ++n) {
    for (int h = 0; h < s.in_h; ++h) {
      const float* from = x + (int64_t{n} * s.in_h + h) * s.in_w * c;
      float* to = y + ((int64_t{n} * oh + h + s.top) * ow + s.left) * c;
      std::memcpy(to, from, sizeof(float) * int64_t{s.in_w} * c);
    }
  }
}

void ZeroPad2DBackward(const PaddingShape& s, const float* dy, float* dx) {
  const int oh = s.out_h(), ow = s.out_w(), c = s.channels;
  for (int n = 0; n < s.batch; ++n) {
    for (int h = 0; h < s.in_h; ++h) {
      const float* from = dy + ((int64_t{n} * oh + h + s.top) * ow + s.left) * c;
      float* to = dx + (int64_t{n} * s.in_h + h) * s.in_w * c;
      std::memcpy(to, from, sizeof(float) * int64_t{s.in_w} * c);
    }
  }
}

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

void LayerNormForward(int64_t rows, int c, const float* x, const float* gamma, const float* beta,
                      float epsilon, float* mean, float* rstd, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * c;
    double sum = 0.0;
    for (int k = 0; k < c; ++k) sum += in[k];
    const double m = sum / c;
    double sq = 0.0;
    for (int k = 0; k < c; ++k) sq += (in[k] - m) * (in[k] - m);
    const float mf = static_cast<float>(m);
    const float inv = static_cast<float>(1.0 / std::sqrt(sq / c + epsilon));
    mean[r] = mf;
    rstd[r] = inv;
    float* out = y + r * c;
    for (int k = 0; k < c; ++k) {
      const float xhat = (in[k] - mf) * inv;
      out[k] = xhat * (gamma != nullptr ? gamma[k] : 1.0f) + (beta != nullptr ? beta[k] : 0.0f);
    }
  }
}

void LayerNormBackward(int64_t rows, int c, const float* x, const float* dy, const float* mean,
                       const float* rstd, const float* gamma, float* dgamma, float* dbeta,
                       float* dx) {
  if (dgamma != nullptr) std::memset(dgamma, 0, sizeof(float) * c);
  if (dbeta != nullptr) std::memset(dbeta, 0, sizeof(float) * c);
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * c;
    const float* d = dy + r * c;
    double sum_g = 0.0, sum_gx = 0.0;
    for (int k = 0; k < c; ++k) {
      const float xhat = (in[k] - mean[r]) * rstd[r];
      const float g = d[k] * (gamma != nullptr ? gamma[k] : 1.0f);
      sum_g += g;
      sum_gx += static_cast<double>(g) * xhat;
      if (dgamma != nullptr) dgamma[k] += d[k] * xhat;
      if (dbeta != nullptr) dbeta[k] += d[k];
    }
    if (dx == nullptr) continue;
    const float mean_g = static_cast<float>(sum_g / c), mean_gx = static_cast<float>(sum_gx / c);
    for (int k = 0; k < c; ++k) {
      const float xhat = (in[k] - mean[r]) * rstd[r];
      const float g = d[k] * (gamma != nullptr ? gamma[k] : 1.0f);
      dx[r * c + k] = rstd[r] * (g - mean_g - xhat * mean_gx);
    }
  }
}

void RescaleForward(int64_t n, float scale, float offset, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale + offset;
}

void RescaleBackward(int64_t n, float scale, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * scale;
}

double RegularizerLoss(int64_t n, float l1, float l2, const float* w) {
  double abs_sum = 0.0, sq_sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    abs_sum += std::fabs(w[i]);
    sq_sum += static_cast<double>(w[i]) * w[i];
  }
  return l1 * abs_sum + l2 * sq_sum;
}

void RegularizerGrad(int64_t n, float l1, float l2, const float* w, float* dw) {
  for (int64_t i = 0; i < n; ++i) {
    const float sign = w[i] > 0.0f ? 1.0f : w[i] < 0.0f ? -1.0f : 0.0f;
    dw[i] += l1 * sign + 2.0f * l2 * w[i];
  }
}

}  // namespace kernels
}  // namespace pscluster
