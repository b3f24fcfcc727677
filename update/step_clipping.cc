#include "update/step_clipping.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// Steps whose norms are kept: the current one, and the last ones, which a
// decider promoted in a lost one's place may ask for again.
constexpr size_t kStepsKept = 4;

}  // namespace

absl::Status StepClipping::Check(const StepClippingConfig& config, int64_t num_floats) {
  if (!config.enabled()) return absl::OkStatus();
  // Bounds that keep a step's norms small whatever a request says.
  constexpr int kMaxVariables = 1 << 20, kMaxPs = 1 << 16;
  if (config.num_trainable <= 0 || config.num_trainable > kMaxVariables || config.num_ps <= 0 ||
      config.num_ps > kMaxPs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "clipping over ", config.num_trainable, " trainable variables on ", config.num_ps,
        " ps: must be in [1, ", kMaxVariables, "] and [1, ", kMaxPs, "]"));
  }
  for (const GradientRange& r : config.ranges) {
    if (r.offset < 0 || r.size < 0 || r.offset > num_floats - r.size || r.variable < 0 ||
        r.variable >= config.num_trainable) {
      return absl::InvalidArgumentError(absl::StrCat(
          "clipped range [", r.offset, ", +", r.size, ") of trainable variable ", r.variable,
          " does not fit ", num_floats, " values and ", config.num_trainable, " variables"));
    }
  }
  return absl::OkStatus();
}

void StepClipping::Configure(const StepClippingConfig& config) {
  config_ = config;
  kept_.clear();
}

std::vector<double> StepClipping::Norms(const float* grad) const {
  std::vector<double> sums(config_.num_trainable, 0.0);
  AddSquaredNorms(config_.ranges, grad, &sums);
  return sums;
}

void StepClipping::Keep(int ps, int64_t generation, int64_t version, std::vector<double> norms) {
  if (Kept(ps, generation, version) != nullptr) return;
  kept_.push_back({ps, generation, version, std::move(norms)});
  while (kept_.size() > kStepsKept * static_cast<size_t>(config_.num_ps)) kept_.pop_front();
}

const std::vector<double>* StepClipping::Kept(int ps, int64_t generation, int64_t version) const {
  for (const Entry& e : kept_) {
    if (e.ps == ps && e.generation == generation && e.version == version) return &e.norms;
  }
  return nullptr;
}

std::optional<std::vector<float>> StepClipping::Scales(int64_t generation, int64_t version) const {
  std::vector<double> sums(config_.num_trainable, 0.0);
  for (int ps = 0; ps < config_.num_ps; ++ps) {
    const std::vector<double>* norms = Kept(ps, generation, version);
    if (norms == nullptr) return std::nullopt;
    for (int v = 0; v < config_.num_trainable; ++v) sums[v] += (*norms)[v];
  }
  return ClipScales(config_.clipping, sums);
}

void StepClipping::Clip(const std::vector<float>& scales, float* grad) const {
  ApplyClipScales(config_.clipping, config_.ranges, scales, grad);
}

}  // namespace pscluster
