#include "model/keras_options.h"

#include <cctype>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace keras {

absl::Status Bad(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

std::string Show(const json& j) { return j.dump(); }

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

std::string SpellingKey(const std::string& name) {
  std::string key;
  for (char c : name) {
    if (c != '_') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return key;
}

bool ClassAndConfig(const json& j, std::string* cls, json* cfg) {
  *cfg = json::object();
  if (j.is_string()) {
    *cls = j.get<std::string>();
  } else if (j.is_object() && j.contains("class_name") && j["class_name"].is_string()) {
    *cls = j["class_name"].get<std::string>();
    if (j.contains("config") && j["config"].is_object()) *cfg = j["config"];
  } else {
    return false;
  }
  return true;
}

double Number(const json& cfg, const char* key, double dflt) {
  auto it = cfg.find(key);
  return it != cfg.end() && it->is_number() ? it->get<double>() : dflt;
}

namespace {

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
  json cfg;
  if (!ClassAndConfig(r, &cls, &cfg)) return bad("a regularizer's name or {class_name, config}");
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

}  // namespace

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

absl::Status PenaltiesOf(const json& cfg, const std::string& where, LayerPenalties* out) {
  static constexpr std::pair<const char*, const char*> kKeys[] = {
      {"kernel_regularizer", "kernel"},
      {"recurrent_regularizer", "recurrent_kernel"},
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

absl::StatusOr<Activation> ActivationOf(const json& cfg, const std::string& where, const char* key,
                                        Activation absent) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return absent;
  std::string name;
  if (it->is_string()) {
    name = it->get<std::string>();
  } else if (it->is_object() && it->contains("config") && (*it)["config"].is_object() &&
             (*it)["config"].contains("name")) {
    name = (*it)["config"]["name"].get<std::string>();
  }
  // Keras's snake_case and TensorFlow.js's camelCase spellings.
  const std::string spelled = SpellingKey(name);
  if (spelled == "linear") return Activation::kNone;
  if (spelled == "relu") return Activation::kRelu;
  if (spelled == "sigmoid") return Activation::kSigmoid;
  if (spelled == "tanh") return Activation::kTanh;
  if (spelled == "softmax") return Activation::kSoftmax;
  if (spelled == "gelu") return Activation::kGelu;
  if (spelled == "gelunew") return Activation::kGeluTanh;  // tfjs's tanh form
  if (spelled == "swish" || spelled == "silu") return Activation::kSwish;
  if (spelled == "elu") return Activation::kElu;
  if (spelled == "leakyrelu") return Activation::kLeakyRelu;
  if (spelled == "hardsigmoid") return Activation::kHardSigmoid;
  return Bad(where, absl::StrCat("option '", key, "' = ", Show(*it),
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

namespace {

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

}  // namespace

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
  if (camel == "Orthogonal") {
    init.kind = K::kOrthogonal;
    const json gain = c.value("gain", json(1.0));
    if (!gain.is_number() || !std::isfinite(gain.get<double>())) {
      return Bad(where, absl::StrCat("option '", key, "': Orthogonal gain ", Show(gain),
                                     " is not a finite number"));
    }
    init.scale = gain.get<double>();
    return init;
  }
  return Bad(where, absl::StrCat("option '", key, "' = ", Show(*it),
                                 " is not supported (Zeros, Ones, Constant, GlorotUniform, "
                                 "GlorotNormal, HeNormal, HeUniform, LecunNormal, LecunUniform, "
                                 "Orthogonal, RandomNormal, RandomUniform, TruncatedNormal, "
                                 "VarianceScaling)"));
}

}  // namespace keras
}  // namespace pscluster
