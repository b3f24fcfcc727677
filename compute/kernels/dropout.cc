#include "compute/kernels/dropout.h"

namespace pscluster {
namespace kernels {

void DropoutForward<CpuDevice>::operator()(const CpuDevice&, const DropoutShape& s,
                                           const float* x, float* y) const {
  const uint32_t threshold = DropoutThreshold(s.rate);
  const float scale = 1.0f / (1.0f - s.rate);
  for (int64_t i = 0; i < s.n; ++i) {
    y[i] = DropoutKeeps(s.key, s.first + i, threshold) ? x[i] * scale : 0.0f;
  }
}

void DropoutBackward<CpuDevice>::operator()(const CpuDevice& d, const DropoutShape& s,
                                            const float* dy, float* dx) const {
  DropoutForward<CpuDevice>()(d, s, dy, dx);
}

}  // namespace kernels
}  // namespace pscluster
