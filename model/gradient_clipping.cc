#include "model/gradient_clipping.h"

#include <algorithm>
#include <cmath>

namespace pscluster {
namespace {

double SquaredNorm(const float* g, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * g[i];
  return sum;
}

}  // namespace

std::vector<GradientRange> TrainableRanges(const ModelSpec& spec) {
  std::vector<GradientRange> ranges;
  for (const VariableSpec& v : spec.variables) {
    if (v.role == VariableRole::kTrainable) ranges.push_back({v.offset, v.size});
  }
  return ranges;
}

void ClipGradient(const GradientClipping& clipping, const std::vector<GradientRange>& ranges,
                  float* grad) {
  if (clipping.clipnorm > 0) {
    // keras.ops.clip_by_norm: x * c / max(norm, c), the norm 0 for zeros.
    const float c = static_cast<float>(clipping.clipnorm);
    for (const GradientRange& r : ranges) {
      float* g = grad + r.offset;
      const float norm = static_cast<float>(std::sqrt(SquaredNorm(g, r.size)));
      if (!std::isfinite(norm)) continue;  // NaN or Inf in it: the ps's check refuses it
      const float divisor = std::max(norm, c);
      for (int64_t i = 0; i < r.size; ++i) g[i] = (g[i] * c) / divisor;
    }
  }
  if (clipping.global_clipnorm > 0) {
    // keras's clip_by_global_norm: t * (c * min(1 / norm, 1 / c)); a zero
    // norm gives an infinite 1 / norm, so the scale 1.
    double sum = 0;
    for (const GradientRange& r : ranges) sum += SquaredNorm(grad + r.offset, r.size);
    const float c = static_cast<float>(clipping.global_clipnorm);
    const float norm = static_cast<float>(std::sqrt(sum));
    if (!std::isfinite(norm)) return;  // NaN or Inf in it: the ps's check refuses it
    const float scale = c * std::min(1.0f / norm, 1.0f / c);
    for (const GradientRange& r : ranges) {
      float* g = grad + r.offset;
      for (int64_t i = 0; i < r.size; ++i) g[i] *= scale;
    }
  }
}

}  // namespace pscluster
