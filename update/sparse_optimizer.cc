#include "update/sparse_optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "update/optimizer.h"
#include "update/update_rules.h"

namespace pscluster {
namespace {

// The kernels update one row: `w` its values, the slots after them. They
// follow Keras 3's update_step term by term, in float32; the BUILD rule
// turns off fused multiply-adds so that the bits do not depend on what the
// compiler contracts.

void SgdRow(int d, const float* __restrict g, float* __restrict w, float lr) {
  for (int i = 0; i < d; ++i) w[i] -= lr * g[i];
}

void AdagradRow(int d, const float* __restrict g, float* __restrict w, float* __restrict acc,
                float lr, float epsilon) {
  for (int i = 0; i < d; ++i) AdagradStep(g[i], &w[i], &acc[i], lr, epsilon);
}

// The dense AdamKernel's expression (update/optimizer.cc) as GCC builds it
// there for x86-64-v3, with its multiply-adds fused: written out as
// std::fma (exact, whatever the compiler), so that a row touched at every
// step is the dense rule's bits. LazyAdamIsDenseAdamWhenEveryRowIsTouched
// checks it.
void AdamRow(int d, const float* __restrict g, float* __restrict w, float* __restrict m_slot,
             float* __restrict v_slot, float one_minus_beta1, float one_minus_beta2, float lr_t,
             float epsilon) {
  for (int i = 0; i < d; ++i) {
    const float m = std::fma(g[i] - m_slot[i], one_minus_beta1, m_slot[i]);
    const float v = std::fma(std::fma(g[i], g[i], -v_slot[i]), one_minus_beta2, v_slot[i]);
    m_slot[i] = m;
    v_slot[i] = v;
    w[i] -= (m * lr_t) / (std::sqrt(v) + epsilon);
  }
}

void FtrlRow(int d, const float* __restrict g, float* __restrict w, float* __restrict acc,
             float* __restrict linear, const FtrlTerms& t) {
  for (int i = 0; i < d; ++i) FtrlStep(g[i], &w[i], &acc[i], &linear[i], t);
}

std::vector<std::string> SlotNames(const std::string& name) {
  if (name == "adagrad") return {"accumulator"};
  if (name == "adam") return {"m", "v"};
  if (name == "ftrl") return {"accumulator", "linear"};
  return {};
}

class SparseSgd final : public SparseOptimizer {
 public:
  SparseSgd(const SparseOptimizerOptions& options, int width) : SparseOptimizer(options, width) {}

  void Apply(absl::Span<float* const> rows, const float* grads, int64_t iterations) const override {
    const int d = width();
    const float lr = LearningRate(iterations);
    for (size_t r = 0; r < rows.size(); ++r) SgdRow(d, grads + r * d, rows[r], lr);
  }
};

class SparseAdagrad final : public SparseOptimizer {
 public:
  SparseAdagrad(const SparseOptimizerOptions& options, int width)
      : SparseOptimizer(options, width) {}

  void Apply(absl::Span<float* const> rows, const float* grads, int64_t iterations) const override {
    const int d = width();
    const float lr = LearningRate(iterations);
    const float epsilon = options().epsilon;
    for (size_t r = 0; r < rows.size(); ++r) {
      float* row = rows[r];
      AdagradRow(d, grads + r * d, row, row + d, lr, epsilon);
    }
  }
};

class SparseAdam final : public SparseOptimizer {
 public:
  SparseAdam(const SparseOptimizerOptions& options, int width) : SparseOptimizer(options, width) {}

  void Apply(absl::Span<float* const> rows, const float* grads, int64_t iterations) const override {
    const SparseOptimizerOptions& o = options();
    const int d = width();
    const float lr_t = LearningRateT(iterations);
    for (size_t r = 0; r < rows.size(); ++r) {
      float* row = rows[r];
      AdamRow(d, grads + r * d, row, row + d, row + 2 * d, 1.0f - o.beta1, 1.0f - o.beta2, lr_t,
              o.epsilon);
    }
  }

 private:
  // The step's rate with the bias correction, in double, rounded once: the
  // dense AdamOptimizer's LearningRateT for the same count.
  float LearningRateT(int64_t iterations) const {
    const SparseOptimizerOptions& o = options();
    const double t = static_cast<double>(iterations + 1);
    const double beta1_power = std::pow(static_cast<double>(o.beta1), t);
    const double beta2_power = std::pow(static_cast<double>(o.beta2), t);
    return static_cast<float>(LearningRate(iterations) * std::sqrt(1.0 - beta2_power) /
                              (1.0 - beta1_power));
  }
};

class SparseFtrl final : public SparseOptimizer {
 public:
  SparseFtrl(const SparseOptimizerOptions& options, int width)
      : SparseOptimizer(options, width) {}

  void Apply(absl::Span<float* const> rows, const float* grads, int64_t iterations) const override {
    const int d = width();
    const SparseOptimizerOptions& o = options();
    const FtrlTerms terms =
        MakeFtrlTerms(LearningRate(iterations), o.learning_rate_power,
                      o.l1_regularization_strength, o.l2_regularization_strength,
                      o.l2_shrinkage_regularization_strength, o.beta);
    for (size_t r = 0; r < rows.size(); ++r) {
      float* row = rows[r];
      FtrlRow(d, grads + r * d, row, row + d, row + 2 * d, terms);
    }
  }
};

absl::Status BadOption(const SparseOptimizerOptions& options, const char* field, float value,
                       const char* requirement) {
  return absl::InvalidArgumentError(absl::StrCat("sparse optimizer \"", options.name, "\": ", field,
                                                 " ", value, " ", requirement));
}

// [0, 1) and finite; NaN fails both comparisons.
bool InUnitInterval(float x) { return x >= 0.0f && x < 1.0f; }
bool FiniteNonNegative(float x) { return std::isfinite(x) && x >= 0.0f; }
bool FinitePositive(float x) { return std::isfinite(x) && x > 0.0f; }

absl::Status Validate(const SparseOptimizerOptions& o, int width) {
  if (o.name != "sgd" && o.name != "adagrad" && o.name != "adam" && o.name != "ftrl") {
    return absl::InvalidArgumentError(absl::StrCat("unknown sparse optimizer \"", o.name,
                                                   "\" (expected sgd, adagrad, adam or ftrl)"));
  }
  if (!FinitePositive(o.learning_rate)) {
    return BadOption(o, "learning_rate", o.learning_rate, "must be finite and > 0");
  }
  if (width <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse optimizer \"", o.name, "\": width ", width, " must be > 0"));
  }
  if (!(o.decay_rate > 0.0f && o.decay_rate <= 1.0f)) {
    return BadOption(o, "decay_rate", o.decay_rate, "must be in (0, 1]");
  }
  if (o.decay_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sparse optimizer \"", o.name,
                                                   "\": decay_steps ", o.decay_steps,
                                                   " must be >= 0"));
  }
  if ((o.name == "adagrad" || o.name == "adam") && !FinitePositive(o.epsilon)) {
    return BadOption(o, "epsilon", o.epsilon, "must be finite and > 0");
  }
  if ((o.name == "adagrad" || o.name == "ftrl") &&
      !FiniteNonNegative(o.initial_accumulator_value)) {
    return BadOption(o, "initial_accumulator_value", o.initial_accumulator_value,
                     "must be finite and >= 0");
  }
  if (o.name == "adam") {
    if (!InUnitInterval(o.beta1)) return BadOption(o, "beta1", o.beta1, "must be in [0, 1)");
    if (!InUnitInterval(o.beta2)) return BadOption(o, "beta2", o.beta2, "must be in [0, 1)");
  }
  if (o.name == "ftrl") {
    if (!std::isfinite(o.learning_rate_power) || !(o.learning_rate_power <= 0.0f)) {
      return BadOption(o, "learning_rate_power", o.learning_rate_power, "must be finite and <= 0");
    }
    const std::pair<const char*, float> strengths[] = {
        {"l1_regularization_strength", o.l1_regularization_strength},
        {"l2_regularization_strength", o.l2_regularization_strength},
        {"l2_shrinkage_regularization_strength", o.l2_shrinkage_regularization_strength},
        {"beta", o.beta},
    };
    for (const auto& [field, value] : strengths) {
      if (!FiniteNonNegative(value)) return BadOption(o, field, value, "must be finite and >= 0");
    }
  }
  return absl::OkStatus();
}

}  // namespace

float SparseOptimizer::LearningRate(int64_t iterations) const {
  return DecayedLearningRate(options_.learning_rate, options_.decay_rate, options_.decay_steps,
                             iterations);
}

absl::StatusOr<std::unique_ptr<SparseOptimizer>> SparseOptimizer::Create(
    const SparseOptimizerOptions& options, int width) {
  absl::Status status = Validate(options, width);
  if (!status.ok()) return status;
  if (options.name == "sgd") {
    return std::unique_ptr<SparseOptimizer>(new SparseSgd(options, width));
  }
  if (options.name == "adagrad") {
    return std::unique_ptr<SparseOptimizer>(new SparseAdagrad(options, width));
  }
  if (options.name == "adam") {
    return std::unique_ptr<SparseOptimizer>(new SparseAdam(options, width));
  }
  return std::unique_ptr<SparseOptimizer>(new SparseFtrl(options, width));
}

SparseOptimizer::SparseOptimizer(const SparseOptimizerOptions& options, int width)
    : options_(options), width_(width), slot_names_(SlotNames(options.name)) {}

int64_t SparseOptimizer::FloatsPerRow(const std::string& name, int width) {
  return static_cast<int64_t>(width) * static_cast<int64_t>(1 + SlotNames(name).size());
}

void SparseOptimizer::InitRow(float* row) const {
  for (size_t s = 0; s < slot_names_.size(); ++s) {
    const float start = slot_names_[s] == "accumulator" ? options_.initial_accumulator_value : 0.0f;
    std::fill_n(row + (s + 1) * width_, width_, start);
  }
}

DeduplicatedRows SumDuplicateRows(absl::Span<const int64_t> ids, const float* grads, int width) {
  DeduplicatedRows out;
  absl::flat_hash_map<int64_t, size_t> index;  // id -> its place in out.ids
  index.reserve(ids.size());
  out.grads.reserve(ids.size() * width);
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* g = grads + i * width;
    const auto [it, inserted] = index.try_emplace(ids[i], out.ids.size());
    if (inserted) {
      out.ids.push_back(ids[i]);
      out.grads.insert(out.grads.end(), g, g + width);
    } else {
      float* sum = out.grads.data() + it->second * width;
      for (int j = 0; j < width; ++j) sum[j] += g[j];
    }
  }
  return out;
}

}  // namespace pscluster
