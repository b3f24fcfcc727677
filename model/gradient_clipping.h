// Keras's gradient clipping (the optimizer's clipnorm and global_clipnorm),
// applied to a gradient in the flat parameter layout. Where a task holds
// the gradient Keras would clip whole (an async worker its own, a ring
// worker the step's mean), it clips it before the update (ClipGradient).
// Where it is held in parts (a sync step's, each ps summing its shards),
// each part's squared norms per variable are added up across the holders
// (SquaredNorms, summed in holder order), the scales follow from the
// totals (ClipScales), and each holder scales its part (ApplyClipScales):
// docs/optimizers.md. Plain functions: thread-safe.
#ifndef PSCLUSTER_MODEL_GRADIENT_CLIPPING_H_
#define PSCLUSTER_MODEL_GRADIENT_CLIPPING_H_

#include <cstdint>
#include <vector>

#include "model/model_spec.h"

namespace pscluster {

struct GradientClipping {
  double clipnorm = 0;         // each variable's gradient to this norm; 0: none
  double global_clipnorm = 0;  // all of them together to this norm; 0: none
  bool enabled() const { return clipnorm > 0 || global_clipnorm > 0; }
};

// A trainable variable's [offset, offset + size) in a flat layout (the
// model's, or a ps's part of it): what Keras clips (the moving statistics
// have no gradient there). `variable`: the variable's index among the
// model's trainable variables; the parts of one variable share it.
struct GradientRange {
  int64_t offset = 0;
  int64_t size = 0;
  int variable = 0;
};
std::vector<GradientRange> TrainableRanges(const ModelSpec& spec);

// Adds each range's squared norm (float32 values, summed in double) to
// (*sums)[range.variable]; *sums must hold every variable's entry.
void AddSquaredNorms(const std::vector<GradientRange>& ranges, const float* grad,
                     std::vector<double>* sums);

// What clips the gradient whose squared norms per variable are `sums`:
// clipnorm, per variable, the divisor max(||g||, c) (g = g * c / divisor);
// global_clipnorm, one scale c * min(1 / ||all||, 1 / c) (g = g * scale).
// A zero gradient keeps the divisor c or the scale 1; a norm that is not
// finite (NaN or Inf in it) gives 0, which leaves that gradient as it is,
// for the non-finite gradient policy. Empty when clipping is off.
std::vector<float> ClipScales(const GradientClipping& clipping, const std::vector<double>& sums);

// Scales grad's `ranges` by ClipScales' `scales`; nothing outside them
// changes.
void ApplyClipScales(const GradientClipping& clipping, const std::vector<GradientRange>& ranges,
                     const std::vector<float>& scales, float* grad);

// The three above on a whole gradient: clips grad's `ranges` as Keras 3
// does (float32, norms summed in double): clipnorm, each variable on its
// own: g = g * c / max(||g||, c); global_clipnorm, over all of them:
// g = g * (c * min(1 / ||all||, 1 / c)).
void ClipGradient(const GradientClipping& clipping, const std::vector<GradientRange>& ranges,
                  float* grad);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_GRADIENT_CLIPPING_H_
