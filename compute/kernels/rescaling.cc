#include "compute/kernels/rescaling.h"

namespace pscluster {
namespace kernels {

void RescaleForward(int64_t n, float scale, float offset, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale + offset;
}

void RescaleBackward(int64_t n, float scale, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * scale;
}

}  // namespace kernels
}  // namespace pscluster
