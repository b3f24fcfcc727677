// StepClipping: Keras's clipnorm / global_clipnorm of a sync step's
// gradient, which the ps hold in parts (each its shards' weighted sum of
// the members' gradients). The norm that clips is the whole gradient's, so
// the ps agree on it through the step's decider (ps 0):
//
//   1. ps 0 closes the step and sends its decision marked clipped, without
//      scales; each ps answers it, once the members' gradients are in, with
//      its squared norm per trainable variable (Norms: its parts' values,
//      summed in double);
//   2. ps 0 adds the answers up in ps order, itself first, and makes the
//      scales (model/gradient_clipping.h ClipScales);
//   3. ps 0 applies the step with them and sends the decision again with
//      the scales; each ps applies its part scaled by them (Clip).
//
// The squared norms are a function of the step's members alone, so a ps
// asked again (a decider promoted in a lost one's place) answers the same;
// a step's scales travel in its replication record, so a backup holds the
// clipped update, bit for bit. This class keeps each ps's norms of the last
// steps (Keep) and makes the scales once all are in; the store holds it
// under its lock. Not thread-safe.
#ifndef PSCLUSTER_UPDATE_STEP_CLIPPING_H_
#define PSCLUSTER_UPDATE_STEP_CLIPPING_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "model/gradient_clipping.h"

namespace pscluster {

struct StepClippingConfig {
  GradientClipping clipping;  // off: no clipping
  // This store's parts of the trainable variables, in its own layout;
  // GradientRange::variable < num_trainable.
  std::vector<GradientRange> ranges;
  int num_trainable = 0;
  int num_ps = 1;  // whose norms the decider adds up
  bool enabled() const { return clipping.enabled(); }
};

class StepClipping {
 public:
  // InvalidArgument when the ranges do not fit `num_floats` or name a
  // variable out of range, or the counts are not positive.
  static absl::Status Check(const StepClippingConfig& config, int64_t num_floats);

  void Configure(const StepClippingConfig& config);
  bool enabled() const { return config_.enabled(); }
  int num_ps() const { return config_.num_ps; }
  int num_trainable() const { return config_.num_trainable; }

  // This store's squared norms per trainable variable of its part `grad`.
  std::vector<double> Norms(const float* grad) const;

  // Keeps ps `ps`'s norms of the step from `version` of `generation`
  // (a decider keeps every ps's; a follower its own, to answer a resent
  // ask). The first kept stays: a ps's norms of a step are one answer.
  void Keep(int ps, int64_t generation, int64_t version, std::vector<double> norms);
  const std::vector<double>* Kept(int ps, int64_t generation, int64_t version) const;

  // The step's scales once every ps's norms are kept; nullopt before.
  std::optional<std::vector<float>> Scales(int64_t generation, int64_t version) const;

  // Scales this store's part `grad` by the step's `scales`.
  void Clip(const std::vector<float>& scales, float* grad) const;

  // Forgets every kept norm (the state they were of was replaced).
  void Clear() { kept_.clear(); }

 private:
  struct Entry {
    int ps = 0;
    int64_t generation = 0;
    int64_t version = 0;
    std::vector<double> norms;
  };
  StepClippingConfig config_;
  std::deque<Entry> kept_;  // the last steps', oldest first
};

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_STEP_CLIPPING_H_
