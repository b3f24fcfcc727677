#include "compute/kernels/softmax.h"

#include <algorithm>
#include <cmath>

namespace pscluster {
namespace kernels {

void SoftmaxRowsForward(int64_t rows, int width, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    float* yr = y + r * width;
    const float top = *std::max_element(xr, xr + width);
    double sum = 0;
    for (int j = 0; j < width; ++j) sum += std::exp(double{xr[j]} - top);
    for (int j = 0; j < width; ++j) {
      yr[j] = static_cast<float>(std::exp(double{xr[j]} - top) / sum);
    }
  }
}

void SoftmaxRowsBackward(int64_t rows, int width, const float* y, const float* gy, float* gx) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * width;
    const float* gr = gy + r * width;
    double dot = 0;
    for (int j = 0; j < width; ++j) dot += double{gr[j]} * yr[j];
    for (int j = 0; j < width; ++j) {
      gx[r * width + j] = static_cast<float>(yr[j] * (gr[j] - dot));
    }
  }
}

}  // namespace kernels
}  // namespace pscluster
