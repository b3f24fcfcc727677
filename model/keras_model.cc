#include "model/keras_model.h"


#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <cctype>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/builtin_models.h"
#include "model/zip_archive.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

using json = nlohmann::json;

absl::Status Bad(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

std::string Show(const json& j) { return j.dump(); }

// An option that changes the math unless it has its neutral value (absent,
// null, or one of `neutral`).
absl::Status Neutral(const json& cfg, const std::string& where, const char* key,
                     std::initializer_list<json> neutral, const std::string& why) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return absl::OkStatus();
  for (const json& n : neutral) {
    if (*it == n) return absl::OkStatus();
  }
  return Bad(where, absl::StrCat("option '", key, "' = ", Show(*it),
                                 " is not supported (", why, ")"));
}

// A Keras name in any of its spellings (snake_case, the class name,
// TensorFlow.js's camelCase) as one key: lower case, no underscores.
std::string SpellingKey(const std::string& name) {
  std::string key;
  for (char c : name) {
    if (c != '_') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return key;
}

// Constraints change the update and activity regularizers the loss by
// the activations: refused. Weight regularizers are read by PenaltiesOf.
absl::Status NoConstraints(const json& cfg, const std::string& where) {
  for (const char* key : {"activity_regularizer", "kernel_constraint", "bias_constraint",
                          "beta_constraint", "gamma_constraint", "depthwise_constraint",
                          "pointwise_constraint", "embeddings_constraint"}) {
    if (absl::Status s = Neutral(cfg, where, key, {}, "constraints and activity regularizers "
                                                      "are not implemented; only null");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// A layer's weight regularizers, by variable suffix: (l1, l2).
using LayerPenalties = std::vector<std::pair<std::string, std::pair<float, float>>>;

// Keras's regularizer `r` (option `key`) as l1 and l2: "l1" or "l2" (0.01),
// or {"class_name": "L1" | "L2" | "L1L2", "config": {"l1": .., "l2": ..}}
// with Keras's defaults (L1 and L2: 0.01; L1L2: 0 and 0). Keras 2, Keras 3
// and TensorFlow.js write these forms.
absl::Status RegularizerOf(const json& r, const std::string& where, const char* key,
                           float* l1, float* l2) {
  auto bad = [&](const std::string& why) {
    return Bad(where, absl::StrCat("option '", key, "' = ", Show(r), " is not supported (", why,
                                   ")"));
  };
  std::string cls;
  json cfg = json::object();
  if (r.is_string()) {
    cls = r.get<std::string>();
  } else if (r.is_object() && r.contains("class_name") && r["class_name"].is_string()) {
    cls = r["class_name"].get<std::string>();
    if (r.contains("config") && r["config"].is_object()) cfg = r["config"];
  } else {
    return bad("a regularizer's name or {class_name, config}");
  }
  const std::string k = SpellingKey(cls);
  double a = 0.0, b = 0.0;
  auto value = [&](const char* name, double dflt, double* out) {
    auto it = cfg.find(name);
    if (it == cfg.end() || it->is_null()) {
      *out = dflt;
      return true;
    }
    if (!it->is_number()) return false;
    *out = it->get<double>();
    return std::isfinite(*out) && *out >= 0.0;
  };
  bool ok = true;
  if (k == "l1") {
    ok = value("l1", 0.01, &a);
  } else if (k == "l2") {
    ok = value("l2", 0.01, &b);
  } else if (k == "l1l2" && r.is_object()) {
    ok = value("l1", 0.0, &a) && value("l2", 0.0, &b);
  } else {
    return bad("L1, L2 or L1L2");
  }
  if (!ok) return bad("l1 and l2 must be numbers >= 0");
  *l1 = static_cast<float>(a);
  *l2 = static_cast<float>(b);
  return absl::OkStatus();
}

// The weight regularizers in `cfg`: option <var>_regularizer penalises
// variable <var> (kernel, bias, depthwise_kernel, ...).
absl::Status PenaltiesOf(const json& cfg, const std::string& where, LayerPenalties* out) {
  static constexpr std::pair<const char*, const char*> kKeys[] = {
      {"kernel_regularizer", "kernel"},
      {"bias_regularizer", "bias"},
      {"depthwise_regularizer", "depthwise_kernel"},
      {"pointwise_regularizer", "pointwise_kernel"},
      {"gamma_regularizer", "gamma"},
      {"beta_regularizer", "beta"}};
  for (const auto& [key, var] : kKeys) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) continue;
    float l1 = 0.0f, l2 = 0.0f;
    if (absl::Status s = RegularizerOf(*it, where, key, &l1, &l2); !s.ok()) return s;
    if (l1 != 0.0f || l2 != 0.0f) out->emplace_back(var, std::make_pair(l1, l2));
  }
  return absl::OkStatus();
}

// `ids_ok`: an InputLayer, whose integer values (an Embedding's ids) the
// examples hold as float32, exact below 2^24.
absl::Status CheckDtype(const json& cfg, const std::string& where, bool ids_ok) {
  auto it = cfg.find("dtype");
  if (it == cfg.end() || it->is_null()) return absl::OkStatus();
  std::string name;
  if (it->is_string()) {
    name = it->get<std::string>();
  } else if (it->is_object() && it->contains("config") && (*it)["config"].contains("name") &&
             (*it)["config"]["name"].is_string()) {
    name = (*it)["config"]["name"].get<std::string>();  // Keras 3 DTypePolicy
  }
  if (ids_ok && (name == "int32" || name == "int64")) return absl::OkStatus();
  if (name != "float32") {
    return Bad(where, absl::StrCat("option 'dtype' = ", Show(*it),
                                   " is not supported (the workers compute in float32",
                                   ids_ok ? "; ids may be int32 or int64)" : ")"));
  }
  return absl::OkStatus();
}

// An int or a list of ints of length `n`, each >= 1, as n values.
absl::Status IntPair(const json& cfg, const std::string& where, const char* key, int dflt,
                     int* a, int* b) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) {
    *a = *b = dflt;
    return absl::OkStatus();
  }
  if (it->is_number_integer()) {
    *a = *b = it->get<int>();
  } else if (it->is_array() && it->size() == 2 && (*it)[0].is_number_integer() &&
             (*it)[1].is_number_integer()) {
    *a = (*it)[0].get<int>();
    *b = (*it)[1].get<int>();
  } else {
    return Bad(where, absl::StrCat("option '", key, "' = ", Show(*it),
                                   " is not an integer or a pair of integers"));
  }
  if (*a < 1 || *b < 1 || *a > 4096 || *b > 4096) {
    return Bad(where, absl::StrCat("option '", key, "' = ", Show(*it), " is out of range"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Activation> ActivationOf(const json& cfg, const std::string& where) {
  auto it = cfg.find("activation");
  if (it == cfg.end() || it->is_null()) return Activation::kNone;
  std::string name;
  if (it->is_string()) {
    name = it->get<std::string>();
  } else if (it->is_object() && it->contains("config") && (*it)["config"].is_object() &&
             (*it)["config"].contains("name")) {
    name = (*it)["config"]["name"].get<std::string>();
  }
  // Keras's snake_case and TensorFlow.js's camelCase spellings.
  const std::string key = SpellingKey(name);
  if (key == "linear") return Activation::kNone;
  if (key == "relu") return Activation::kRelu;
  if (key == "sigmoid") return Activation::kSigmoid;
  if (key == "tanh") return Activation::kTanh;
  if (key == "softmax") return Activation::kSoftmax;
  if (key == "gelu") return Activation::kGelu;
  if (key == "gelunew") return Activation::kGeluTanh;  // tfjs's tanh form
  if (key == "swish" || key == "silu") return Activation::kSwish;
  if (key == "elu") return Activation::kElu;
  if (key == "leakyrelu") return Activation::kLeakyRelu;
  if (key == "hardsigmoid") return Activation::kHardSigmoid;
  return Bad(where, absl::StrCat("option 'activation' = ", Show(*it),
                                 " is not supported (relu, sigmoid, tanh, softmax, gelu, swish, "
                                 "silu, elu, leaky_relu, hard_sigmoid, linear)"));
}

absl::Status PaddingOf(const json& cfg, const std::string& where, Padding* out) {
  auto it = cfg.find("padding");
  if (it == cfg.end() || it->is_null() || *it == "valid") {
    *out = Padding::kValid;
  } else if (*it == "same") {
    *out = Padding::kSame;
  } else {
    return Bad(where, absl::StrCat("option 'padding' = ", Show(*it),
                                   " is not supported (valid or same)"));
  }
  return absl::OkStatus();
}

absl::Status ChannelsLast(const json& cfg, const std::string& where) {
  return Neutral(cfg, where, "data_format", {"channels_last"},
                 "activations are NHWC: only channels_last");
}

double Number(const json& cfg, const char* key, double dflt) {
  auto it = cfg.find(key);
  return it != cfg.end() && it->is_number() ? it->get<double>() : dflt;
}

// snake_case names (Keras 2's "glorot_uniform") as CamelCase.
std::string CamelCase(const std::string& name) {
  std::string camel;
  bool up = true;
  for (char ch : name) {
    if (ch == '_') {
      up = true;
      continue;
    }
    camel += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
    up = false;
  }
  return camel;
}

Initializer VarianceScaling(double scale, Initializer::Mode mode,
                            Initializer::Distribution distribution) {
  Initializer init;
  init.kind = Initializer::Kind::kVarianceScaling;
  init.scale = scale;
  init.mode = mode;
  init.distribution = distribution;
  return init;
}

// A VarianceScaling initializer's config `c`, the value of option `key`.
absl::StatusOr<Initializer> VarianceScalingOf(const json& c, const std::string& where,
                                              const char* key) {
  using M = Initializer::Mode;
  using D = Initializer::Distribution;
  const double scale = Number(c, "scale", 1.0);
  std::string mode = c.value("mode", "fan_in");
  std::string dist = c.value("distribution", "truncated_normal");
  M m;
  if (mode == "fan_in" || mode == "fanIn") {
    m = M::kFanIn;
  } else if (mode == "fan_out" || mode == "fanOut") {
    m = M::kFanOut;
  } else if (mode == "fan_avg" || mode == "fanAvg") {
    m = M::kFanAvg;
  } else {
    return Bad(where, absl::StrCat("option '", key, "': VarianceScaling mode \"", mode,
                                   "\" is not known"));
  }
  D d;
  if (dist == "uniform") {
    d = D::kUniform;
  } else if (dist == "truncated_normal" || dist == "normal") {  // Keras 2: truncated
    d = D::kTruncatedNormal;
  } else if (dist == "untruncated_normal") {
    d = D::kUntruncatedNormal;
  } else {
    return Bad(where, absl::StrCat("option '", key, "': VarianceScaling distribution \"",
                                   dist, "\" is not known"));
  }
  if (!(scale > 0)) {
    return Bad(where, absl::StrCat("option '", key, "': VarianceScaling scale ", scale,
                                   " must be positive"));
  }
  return VarianceScaling(scale, m, d);
}

// A Keras initializer object ({"class_name": ..., "config": {...}}).
absl::StatusOr<Initializer> InitializerOf(const json& cfg, const std::string& where,
                                          const char* key, Initializer dflt) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return dflt;
  std::string cls;
  json c = json::object();
  if (it->is_string()) {
    cls = it->get<std::string>();
  } else if (it->is_object() && it->contains("class_name")) {
    cls = (*it)["class_name"].get<std::string>();
    if (it->contains("config") && (*it)["config"].is_object()) c = (*it)["config"];
  } else {
    return Bad(where, absl::StrCat("option '", key, "' = ", Show(*it), " is not an initializer"));
  }
  const std::string camel = CamelCase(cls);
  using K = Initializer::Kind;
  using M = Initializer::Mode;
  using D = Initializer::Distribution;
  Initializer init;
  if (camel == "Zeros" || camel == "Zero") {
    init.kind = K::kZeros;
    return init;
  }
  if (camel == "Ones" || camel == "One") {
    init.kind = K::kOnes;
    return init;
  }
  if (camel == "Constant") {
    init.kind = K::kConstant;
    init.value = Number(c, "value", 0.0);
    return init;
  }
  if (camel == "GlorotUniform") return VarianceScaling(1.0, M::kFanAvg, D::kUniform);
  if (camel == "GlorotNormal") return VarianceScaling(1.0, M::kFanAvg, D::kTruncatedNormal);
  if (camel == "HeUniform") return VarianceScaling(2.0, M::kFanIn, D::kUniform);
  if (camel == "HeNormal") return VarianceScaling(2.0, M::kFanIn, D::kTruncatedNormal);
  if (camel == "LecunUniform") return VarianceScaling(1.0, M::kFanIn, D::kUniform);
  if (camel == "LecunNormal") return VarianceScaling(1.0, M::kFanIn, D::kTruncatedNormal);
  if (camel == "RandomNormal") {
    init.kind = K::kRandomNormal;
    init.mean = Number(c, "mean", 0.0);
    init.stddev = Number(c, "stddev", 0.05);
    return init;
  }
  if (camel == "TruncatedNormal") {
    init.kind = K::kTruncatedNormal;
    init.mean = Number(c, "mean", 0.0);
    init.stddev = Number(c, "stddev", 0.05);
    return init;
  }
  if (camel == "RandomUniform") {
    init.kind = K::kRandomUniform;
    init.minval = Number(c, "minval", -0.05);
    init.maxval = Number(c, "maxval", 0.05);
    return init;
  }
  if (camel == "VarianceScaling") return VarianceScalingOf(c, where, key);
  return Bad(where, absl::StrCat("option '", key, "' = ", Show(*it),
                                 " is not supported (Zeros, Ones, Constant, GlorotUniform, "
                                 "GlorotNormal, HeNormal, HeUniform, LecunNormal, LecunUniform, "
                                 "RandomNormal, RandomUniform, TruncatedNormal, "
                                 "VarianceScaling)"));
}

// The input shape a layer config declares, if any: [H, W, C] or [F].
bool DeclaredShape(const json& layer, const json& cfg, std::vector<json>* out) {
  for (const char* key : {"batch_shape", "batch_input_shape"}) {
    auto it = cfg.find(key);
    if (it != cfg.end() && it->is_array() && !it->empty()) {
      out->assign(it->begin() + 1, it->end());
      return true;
    }
  }
  auto it = cfg.find("input_shape");  // tf.keras's InputLayer sometimes
  if (it != cfg.end() && it->is_array()) {
    out->assign(it->begin(), it->end());
    return true;
  }
  if (layer.contains("build_config") && layer["build_config"].is_object() &&
      layer["build_config"].contains("input_shape") &&
      layer["build_config"]["input_shape"].is_array() &&
      !layer["build_config"]["input_shape"].empty()) {
    const json& s = layer["build_config"]["input_shape"];
    out->assign(s.begin() + 1, s.end());
    return true;
  }
  return false;
}

// A tensor a Functional layer reads: the `node`-th application of layer
// `layer` (Keras's [name, node_index, tensor_index]).
struct TensorRef {
  std::string layer;
  int node = 0;
};

// The tensors each application (inbound node) of `layer` reads, in a
// Functional config: Keras 2 and TensorFlow.js write a node as a list of
// [name, node_index, tensor_index, kwargs], Keras 3 as {"args": [...],
// "kwargs": {...}} holding "keras_history": [name, node_index,
// tensor_index]. Layers with several outputs (tensor_index > 0) are refused.
absl::StatusOr<std::vector<std::vector<TensorRef>>> InboundNodes(const json& layer,
                                                                const std::string& where) {
  std::vector<std::vector<TensorRef>> nodes;
  if (!layer.contains("inbound_nodes") || !layer["inbound_nodes"].is_array()) return nodes;
  absl::Status st;
  std::function<void(const json&, std::vector<TensorRef>*)> walk = [&](const json& j,
                                                                       std::vector<TensorRef>* out) {
    const json* history = nullptr;
    if (j.is_object() && j.contains("keras_history") && j["keras_history"].is_array()) {
      history = &j["keras_history"];
    } else if (j.is_array() && j.size() >= 3 && j[0].is_string() && j[1].is_number_integer() &&
               j[2].is_number_integer()) {
      history = &j;
    }
    if (history != nullptr) {
      const json& h = *history;
      if (h.size() < 3 || !h[0].is_string() || !h[1].is_number_integer() ||
          !h[2].is_number_integer()) {
        st.Update(Bad(where, absl::StrCat("inbound tensor ", Show(h), " is not [name, node, tensor]")));
      } else if (h[2].get<int>() != 0) {
        st.Update(Bad(where, absl::StrCat("reads output ", h[2].get<int>(), " of layer '",
                                          h[0].get<std::string>(),
                                          "': layers with several outputs are not supported")));
      } else {
        out->push_back({h[0].get<std::string>(), h[1].get<int>()});
      }
      return;
    }
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) walk(v, out);
    } else if (j.is_array()) {
      for (const json& v : j) walk(v, out);
    }
  };
  for (const json& node : layer["inbound_nodes"]) {
    std::vector<TensorRef> refs;
    walk(node, &refs);
    nodes.push_back(std::move(refs));
  }
  if (!st.ok()) return st;
  return nodes;
}

// The model's one output tensor: config.output_layers, [[name, node,
// tensor]] or [name, node, tensor]; absent, the last layer's last node.
absl::StatusOr<TensorRef> OutputTensor(const json& config, const json& layers,
                                       const std::string& source) {
  if (config.is_object() && config.contains("output_layers")) {
    json out = config["output_layers"];
    if (out.is_array() && !out.empty() && out[0].is_array()) {
      if (out.size() != 1) {
        return Bad(source, absl::StrCat("output_layers ", Show(out),
                                        ": models with several outputs are not supported"));
      }
      out = out[0];
    }
    if (!out.is_array() || out.size() < 2 || !out[0].is_string() || !out[1].is_number_integer()) {
      return Bad(source, absl::StrCat("output_layers ", Show(out), " is not [name, node, tensor]"));
    }
    return TensorRef{out[0].get<std::string>(), out[1].get<int>()};
  }
  const json& last = layers.back();
  TensorRef ref;
  ref.layer = last.contains("config") && last["config"].contains("name")
                  ? last["config"]["name"].get<std::string>()
                  : "";
  ref.node = last.contains("inbound_nodes") && last["inbound_nodes"].is_array()
                 ? std::max(0, static_cast<int>(last["inbound_nodes"].size()) - 1)
                 : 0;
  return ref;
}

// A model file's JSON unwrapped down to the model: tfjs's model.json
// (modelTopology), Keras 3's .keras config (model_config), the model itself.
struct ModelEnvelope {
  std::string cls;  // the model's class_name
  bool functional = false;
  json layers;             // a non-empty array
  json config;             // the model's config (output_layers, ...)
  json loss;               // the compiled loss, if the file has one (else null)
  bool keras3 = false;     // written by Keras 3 (its hard_sigmoid differs)
  std::string model_name;  // config.name, else the source
};

absl::StatusOr<ModelEnvelope> ReadEnvelope(absl::string_view text, const std::string& source) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Bad(source, "not a JSON object (expected what Keras's model.to_json() writes)");
  }
  // The compiled loss: Keras 3's compile_config (a .keras archive's
  // config.json), tf.keras's and TensorFlow.js's training_config.
  json loss;
  for (const json* d : {&doc, doc.contains("modelTopology") ? &doc["modelTopology"] : nullptr}) {
    if (d == nullptr || !d->is_object()) continue;
    for (const char* key : {"compile_config", "training_config", "trainingConfig"}) {
      if (d->contains(key) && (*d)[key].is_object() && (*d)[key].contains("loss")) {
        loss = (*d)[key]["loss"];
      }
    }
  }
  if (doc.contains("modelTopology")) doc = doc["modelTopology"];  // tfjs model.json
  if (doc.is_object() && doc.contains("model_config")) doc = doc["model_config"];
  if (!doc.is_object() || !doc.contains("class_name") || !doc["class_name"].is_string()) {
    return Bad(source, "no top-level class_name (expected a Keras model's JSON)");
  }
  ModelEnvelope model;
  model.cls = doc["class_name"].get<std::string>();
  const std::string& cls = model.cls;
  const json& config = doc.contains("config") ? doc["config"] : json();
  if (config.is_array()) {
    model.layers = config;  // very old Keras: the config is the layer list
  } else if (config.is_object() && config.contains("layers")) {
    model.layers = config["layers"];
  }
  if (!model.layers.is_array() || model.layers.empty()) {
    return Bad(source, absl::StrCat("model \"", cls, "\" has no layer list"));
  }
  model.config = config;
  model.loss = loss;
  const std::string version = doc.value("keras_version", std::string());
  model.keras3 = absl::StartsWith(version, "3") ||
                 (model.layers[0].is_object() && model.layers[0].contains("module"));
  model.functional = cls == "Functional" || cls == "Model";
  if (cls != "Sequential" && !model.functional) {
    return Bad(source, absl::StrCat("class_name \"", cls,
                                    "\" is not supported (Sequential or Functional)"));
  }
  model.model_name = config.is_object() && config.contains("name") && config["name"].is_string()
                         ? config["name"].get<std::string>()
                         : source;
  return model;
}

// The file's initializers of one layer, by variable suffix ("kernel", ...).
using LayerInits = std::vector<std::pair<std::string, Initializer>>;

// Appends variable `var`'s initializer: option `key`, else `dflt`.
absl::Status AddInit(const json& cfg, const std::string& where, const char* key,
                     const char* var, Initializer dflt, LayerInits* inits) {
  absl::StatusOr<Initializer> in = InitializerOf(cfg, where, key, dflt);
  if (!in.ok()) return in.status();
  inits->emplace_back(var, *in);
  return absl::OkStatus();
}

// A per-class parser: checks the layer's options in `cfg` and fills `l`
// (kind and options) and `inits`. `where` names the layer in errors. Some
// options refuse at once, others are all checked and the first refusal
// returned; the order decides which error a bad file gets.
using LayerParser = absl::Status (*)(const json& cfg, const std::string& where, LayerSpec* l,
                                     LayerInits* inits);

// An integer option in [lo, hi], or InvalidArgument naming it.
absl::Status IntIn(const json& cfg, const std::string& where, const char* key, int dflt, int lo,
                   int hi, int* out) {
  const json v = cfg.value(key, json(dflt));
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    return Bad(where, absl::StrCat("option '", key, "' = ", Show(v), " is not valid (an integer"
                                   " in [", lo, ", ", hi, "])"));
  }
  *out = v.get<int>();
  return absl::OkStatus();
}

// The options every convolution has: kernel_size, strides, padding,
// dilation_rate (not with strides > 1, which TensorFlow refuses too),
// data_format, use_bias and activation.
absl::Status ParseWindowOptions(const json& cfg, const std::string& where, LayerSpec* l) {
  absl::Status st;
  if (!cfg.contains("kernel_size")) return Bad(where, "option 'kernel_size' is missing");
  st.Update(IntPair(cfg, where, "kernel_size", 1, &l->window_h, &l->window_w));
  st.Update(IntPair(cfg, where, "strides", 1, &l->stride_h, &l->stride_w));
  st.Update(IntPair(cfg, where, "dilation_rate", 1, &l->dilation_h, &l->dilation_w));
  if (st.ok() && std::max(l->dilation_h, l->dilation_w) > 1 &&
      std::max(l->stride_h, l->stride_w) > 1) {
    return Bad(where, absl::StrCat("option 'dilation_rate' = ",
                                   Show(cfg.value("dilation_rate", json())),
                                   " with 'strides' = ", Show(cfg.value("strides", json())),
                                   " is not supported (TensorFlow too needs one of them 1)"));
  }
  st.Update(PaddingOf(cfg, where, &l->padding));
  st.Update(ChannelsLast(cfg, where));
  st.Update(Neutral(cfg, where, "lora_rank", {}, "LoRA is not implemented"));
  l->use_bias = cfg.value("use_bias", true);
  absl::StatusOr<Activation> a = ActivationOf(cfg, where);
  if (!a.ok()) return a.status();
  l->activation = *a;
  return st;
}

absl::Status ParseConv2D(const json& cfg, const std::string& where, LayerSpec* l,
                         LayerInits* inits) {
  l->kind = LayerKind::kConv2D;
  if (absl::Status s = IntIn(cfg, where, "filters", 0, 1, 65536, &l->units); !s.ok()) return s;
  absl::Status st = ParseWindowOptions(cfg, where, l);
  st.Update(Neutral(cfg, where, "groups", {1}, "grouped convolutions are not implemented"));
  if (st.ok()) {
    st = AddInit(cfg, where, "kernel_initializer", "kernel", Initializer::GlorotUniform(), inits);
  }
  if (st.ok()) st = AddInit(cfg, where, "bias_initializer", "bias", Initializer::Zeros(), inits);
  return st;
}

absl::Status ParseDepthwiseConv2D(const json& cfg, const std::string& where, LayerSpec* l,
                                  LayerInits* inits) {
  l->kind = LayerKind::kDepthwiseConv2D;
  absl::Status st = ParseWindowOptions(cfg, where, l);
  st.Update(IntIn(cfg, where, "depth_multiplier", 1, 1, 4096, &l->depth_multiplier));
  if (st.ok()) {
    st = AddInit(cfg, where, "depthwise_initializer", "depthwise_kernel",
                 Initializer::GlorotUniform(), inits);
  }
  if (st.ok()) st = AddInit(cfg, where, "bias_initializer", "bias", Initializer::Zeros(), inits);
  return st;
}

absl::Status ParseSeparableConv2D(const json& cfg, const std::string& where, LayerSpec* l,
                                  LayerInits* inits) {
  l->kind = LayerKind::kSeparableConv2D;
  if (absl::Status s = IntIn(cfg, where, "filters", 0, 1, 65536, &l->units); !s.ok()) return s;
  absl::Status st = ParseWindowOptions(cfg, where, l);
  st.Update(IntIn(cfg, where, "depth_multiplier", 1, 1, 4096, &l->depth_multiplier));
  if (st.ok()) {
    st = AddInit(cfg, where, "depthwise_initializer", "depthwise_kernel",
                 Initializer::GlorotUniform(), inits);
  }
  if (st.ok()) {
    st = AddInit(cfg, where, "pointwise_initializer", "pointwise_kernel",
                 Initializer::GlorotUniform(), inits);
  }
  if (st.ok()) st = AddInit(cfg, where, "bias_initializer", "bias", Initializer::Zeros(), inits);
  return st;
}

// LayerNormalization over the last axis: Keras 3's -1 or [-1], tf.keras's
// and TensorFlow.js's [3] (or [1] on features), which the shapes check.
absl::Status ParseLayerNorm(const json& cfg, const std::string& where, LayerSpec* l,
                            LayerInits* inits) {
  absl::Status st;
  l->kind = LayerKind::kLayerNorm;
  json axis = cfg.value("axis", json(-1));
  if (axis.is_array() && axis.size() == 1) axis = axis[0];
  if (!axis.is_number_integer() || axis.get<int>() < -1 || axis.get<int>() == 0) {
    return Bad(where, absl::StrCat("option 'axis' = ", Show(cfg.value("axis", json(-1))),
                                   " is not supported (the last axis only)"));
  }
  l->axis = axis.get<int>();
  st.Update(Neutral(cfg, where, "rms_scaling", {false}, "not implemented"));
  l->epsilon = static_cast<float>(Number(cfg, "epsilon", 1e-3));
  l->center = cfg.value("center", true);
  l->scale = cfg.value("scale", true);
  if (!(l->epsilon > 0.0f) || !std::isfinite(l->epsilon)) {
    return Bad(where, absl::StrCat("epsilon ", l->epsilon, " must be positive"));
  }
  if (st.ok()) st = AddInit(cfg, where, "gamma_initializer", "gamma", Initializer::Ones(), inits);
  if (st.ok()) st = AddInit(cfg, where, "beta_initializer", "beta", Initializer::Zeros(), inits);
  return st;
}

// MaxPooling2D and AveragePooling2D: `kind` says which.
absl::Status ParsePool2D(LayerKind kind, const json& cfg, const std::string& where,
                         LayerSpec* l) {
  absl::Status st;
  l->kind = kind;
  st.Update(IntPair(cfg, where, "pool_size", 2, &l->window_h, &l->window_w));
  if (!cfg.contains("strides") || cfg["strides"].is_null()) {
    l->stride_h = l->window_h;  // Keras: strides default to pool_size
    l->stride_w = l->window_w;
  } else {
    st.Update(IntPair(cfg, where, "strides", 1, &l->stride_h, &l->stride_w));
  }
  st.Update(PaddingOf(cfg, where, &l->padding));
  st.Update(ChannelsLast(cfg, where));
  return st;
}

absl::Status ParseMaxPool2D(const json& cfg, const std::string& where, LayerSpec* l,
                            LayerInits*) {
  return ParsePool2D(LayerKind::kMaxPool2D, cfg, where, l);
}

absl::Status ParseAvgPool2D(const json& cfg, const std::string& where, LayerSpec* l,
                            LayerInits*) {
  return ParsePool2D(LayerKind::kAvgPool2D, cfg, where, l);
}

absl::Status ParseGlobalAvgPool2D(const json& cfg, const std::string& where, LayerSpec* l,
                                  LayerInits*) {
  absl::Status st;
  l->kind = LayerKind::kGlobalAvgPool2D;
  st.Update(ChannelsLast(cfg, where));
  st.Update(Neutral(cfg, where, "keepdims", {false}, "only keepdims false"));
  return st;
}

// GlobalAveragePooling1D over [steps, features]: the same mean as the 2-D
// pool's over 1 x steps pixels (model_spec.cc checks the input's rank).
absl::Status ParseGlobalAvgPool1D(const json& cfg, const std::string& where, LayerSpec* l,
                                  LayerInits*) {
  absl::Status st;
  l->kind = LayerKind::kGlobalAvgPool1D;
  st.Update(ChannelsLast(cfg, where));
  st.Update(Neutral(cfg, where, "keepdims", {false}, "only keepdims false"));
  return st;
}

// Embedding: ids [L] (float32 in the examples) -> [L, output_dim] rows of
// the [input_dim, output_dim] table. Masks are not supported; nor is a
// regularizer of the table (the sparse path would have to touch every row).
absl::Status ParseEmbedding(const json& cfg, const std::string& where, LayerSpec* l,
                            LayerInits* inits) {
  absl::Status st;
  l->kind = LayerKind::kEmbedding;
  // Ids travel as float32: exact below 2^24.
  if (absl::Status s = IntIn(cfg, where, "input_dim", 0, 1, 1 << 24, &l->input_dim); !s.ok()) {
    return s;
  }
  if (absl::Status s = IntIn(cfg, where, "output_dim", 0, 1, 1 << 20, &l->units); !s.ok()) {
    return s;
  }
  const json length = cfg.value("input_length", json());
  if (!length.is_null()) {
    if (!length.is_number_integer() || length.get<int64_t>() < 1 ||
        length.get<int64_t>() > (1 << 26)) {
      return Bad(where, absl::StrCat("option 'input_length' = ", Show(length),
                                     " is not a positive integer"));
    }
    l->input_length = length.get<int>();
  }
  st.Update(Neutral(cfg, where, "mask_zero", {false},
                    "masks are not supported: no layer here reads a mask"));
  st.Update(Neutral(cfg, where, "embeddings_regularizer", {}, "not implemented; only null"));
  st.Update(Neutral(cfg, where, "lora_rank", {}, "LoRA is not implemented"));
  if (st.ok()) {
    st = AddInit(cfg, where, "embeddings_initializer", "embeddings",
                 Initializer::RandomUniform(), inits);
  }
  return st;
}

absl::Status ParseFlatten(const json& cfg, const std::string& where, LayerSpec* l,
                          LayerInits*) {
  l->kind = LayerKind::kFlatten;
  return ChannelsLast(cfg, where);
}

absl::Status ParseDense(const json& cfg, const std::string& where, LayerSpec* l,
                        LayerInits* inits) {
  absl::Status st;
  l->kind = LayerKind::kDense;
  if (!cfg.contains("units") || !cfg["units"].is_number_integer() ||
      cfg["units"].get<int>() < 1 || cfg["units"].get<int>() > (1 << 24)) {
    return Bad(where, absl::StrCat("option 'units' = ", Show(cfg.value("units", json())),
                                   " is not valid"));
  }
  l->units = cfg["units"].get<int>();
  l->use_bias = cfg.value("use_bias", true);
  st.Update(Neutral(cfg, where, "lora_rank", {}, "LoRA is not implemented"));
  absl::StatusOr<Activation> a = ActivationOf(cfg, where);
  if (!a.ok()) return a.status();
  l->activation = *a;
  if (st.ok()) {
    st = AddInit(cfg, where, "kernel_initializer", "kernel", Initializer::GlorotUniform(), inits);
  }
  if (st.ok()) st = AddInit(cfg, where, "bias_initializer", "bias", Initializer::Zeros(), inits);
  return st;
}

absl::Status ParseDropout(const json& cfg, const std::string& where, LayerSpec* l,
                          LayerInits*) {
  l->kind = LayerKind::kDropout;
  const double rate = Number(cfg, "rate", -1.0);
  if (!(rate >= 0.0 && rate < 1.0)) {
    return Bad(where, absl::StrCat("option 'rate' = ", Show(cfg.value("rate", json())),
                                   " is not in [0, 1)"));
  }
  l->rate = static_cast<float>(rate);
  return Neutral(cfg, where, "noise_shape", {}, "only element-wise dropout");
}

absl::Status ParseActivation(const json& cfg, const std::string& where, LayerSpec* l,
                             LayerInits*) {
  l->kind = LayerKind::kActivation;
  absl::StatusOr<Activation> a = ActivationOf(cfg, where);
  if (!a.ok()) return a.status();
  l->activation = *a;
  return absl::OkStatus();
}

absl::Status ParseReLU(const json& cfg, const std::string& where, LayerSpec* l, LayerInits*) {
  absl::Status st;
  l->kind = LayerKind::kActivation;
  l->activation = Activation::kRelu;
  st.Update(Neutral(cfg, where, "max_value", {}, "only the plain ReLU"));
  st.Update(Neutral(cfg, where, "negative_slope", {0, 0.0}, "only the plain ReLU"));
  st.Update(Neutral(cfg, where, "threshold", {0, 0.0}, "only the plain ReLU"));
  return st;
}

// LeakyReLU: Keras 3's negative_slope, Keras 2's and TensorFlow.js's
// alpha; 0.3 by default in all three.
absl::Status ParseLeakyReLU(const json& cfg, const std::string& where, LayerSpec* l,
                            LayerInits*) {
  l->kind = LayerKind::kActivation;
  l->activation = Activation::kLeakyRelu;
  const double slope = Number(cfg, cfg.contains("negative_slope") ? "negative_slope" : "alpha", 0.3);
  if (!(slope >= 0.0)) {
    return Bad(where, absl::StrCat("negative slope ", slope, " must be >= 0"));
  }
  l->alpha = static_cast<float>(slope);
  if (slope == 0.0) l->activation = Activation::kRelu;  // a slope of 0 is ReLU
  return absl::OkStatus();
}

absl::Status ParseELU(const json& cfg, const std::string& where, LayerSpec* l, LayerInits*) {
  l->kind = LayerKind::kActivation;
  l->activation = Activation::kElu;
  l->alpha = static_cast<float>(Number(cfg, "alpha", 1.0));
  if (!std::isfinite(l->alpha)) return Bad(where, "alpha must be finite");
  if (l->alpha == 0.0f) l->activation = Activation::kRelu;  // elu with alpha 0 is ReLU
  return absl::OkStatus();
}

// ZeroPadding2D's padding: n, [rows, cols] or [[top, bottom], [left, right]].
absl::Status ParseZeroPadding2D(const json& cfg, const std::string& where, LayerSpec* l,
                                LayerInits*) {
  l->kind = LayerKind::kZeroPadding2D;
  if (absl::Status s = ChannelsLast(cfg, where); !s.ok()) return s;
  const json p = cfg.value("padding", json(1));
  auto amount = [](const json& v, int* out) {
    if (!v.is_number_integer() || v.get<int>() < 0 || v.get<int>() > (1 << 16)) return false;
    *out = v.get<int>();
    return true;
  };
  bool ok = false;
  if (p.is_number_integer()) {
    ok = amount(p, &l->pad_top);
    l->pad_bottom = l->pad_left = l->pad_right = l->pad_top;
  } else if (p.is_array() && p.size() == 2 && p[0].is_number_integer()) {
    ok = amount(p[0], &l->pad_top) && amount(p[1], &l->pad_left);
    l->pad_bottom = l->pad_top;
    l->pad_right = l->pad_left;
  } else if (p.is_array() && p.size() == 2 && p[0].is_array() && p[1].is_array() &&
             p[0].size() == 2 && p[1].size() == 2) {
    ok = amount(p[0][0], &l->pad_top) && amount(p[0][1], &l->pad_bottom) &&
         amount(p[1][0], &l->pad_left) && amount(p[1][1], &l->pad_right);
  }
  if (!ok) {
    return Bad(where, absl::StrCat("option 'padding' = ", Show(p),
                                   " is not n, [rows, cols] or [[top, bottom], [left, right]] "
                                   "of amounts >= 0"));
  }
  return absl::OkStatus();
}

absl::Status ParseGlobalMaxPool2D(const json& cfg, const std::string& where, LayerSpec* l,
                                  LayerInits*) {
  absl::Status st;
  l->kind = LayerKind::kGlobalMaxPool2D;
  st.Update(ChannelsLast(cfg, where));
  st.Update(Neutral(cfg, where, "keepdims", {false}, "only keepdims false"));
  return st;
}

absl::Status ParseRescaling(const json& cfg, const std::string& where, LayerSpec* l,
                            LayerInits*) {
  l->kind = LayerKind::kRescaling;
  const json scale = cfg.value("scale", json(1.0)), offset = cfg.value("offset", json(0.0));
  if (!scale.is_number() || !offset.is_number() || !std::isfinite(scale.get<double>()) ||
      !std::isfinite(offset.get<double>())) {
    return Bad(where, absl::StrCat("options 'scale' = ", Show(scale), ", 'offset' = ",
                                   Show(offset), ": one number each (per-channel lists are not "
                                   "supported)"));
  }
  l->rescale = scale.get<float>();
  l->reshift = offset.get<float>();
  return absl::OkStatus();
}

absl::Status ParseReshape(const json& cfg, const std::string& where, LayerSpec* l,
                          LayerInits*) {
  l->kind = LayerKind::kReshape;
  const json t = cfg.value("target_shape", json());
  bool ok = t.is_array() && t.size() >= 1 && t.size() <= 3;
  for (size_t i = 0; ok && i < t.size(); ++i) {
    ok = t[i].is_number_integer() && (t[i].get<int>() >= 1 || t[i].get<int>() == -1);
    if (ok) l->target_shape.push_back(t[i].get<int>());
  }
  if (!ok) {
    return Bad(where, absl::StrCat("option 'target_shape' = ", Show(t),
                                   " is not [height, width, channels], [steps, features] or "
                                   "[features]"));
  }
  return absl::OkStatus();
}

absl::Status ParseBatchNorm(const json& cfg, const std::string& where, LayerSpec* l,
                            LayerInits* inits) {
  absl::Status st;
  l->kind = LayerKind::kBatchNorm;
  st.Update(Neutral(cfg, where, "axis", {-1, 3, json::array({-1}), json::array({3})},
                    "normalisation over the channel (last) axis only"));
  for (const char* key : {"renorm", "synchronized"}) {
    st.Update(Neutral(cfg, where, key, {false}, "not implemented"));
  }
  st.Update(Neutral(cfg, where, "virtual_batch_size", {}, "not implemented"));
  st.Update(Neutral(cfg, where, "adjustment", {}, "not implemented"));
  l->momentum = static_cast<float>(Number(cfg, "momentum", 0.99));
  l->epsilon = static_cast<float>(Number(cfg, "epsilon", 1e-3));
  l->center = cfg.value("center", true);
  l->scale = cfg.value("scale", true);
  if (!(l->momentum >= 0.0f && l->momentum <= 1.0f) || !(l->epsilon > 0.0f)) {
    return Bad(where, absl::StrCat("momentum ", l->momentum, " must be in [0, 1] and epsilon ",
                                   l->epsilon, " positive"));
  }
  if (st.ok()) st = AddInit(cfg, where, "gamma_initializer", "gamma", Initializer::Ones(), inits);
  if (st.ok()) st = AddInit(cfg, where, "beta_initializer", "beta", Initializer::Zeros(), inits);
  if (st.ok()) {
    st = AddInit(cfg, where, "moving_mean_initializer", "moving_mean", Initializer::Zeros(),
                 inits);
  }
  if (st.ok()) {
    st = AddInit(cfg, where, "moving_variance_initializer", "moving_variance",
                 Initializer::Ones(), inits);
  }
  return st;
}

absl::Status ParseMerge(LayerKind kind, const json& cfg, LayerSpec* l) {
  l->kind = kind;
  (void)cfg;
  return absl::OkStatus();
}
absl::Status ParseAdd(const json& cfg, const std::string&, LayerSpec* l, LayerInits*) {
  return ParseMerge(LayerKind::kAdd, cfg, l);
}
absl::Status ParseSubtract(const json& cfg, const std::string&, LayerSpec* l, LayerInits*) {
  return ParseMerge(LayerKind::kSubtract, cfg, l);
}
absl::Status ParseMultiply(const json& cfg, const std::string&, LayerSpec* l, LayerInits*) {
  return ParseMerge(LayerKind::kMultiply, cfg, l);
}
absl::Status ParseAverage(const json& cfg, const std::string&, LayerSpec* l, LayerInits*) {
  return ParseMerge(LayerKind::kAverage, cfg, l);
}
// Concatenate along the last (channel) axis: -1, or its index, which the
// shapes check (model_spec.cc NodeShapes).
absl::Status ParseConcatenate(const json& cfg, const std::string& where, LayerSpec* l,
                              LayerInits*) {
  l->kind = LayerKind::kConcatenate;
  const json axis = cfg.value("axis", json(-1));
  if (!axis.is_number_integer() || axis.get<int>() < -1 || axis.get<int>() == 0) {
    return Bad(where, absl::StrCat("option 'axis' = ", Show(axis),
                                   " is not supported (the last axis only: -1)"));
  }
  l->axis = axis.get<int>();
  return absl::OkStatus();
}

// The layer classes the workers run, under every name Keras writes for them.
struct LayerClass {
  const char* name;
  LayerParser parse;
};
constexpr LayerClass kLayerClasses[] = {
    {"Conv2D", ParseConv2D},
    {"Convolution2D", ParseConv2D},
    {"MaxPooling2D", ParseMaxPool2D},
    {"MaxPool2D", ParseMaxPool2D},
    {"AveragePooling2D", ParseAvgPool2D},
    {"AvgPool2D", ParseAvgPool2D},
    {"GlobalAveragePooling2D", ParseGlobalAvgPool2D},
    {"GlobalAvgPool2D", ParseGlobalAvgPool2D},
    {"GlobalAveragePooling1D", ParseGlobalAvgPool1D},
    {"GlobalAvgPool1D", ParseGlobalAvgPool1D},
    {"Embedding", ParseEmbedding},
    {"Flatten", ParseFlatten},
    {"Dense", ParseDense},
    {"Dropout", ParseDropout},
    {"Activation", ParseActivation},
    {"ReLU", ParseReLU},
    {"BatchNormalization", ParseBatchNorm},
    {"Add", ParseAdd},
    {"Subtract", ParseSubtract},
    {"Multiply", ParseMultiply},
    {"Average", ParseAverage},
    {"Concatenate", ParseConcatenate},
    {"LeakyReLU", ParseLeakyReLU},
    {"ELU", ParseELU},
    {"ZeroPadding2D", ParseZeroPadding2D},
    {"GlobalMaxPooling2D", ParseGlobalMaxPool2D},
    {"GlobalMaxPool2D", ParseGlobalMaxPool2D},
    {"Rescaling", ParseRescaling},
    {"Reshape", ParseReshape},
    {"DepthwiseConv2D", ParseDepthwiseConv2D},
    {"SeparableConv2D", ParseSeparableConv2D},
    {"SeparableConvolution2D", ParseSeparableConv2D},
    {"LayerNormalization", ParseLayerNorm},
};

// The model's nodes as parsed: what its spec is built from.
struct ParsedLayers {
  std::vector<json> shape;  // the declared input shape, without the batch
  bool have_shape = false;
  // A Functional model with several inputs: each one's name and declared
  // shape, in the model's input order (nodes read ModelInput(k)).
  std::vector<std::pair<std::string, std::vector<json>>> inputs;
  std::vector<LayerSpec> specs;   // nodes, each after its inputs
  std::vector<LayerInits> inits;  // per node
  std::vector<LayerPenalties> penalties;  // per node
};

// One layer of the file, its options parsed.
struct FileLayer {
  std::string name, where;
  bool input = false;  // an InputLayer
  std::vector<json> shape;  // an InputLayer's declared shape, if any
  LayerSpec spec;
  LayerInits inits;
  LayerPenalties penalties;
  std::vector<std::vector<TensorRef>> nodes;  // Functional: its applications
};

// One layer's options: its LayerSpec and initializers, or `input` for an
// InputLayer.
absl::Status ParseLayerOptions(const std::string& type, const json& cfg, FileLayer* out) {
  const std::string& where = out->where;
  if (absl::Status s = CheckDtype(cfg, where, type == "InputLayer"); !s.ok()) return s;
  if (absl::Status s = NoConstraints(cfg, where); !s.ok()) return s;
  if (absl::Status s = PenaltiesOf(cfg, where, &out->penalties); !s.ok()) return s;
  if (type == "InputLayer") {
    if (absl::Status s = Neutral(cfg, where, "sparse", {false}, "dense inputs only"); !s.ok())
      return s;
    if (absl::Status s = Neutral(cfg, where, "ragged", {false}, "dense inputs only"); !s.ok())
      return s;
    out->input = true;
    return absl::OkStatus();
  }
  const LayerClass* cls = nullptr;
  for (const LayerClass& c : kLayerClasses) {
    if (type == c.name) {
      cls = &c;
      break;
    }
  }
  if (cls == nullptr) {
    std::vector<std::string> known = {"InputLayer"};
    for (const LayerClass& c : kLayerClasses) known.push_back(c.name);
    return Bad(where, absl::StrCat("this layer is not supported (", absl::StrJoin(known, ", "),
                                   ")"));
  }
  out->spec.name = out->name;
  return cls->parse(cfg, where, &out->spec, &out->inits);
}

// Every layer of the file: its class and name, the first declared input
// shape, its options and, in a Functional model, what each application
// reads.
absl::StatusOr<std::vector<FileLayer>> ReadLayers(const ModelEnvelope& model,
                                                  const std::string& source,
                                                  ParsedLayers* parsed) {
  const json& layers = model.layers;
  std::vector<FileLayer> out;
  std::set<std::string> names;
  for (size_t i = 0; i < layers.size(); ++i) {
    const json& layer = layers[i];
    if (!layer.is_object() || !layer.contains("class_name") ||
        !layer["class_name"].is_string()) {
      return Bad(source, absl::StrCat("layer ", i, " has no class_name"));
    }
    const std::string type = layer["class_name"].get<std::string>();
    const json cfg = layer.contains("config") && layer["config"].is_object() ? layer["config"]
                                                                             : json::object();
    FileLayer f;
    f.name = cfg.contains("name") && cfg["name"].is_string() ? cfg["name"].get<std::string>()
                                                             : absl::StrCat(type, "_", i);
    f.where = absl::StrCat(source, ": layer '", f.name, "' (", type, ")");
    if (!names.insert(f.name).second) return Bad(f.where, "the layer name is used twice");
    if (f.name.empty() || f.name.find('/') != std::string::npos) {
      return Bad(f.where, "layer names must be non-empty and hold no '/'");
    }
    if (model.functional) {
      absl::StatusOr<std::vector<std::vector<TensorRef>>> nodes = InboundNodes(layer, f.where);
      if (!nodes.ok()) return nodes.status();
      f.nodes = *std::move(nodes);
    }
    if (!parsed->have_shape) parsed->have_shape = DeclaredShape(layer, cfg, &parsed->shape);
    if (type == "InputLayer") DeclaredShape(layer, cfg, &f.shape);
    if (absl::Status s = ParseLayerOptions(type, cfg, &f); !s.ok()) return s;
    out.push_back(std::move(f));
  }
  return out;
}

// A Functional model's graph as nodes in an order where each comes after
// what it reads: the applications that the output depends on, ordered by
// file position among those ready (a chain keeps the file's order).
absl::Status PlanFunctionalNodes(const ModelEnvelope& model, const std::string& source,
                                 const std::vector<FileLayer>& layers, ParsedLayers* parsed) {
  std::map<std::string, int> by_name;
  std::vector<std::string> inputs;  // the InputLayers, in file order
  for (size_t i = 0; i < layers.size(); ++i) {
    by_name[layers[i].name] = static_cast<int>(i);
    if (layers[i].input) inputs.push_back(layers[i].name);
  }
  // The model's input order (what fit's list of arrays follows): its
  // input_layers, [[name, node, tensor], ...] (Keras 3: [name, node,
  // tensor] for one), else the InputLayers' order in the file.
  if (inputs.size() > 1 && model.config.contains("input_layers")) {
    json order = model.config["input_layers"];
    if (order.is_array() && !order.empty() && order[0].is_string()) order = json::array({order});
    std::vector<std::string> named;
    for (const json& ref : order.is_array() ? order : json::array()) {
      if (ref.is_array() && !ref.empty() && ref[0].is_string()) {
        named.push_back(ref[0].get<std::string>());
      }
    }
    std::vector<std::string> sorted_named = named, sorted_inputs = inputs;
    std::sort(sorted_named.begin(), sorted_named.end());
    std::sort(sorted_inputs.begin(), sorted_inputs.end());
    if (sorted_named != sorted_inputs) {
      return Bad(source, absl::StrCat("input_layers ", Show(model.config["input_layers"]),
                                      " do not name the model's InputLayers [",
                                      absl::StrJoin(inputs, ", "), "] once each"));
    }
    inputs = named;
  }
  std::map<std::string, int> input_index;
  for (size_t k = 0; k < inputs.size(); ++k) input_index[inputs[k]] = static_cast<int>(k);
  if (inputs.size() > 1) {
    for (const std::string& name : inputs) {
      const FileLayer& l = layers[by_name.at(name)];
      if (l.shape.empty()) return Bad(l.where, "no declared shape (batch_shape)");
      parsed->inputs.emplace_back(name, l.shape);
    }
  }
  using Key = std::pair<int, int>;  // (layer, application); (ModelInput(k), 0): input k
  auto resolve = [&](const TensorRef& ref, const std::string& where) -> absl::StatusOr<Key> {
    auto it = by_name.find(ref.layer);
    if (it == by_name.end()) {
      return Bad(where, absl::StrCat("reads layer '", ref.layer, "', which the model lacks"));
    }
    const FileLayer& from = layers[it->second];
    if (from.input) return Key{ModelInput(input_index[from.name]), 0};
    if (ref.node < 0 || ref.node >= static_cast<int>(from.nodes.size())) {
      return Bad(where, absl::StrCat("reads application ", ref.node, " of layer '", ref.layer,
                                     "', which has ", from.nodes.size()));
    }
    return Key{it->second, ref.node};
  };
  absl::StatusOr<TensorRef> output = OutputTensor(model.config, model.layers, source);
  if (!output.ok()) return output.status();
  absl::StatusOr<Key> out_key = resolve(*output, source);
  if (!out_key.ok()) return out_key.status();
  if (out_key->first < 0) return Bad(source, "the model's output is its input");
  // What each needed node reads, found from the output back.
  std::map<Key, std::vector<Key>> reads;
  std::vector<Key> todo = {*out_key};
  while (!todo.empty()) {
    const Key k = todo.back();
    todo.pop_back();
    if (k.first < 0 || reads.count(k)) continue;
    const FileLayer& l = layers[k.first];
    std::vector<Key>& in = reads[k];
    for (const TensorRef& ref : l.nodes[k.second]) {
      absl::StatusOr<Key> from = resolve(ref, l.where);
      if (!from.ok()) return from.status();
      in.push_back(*from);
      todo.push_back(*from);
    }
    if (in.empty()) return Bad(l.where, "reads nothing");
  }
  std::map<Key, int> waiting;             // inputs not yet placed
  std::map<Key, std::vector<Key>> users;  // who reads a node
  std::set<Key> ready;
  for (const auto& [k, in] : reads) {
    int n = 0;
    for (const Key& from : in) {
      if (from.first < 0) continue;
      users[from].push_back(k);
      ++n;
    }
    waiting[k] = n;
    if (n == 0) ready.insert(k);
  }
  std::map<Key, int> index;
  while (!ready.empty()) {
    const Key k = *ready.begin();
    ready.erase(ready.begin());
    const FileLayer& l = layers[k.first];
    LayerSpec spec = l.spec;
    for (const Key& from : reads[k]) {
      spec.inputs.push_back(from.first < 0 ? from.first : index.at(from));
    }
    index[k] = static_cast<int>(parsed->specs.size());
    parsed->specs.push_back(std::move(spec));
    parsed->inits.push_back(l.inits);
    parsed->penalties.push_back(l.penalties);
    for (const Key& user : users[k]) {
      if (--waiting[user] == 0) ready.insert(user);
    }
  }
  if (parsed->specs.size() != reads.size()) {
    return Bad(source, "the layers' graph has a cycle");
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedLayers> ParseLayers(const ModelEnvelope& model, const std::string& source) {
  ParsedLayers out;
  absl::StatusOr<std::vector<FileLayer>> layers = ReadLayers(model, source, &out);
  if (!layers.ok()) return layers.status();
  if (model.functional) {
    if (absl::Status s = PlanFunctionalNodes(model, source, *layers, &out); !s.ok()) return s;
    return out;
  }
  for (FileLayer& l : *layers) {  // Sequential: a chain in file order
    if (l.input) continue;
    out.specs.push_back(std::move(l.spec));
    out.inits.push_back(std::move(l.inits));
    out.penalties.push_back(std::move(l.penalties));
  }
  if (out.specs.empty()) return Bad(source, "the model has no layers but its input");
  return out;
}

// The node that node i reads first (Sequential nodes read the one before).
int FirstInput(const std::vector<LayerSpec>& specs, int i) {
  return specs[i].inputs.empty() ? i - 1 : specs[i].inputs[0];
}

// The loss the model trains on; from_logits as the file or flag says it
// (absent: unset).
struct LossChoice {
  LossKind kind = LossKind::kSparseCategoricalCrossentropy;
  bool given = false;  // by the file or a flag; else chosen from the output
  std::optional<bool> from_logits;
};

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
  json cfg = json::object();
  if (loss.is_string()) {
    name = loss.get<std::string>();
  } else if (loss.is_object() && loss.contains("class_name") && loss["class_name"].is_string()) {
    name = loss["class_name"].get<std::string>();
    if (loss.contains("config") && loss["config"].is_object()) cfg = loss["config"];
  } else {
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

// Checks that the model's output fits the loss and gives the output's
// width: the output, or the node its tail of Dropout, Add and one last
// Activation reads (an Add through its first input: logits summed with
// others, as DeepFM sums its deep tower's logit with the factorization
// machine's terms, the Dense then linear), is a Dense layer whose
// activation the loss takes:
// softmax (fused) or linear logits for categorical cross-entropy; sigmoid
// (fused) or linear logits for binary; anything but softmax for
// regression. Softmax anywhere else is refused. Without a loss from the
// file or a flag, a sigmoid output trains on binary cross-entropy and any
// other on sparse categorical cross-entropy.
absl::StatusOr<int> CheckOutput(const std::vector<LayerSpec>& specs, LossChoice* loss,
                                const std::string& source) {
  const int last = static_cast<int>(specs.size()) - 1;
  int head = last;
  Activation tail = Activation::kNone;  // a last Activation layer's
  std::string sum;                      // the Add in the tail, if any
  while (head >= 0 && specs[head].kind != LayerKind::kDense) {
    const LayerSpec& l = specs[head];
    const bool ok_tail = l.kind == LayerKind::kDropout || l.kind == LayerKind::kAdd ||
                         (l.kind == LayerKind::kActivation && head == last);
    if (!ok_tail) {
      return Bad(absl::StrCat(source, ": layer '", l.name, "'"),
                 "comes after the last Dense layer; the model must end in a Dense layer "
                 "(optionally then Dropout, Add and one Activation) whose outputs the loss "
                 "reads");
    }
    if (l.kind == LayerKind::kActivation) tail = l.activation;
    if (l.kind == LayerKind::kAdd) sum = l.name;
    head = FirstInput(specs, head);
  }
  if (head < 0) {
    return Bad(source, "the model has no Dense layer; the last must give the outputs");
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
  if (loss->kind == LossKind::kSparseCategoricalCrossentropy && dense.units > (1 << 24)) {
    return Bad(at, absl::StrCat(dense.units, " classes; at most 2^24"));
  }
  return dense.units;
}

struct InputShape {
  int h, w, c;
};

// Whether every node reading the model's input is a Flatten.
bool ReadByFlattenOnly(const std::vector<LayerSpec>& specs) {
  bool any = false;
  for (size_t i = 0; i < specs.size(); ++i) {
    for (int j : specs[i].inputs.empty() ? std::vector<int>{static_cast<int>(i) - 1}
                                         : specs[i].inputs) {
      if (j != kModelInput) continue;
      if (specs[i].kind != LayerKind::kFlatten) return false;
      any = true;
    }
  }
  return any;
}

// Declared shape `shape` (without the batch) as height x width x channels:
// [H, W, C], [F] (1 x 1 x F), or, when `flattened_first`, [H, W] (H x W x
// 1). `what` names it in errors.
absl::StatusOr<InputShape> ShapeOfDims(const std::vector<json>& shape, bool flattened_first,
                                       const std::string& what) {
  std::vector<int> dims;
  for (const json& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (1 << 20)) {
      return Bad(what, absl::StrCat("input shape ", Show(json(shape)),
                                    ": every dimension but the batch must be a positive "
                                    "number (no None)"));
    }
    dims.push_back(d.get<int>());
  }
  int h, w, c;
  if (dims.size() == 3) {
    h = dims[0], w = dims[1], c = dims[2];
  } else if (dims.size() == 1) {
    h = w = 1, c = dims[0];
  } else if (dims.size() == 2 && flattened_first) {
    h = dims[0], w = dims[1], c = 1;  // [H, W] flattened first: as [H, W, 1]
  } else {
    return Bad(what, absl::StrCat("input shape ", Show(json(shape)),
                                  " is not supported ([height, width, channels] or "
                                  "[features])"));
  }
  if (static_cast<int64_t>(h) * w * c > (int64_t{1} << 26)) {
    return Bad(what, absl::StrCat("input shape ", Show(json(shape)), " is too large"));
  }
  return InputShape{h, w, c};
}

// The declared input shape: [H, W, C], [F], or [H, W] read by a Flatten
// first (H x W x 1).
absl::StatusOr<InputShape> DeclaredInputShape(const ParsedLayers& parsed,
                                              const std::string& source) {
  if (!parsed.have_shape) {
    return Bad(source, "no input shape (an InputLayer's batch_shape, or batch_input_shape or "
                       "build_config on the first layer)");
  }
  return ShapeOfDims(parsed.shape, ReadByFlattenOnly(parsed.specs), source);
}

// A model with several inputs: each one's name and shape ([H, W, C] or
// [F]), in the model's input order; empty for a model with one.
absl::StatusOr<std::vector<InputSpec>> InputsOf(const ParsedLayers& parsed,
                                                const std::string& source) {
  std::vector<InputSpec> out;
  for (const auto& [name, shape] : parsed.inputs) {
    absl::StatusOr<InputShape> in =
        ShapeOfDims(shape, false, absl::StrCat(source, ": input '", name, "'"));
    if (!in.ok()) return in.status();
    out.push_back(InputSpec{name, in->h, in->w, in->c});
  }
  return out;
}

// Gives each variable of `spec` the initializer and regularizer its
// layer's file entry set (a regularizer of a variable the layer lacks, a
// bias with use_bias false, is ignored, as Keras does).
void ApplyVariableOptions(const ParsedLayers& parsed, ModelSpec* spec) {
  for (VariableSpec& v : spec->variables) {
    const size_t slash = v.name.rfind('/');
    const std::string layer = v.name.substr(0, slash), var = v.name.substr(slash + 1);
    for (size_t i = 0; i < spec->layers.size(); ++i) {
      if (spec->layers[i].name != layer) continue;
      for (const auto& [suffix, in] : parsed.inits[i]) {
        if (suffix == var) v.initializer = in;
      }
      for (const auto& [suffix, l1_l2] : parsed.penalties[i]) {
        if (suffix == var) std::tie(v.l1, v.l2) = l1_l2;
      }
    }
  }
}

// ParseKerasModel's steps; nlohmann's exceptions pass through.
absl::StatusOr<ModelSpec> ParseKerasModelOrThrow(absl::string_view text,
                                                 const std::string& source,
                                                 const std::string& loss_flag) {
  absl::StatusOr<ModelEnvelope> model = ReadEnvelope(text, source);
  if (!model.ok()) return model.status();
  absl::StatusOr<ParsedLayers> parsed = ParseLayers(*model, source);
  if (!parsed.ok()) return parsed.status();
  LossChoice loss;
  if (!loss_flag.empty()) {
    std::optional<LossKind> kind = LossByName(loss_flag);
    if (!kind) {
      return Bad(absl::StrCat("--loss=", loss_flag), absl::StrCat("not a loss we train on (",
                                                                   kLossNames, ")"));
    }
    loss.kind = *kind;
    loss.given = true;
  } else if (!model->loss.is_null()) {
    absl::StatusOr<LossChoice> given = LossOfConfig(model->loss, source);
    if (!given.ok()) return given.status();
    loss = *given;
  }
  // The activations' parameters where the file gives none: Keras's
  // defaults for the activation functions (elu 1; leaky_relu 0.2, Keras 3's
  // function; hard_sigmoid's slope 1/6 in Keras 3, 0.2 in Keras 2 and
  // TensorFlow.js).
  for (LayerSpec& l : parsed->specs) {
    if (l.alpha != 0.0f) continue;
    if (l.activation == Activation::kElu) l.alpha = 1.0f;
    if (l.activation == Activation::kLeakyRelu) l.alpha = 0.2f;
    if (l.activation == Activation::kHardSigmoid) l.alpha = model->keras3 ? 1.0f / 6 : 0.2f;
  }
  absl::StatusOr<int> outputs = CheckOutput(parsed->specs, &loss, source);
  if (!outputs.ok()) return outputs.status();
  const int classes = *outputs;
  absl::StatusOr<std::vector<InputSpec>> inputs = InputsOf(*parsed, source);
  if (!inputs.ok()) return inputs.status();
  // With several inputs the example's shape is theirs, end to end.
  absl::StatusOr<InputShape> in =
      inputs->empty() ? DeclaredInputShape(*parsed, source) : InputShape{1, 1, 1};
  if (!in.ok()) return in.status();
  absl::StatusOr<ModelSpec> spec =
      BuildModelSpec(model->model_name, in->h, in->w, in->c, classes, std::move(parsed->specs),
                     *std::move(inputs));
  if (!spec.ok()) {
    return Bad(source, std::string(spec.status().message()));
  }
  ApplyVariableOptions(*parsed, &*spec);
  spec->loss = loss.kind;
  if (spec->num_parameters > (int64_t{1} << 31)) {
    return Bad(source, absl::StrCat(spec->num_parameters, " parameters; at most 2^31"));
  }
  return spec;
}

}  // namespace

absl::StatusOr<ModelSpec> ParseKerasModel(absl::string_view text, const std::string& source,
                                          const std::string& loss) {
  // The parts check each value's type before they read it; a value of
  // another type that slips past them is a bad file all the same, never a
  // crash (nlohmann's type_error, out_of_range, ...).
  try {
    return ParseKerasModelOrThrow(text, source, loss);
  } catch (const nlohmann::json::exception& e) {
    return Bad(source, absl::StrCat("a value of the wrong type or out of range: ", e.what()));
  }
}


absl::StatusOr<ModelSpec> PlanModelSpec(const std::string& model,
                                        const std::string& model_json,
                                        const std::string& loss) {
  if (model_json.empty()) return ModelByName(model);
  return ParseKerasModel(model_json, model, loss);
}

std::vector<std::string> BuiltinModelNames() {
  std::vector<std::string> names;
  for (const BuiltinModel& m : BuiltinModels()) names.push_back(m.name);
  return names;
}

absl::StatusOr<std::string> ReadModelFile(const std::string& name_or_path) {
  for (const BuiltinModel& m : BuiltinModels()) {
    if (name_or_path == m.name) return std::string(m.json);
  }
  if (absl::EndsWith(name_or_path, ".keras")) {
    absl::StatusOr<std::unique_ptr<ZipArchive>> archive = ZipArchive::Open(name_or_path, "a .keras");
    if (!archive.ok()) return archive.status();
    if (!(*archive)->Has("config.json")) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_or_path, ": the archive has no config.json"));
    }
    return (*archive)->Read("config.json", uint64_t{64} << 20);
  }
  std::ifstream in(name_or_path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        name_or_path, ": cannot read it (not a built-in model: ",
        absl::StrJoin(BuiltinModelNames(), ", "), "; nor a readable .json or .keras file)"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace pscluster
