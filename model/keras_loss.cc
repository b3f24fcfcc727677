#include "model/keras_loss.h"

#include "absl/strings/str_cat.h"

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

absl::StatusOr<int> CheckOutput(const std::vector<LayerSpec>& specs, LossChoice* loss,
                                const std::string& source) {
  const int last = static_cast<int>(specs.size()) - 1;
  int head = last;
  Activation tail = Activation::kNone;  // a last Activation layer's
  std::string sum;                      // the Add in the tail, if any
  // The head: the last Dense, or a Dot (a two-tower model's logit).
  auto is_head = [](const LayerSpec& l) {
    return l.kind == LayerKind::kDense || l.kind == LayerKind::kDot;
  };
  while (head >= 0 && !is_head(specs[head])) {
    const LayerSpec& l = specs[head];
    const bool ok_tail = l.kind == LayerKind::kDropout || l.kind == LayerKind::kAdd ||
                         (l.kind == LayerKind::kActivation && head == last);
    if (!ok_tail) {
      return Bad(absl::StrCat(source, ": layer '", l.name, "'"),
                 "comes after the last Dense (or Dot) layer; the model must end in a Dense "
                 "or Dot layer (optionally then Dropout, Add and one Activation) whose "
                 "outputs the loss reads");
    }
    if (l.kind == LayerKind::kActivation) tail = l.activation;
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
    return Bad(absl::StrCat(source, ": layer '", specs[last].name, "'"),
               "an activation after the output Dense layer's own is not supported");
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
  for (int i = 0; i <= last; ++i) {
    const LayerSpec& l = specs[i];
    if (l.activation == Activation::kSoftmax && i != head && !(i == last && tail == out)) {
      return Bad(absl::StrCat(source, ": layer '", l.name, "'"),
                 "option 'activation' = \"softmax\" is only supported at the end of the model, "
                 "where it is fused with the cross-entropy loss");
    }
  }
  const int width = dense.kind == LayerKind::kDot ? 1 : dense.units;
  if (loss->kind == LossKind::kSparseCategoricalCrossentropy && width > (1 << 24)) {
    return Bad(at, absl::StrCat(width, " classes; at most 2^24"));
  }
  return width;
}

}  // namespace keras
}  // namespace pscluster
