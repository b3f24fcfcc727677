// Keras's gradient clipping (the optimizer's clipnorm and global_clipnorm),
// applied to a whole gradient in the flat parameter layout: where a task
// holds the gradient Keras would clip (an async worker its own, a ring
// worker the step's mean), it clips it before the update
// (docs/optimizers.md). Plain functions: thread-safe.
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

// The trainable variables' [offset, offset + size) in the flat layout: what
// Keras clips (the moving statistics have no gradient there).
struct GradientRange {
  int64_t offset = 0;
  int64_t size = 0;
};
std::vector<GradientRange> TrainableRanges(const ModelSpec& spec);

// Clips grad's `ranges` as Keras 3 does (float32, norms summed in double):
// clipnorm, each range on its own: g = g * c / max(||g||, c); then
// global_clipnorm, over all the ranges: g = g * (c * min(1 / ||all||,
// 1 / c)). A zero gradient stays zero; one whose norm is not finite (NaN
// or Inf in it) is left as it is, for the non-finite gradient policy.
// Nothing outside the ranges changes.
void ClipGradient(const GradientClipping& clipping, const std::vector<GradientRange>& ranges,
                  float* grad);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_GRADIENT_CLIPPING_H_
