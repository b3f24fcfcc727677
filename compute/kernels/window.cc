#include "compute/kernels/window.h"

#include <algorithm>

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

}  // namespace kernels
}  // namespace pscluster
