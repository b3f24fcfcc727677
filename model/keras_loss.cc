#include "model/keras_loss.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace pscluster {
namespace keras {
namespace {

// The node that node i reads first (Sequential nodes read the one before).
int FirstInput(const std::vector<LayerSpec>& specs, int i) {
  return specs[i].inputs.empty() ? i - 1 : specs[i].inputs[0];
}

// A Keras loss by name (any of Keras's spellings: snake_case, the class
// name, TensorFlow.js's camelCase, the mse/mae aliases).
std::optional<LossKind> LossByName(std::string name) {
  const std::string key = SpellingKey(name);
  if (key == "sparsecategoricalcrossentropy") return LossKind::kSparseCategoricalCrossentropy;
  if (key == "categoricalcrossentropy") return LossKind::kCategoricalCrossentropy;
  if (key == "binarycrossentropy") return LossKind::kBinaryCrossentropy;
  if (key == "meansquarederror" || key == "mse") return LossKind::kMeanSquaredError;
  if (key == "meanabsoluteerror" || key == "mae") return LossKind::kMeanAbsoluteError;
  return std::nullopt;
}

constexpr char kLossNames[] =
    "sparse_categorical_crossentropy, categorical_crossentropy, binary_crossentropy, "
    "mean_squared_error (mse), mean_absolute_error (mae)";

// The loss a file's compile/training config gives: a name, or a Keras loss
// object {"class_name": ..., "config": {"from_logits": ...}}.
absl::StatusOr<LossChoice> LossOfConfig(const json& loss, const std::string& source) {
  LossChoice c;
  const std::string where = absl::StrCat(source, ": loss ", Show(loss));
  std::string name;
  json cfg;
  if (!ClassAndConfig(loss, &name, &cfg)) {
    return Bad(where, "is not supported (one loss for the model's one output)");
  }
  std::optional<LossKind> kind = LossByName(name);
  if (!kind) return Bad(where, absl::StrCat("is not supported (", kLossNames, ")"));
  c.kind = *kind;
  c.given = true;
  if (cfg.contains("from_logits") && cfg["from_logits"].is_boolean()) {
    c.from_logits = cfg["from_logits"].get<bool>();
  }
  if (absl::Status s = Neutral(cfg, where, "label_smoothing", {0, 0.0}, "no label smoothing");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Neutral(cfg, where, "reduction",
                               {"auto", "sum_over_batch_size", "mean"},
                               "the mean over the batch only");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Neutral(cfg, where, "ignore_class", {}, "not implemented"); !s.ok()) {
    return s;
  }
  return c;
}

}  // namespace

absl::StatusOr<LossChoice> ChooseLoss(const std::string& flag, const json& file_loss,
                                      const std::string& source) {
  LossChoice loss;
  if (!flag.empty()) {
    std::optional<LossKind> kind = LossByName(flag);
    if (!kind) {
      return Bad(absl::StrCat("--loss=", flag), absl::StrCat("not a loss we train on (",
                                                              kLossNames, ")"));
    }
    loss.kind = *kind;
    loss.given = true;
  } else if (!file_loss.is_null()) {
    return LossOfConfig(file_loss, source);
  }
  return loss;
}

namespace {

// The output at node `node` checked against `loss` (CheckOutput's rules),
// what the loss reads described in *head.
absl::Status CheckHead(const std::vector<LayerSpec>& specs, int node, LossChoice* loss,
                       const std::string& source, HeadInfo* head_info) {
  int head = node;
  int tail_node = -1;                   // a last Activation layer
  Activation tail = Activation::kNone;  // its function
  std::string sum;                      // the Add in the tail, if any
  // The head: the last Dense, or a Dot (a two-tower model's logit).
  auto is_head = [](const LayerSpec& l) {
    return l.kind == LayerKind::kDense || l.kind == LayerKind::kDot;
  };
  while (head >= 0 && !is_head(specs[head])) {
    const LayerSpec& l = specs[head];
    const bool ok_tail = l.kind == LayerKind::kDropout || l.kind == LayerKind::kAdd ||
                         (l.kind == LayerKind::kActivation && head == node);
    if (!ok_tail) {
      return Bad(absl::StrCat(source, ": layer '", l.name, "'"),
                 "comes after the last Dense (or Dot) layer; the model must end in a Dense "
                 "or Dot layer (optionally then Dropout, Add and one Activation) whose "
                 "outputs the loss reads");
    }
    if (l.kind == LayerKind::kActivation) tail = l.activation, tail_node = head;
    if (l.kind == LayerKind::kAdd) sum = l.name;
    head = FirstInput(specs, head);
  }
  if (head < 0) {
    return Bad(source, "the model has no Dense (or Dot) layer; the last must give the outputs");
  }
  const LayerSpec& dense = specs[head];
  if (!sum.empty() && dense.activation != Activation::kNone) {
    return Bad(absl::StrCat(source, ": layer '", dense.name, "'"),
               absl::StrCat("its outputs are summed by the Add layer '", sum,
                            "' before the loss: its activation must be linear (logits)"));
  }
  if (tail != Activation::kNone && dense.activation != Activation::kNone) {
    return Bad(absl::StrCat(source, ": layer '", specs[node].name, "'"),
               "an activation after the output Dense layer's own is not supported");
  }
  if (tail == Activation::kNone && head != node &&
      (dense.activation == Activation::kSigmoid || dense.activation == Activation::kSoftmax)) {
    // Keras would drop out probabilities (scaled past 1) and read them as
    // such; the loss here takes the head's logits in.
    return Bad(absl::StrCat(source, ": layer '", specs[node].name, "'"),
               absl::StrCat("comes after the output layer '", dense.name,
                            "', whose sigmoid or softmax the loss takes in: put the Dropout "
                            "before it, or the activation in an Activation layer after it"));
  }
  const Activation out = tail != Activation::kNone ? tail : dense.activation;
  if (!loss->given) {
    loss->kind = out == Activation::kSigmoid ? LossKind::kBinaryCrossentropy
                                             : LossKind::kSparseCategoricalCrossentropy;
  }
  const bool categorical = loss->kind == LossKind::kSparseCategoricalCrossentropy ||
                           loss->kind == LossKind::kCategoricalCrossentropy;
  const bool binary = loss->kind == LossKind::kBinaryCrossentropy;
  const std::string at = absl::StrCat(source, ": layer '", dense.name, "'");
  const char* name = LossName(loss->kind);
  if (categorical && out != Activation::kSoftmax && out != Activation::kNone) {
    return Bad(at, absl::StrCat("the output's activation must be softmax or linear (logits) for ",
                                name));
  }
  if (binary && out != Activation::kSigmoid && out != Activation::kNone) {
    return Bad(at, absl::StrCat("the output's activation must be sigmoid or linear (logits) for ",
                                name));
  }
  if (!categorical && !binary && out == Activation::kSoftmax) {
    return Bad(at, absl::StrCat("a softmax output is only supported with categorical "
                                "cross-entropy, not ", name));
  }
  if ((categorical || binary) && loss->from_logits.has_value() &&
      *loss->from_logits != (out == Activation::kNone)) {
    return Bad(at, absl::StrCat(name, " with from_logits=", *loss->from_logits ? "true" : "false",
                                " on a ", out == Activation::kNone ? "linear" : "squashed",
                                " output: Keras would read ",
                                *loss->from_logits ? "probabilities as logits"
                                                   : "logits as probabilities",
                                "; give the output ", out == Activation::kNone ? "a " : "no ",
                                categorical ? "softmax" : "sigmoid", " or flip from_logits"));
  }
  const int width = dense.kind == LayerKind::kDot ? 1 : dense.units;
  if (loss->kind == LossKind::kSparseCategoricalCrossentropy && width > (1 << 24)) {
    return Bad(at, absl::StrCat(width, " classes; at most 2^24"));
  }
  head_info->width = width;
  head_info->head = head;
  head_info->tail = tail_node;
  head_info->squashed = (categorical || binary) && out != Activation::kNone;
  return absl::OkStatus();
}

// The loss an output's entry of the file's loss (a list's element, a
// dict's value) gives; null: none (chosen from the output).
absl::StatusOr<LossChoice> EntryLoss(const json& entry, const std::string& source) {
  if (entry.is_null()) return LossChoice();
  return LossOfConfig(entry, source);
}

// Each output's loss (CheckOutputs's rules): `flag`'s, else the file's
// (one for all, a list, a dict by name); unset where none says.
absl::StatusOr<std::vector<LossChoice>> OutputLosses(const std::vector<std::string>& names,
                                                     const std::string& flag, const json& file_loss,
                                                     const std::string& source) {
  const size_t n = names.size();
  const std::string outputs_text = absl::StrCat("[", absl::StrJoin(names, ", "), "]");
  auto index_of = [&](const std::string& name) {
    return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  std::vector<LossChoice> losses(n);
  if (!flag.empty() && flag.find(':') == std::string::npos) {
    absl::StatusOr<LossChoice> one = ChooseLoss(flag, json(), source);
    if (!one.ok()) return one.status();
    losses.assign(n, *one);
  } else if (!flag.empty()) {  // --loss=<output>:<loss>,...
    std::vector<bool> seen(n, false);
    for (absl::string_view part : absl::StrSplit(flag, ',')) {
      std::vector<std::string> kv = absl::StrSplit(part, absl::MaxSplits(':', 1));
      const size_t k = kv.size() == 2 ? index_of(kv[0]) : n;
      if (k == n || seen[k]) {
        return Bad(absl::StrCat("--loss=", flag),
                   absl::StrCat("'", part, "' is not <output>:<loss> for one of the outputs ",
                                outputs_text, " (each once)"));
      }
      absl::StatusOr<LossChoice> one = ChooseLoss(kv[1], json(), source);
      if (!one.ok()) return one.status();
      losses[k] = *one;
      seen[k] = true;
    }
    if (std::find(seen.begin(), seen.end(), false) != seen.end()) {
      return Bad(
          absl::StrCat("--loss=", flag),
          absl::StrCat("names a loss for some outputs only; the model's are ", outputs_text));
    }
  } else if (file_loss.is_array()) {
    if (file_loss.size() != n) {
      return Bad(source, absl::StrCat("loss ", Show(file_loss), ": ", file_loss.size(),
                                      " losses for ", n, " outputs ", outputs_text));
    }
    for (size_t k = 0; k < n; ++k) {
      absl::StatusOr<LossChoice> one = EntryLoss(file_loss[k], source);
      if (!one.ok()) return one.status();
      losses[k] = *one;
    }
  } else if (file_loss.is_object() && !file_loss.contains("class_name")) {
    for (const auto& [name, entry] : file_loss.items()) {
      if (index_of(name) == n) {
        return Bad(source, absl::StrCat("loss ", Show(file_loss), " names '", name,
                                        "', which is not one of the outputs ", outputs_text));
      }
    }
    for (size_t k = 0; k < n; ++k) {
      absl::StatusOr<LossChoice> one =
          EntryLoss(file_loss.contains(names[k]) ? file_loss[names[k]] : json(), source);
      if (!one.ok()) return one.status();
      losses[k] = *one;
    }
  } else if (!file_loss.is_null()) {  // one loss for every output
    absl::StatusOr<LossChoice> one = LossOfConfig(file_loss, source);
    if (!one.ok()) return one.status();
    losses.assign(n, *one);
  }
  return losses;
}

// Each output's weight: the file's loss_weights (a list or a dict by
// name), 1 where absent.
absl::StatusOr<std::vector<float>> OutputWeights(const std::vector<std::string>& names,
                                                 const json& file_weights,
                                                 const std::string& source) {
  const size_t n = names.size();
  const std::string outputs_text = absl::StrCat("[", absl::StrJoin(names, ", "), "]");
  auto index_of = [&](const std::string& name) {
    return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  std::vector<float> weights(n, 1.0f);
  auto weight_of = [&](const json& w, size_t k) -> absl::Status {
    if (!w.is_number() || !(w.get<double>() >= 0) || !std::isfinite(w.get<double>())) {
      return Bad(source, absl::StrCat("loss_weights ", Show(file_weights), ": the weight of '",
                                      names[k], "' is ", Show(w), ", not a number >= 0"));
    }
    weights[k] = w.get<float>();
    return absl::OkStatus();
  };
  if (file_weights.is_array()) {
    if (file_weights.size() != n) {
      return Bad(source,
                 absl::StrCat("loss_weights ", Show(file_weights), ": ", file_weights.size(),
                              " weights for ", n, " outputs ", outputs_text));
    }
    for (size_t k = 0; k < n; ++k) {
      if (absl::Status s = weight_of(file_weights[k], k); !s.ok()) return s;
    }
  } else if (file_weights.is_object()) {
    for (const auto& [name, w] : file_weights.items()) {
      const size_t k = index_of(name);
      if (k == n) {
        return Bad(source, absl::StrCat("loss_weights ", Show(file_weights), " names '", name,
                                        "', which is not one of the outputs ", outputs_text));
      }
      if (absl::Status s = weight_of(w, k); !s.ok()) return s;
    }
  } else if (!file_weights.is_null()) {
    return Bad(source, absl::StrCat("loss_weights ", Show(file_weights),
                                    " is not a list or a dict by output"));
  }
  return weights;
}

}  // namespace

absl::StatusOr<int> CheckOutput(const std::vector<LayerSpec>& specs, LossChoice* loss,
                                const std::string& source, HeadInfo* info) {
  const int last = static_cast<int>(specs.size()) - 1;
  HeadInfo head;
  if (absl::Status s = CheckHead(specs, last, loss, source, &head); !s.ok()) return s;
  if (info != nullptr) *info = head;
  return head.width;
}

absl::StatusOr<std::vector<OutputLoss>> CheckOutputs(const std::vector<LayerSpec>& specs,
                                                     const std::vector<int>& outputs,
                                                     const std::vector<std::string>& names,
                                                     const std::string& flag, const json& file_loss,
                                                     const json& file_weights,
                                                     const std::string& source) {
  const size_t n = outputs.size();
  absl::StatusOr<std::vector<LossChoice>> chosen = OutputLosses(names, flag, file_loss, source);
  if (!chosen.ok()) return chosen.status();
  std::vector<LossChoice>& losses = *chosen;
  absl::StatusOr<std::vector<float>> weights = OutputWeights(names, file_weights, source);
  if (!weights.ok()) return weights.status();
  std::vector<OutputLoss> out(n);
  for (size_t k = 0; k < n; ++k) {
    OutputLoss& o = out[k];
    o.node = outputs[k];
    o.weight = (*weights)[k];
    const LayerSpec& l = specs[o.node];
    const std::string at = absl::StrCat(source, ": output '", names[k], "'");
    if (l.kind == LayerKind::kMultiply) {
      // A product of probabilities (ESMM's click-and-convert head): read
      // as it is, binary cross-entropy on probabilities.
      LossChoice& c = losses[k];
      if (!c.given) c.kind = LossKind::kBinaryCrossentropy;
      const bool categorical = c.kind == LossKind::kSparseCategoricalCrossentropy ||
                               c.kind == LossKind::kCategoricalCrossentropy;
      if (categorical || (c.kind == LossKind::kBinaryCrossentropy && c.from_logits == true)) {
        return Bad(at, absl::StrCat("a Multiply output is read as it is: ", LossName(c.kind),
                                    c.from_logits == true ? " from logits" : "",
                                    " would need logits; use binary_crossentropy (on "
                                    "probabilities) or a regression loss"));
      }
      o.kind = c.kind;
      o.probabilities = c.kind == LossKind::kBinaryCrossentropy;
      continue;
    }
    HeadInfo head;
    if (absl::Status s = CheckHead(specs, o.node, &losses[k], at, &head); !s.ok()) return s;
    o.kind = losses[k].kind;
    o.head = head;
  }
  return out;
}

}  // namespace keras
}  // namespace pscluster
