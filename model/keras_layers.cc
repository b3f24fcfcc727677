#include "model/keras_layers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pscluster {
namespace keras {
namespace {

// Appends variable `var`'s initializer: option `key`, else `dflt`.
absl::Status AddInit(const json& cfg, const std::string& where, const char* key,
                     const char* var, Initializer dflt, LayerInits* inits) {
  absl::StatusOr<Initializer> in = InitializerOf(cfg, where, key, dflt);
  if (!in.ok()) return in.status();
  // Keras draws orthogonal matrices (rank >= 2): kernels. An Embedding's
  // table is drawn a row at a time (a sparse table's rows appear as they
  // are first used), so no two rows could be made orthogonal.
  const std::string name = var;
  if (in->kind == Initializer::Kind::kOrthogonal &&
      (name.find("kernel") == std::string::npos || name == "embeddings")) {
    return Bad(where, absl::StrCat("option '", key,
                                   "' = Orthogonal is supported for kernels only (a matrix), "
                                   "not for its ",
                                   name));
  }
  inits->emplace_back(var, *in);
  return absl::OkStatus();
}

// A per-class parser: checks the layer's options in `cfg` and fills `l`
// (its options; its kind comes from the table) and `inits`. `where` names
// the layer in errors. Some options refuse at once, others are all checked
// and the first refusal returned; the order decides which error a bad file
// gets.
using LayerParser = absl::Status (*)(const json& cfg, const std::string& where, LayerSpec* l,
                                     LayerInits* inits);

// Option `key`, true or false; `dflt` when absent or null (TensorFlow.js
// writes null for an option left unset).
absl::Status BoolOption(const json& cfg, const std::string& where, const char* key, bool dflt,
                        bool* out) {
  const json v = cfg.value(key, json());
  if (v.is_null()) {
    *out = dflt;
    return absl::OkStatus();
  }
  if (!v.is_boolean()) {
    return Bad(where, absl::StrCat("option '", key, "' = ", Show(v), " is not true or false"));
  }
  *out = v.get<bool>();
  return absl::OkStatus();
}

// use_bias and activation, as every convolution and Dense has them.
absl::Status BiasAndActivation(const json& cfg, const std::string& where, LayerSpec* l) {
  l->use_bias = cfg.value("use_bias", true);
  absl::StatusOr<Activation> a = ActivationOf(cfg, where);
  if (!a.ok()) return a.status();
  l->activation = *a;
  return absl::OkStatus();
}

// The `kernel` (Glorot uniform unless given) and `bias` (zeros)
// initializers of a convolution or a Dense, after the checks in `st`.
absl::Status KernelAndBiasInits(const json& cfg, const std::string& where, absl::Status st,
                                LayerInits* inits) {
  if (st.ok()) {
    st = AddInit(cfg, where, "kernel_initializer", "kernel", Initializer::GlorotUniform(), inits);
  }
  if (st.ok()) st = AddInit(cfg, where, "bias_initializer", "bias", Initializer::Zeros(), inits);
  return st;
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
  if (absl::Status s = BiasAndActivation(cfg, where, l); !s.ok()) return s;
  return st;
}

absl::Status ParseConv2D(const json& cfg, const std::string& where, LayerSpec* l,
                         LayerInits* inits) {
  if (absl::Status s = IntIn(cfg, where, "filters", 0, 1, 65536, &l->units); !s.ok()) return s;
  absl::Status st = ParseWindowOptions(cfg, where, l);
  st.Update(Neutral(cfg, where, "groups", {1}, "grouped convolutions are not implemented"));
  return KernelAndBiasInits(cfg, where, st, inits);
}

// The options of a depthwise convolution, DepthwiseConv2D's and the first
// step of SeparableConv2D's: the window's, depth_multiplier and the
// depthwise kernel's initializer.
absl::Status ParseDepthwiseOptions(const json& cfg, const std::string& where, LayerSpec* l,
                                   LayerInits* inits) {
  absl::Status st = ParseWindowOptions(cfg, where, l);
  st.Update(IntIn(cfg, where, "depth_multiplier", 1, 1, 4096, &l->depth_multiplier));
  if (st.ok()) {
    st = AddInit(cfg, where, "depthwise_initializer", "depthwise_kernel",
                 Initializer::GlorotUniform(), inits);
  }
  return st;
}

absl::Status ParseDepthwiseConv2D(const json& cfg, const std::string& where, LayerSpec* l,
                                  LayerInits* inits) {
  absl::Status st = ParseDepthwiseOptions(cfg, where, l, inits);
  if (st.ok()) st = AddInit(cfg, where, "bias_initializer", "bias", Initializer::Zeros(), inits);
  return st;
}

absl::Status ParseSeparableConv2D(const json& cfg, const std::string& where, LayerSpec* l,
                                  LayerInits* inits) {
  if (absl::Status s = IntIn(cfg, where, "filters", 0, 1, 65536, &l->units); !s.ok()) return s;
  absl::Status st = ParseDepthwiseOptions(cfg, where, l, inits);
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

// Option `key` of a 1-D layer: an integer or a list of one (TensorFlow.js
// and Keras write [3]); `dflt` when absent or null.
absl::Status IntOne(const json& cfg, const std::string& where, const char* key, int dflt,
                    int* out) {
  const json v = cfg.value(key, json());
  const json one = v.is_array() && v.size() == 1 ? v[0] : v;
  if (v.is_null()) {
    *out = dflt;
  } else if (one.is_number_integer() && one.get<int64_t>() >= 1 && one.get<int64_t>() <= 4096) {
    *out = one.get<int>();
  } else {
    return Bad(where, absl::StrCat("option '", key, "' = ", Show(v),
                                   " is not an integer in [1, 4096] or a list of one"));
  }
  return absl::OkStatus();
}

// Conv1D: Conv2D's window over 1 x steps (LayerSpec::one_d).
absl::Status ParseConv1D(const json& cfg, const std::string& where, LayerSpec* l,
                         LayerInits* inits) {
  if (absl::Status s = IntIn(cfg, where, "filters", 0, 1, 65536, &l->units); !s.ok()) return s;
  l->one_d = true;
  l->window_h = 1;
  if (!cfg.contains("kernel_size")) return Bad(where, "option 'kernel_size' is missing");
  absl::Status st = IntOne(cfg, where, "kernel_size", 1, &l->window_w);
  st.Update(IntOne(cfg, where, "strides", 1, &l->stride_w));
  st.Update(IntOne(cfg, where, "dilation_rate", 1, &l->dilation_w));
  if (st.ok() && l->dilation_w > 1 && l->stride_w > 1) {
    return Bad(where,
               absl::StrCat("option 'dilation_rate' = ", Show(cfg.value("dilation_rate", json())),
                            " with 'strides' = ", Show(cfg.value("strides", json())),
                            " is not supported (TensorFlow too needs one of them 1)"));
  }
  if (cfg.value("padding", json()) == "causal") {
    return Bad(where, "option 'padding' = \"causal\" is not supported (valid or same)");
  }
  st.Update(PaddingOf(cfg, where, &l->padding));
  st.Update(ChannelsLast(cfg, where));
  st.Update(Neutral(cfg, where, "groups", {1}, "grouped convolutions are not implemented"));
  st.Update(Neutral(cfg, where, "lora_rank", {}, "LoRA is not implemented"));
  if (absl::Status s = BiasAndActivation(cfg, where, l); !s.ok()) return s;
  return KernelAndBiasInits(cfg, where, st, inits);
}

// MaxPooling1D and AveragePooling1D: the 2-D pools over 1 x steps.
absl::Status ParsePool1D(const json& cfg, const std::string& where, LayerSpec* l, LayerInits*) {
  l->one_d = true;
  l->window_h = 1;
  absl::Status st = IntOne(cfg, where, "pool_size", 2, &l->window_w);
  // Keras: strides default to pool_size.
  st.Update(IntOne(cfg, where, "strides", l->window_w, &l->stride_w));
  st.Update(PaddingOf(cfg, where, &l->padding));
  st.Update(ChannelsLast(cfg, where));
  return st;
}

// MaxPooling2D and AveragePooling2D.
absl::Status ParsePool2D(const json& cfg, const std::string& where, LayerSpec* l, LayerInits*) {
  absl::Status st;
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

// GlobalAveragePooling2D, GlobalMaxPooling2D and GlobalAveragePooling1D;
// the 1-D pool over [steps, features] is the same mean as the 2-D pool's
// over 1 x steps pixels (model_spec.cc checks the input's rank).
absl::Status ParseGlobalPool(const json& cfg, const std::string& where, LayerSpec*,
                             LayerInits*) {
  absl::Status st;
  st.Update(ChannelsLast(cfg, where));
  st.Update(Neutral(cfg, where, "keepdims", {false}, "only keepdims false"));
  return st;
}

// GlobalMaxPooling1D: GlobalMaxPooling2D over 1 x steps.
absl::Status ParseGlobalPool1D(const json& cfg, const std::string& where, LayerSpec* l,
                               LayerInits* inits) {
  l->one_d = true;
  return ParseGlobalPool(cfg, where, l, inits);
}

// Embedding: ids [L] (float32 in the examples) -> [L, output_dim] rows of
// the [input_dim, output_dim] table. Masks are not supported; nor is a
// regularizer of the table (the sparse path would have to touch every row).
absl::Status ParseEmbedding(const json& cfg, const std::string& where, LayerSpec* l,
                            LayerInits* inits) {
  absl::Status st;
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
  if (absl::Status s = BoolOption(cfg, where, "mask_zero", false, &l->mask_zero); !s.ok()) {
    return s;
  }
  st.Update(Neutral(cfg, where, "embeddings_regularizer", {}, "not implemented; only null"));
  st.Update(Neutral(cfg, where, "lora_rank", {}, "LoRA is not implemented"));
  if (st.ok()) {
    st = AddInit(cfg, where, "embeddings_initializer", "embeddings",
                 Initializer::RandomUniform(), inits);
  }
  return st;
}

absl::Status ParseFlatten(const json& cfg, const std::string& where, LayerSpec*, LayerInits*) {
  return ChannelsLast(cfg, where);
}

absl::Status ParseDense(const json& cfg, const std::string& where, LayerSpec* l,
                        LayerInits* inits) {
  absl::Status st;
  if (!cfg.contains("units") || !cfg["units"].is_number_integer() ||
      cfg["units"].get<int>() < 1 || cfg["units"].get<int>() > (1 << 24)) {
    return Bad(where, absl::StrCat("option 'units' = ", Show(cfg.value("units", json())),
                                   " is not valid"));
  }
  l->units = cfg["units"].get<int>();
  st.Update(Neutral(cfg, where, "lora_rank", {}, "LoRA is not implemented"));
  if (absl::Status s = BiasAndActivation(cfg, where, l); !s.ok()) return s;
  return KernelAndBiasInits(cfg, where, st, inits);
}

absl::Status ParseDropout(const json& cfg, const std::string& where, LayerSpec* l,
                          LayerInits*) {
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
  absl::StatusOr<Activation> a = ActivationOf(cfg, where);
  if (!a.ok()) return a.status();
  l->activation = *a;
  return absl::OkStatus();
}

absl::Status ParseReLU(const json& cfg, const std::string& where, LayerSpec* l, LayerInits*) {
  absl::Status st;
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
  l->activation = Activation::kLeakyRelu;
  const double slope =
      Number(cfg, cfg.contains("negative_slope") ? "negative_slope" : "alpha", 0.3);
  if (!(slope >= 0.0)) {
    return Bad(where, absl::StrCat("negative slope ", slope, " must be >= 0"));
  }
  l->alpha = static_cast<float>(slope);
  if (slope == 0.0) l->activation = Activation::kRelu;  // a slope of 0 is ReLU
  return absl::OkStatus();
}

absl::Status ParseELU(const json& cfg, const std::string& where, LayerSpec* l, LayerInits*) {
  l->activation = Activation::kElu;
  l->alpha = static_cast<float>(Number(cfg, "alpha", 1.0));
  if (!std::isfinite(l->alpha)) return Bad(where, "alpha must be finite");
  if (l->alpha == 0.0f) l->activation = Activation::kRelu;  // elu with alpha 0 is ReLU
  return absl::OkStatus();
}

// ZeroPadding2D's padding: n, [rows, cols] or [[top, bottom], [left, right]].
absl::Status ParseZeroPadding2D(const json& cfg, const std::string& where, LayerSpec* l,
                                LayerInits*) {
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

absl::Status ParseRescaling(const json& cfg, const std::string& where, LayerSpec* l,
                            LayerInits*) {
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

// Add, Subtract, Multiply and Average: no options the math reads.
absl::Status ParseMerge(const json&, const std::string&, LayerSpec*, LayerInits*) {
  return absl::OkStatus();
}

// Concatenate along the last (channel) axis: -1, or its index, which the
// shapes check (model_spec.cc NodeShapes).
absl::Status ParseConcatenate(const json& cfg, const std::string& where, LayerSpec* l,
                              LayerInits*) {
  const json axis = cfg.value("axis", json(-1));
  if (!axis.is_number_integer() || axis.get<int>() < -1 || axis.get<int>() == 0) {
    return Bad(where, absl::StrCat("option 'axis' = ", Show(axis),
                                   " is not supported (the last axis only: -1)"));
  }
  l->axis = axis.get<int>();
  return absl::OkStatus();
}

// Dot of two flat inputs along their features: `axes` 1 or -1 (as one
// number or a pair), the only axis a [batch, features] tensor has besides
// the batch's; `normalize` makes it the cosine (Keras 3's normalize: each
// input times min(1 / |x|, 1e7)).
absl::Status ParseDot(const json& cfg, const std::string& where, LayerSpec* l, LayerInits*) {
  const json axes = cfg.value("axes", json(-1));
  auto one_axis = [](const json& a) {
    return a.is_number_integer() && (a.get<int>() == 1 || a.get<int>() == 2 || a.get<int>() == -1);
  };
  const bool ok = one_axis(axes) ||
                  (axes.is_array() && axes.size() == 2 && one_axis(axes[0]) && one_axis(axes[1]));
  if (!ok) {
    return Bad(where, absl::StrCat("option 'axes' = ", Show(axes),
                                   " is not supported (1, 2 or -1, or a pair of them)"));
  }
  l->dot_axes[0] = axes.is_array() ? axes[0].get<int>() : axes.get<int>();
  l->dot_axes[1] = axes.is_array() ? axes[1].get<int>() : axes.get<int>();
  const json normalize = cfg.value("normalize", json(false));
  if (!normalize.is_boolean()) {
    return Bad(where,
               absl::StrCat("option 'normalize' = ", Show(normalize), " is not true or false"));
  }
  l->normalize = normalize.get<bool>();
  return absl::OkStatus();
}

// Keras's MultiHeadAttention: heads, key and value widths, biases and
// initializers (each projection's kernel and bias); expanded into Dense
// projections around an Attention core by the model's parser.
absl::Status ParseMultiHeadAttention(const json& cfg, const std::string& where, LayerSpec* l,
                                     LayerInits* inits) {
  absl::Status st;
  if (absl::Status s = IntIn(cfg, where, "num_heads", 0, 1, 1024, &l->heads); !s.ok()) return s;
  if (absl::Status s = IntIn(cfg, where, "key_dim", 0, 1, 65536, &l->units); !s.ok()) return s;
  l->value_dim = l->units;
  if (cfg.contains("value_dim") && !cfg["value_dim"].is_null()) {
    if (absl::Status s = IntIn(cfg, where, "value_dim", 0, 1, 65536, &l->value_dim); !s.ok()) {
      return s;
    }
  }
  l->use_bias = cfg.value("use_bias", true);
  st.Update(Neutral(cfg, where, "dropout", {0, 0.0}, "no dropout on the weights"));
  st.Update(Neutral(cfg, where, "output_shape", {}, "only the query's features"));
  st.Update(Neutral(cfg, where, "attention_axes", {json::array({1}), 1, json::array({-2}), -2},
                    "only the steps"));
  for (const char* key : {"kernel_regularizer", "bias_regularizer", "activity_regularizer",
                          "kernel_constraint", "bias_constraint"}) {
    st.Update(Neutral(cfg, where, key, {}, "not implemented; only null"));
  }
  return KernelAndBiasInits(cfg, where, st, inits);
}

// Keras's Softmax layer over the last axis.
absl::Status ParseSoftmax(const json& cfg, const std::string& where, LayerSpec*, LayerInits*) {
  const json axis = cfg.value("axis", json(-1));
  const bool last = axis == json(-1) || (axis.is_array() && axis.size() == 1 && axis[0] == -1);
  if (!last) {
    return Bad(where, absl::StrCat("option 'axis' = ", Show(axis),
                                   " is not supported (only the last axis, -1)"));
  }
  return absl::OkStatus();
}

// Keras's Attention with dot-product scores, as it is built by default.
absl::Status ParseAttention(const json& cfg, const std::string& where, LayerSpec*, LayerInits*) {
  absl::Status st;
  st.Update(Neutral(cfg, where, "use_scale", {false}, "only false: no learnt scale"));
  st.Update(Neutral(cfg, where, "score_mode", {"dot"}, "only \"dot\" scores"));
  st.Update(Neutral(cfg, where, "dropout", {0, 0.0}, "no dropout on the weights"));
  st.Update(Neutral(cfg, where, "causal", {false}, "no causal mask"));  // Keras 2's option
  return st;
}

// LSTM and GRU (Keras 3, Keras 2 and TensorFlow.js configs): units, the
// activations the kernels run, use_bias, return_sequences, go_backwards,
// GRU's reset_after and LSTM's unit_forget_bias; the options that would
// change the math otherwise (dropout, state kept across batches, the
// states as outputs) refused. `unroll`, `implementation` and `use_cudnn`
// choose how Keras runs the same math: ignored.
absl::Status ParseRecurrent(const json& cfg, const std::string& where, LayerSpec* l,
                            LayerInits* inits) {
  if (absl::Status s = IntIn(cfg, where, "units", 0, 1, 1 << 16, &l->units); !s.ok()) return s;
  absl::StatusOr<Activation> a = ActivationOf(cfg, where, "activation", Activation::kTanh);
  if (!a.ok()) return a.status();
  absl::StatusOr<Activation> ra =
      ActivationOf(cfg, where, "recurrent_activation", Activation::kSigmoid);
  if (!ra.ok()) return ra.status();
  if (*a != Activation::kTanh && *a != Activation::kSigmoid && *a != Activation::kRelu) {
    return Bad(where, absl::StrCat("option 'activation' = ", Show(cfg["activation"]),
                                   " is not supported here (tanh, sigmoid or relu)"));
  }
  if (*ra != Activation::kSigmoid && *ra != Activation::kHardSigmoid && *ra != Activation::kTanh) {
    return Bad(where,
               absl::StrCat("option 'recurrent_activation' = ", Show(cfg["recurrent_activation"]),
                            " is not supported (sigmoid, hard_sigmoid or tanh)"));
  }
  l->activation = *a;
  l->recurrent_activation = *ra;
  absl::Status st;
  st.Update(BoolOption(cfg, where, "use_bias", true, &l->use_bias));
  st.Update(BoolOption(cfg, where, "return_sequences", false, &l->return_sequences));
  st.Update(BoolOption(cfg, where, "go_backwards", false, &l->go_backwards));
  if (l->kind == LayerKind::kGru) {
    // Keras 3 and tf.keras default to true; TensorFlow.js writes false
    // (the only form it has).
    st.Update(BoolOption(cfg, where, "reset_after", true, &l->reset_after));
  } else {
    st.Update(BoolOption(cfg, where, "unit_forget_bias", true, &l->unit_forget_bias));
  }
  st.Update(Neutral(cfg, where, "return_state", {false},
                    "the states as outputs are not implemented (only the output)"));
  st.Update(Neutral(cfg, where, "stateful", {false},
                    "every batch starts from zero states (no state kept across batches)"));
  st.Update(Neutral(cfg, where, "time_major", {false}, "batch-major inputs only"));
  st.Update(Neutral(cfg, where, "dropout", {0, 0.0}, "dropout in the cell is not implemented"));
  st.Update(
      Neutral(cfg, where, "recurrent_dropout", {0, 0.0}, "dropout in the cell is not implemented"));
  st.Update(Neutral(cfg, where, "zero_output_for_mask", {false},
                    "a masked step's output is the last state, as Keras's default"));
  if (st.ok()) {
    st = AddInit(cfg, where, "kernel_initializer", "kernel", Initializer::GlorotUniform(), inits);
  }
  if (st.ok()) {
    Initializer orthogonal;
    orthogonal.kind = Initializer::Kind::kOrthogonal;
    st = AddInit(cfg, where, "recurrent_initializer", "recurrent_kernel", orthogonal, inits);
  }
  if (st.ok()) st = AddInit(cfg, where, "bias_initializer", "bias", Initializer::Zeros(), inits);
  return st;
}

// The layer classes the workers run, under every name Keras writes for
// them (an unknown class's error lists them in this order).
struct LayerClass {
  const char* name;
  LayerKind kind;
  LayerParser parse;
};
constexpr LayerClass kLayerClasses[] = {
    {"Conv2D", LayerKind::kConv2D, ParseConv2D},
    {"Convolution2D", LayerKind::kConv2D, ParseConv2D},
    {"MaxPooling2D", LayerKind::kMaxPool2D, ParsePool2D},
    {"MaxPool2D", LayerKind::kMaxPool2D, ParsePool2D},
    {"AveragePooling2D", LayerKind::kAvgPool2D, ParsePool2D},
    {"AvgPool2D", LayerKind::kAvgPool2D, ParsePool2D},
    {"GlobalAveragePooling2D", LayerKind::kGlobalAvgPool2D, ParseGlobalPool},
    {"GlobalAvgPool2D", LayerKind::kGlobalAvgPool2D, ParseGlobalPool},
    {"GlobalAveragePooling1D", LayerKind::kGlobalAvgPool1D, ParseGlobalPool},
    {"GlobalAvgPool1D", LayerKind::kGlobalAvgPool1D, ParseGlobalPool},
    {"Embedding", LayerKind::kEmbedding, ParseEmbedding},
    {"Flatten", LayerKind::kFlatten, ParseFlatten},
    {"Dense", LayerKind::kDense, ParseDense},
    {"Dropout", LayerKind::kDropout, ParseDropout},
    {"Activation", LayerKind::kActivation, ParseActivation},
    {"ReLU", LayerKind::kActivation, ParseReLU},
    {"BatchNormalization", LayerKind::kBatchNorm, ParseBatchNorm},
    {"Add", LayerKind::kAdd, ParseMerge},
    {"Subtract", LayerKind::kSubtract, ParseMerge},
    {"Multiply", LayerKind::kMultiply, ParseMerge},
    {"Average", LayerKind::kAverage, ParseMerge},
    {"Concatenate", LayerKind::kConcatenate, ParseConcatenate},
    {"Dot", LayerKind::kDot, ParseDot},
    {"Attention", LayerKind::kAttention, ParseAttention},
    {"Softmax", LayerKind::kSoftmax, ParseSoftmax},
    {"MultiHeadAttention", LayerKind::kMultiHeadAttention, ParseMultiHeadAttention},
    {"LeakyReLU", LayerKind::kActivation, ParseLeakyReLU},
    {"ELU", LayerKind::kActivation, ParseELU},
    {"ZeroPadding2D", LayerKind::kZeroPadding2D, ParseZeroPadding2D},
    {"GlobalMaxPooling2D", LayerKind::kGlobalMaxPool2D, ParseGlobalPool},
    {"GlobalMaxPool2D", LayerKind::kGlobalMaxPool2D, ParseGlobalPool},
    {"Rescaling", LayerKind::kRescaling, ParseRescaling},
    {"Reshape", LayerKind::kReshape, ParseReshape},
    {"DepthwiseConv2D", LayerKind::kDepthwiseConv2D, ParseDepthwiseConv2D},
    {"SeparableConv2D", LayerKind::kSeparableConv2D, ParseSeparableConv2D},
    {"SeparableConvolution2D", LayerKind::kSeparableConv2D, ParseSeparableConv2D},
    {"LayerNormalization", LayerKind::kLayerNorm, ParseLayerNorm},
    {"Conv1D", LayerKind::kConv2D, ParseConv1D},
    {"Convolution1D", LayerKind::kConv2D, ParseConv1D},
    {"MaxPooling1D", LayerKind::kMaxPool2D, ParsePool1D},
    {"MaxPool1D", LayerKind::kMaxPool2D, ParsePool1D},
    {"AveragePooling1D", LayerKind::kAvgPool2D, ParsePool1D},
    {"AvgPool1D", LayerKind::kAvgPool2D, ParsePool1D},
    {"GlobalMaxPooling1D", LayerKind::kGlobalMaxPool2D, ParseGlobalPool1D},
    {"GlobalMaxPool1D", LayerKind::kGlobalMaxPool2D, ParseGlobalPool1D},
    {"LSTM", LayerKind::kLstm, ParseRecurrent},
    {"GRU", LayerKind::kGru, ParseRecurrent},
};

}  // namespace

absl::Status ParseLayerOptions(const std::string& type, const json& cfg, const std::string& name,
                               const std::string& where, LayerOptions* out) {
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
  out->spec.name = name;
  out->spec.kind = cls->kind;
  return cls->parse(cfg, where, &out->spec, &out->inits);
}

}  // namespace keras
}  // namespace pscluster
