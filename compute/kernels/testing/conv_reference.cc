#include "compute/kernels/testing/conv_reference.h"

namespace pscluster {
namespace kernels {
namespace testing {

std::vector<double> ConvRef(const WindowShape& s, bool depthwise, const Tensors& in) {
  const std::vector<double>& x = in[0];
  const std::vector<double>& w = in[1];
  const bool bias = in.size() > 2;
  const int dm = s.out_c / s.in_c;
  std::vector<double> y(s.out_pixels() * s.out_c);
  for (int n = 0; n < s.batch; ++n)
    for (int oh = 0; oh < s.out_h; ++oh)
      for (int ow = 0; ow < s.out_w; ++ow)
        for (int o = 0; o < s.out_c; ++o) {
          double sum = bias ? in[2][o] : 0.0;
          for (int kh = 0; kh < s.window_h; ++kh)
            for (int kw = 0; kw < s.window_w; ++kw) {
              const int ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
              const int iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
              if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) continue;
              const double* px = &x[((int64_t{n} * s.in_h + ih) * s.in_w + iw) * s.in_c];
              if (depthwise) {
                const int ci = o / dm, m = o % dm;
                sum += px[ci] * w[((kh * s.window_w + kw) * s.in_c + ci) * dm + m];
              } else {
                for (int ci = 0; ci < s.in_c; ++ci) {
                  sum += px[ci] * w[((kh * s.window_w + kw) * s.in_c + ci) * s.out_c + o];
                }
              }
            }
          y[((int64_t{n} * s.out_h + oh) * s.out_w + ow) * s.out_c + o] = sum;
        }
  return y;
}

WindowShape DilatedWindowShape(int batch, int h, int w, int c, int kh, int kw, int stride_h,
                               int stride_w, int dilation_h, int dilation_w, bool same,
                               int out_c) {
  WindowShape s;
  s.batch = batch;
  s.in_h = h;
  s.in_w = w;
  s.in_c = c;
  s.window_h = kh;
  s.window_w = kw;
  s.stride_h = stride_h;
  s.stride_w = stride_w;
  s.dilation_h = dilation_h;
  s.dilation_w = dilation_w;
  KerasDilatedWindow(h, kh, stride_h, dilation_h, same, &s.out_h, &s.pad_top);
  KerasDilatedWindow(w, kw, stride_w, dilation_w, same, &s.out_w, &s.pad_left);
  s.out_c = out_c;
  return s;
}

WindowShape ConvShape(int batch, int h, int w, int c, int kh, int kw, int stride, int dilation,
                      bool same, int out_c) {
  // Unequal dilations when dilated.
  return DilatedWindowShape(batch, h, w, c, kh, kw, stride, stride, dilation,
                            dilation == 1 ? 1 : dilation - 1, same, out_c);
}

}  // namespace testing
}  // namespace kernels
}  // namespace pscluster
