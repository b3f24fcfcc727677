#include "model/keras_optimizer.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

using json = nlohmann::json;

// The optimizer's entry under the first training config the file has
// (the model's own, or tfjs's modelTopology's); null when none.
json FindOptimizer(const json& doc) {
  for (const json* d : {&doc, doc.contains("modelTopology") ? &doc["modelTopology"] : nullptr}) {
    if (d == nullptr || !d->is_object()) continue;
    for (const char* key : {"compile_config", "training_config", "trainingConfig"}) {
      auto it = d->find(key);
      if (it == d->end() || !it->is_object()) continue;
      for (const char* entry : {"optimizer", "optimizer_config"}) {
        auto o = it->find(entry);
        if (o != it->end() && !o->is_null()) return *o;
      }
    }
  }
  return json();
}

// An option's value under its Keras 3 / tf.keras name or TensorFlow.js's.
class Options {
 public:
  Options(const json& config, std::string where) : config_(config), where_(std::move(where)) {}

  // The first of `names` present and not null.
  const json* Find(std::vector<const char*> names) const {
    for (const char* n : names) {
      auto it = config_.find(n);
      if (it != config_.end() && !it->is_null()) return &*it;
    }
    return nullptr;
  }

  // Sets *out from the first of `names` present; a value that is not a
  // number is an error naming it.
  absl::Status Number(std::vector<const char*> names, double* out) const {
    const json* v = Find(names);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number()) return Bad(names.front(), v->dump(), "is not a number");
    *out = v->get<double>();
    return absl::OkStatus();
  }

  absl::Status Bool(std::vector<const char*> names, bool* out) const {
    const json* v = Find(names);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) return Bad(names.front(), v->dump(), "is not true or false");
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  // An option the cluster cannot follow, refused unless absent, null or
  // equal to `neutral` (its Keras default that changes nothing).
  absl::Status Refuse(std::vector<const char*> names, const json& neutral,
                      const std::string& why) const {
    const json* v = Find(names);
    if (v == nullptr || *v == neutral) return absl::OkStatus();
    return Bad(names.front(), v->dump(), why);
  }

  absl::Status Bad(const std::string& option, const std::string& value,
                   const std::string& why) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": ", option, "=", value, " ", why));
  }

 private:
  const json& config_;
  const std::string where_;
};

// The rate: a number, or a smooth ExponentialDecay schedule.
absl::Status ReadLearningRate(const Options& opts, CompiledOptimizer* out) {
  const json* lr = opts.Find({"learning_rate", "learningRate", "lr"});
  if (lr == nullptr) return absl::OkStatus();
  if (lr->is_number()) {
    out->learning_rate = lr->get<double>();
    return absl::OkStatus();
  }
  const std::string cls = lr->is_object() ? lr->value("class_name", std::string()) : "";
  if (cls != "ExponentialDecay" || !(*lr)["config"].is_object()) {
    return opts.Bad("learning_rate", lr->dump().substr(0, 200),
                    "is a schedule this cluster does not follow (a number or ExponentialDecay)");
  }
  const Options schedule((*lr)["config"], "learning_rate's ExponentialDecay");
  double steps = 0;
  if (absl::Status s = schedule.Number({"initial_learning_rate"}, &out->learning_rate); !s.ok()) {
    return s;
  }
  if (absl::Status s = schedule.Number({"decay_rate"}, &out->decay_rate); !s.ok()) return s;
  if (absl::Status s = schedule.Number({"decay_steps"}, &steps); !s.ok()) return s;
  if (absl::Status s = schedule.Refuse({"staircase"}, false, "is not followed (smooth decay only)");
      !s.ok()) {
    return s;
  }
  if (!(steps >= 1 && steps < 9.2e18)) {
    return schedule.Bad("decay_steps", absl::StrCat(steps), "must be >= 1");
  }
  out->decay_steps = static_cast<int64_t>(steps);
  return absl::OkStatus();
}

}  // namespace

CompiledOptimizer KerasOptimizerDefaults(const std::string& name) {
  CompiledOptimizer keras;
  keras.name = name;
  if (name == "momentum") keras.momentum = 0.9;
  if (name == "adamw") keras.weight_decay = 0.004;
  return keras;
}

absl::StatusOr<std::optional<CompiledOptimizer>> ReadCompiledOptimizer(absl::string_view model_json,
                                                                       const std::string& source) {
  const json doc = json::parse(model_json.begin(), model_json.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return std::optional<CompiledOptimizer>();
  const json entry = FindOptimizer(doc);
  if (entry.is_null()) return std::optional<CompiledOptimizer>();
  CompiledOptimizer out;
  json config = json::object();
  if (entry.is_string()) {  // compile(optimizer="adam") as some writers keep it
    out.keras_class = entry.get<std::string>();
  } else if (entry.is_object() && entry.contains("class_name") && entry["class_name"].is_string()) {
    out.keras_class = entry["class_name"].get<std::string>();
    if (entry.contains("config") && entry["config"].is_object()) config = entry["config"];
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the compiled optimizer ", entry.dump().substr(0, 200), " has no class_name"));
  }
  // tf.keras 2.11+ writes its optimizers as "Custom>Adam".
  std::string cls(absl::StripPrefix(out.keras_class, "Custom>"));
  const std::string lower = absl::AsciiStrToLower(cls);
  const Options opts(config, absl::StrCat(source, ": the compiled optimizer ", out.keras_class));
  if (lower == "sgd") {
    out.name = "sgd";
  } else if (lower == "momentum") {  // TensorFlow.js's
    out.name = "momentum";
  } else if (lower == "adam" || lower == "adamw" || lower == "adagrad" || lower == "rmsprop" ||
             lower == "ftrl") {
    out.name = lower;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the compiled optimizer ", out.keras_class,
                     " is not one this cluster applies (SGD, Adam, AdamW, Adagrad, RMSprop, "
                     "Ftrl); give --optimizer to train with another"));
  }
  const CompiledOptimizer defaults = KerasOptimizerDefaults(out.name);
  out.momentum = defaults.momentum;  // tfjs's Momentum names it; a fallback
  out.weight_decay = defaults.weight_decay;
  const std::vector<std::pair<std::vector<const char*>, double*>> numbers = {
      {{"momentum"}, &out.momentum},
      {{"beta_1", "beta1"}, &out.beta1},
      {{"beta_2", "beta2"}, &out.beta2},
      {{"epsilon"}, &out.epsilon},
      {{"weight_decay"}, &out.weight_decay},
      {{"rho", "decay"}, &out.rho},
      {{"initial_accumulator_value", "initialAccumulatorValue"}, &out.initial_accumulator_value},
      {{"learning_rate_power"}, &out.learning_rate_power},
      {{"l1_regularization_strength"}, &out.l1},
      {{"l2_regularization_strength"}, &out.l2},
      {{"l2_shrinkage_regularization_strength"}, &out.l2_shrinkage},
      {{"beta"}, &out.beta},
      {{"clipnorm"}, &out.clipnorm},
      {{"global_clipnorm"}, &out.global_clipnorm},
  };
  // "decay" is TensorFlow.js RMSProp's rho, and Keras 2's legacy
  // time-based decay of the rate everywhere else (refused below).
  const bool decay_is_rho = out.name == "rmsprop" && opts.Find({"rho"}) == nullptr;
  for (const auto& [names, field] : numbers) {
    if (names.front() == std::string("rho") && !decay_is_rho) {
      if (absl::Status s = opts.Number({"rho"}, field); !s.ok()) return s;
      continue;
    }
    if (absl::Status s = opts.Number(names, field); !s.ok()) return s;
  }
  if (absl::Status s = opts.Bool({"centered"}, &out.centered); !s.ok()) return s;
  if (absl::Status s = ReadLearningRate(opts, &out); !s.ok()) return s;
  if (out.name == "sgd" && out.momentum > 0) out.name = "momentum";
  const std::pair<std::vector<const char*>, std::pair<json, const char*>> refused[] = {
      {{"amsgrad"}, {false, "is not followed (Adam without AMSGrad only)"}},
      {{"nesterov", "useNesterov"}, {false, "is not followed (plain momentum only)"}},
      {{"clipvalue"}, {json(), "is not followed (clipnorm and global_clipnorm are)"}},
      {{"use_ema"}, {false, "is not followed (no moving average of the weights)"}},
      {{"loss_scale_factor"}, {json(), "is not followed (float32 training needs no loss scale)"}},
      {{"gradient_accumulation_steps"}, {json(), "is not followed (one update per step)"}},
  };
  for (const auto& [names, neutral_why] : refused) {
    if (absl::Status s = opts.Refuse(names, neutral_why.first, neutral_why.second); !s.ok()) {
      return s;
    }
  }
  if (!decay_is_rho) {
    if (absl::Status s = opts.Refuse({"decay"}, 0.0,
                                     "(Keras 2's time-based decay) is not followed; "
                                     "an ExponentialDecay schedule is");
        !s.ok()) {
      return s;
    }
  }
  if (out.clipnorm != 0 && out.global_clipnorm != 0) {
    return opts.Bad("clipnorm", absl::StrCat(out.clipnorm),
                    "and global_clipnorm are both set (Keras refuses that too)");
  }
  return std::optional<CompiledOptimizer>(std::move(out));
}

}  // namespace pscluster
