#include "update/optimizer.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

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

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(const OptimizerOptions& options, int64_t num_params)
      : Optimizer(options, num_params, {}) {}

  void Apply(const float* grad, float* params) override {
    const float lr = current_learning_rate();
    ForRanges([&](int64_t b, int64_t e) { SgdKernel(e - b, grad + b, params + b, lr); });
    increment_iterations();
  }

 protected:
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

  void Apply(const float* grad, float* params) override {
    const float lr = current_learning_rate();
    const float momentum = options().momentum;
    float* velocity = mutable_slot(0);
    ForRanges([&](int64_t b, int64_t e) {
      MomentumKernel(e - b, grad + b, params + b, velocity + b, lr, momentum);
    });
    increment_iterations();
  }

 protected:
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

class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(const OptimizerOptions& options, int64_t num_params)
      : Optimizer(options, num_params, {"m", "v"}) {}

  void Apply(const float* grad, float* params) override {
    const OptimizerOptions& o = options();
    const float lr_t = LearningRateT();
    float* m = mutable_slot(0);
    float* v = mutable_slot(1);
    ForRanges([&](int64_t b, int64_t e) {
      AdamKernel(e - b, grad + b, params + b, m + b, v + b, 1.0f - o.beta1, 1.0f - o.beta2,
                 lr_t, o.epsilon);
    });
    increment_iterations();
  }

 protected:
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

absl::Status BadOption(const OptimizerOptions& options, const char* field,
                       float value, const char* requirement) {
  return absl::InvalidArgumentError(absl::StrCat("optimizer \"", options.name,
                                                 "\": ", field, " ", value, " ",
                                                 requirement));
}

// [0, 1) and finite; NaN fails both comparisons.
bool InUnitInterval(float x) { return x >= 0.0f && x < 1.0f; }

absl::Status Validate(const OptimizerOptions& o, int64_t num_params) {
  if (o.name != "sgd" && o.name != "momentum" && o.name != "adam") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown optimizer \"", o.name, "\" (expected sgd, momentum or adam)"));
  }
  if (!std::isfinite(o.learning_rate) || !(o.learning_rate > 0.0f)) {
    return BadOption(o, "learning_rate", o.learning_rate,
                     "must be finite and > 0");
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
  if (o.name == "momentum" && !InUnitInterval(o.momentum)) {
    return BadOption(o, "momentum", o.momentum, "must be in [0, 1)");
  }
  if (o.name == "adam") {
    if (!InUnitInterval(o.beta1)) {
      return BadOption(o, "beta1", o.beta1, "must be in [0, 1)");
    }
    if (!InUnitInterval(o.beta2)) {
      return BadOption(o, "beta2", o.beta2, "must be in [0, 1)");
    }
    if (!std::isfinite(o.epsilon) || !(o.epsilon > 0.0f)) {
      return BadOption(o, "epsilon", o.epsilon, "must be finite and > 0");
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
  if (options.name == "sgd") {
    return std::unique_ptr<Optimizer>(new SgdOptimizer(options, num_params));
  }
  if (options.name == "momentum") {
    return std::unique_ptr<Optimizer>(
        new MomentumOptimizer(options, num_params));
  }
  return std::unique_ptr<Optimizer>(new AdamOptimizer(options, num_params));
}

Optimizer::Optimizer(const OptimizerOptions& options, int64_t num_params,
                     std::vector<std::string> slot_names)
    : options_(options),
      num_params_(num_params),
      slot_names_(std::move(slot_names)),
      slots_(slot_names_.size(), std::vector<float>(num_params, 0.0f)) {}

void Optimizer::ApplyAside(const float* grad, const float* params, float* params_out) {
  if (aside_.size() != slots_.size()) {
    aside_.assign(slots_.size(), std::vector<float>(num_params_, 0.0f));
  }
  ComputeAside(grad, params, params_out);
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

absl::Status Optimizer::RestoreState(const OptimizerState& state) {
  const std::string prefix =
      absl::StrCat("optimizer \"", options_.name, "\": restoring state: ");
  if (state.iterations < 0 || state.iterations > kMaxIterations) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "iterations ", state.iterations,
        state.iterations < 0 ? " is negative" : " is more than 2^53 (no run takes that many steps)"));
  }
  // Check everything first so that a bad state changes nothing.
  std::vector<const OptimizerSlot*> by_index(slot_names_.size(), nullptr);
  for (const OptimizerSlot& s : state.slots) {
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
    slots_[i] = by_index[i]->values;
  }
  iterations_ = state.iterations;
  return absl::OkStatus();
}

}  // namespace pscluster
