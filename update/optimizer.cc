#include "update/optimizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "update/update_rules.h"

namespace pscluster {
namespace {

// The kernels: plain loops over restrict-qualified arrays, which the
// compiler vectorises (the BUILD rule adds -O3 -fno-math-errno so that
// sqrt does not block it). They follow TensorFlow's CPU training ops
// (ApplyGradientDescent, ApplyKerasMomentum, ApplyAdam) term by term.

void SgdKernel(int64_t n, const float* __restrict grad,
               float* __restrict params, float lr) {
  for (int64_t i = 0; i < n; ++i) params[i] -= lr * grad[i];
}

void MomentumKernel(int64_t n, const float* __restrict grad,
                    float* __restrict params, float* __restrict velocity,
                    float lr, float momentum) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = momentum * velocity[i] - lr * grad[i];
    velocity[i] = v;
    params[i] += v;
  }
}

// m += (g - m) * (1 - b1) is b1 * m + (1 - b1) * g, written as TF does.
void AdamKernel(int64_t n, const float* __restrict grad,
                float* __restrict params, float* __restrict m_slot,
                float* __restrict v_slot, float one_minus_beta1,
                float one_minus_beta2, float lr_t, float epsilon) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float m = m_slot[i] + (g - m_slot[i]) * one_minus_beta1;
    const float v = v_slot[i] + (g * g - v_slot[i]) * one_minus_beta2;
    m_slot[i] = m;
    v_slot[i] = v;
    params[i] -= (m * lr_t) / (std::sqrt(v) + epsilon);
  }
}

// The same rules out of place (ApplyAside): every input array read, every
// output written, term for term as above, so that the results are the
// same bits.
void SgdKernelTo(int64_t n, const float* __restrict grad, const float* __restrict params,
                 float* __restrict params_out, float lr) {
  for (int64_t i = 0; i < n; ++i) params_out[i] = params[i] - lr * grad[i];
}

void MomentumKernelTo(int64_t n, const float* __restrict grad, const float* __restrict params,
                      float* __restrict params_out, const float* __restrict velocity,
                      float* __restrict velocity_out, float lr, float momentum) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = momentum * velocity[i] - lr * grad[i];
    velocity_out[i] = v;
    params_out[i] = params[i] + v;
  }
}

void AdamKernelTo(int64_t n, const float* __restrict grad, const float* __restrict params,
                  float* __restrict params_out, const float* __restrict m_slot,
                  float* __restrict m_out, const float* __restrict v_slot,
                  float* __restrict v_out, float one_minus_beta1, float one_minus_beta2,
                  float lr_t, float epsilon) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float m = m_slot[i] + (g - m_slot[i]) * one_minus_beta1;
    const float v = v_slot[i] + (g * g - v_slot[i]) * one_minus_beta2;
    m_out[i] = m;
    v_out[i] = v;
    params_out[i] = params[i] - (m * lr_t) / (std::sqrt(v) + epsilon);
  }
}

// Keras 3's _apply_weight_decay: variable - variable * wd * lr.
void WeightDecayKernel(int64_t n, float* __restrict params, float weight_decay, float lr) {
  for (int64_t i = 0; i < n; ++i) params[i] = params[i] - params[i] * weight_decay * lr;
}

void AdagradKernel(int64_t n, const float* __restrict grad, float* __restrict params,
                   float* __restrict acc, float lr, float epsilon) {
  for (int64_t i = 0; i < n; ++i) AdagradStep(grad[i], &params[i], &acc[i], lr, epsilon);
}

void FtrlKernel(int64_t n, const float* __restrict grad, float* __restrict params,
                float* __restrict acc, float* __restrict linear, const FtrlTerms& t) {
  for (int64_t i = 0; i < n; ++i) FtrlStep(grad[i], &params[i], &acc[i], &linear[i], t);
}

struct RmspropTerms {
  float lr;
  float rho;
  float momentum;  // 0: no momentum slot
  float epsilon;
};

// Keras 3's RMSprop.update_step term by term (Keras 2's
// ResourceApplyRMSProp and ResourceApplyCenteredRMSProp compute the same).
// momentum and average are null when the optimizer has no such slot.
void RmspropKernel(int64_t n, const float* __restrict grad, float* __restrict params,
                   float* __restrict velocity, float* __restrict momentum,
                   float* __restrict average, const RmspropTerms& t) {
  const float one_minus_rho = 1.0f - t.rho;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float v = t.rho * velocity[i] + one_minus_rho * (g * g);
    velocity[i] = v;
    float denominator = v;
    if (average != nullptr) {
      const float ag = t.rho * average[i] + one_minus_rho * g;
      average[i] = ag;
      denominator = v - ag * ag;
    }
    const float increment = (t.lr * g) / std::sqrt(denominator + t.epsilon);
    if (momentum != nullptr) {
      const float m = t.momentum * momentum[i] + increment;
      momentum[i] = m;
      params[i] -= m;
    } else {
      params[i] -= increment;
    }
  }
}

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(const OptimizerOptions& options, int64_t num_params)
      : Optimizer(options, num_params, {}) {}

 protected:
  void Update(const float* grad, float* params, float* const*) override {
    const float lr = current_learning_rate();
    ForRanges([&](int64_t b, int64_t e) { SgdKernel(e - b, grad + b, params + b, lr); });
  }

  void ComputeAside(const float* grad, const float* params, float* params_out) override {
    const float lr = current_learning_rate();
    ForRanges([&](int64_t b, int64_t e) {
      SgdKernelTo(e - b, grad + b, params + b, params_out + b, lr);
    });
  }
};

class MomentumOptimizer final : public Optimizer {
 public:
  MomentumOptimizer(const OptimizerOptions& options, int64_t num_params)
      : Optimizer(options, num_params, {"momentum"}) {}

 protected:
  void Update(const float* grad, float* params, float* const* slots) override {
    const float lr = current_learning_rate();
    const float momentum = options().momentum;
    float* velocity = slots[0];
    ForRanges([&](int64_t b, int64_t e) {
      MomentumKernel(e - b, grad + b, params + b, velocity + b, lr, momentum);
    });
  }

  void ComputeAside(const float* grad, const float* params, float* params_out) override {
    const float lr = current_learning_rate();
    const float momentum = options().momentum;
    const float* velocity = mutable_slot(0);
    float* velocity_out = aside_slot(0);
    ForRanges([&](int64_t b, int64_t e) {
      MomentumKernelTo(e - b, grad + b, params + b, params_out + b, velocity + b,
                       velocity_out + b, lr, momentum);
    });
  }
};

// Adam, and AdamW: Adam with a weight decay (Keras's default 0.004, which
// the caller sets), applied before every rule's update (Apply).
class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(const OptimizerOptions& options, int64_t num_params)
      : Optimizer(options, num_params, {"m", "v"}) {}

 protected:
  void Update(const float* grad, float* params, float* const* slots) override {
    const OptimizerOptions& o = options();
    const float lr_t = LearningRateT();
    float* m = slots[0];
    float* v = slots[1];
    ForRanges([&](int64_t b, int64_t e) {
      AdamKernel(e - b, grad + b, params + b, m + b, v + b, 1.0f - o.beta1, 1.0f - o.beta2,
                 lr_t, o.epsilon);
    });
  }

  void ComputeAside(const float* grad, const float* params, float* params_out) override {
    const OptimizerOptions& o = options();
    const float lr_t = LearningRateT();
    const float* m = mutable_slot(0);
    const float* v = mutable_slot(1);
    float* m_out = aside_slot(0);
    float* v_out = aside_slot(1);
    ForRanges([&](int64_t b, int64_t e) {
      AdamKernelTo(e - b, grad + b, params + b, params_out + b, m + b, m_out + b, v + b,
                   v_out + b, 1.0f - o.beta1, 1.0f - o.beta2, lr_t, o.epsilon);
    });
  }

 private:
  // The step's rate with the bias correction, in double, rounded once.
  float LearningRateT() const {
    const OptimizerOptions& o = options();
    const double t = static_cast<double>(iterations() + 1);
    const double beta1_power = std::pow(static_cast<double>(o.beta1), t);
    const double beta2_power = std::pow(static_cast<double>(o.beta2), t);
    return static_cast<float>(current_learning_rate() * std::sqrt(1.0 - beta2_power) /
                              (1.0 - beta1_power));
  }
};

class AdagradOptimizer final : public Optimizer {
 public:
  AdagradOptimizer(const OptimizerOptions& options, int64_t num_params)
      : Optimizer(options, num_params, {"accumulator"}, {options.initial_accumulator_value}) {}

 protected:
  void Update(const float* grad, float* params, float* const* slots) override {
    const float lr = current_learning_rate();
    const float epsilon = options().epsilon;
    float* acc = slots[0];
    ForRanges([&](int64_t b, int64_t e) {
      AdagradKernel(e - b, grad + b, params + b, acc + b, lr, epsilon);
    });
  }
};

class RmspropOptimizer final : public Optimizer {
 public:
  RmspropOptimizer(const OptimizerOptions& options, int64_t num_params)
      : Optimizer(options, num_params, SlotNames(options)) {}

  static std::vector<std::string> SlotNames(const OptimizerOptions& o) {
    std::vector<std::string> names = {"velocity"};
    if (o.momentum > 0.0f) names.push_back("momentum");
    if (o.centered) names.push_back("average_gradient");
    return names;
  }

 protected:
  void Update(const float* grad, float* params, float* const* slots) override {
    const OptimizerOptions& o = options();
    const RmspropTerms t{current_learning_rate(), o.rho, o.momentum, o.epsilon};
    float* velocity = slots[0];
    float* momentum = o.momentum > 0.0f ? slots[1] : nullptr;
    float* average = o.centered ? slots[o.momentum > 0.0f ? 2 : 1] : nullptr;
    ForRanges([&](int64_t b, int64_t e) {
      RmspropKernel(e - b, grad + b, params + b, velocity + b,
                    momentum != nullptr ? momentum + b : nullptr,
                    average != nullptr ? average + b : nullptr, t);
    });
  }
};

class FtrlOptimizer final : public Optimizer {
 public:
  FtrlOptimizer(const OptimizerOptions& options, int64_t num_params)
      : Optimizer(options, num_params, {"accumulator", "linear"},
                  {options.initial_accumulator_value, 0.0f}) {}

 protected:
  void Update(const float* grad, float* params, float* const* slots) override {
    const OptimizerOptions& o = options();
    const FtrlTerms t = MakeFtrlTerms(current_learning_rate(), o.learning_rate_power, o.l1, o.l2,
                                      o.l2_shrinkage, o.beta);
    float* acc = slots[0];
    float* linear = slots[1];
    ForRanges([&](int64_t b, int64_t e) {
      FtrlKernel(e - b, grad + b, params + b, acc + b, linear + b, t);
    });
  }
};

absl::Status BadOption(const OptimizerOptions& options, const char* field,
                       float value, const char* requirement) {
  return absl::InvalidArgumentError(absl::StrCat("optimizer \"", options.name,
                                                 "\": ", field, " ", value, " ",
                                                 requirement));
}

// [0, 1) and finite; NaN fails both comparisons.
bool InUnitInterval(float x) { return x >= 0.0f && x < 1.0f; }

bool FiniteNonNegative(float x) { return std::isfinite(x) && x >= 0.0f; }

absl::Status Validate(const OptimizerOptions& o, int64_t num_params) {
  static const char* const kNames[] = {"sgd",     "momentum", "adam", "adamw",
                                       "adagrad", "rmsprop",  "ftrl"};
  if (std::find(std::begin(kNames), std::end(kNames), o.name) == std::end(kNames)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer \"", o.name,
                     "\" (expected sgd, momentum, adam, adamw, adagrad, rmsprop or ftrl)"));
  }
  if (!std::isfinite(o.learning_rate) || !(o.learning_rate > 0.0f)) {
    return BadOption(o, "learning_rate", o.learning_rate, "must be finite and > 0");
  }
  if (!(o.decay_rate > 0.0f && o.decay_rate <= 1.0f)) {
    return BadOption(o, "decay_rate", o.decay_rate, "must be in (0, 1]");
  }
  if (o.decay_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer \"", o.name, "\": decay_steps ", o.decay_steps, " must be >= 0"));
  }
  if (num_params < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer \"", o.name, "\": num_params ", num_params, " is negative"));
  }
  if (!FiniteNonNegative(o.weight_decay)) {
    return BadOption(o, "weight_decay", o.weight_decay, "must be finite and >= 0");
  }
  const bool adam = o.name == "adam" || o.name == "adamw";
  if ((o.name == "momentum" || o.name == "rmsprop") && !InUnitInterval(o.momentum)) {
    return BadOption(o, "momentum", o.momentum, "must be in [0, 1)");
  }
  if (adam && !InUnitInterval(o.beta1)) return BadOption(o, "beta1", o.beta1, "must be in [0, 1)");
  if (adam && !InUnitInterval(o.beta2)) return BadOption(o, "beta2", o.beta2, "must be in [0, 1)");
  if (o.name == "rmsprop" && !InUnitInterval(o.rho)) {
    return BadOption(o, "rho", o.rho, "must be in [0, 1)");
  }
  if ((adam || o.name == "adagrad" || o.name == "rmsprop") &&
      !(std::isfinite(o.epsilon) && o.epsilon > 0.0f)) {
    return BadOption(o, "epsilon", o.epsilon, "must be finite and > 0");
  }
  if ((o.name == "adagrad" || o.name == "ftrl") && !FiniteNonNegative(o.initial_accumulator_value)) {
    return BadOption(o, "initial_accumulator_value", o.initial_accumulator_value,
                     "must be finite and >= 0");
  }
  if (o.name == "ftrl") {
    if (!std::isfinite(o.learning_rate_power) || !(o.learning_rate_power <= 0.0f)) {
      return BadOption(o, "learning_rate_power", o.learning_rate_power, "must be finite and <= 0");
    }
    const std::pair<const char*, float> strengths[] = {
        {"l1", o.l1}, {"l2", o.l2}, {"l2_shrinkage", o.l2_shrinkage}, {"beta", o.beta}};
    for (const auto& [field, value] : strengths) {
      if (!FiniteNonNegative(value)) return BadOption(o, field, value, "must be finite and >= 0");
    }
  }
  return absl::OkStatus();
}

}  // namespace

float DecayedLearningRate(float learning_rate, float decay_rate, int64_t decay_steps,
                          int64_t iterations) {
  if (decay_steps <= 0 || decay_rate == 1.0f) return learning_rate;
  const double exponent = static_cast<double>(iterations) / decay_steps;
  return static_cast<float>(learning_rate * std::pow(static_cast<double>(decay_rate), exponent));
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const OptimizerOptions& options, int64_t num_params) {
  absl::Status status = Validate(options, num_params);
  if (!status.ok()) return status;
  const std::string& name = options.name;
  std::unique_ptr<Optimizer> made;
  if (name == "sgd") made = std::make_unique<SgdOptimizer>(options, num_params);
  if (name == "momentum") made = std::make_unique<MomentumOptimizer>(options, num_params);
  if (name == "adam" || name == "adamw") made = std::make_unique<AdamOptimizer>(options, num_params);
  if (name == "adagrad") made = std::make_unique<AdagradOptimizer>(options, num_params);
  if (name == "rmsprop") made = std::make_unique<RmspropOptimizer>(options, num_params);
  if (name == "ftrl") made = std::make_unique<FtrlOptimizer>(options, num_params);
  return made;
}

Optimizer::Optimizer(const OptimizerOptions& options, int64_t num_params,
                     std::vector<std::string> slot_names, std::vector<float> slot_starts)
    : options_(options), num_params_(num_params), slot_names_(std::move(slot_names)) {
  for (size_t i = 0; i < slot_names_.size(); ++i) {
    slots_.emplace_back(num_params, i < slot_starts.size() ? slot_starts[i] : 0.0f);
  }
}

namespace {

// Pointers to each slot's floats, for Update (at most three slots).
std::array<float*, 4> SlotPointers(std::vector<std::vector<float>>& slots) {
  std::array<float*, 4> p{};
  for (size_t i = 0; i < slots.size() && i < p.size(); ++i) p[i] = slots[i].data();
  return p;
}

}  // namespace

void Optimizer::Apply(const float* grad, float* params) {
  if (options_.weight_decay != 0.0f) DecayWeights(params);
  Update(grad, params, SlotPointers(slots_).data());
  ++iterations_;
}

void Optimizer::DecayWeights(float* params) {
  const float lr = current_learning_rate();
  const float weight_decay = options_.weight_decay;
  ForRanges([&](int64_t b, int64_t e) { WeightDecayKernel(e - b, params + b, weight_decay, lr); });
}

void Optimizer::ApplyAside(const float* grad, const float* params, float* params_out) {
  if (aside_.size() != slots_.size()) {
    aside_.assign(slots_.size(), std::vector<float>(num_params_, 0.0f));
  }
  if (options_.weight_decay != 0.0f) {
    Optimizer::ComputeAside(grad, params, params_out);
  } else {
    ComputeAside(grad, params, params_out);
  }
}

void Optimizer::ComputeAside(const float* grad, const float* params, float* params_out) {
  std::copy(params, params + num_params_, params_out);
  for (size_t i = 0; i < slots_.size(); ++i) aside_[i] = slots_[i];
  if (options_.weight_decay != 0.0f) DecayWeights(params_out);
  Update(grad, params_out, SlotPointers(aside_).data());
}

void Optimizer::TakeAside() {
  slots_.swap(aside_);
  ++iterations_;
}

absl::Span<const float> Optimizer::slot(const std::string& name) const {
  for (size_t i = 0; i < slot_names_.size(); ++i) {
    if (slot_names_[i] == name) return slots_[i];
  }
  return {};
}

OptimizerState Optimizer::SaveState() const {
  OptimizerState state;
  state.iterations = iterations_;
  for (size_t i = 0; i < slot_names_.size(); ++i) {
    state.slots.push_back({slot_names_[i], slots_[i]});
  }
  return state;
}

absl::Status Optimizer::RestoreState(OptimizerState state) {
  const std::string prefix =
      absl::StrCat("optimizer \"", options_.name, "\": restoring state: ");
  if (state.iterations < 0 || state.iterations > kMaxIterations) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "iterations ", state.iterations,
        state.iterations < 0 ? " is negative" : " is more than 2^53 (no run takes that many steps)"));
  }
  // Check everything first so that a bad state changes nothing.
  std::vector<OptimizerSlot*> by_index(slot_names_.size(), nullptr);
  for (OptimizerSlot& s : state.slots) {
    size_t i = 0;
    while (i < slot_names_.size() && slot_names_[i] != s.name) ++i;
    if (i == slot_names_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "unexpected slot \"", s.name, "\""));
    }
    if (by_index[i] != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "slot \"", s.name, "\" appears twice"));
    }
    if (static_cast<int64_t>(s.values.size()) != num_params_) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "slot \"", s.name, "\" has ", s.values.size(),
                       " values, expected ", num_params_));
    }
    by_index[i] = &s;
  }
  for (size_t i = 0; i < slot_names_.size(); ++i) {
    if (by_index[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "missing slot \"", slot_names_[i], "\""));
    }
  }
  for (size_t i = 0; i < slot_names_.size(); ++i) {
    slots_[i] = std::move(by_index[i]->values);
  }
  iterations_ = state.iterations;
  return absl::OkStatus();
}

}  // namespace pscluster
