#include "model/gradient_clipping.h"

#include <algorithm>
#include <cmath>

namespace pscluster {

std::vector<GradientRange> TrainableRanges(const ModelSpec& spec) {
  std::vector<GradientRange> ranges;
  for (const VariableSpec& v : spec.variables) {
    if (v.role == VariableRole::kTrainable) {
      ranges.push_back({v.offset, v.size, static_cast<int>(ranges.size())});
    }
  }
  return ranges;
}

void AddSquaredNorms(const std::vector<GradientRange>& ranges, const float* grad,
                     std::vector<double>* sums) {
  for (const GradientRange& r : ranges) {
    const float* g = grad + r.offset;
    double sum = 0;
    for (int64_t i = 0; i < r.size; ++i) sum += static_cast<double>(g[i]) * g[i];
    (*sums)[r.variable] += sum;
  }
}

std::vector<float> ClipScales(const GradientClipping& clipping, const std::vector<double>& sums) {
  std::vector<float> scales;
  if (clipping.clipnorm > 0) {
    // keras.ops.clip_by_norm: x * c / max(norm, c), the norm 0 for zeros.
    const float c = static_cast<float>(clipping.clipnorm);
    for (double sum : sums) {
      const float norm = static_cast<float>(std::sqrt(sum));
      scales.push_back(std::isfinite(norm) ? std::max(norm, c) : 0.0f);
    }
  } else if (clipping.global_clipnorm > 0) {
    // keras's clip_by_global_norm: t * (c * min(1 / norm, 1 / c)); a zero
    // norm gives an infinite 1 / norm, so the scale 1.
    double total = 0;
    for (double sum : sums) total += sum;
    const float c = static_cast<float>(clipping.global_clipnorm);
    const float norm = static_cast<float>(std::sqrt(total));
    scales.push_back(std::isfinite(norm) ? c * std::min(1.0f / norm, 1.0f / c) : 0.0f);
  }
  return scales;
}

void ApplyClipScales(const GradientClipping& clipping, const std::vector<GradientRange>& ranges,
                     const std::vector<float>& scales, float* grad) {
  if (clipping.clipnorm > 0) {
    const float c = static_cast<float>(clipping.clipnorm);
    for (const GradientRange& r : ranges) {
      const float divisor = scales[r.variable];
      if (divisor == 0) continue;  // not finite: the ps's check refuses it
      float* g = grad + r.offset;
      for (int64_t i = 0; i < r.size; ++i) g[i] = (g[i] * c) / divisor;
    }
  } else if (clipping.global_clipnorm > 0) {
    const float scale = scales[0];
    if (scale == 0) return;  // not finite: the ps's check refuses it
    for (const GradientRange& r : ranges) {
      float* g = grad + r.offset;
      for (int64_t i = 0; i < r.size; ++i) g[i] *= scale;
    }
  }
}

void ClipGradient(const GradientClipping& clipping, const std::vector<GradientRange>& ranges,
                  float* grad) {
  if (!clipping.enabled()) return;
  int variables = 0;
  for (const GradientRange& r : ranges) variables = std::max(variables, r.variable + 1);
  std::vector<double> sums(variables, 0.0);
  AddSquaredNorms(ranges, grad, &sums);
  ApplyClipScales(clipping, ranges, ClipScales(clipping, sums), grad);
}

}  // namespace pscluster
