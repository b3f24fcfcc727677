// The optimizer a Keras model file was compiled with, read into our
// optimizers' terms: Keras 3's compile_config.optimizer (a .keras archive's
// config.json), tf.keras's training_config.optimizer_config and
// TensorFlow.js's trainingConfig.optimizer_config. The chief trains with
// it where its own flags do not say otherwise (docs/optimizers.md).
// Plain functions: thread-safe.
#ifndef PSCLUSTER_MODEL_KERAS_OPTIMIZER_H_
#define PSCLUSTER_MODEL_KERAS_OPTIMIZER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pscluster {

// Keras's defaults for what the file leaves out; each optimizer reads the
// fields update/optimizer.h says it uses.
struct CompiledOptimizer {
  std::string keras_class;  // as the file names it: "Adam", "RMSprop", ...
  // sgd, momentum (an SGD with momentum > 0), adam, adamw, adagrad,
  // rmsprop or ftrl
  std::string name;
  double learning_rate = 0.001;
  double momentum = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-7;
  double weight_decay = 0;
  double rho = 0.9;
  bool centered = false;
  double initial_accumulator_value = 0.1;
  double learning_rate_power = -0.5;
  double l1 = 0;
  double l2 = 0;
  double l2_shrinkage = 0;
  double beta = 0;
  // An ExponentialDecay schedule of the rate (not staircase); 0 steps: none.
  double decay_rate = 1;
  int64_t decay_steps = 0;
  // Gradient clipping (0: none): each variable's gradient to this norm, or
  // all of them together to this global norm.
  double clipnorm = 0;
  double global_clipnorm = 0;
};

// Keras's defaults for our optimizer `name`: the struct's, with 0.9 for
// momentum's momentum and AdamW's weight decay 0.004.
CompiledOptimizer KerasOptimizerDefaults(const std::string& name);

// The compiled optimizer of the model file text `model_json` (what
// ReadModelFile returns); nullopt when it has none. InvalidArgument
// starting with `source` and naming the class or option for one this
// cluster cannot follow exactly (another class, amsgrad, nesterov,
// clipvalue, an exponential moving average, a loss scale, gradient
// accumulation, Keras 2's "decay", a schedule other than a smooth
// ExponentialDecay), or a value of the wrong type.
absl::StatusOr<std::optional<CompiledOptimizer>> ReadCompiledOptimizer(absl::string_view model_json,
                                                                       const std::string& source);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_KERAS_OPTIMIZER_H_
