// Optimizers a parameter server applies to its shard of the model, with
// Keras's update rules, in float32 like Keras: SGD with and without
// momentum, Adam, AdamW, Adagrad, RMSprop and FTRL (docs/optimizers.md has
// the formulas and which Keras they follow where Keras 2 and 3 differ). An
// Optimizer is not thread-safe: its owner serialises calls (the parameter
// store calls it under its lock). It owns its slot buffers; it borrows the
// gradient and parameter arrays only for the duration of Apply.
#ifndef PSCLUSTER_UPDATE_OPTIMIZER_H_
#define PSCLUSTER_UPDATE_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/parallel_for.h"

namespace pscluster {

// Keras's defaults but for learning_rate (it must be set) and momentum
// (0.9 for "momentum"; Keras's RMSprop default is 0: set it).
struct OptimizerOptions {
  // "sgd", "momentum", "adam", "adamw", "adagrad", "rmsprop" or "ftrl"
  std::string name;
  float learning_rate = 0.0f;
  float momentum = 0.9f;  // "momentum"; "rmsprop" (0: none)
  float beta1 = 0.9f;     // "adam", "adamw"
  float beta2 = 0.999f;   // "adam", "adamw"
  float epsilon = 1e-7f;  // "adam", "adamw", "adagrad", "rmsprop"
  // Every optimizer: p = p - p * weight_decay * lr before the update
  // (Keras's decoupled weight decay; AdamW's default is 0.004: set it).
  float weight_decay = 0.0f;
  float rho = 0.9f;             // "rmsprop": the squares' moving average
  bool centered = false;        // "rmsprop": divide by the gradient's variance
  float initial_accumulator_value = 0.1f;  // "adagrad", "ftrl"
  float learning_rate_power = -0.5f;       // "ftrl"
  float l1 = 0.0f;            // "ftrl": l1_regularization_strength
  float l2 = 0.0f;            // "ftrl": l2_regularization_strength
  float l2_shrinkage = 0.0f;  // "ftrl": l2_shrinkage_regularization_strength
  float beta = 0.0f;          // "ftrl"
  // Keras's ExponentialDecay: the rate at update t (0-based) is
  // learning_rate * decay_rate^(t / decay_steps). decay_steps 0: constant.
  float decay_rate = 1.0f;
  int64_t decay_steps = 0;
};

// One named slot buffer, num_params floats.
struct OptimizerSlot {
  std::string name;
  std::vector<float> values;
};

// Everything a checkpoint needs to resume an optimizer exactly.
struct OptimizerState {
  int64_t iterations = 0;
  std::vector<OptimizerSlot> slots;  // in slot_names() order
};

// Keras's ExponentialDecay (not staircase) after `iterations` updates:
// learning_rate * decay_rate^(iterations / decay_steps), in double and
// rounded once; decay_steps <= 0 or decay_rate 1: learning_rate. The dense
// Optimizer's schedule and the sparse tables' (update/sparse_optimizer.h).
float DecayedLearningRate(float learning_rate, float decay_rate, int64_t decay_steps,
                          int64_t iterations);

class Optimizer {
 public:
  // Validates the options that apply to `options.name`: learning_rate
  // finite and > 0; momentum, beta1, beta2, rho in [0, 1); epsilon finite
  // and > 0; weight_decay, initial_accumulator_value, l1, l2, l2_shrinkage
  // and beta finite and >= 0; learning_rate_power finite and <= 0;
  // num_params >= 0. InvalidArgument naming the bad value. Slots start as
  // Keras starts them (the accumulators at initial_accumulator_value, the
  // others at 0), iterations at 0.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const OptimizerOptions& options, int64_t num_params);

  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of params[0, num_params) with grad[0, num_params), then
  // iterations() + 1. Keras's rules (t = iterations() + 1):
  //   sgd:      p -= lr * g
  //   momentum: v = momentum * v - lr * g;  p += v
  //   adam:     m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g
  //             p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)
  //   adamw:    adam's (AdamW is Adam with a weight_decay)
  //   adagrad:  a += g * g;  p -= lr * g / sqrt(a + eps)
  //   rmsprop:  v = rho * v + (1 - rho) * g * g;  centered: also
  //             ag = rho * ag + (1 - rho) * g, and d = v - ag * ag, else
  //             d = v;  inc = lr * g / sqrt(d + eps);  with momentum:
  //             mom = momentum * mom + inc;  p -= mom;  else p -= inc
  //   ftrl:     update/update_rules.h's FtrlStep
  // With a weight_decay, every rule first sets p = p - p * weight_decay * lr.
  // The caller checks gradients (e.g. for non-finite values) beforehand.
  // grad and params must not overlap.
  void Apply(const float* grad, float* params);

  // Apply computed aside, for a step that may or may not be taken: writes
  // into params_out what Apply would leave in params (which is only read),
  // and the slots' next values into a spare set of slots, bit for bit as
  // Apply would, and changes nothing else. TakeAside() then makes the
  // spare slots this optimizer's and counts the iteration, which leaves it
  // exactly as Apply would have; any other call in between makes what was
  // computed aside void (TakeAside must not follow it). The spare slots
  // are allocated at the first call. params and params_out must not
  // overlap.
  void ApplyAside(const float* grad, const float* params, float* params_out);
  void TakeAside();

  int64_t iterations() const { return iterations_; }
  int64_t num_params() const { return num_params_; }
  const OptimizerOptions& options() const { return options_; }
  // The scheduled learning rate for the next update.
  float current_learning_rate() const {
    return DecayedLearningRate(options_.learning_rate, options_.decay_rate, options_.decay_steps,
                               iterations_);
  }

  // Slot names, fixed per optimizer and options: none for sgd,
  // {"momentum"} for momentum, {"m", "v"} for adam and adamw,
  // {"accumulator"} for adagrad, {"accumulator", "linear"} for ftrl, and
  // for rmsprop {"velocity"}, then "momentum" when momentum > 0, then
  // "average_gradient" when centered.
  const std::vector<std::string>& slot_names() const { return slot_names_; }
  // A view of one slot, valid until the next Apply or RestoreState; empty
  // for an unknown name.
  absl::Span<const float> slot(const std::string& name) const;

  // A copy of iterations and slots, for a checkpoint.
  OptimizerState SaveState() const;
  // Replaces iterations and slots with `state`. InvalidArgument (naming the
  // slot or value) and no change at all unless the state has exactly this
  // optimizer's slots, each of num_params floats, and iterations in
  // [0, kMaxIterations].
  absl::Status RestoreState(OptimizerState state);  // its slots moved in

  // Apply's loop runs on up to `threads` cores for large models
  // (common/parallel_for.h); the result is the same whatever the number.
  void set_threads(int threads) { threads_ = threads; }

  // Beyond it Keras's t = iterations + 1 is no longer exact as a double;
  // a restored count past it comes from a corrupt state, and counting on
  // from it could overflow.
  static constexpr int64_t kMaxIterations = int64_t{1} << 53;

 protected:
  // Slots named `slot_names`, slot i starting at slot_starts[i] (0 for
  // those past its end).
  Optimizer(const OptimizerOptions& options, int64_t num_params,
            std::vector<std::string> slot_names, std::vector<float> slot_starts = {});

  float* mutable_slot(size_t i) { return slots_[i].data(); }
  float* aside_slot(size_t i) { return aside_[i].data(); }
  // The rule in place: params and slots[i] (slot i's num_params floats)
  // updated from grad, at the rate of update iterations().
  virtual void Update(const float* grad, float* params, float* const* slots) = 0;
  // ApplyAside's rule: params_out and aside_slot(i) from grad, params and
  // the slots. By default a copy of params and the slots updated in place
  // (the same bits as Apply); an optimizer may compute it out of place.
  virtual void ComputeAside(const float* grad, const float* params, float* params_out);
  // Runs the kernel `fn(begin, end)` over [0, num_params()) on threads().
  template <typename Fn>
  void ForRanges(Fn&& fn) {
    ParallelFor(num_params_, kMinRange, threads_, std::forward<Fn>(fn));
  }

 private:
  // p = p - p * weight_decay * lr over params[0, num_params).
  void DecayWeights(float* params);

  static constexpr int64_t kMinRange = 256 << 10;
  int threads_ = 1;
  const OptimizerOptions options_;
  const int64_t num_params_;
  const std::vector<std::string> slot_names_;
  std::vector<std::vector<float>> slots_;  // parallel to slot_names_
  std::vector<std::vector<float>> aside_;  // ApplyAside's slots; empty until then
  int64_t iterations_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_OPTIMIZER_H_
