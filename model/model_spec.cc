#include "model/model_spec.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pscluster {
namespace {

// Keras's output size along one axis.
int OutputSize(int in, int window, int stride, Padding padding) {
  if (padding == Padding::kSame) return (in + stride - 1) / stride;
  return in < window ? 0 : (in - window) / stride + 1;
}

LayerSpec Conv(const char* name, int filters, int k) {
  LayerSpec l;
  l.kind = LayerKind::kConv2D;
  l.name = name;
  l.units = filters;
  l.window_h = l.window_w = k;
  l.activation = Activation::kRelu;
  return l;
}
LayerSpec Pool(const char* name, int p) {
  LayerSpec l;
  l.kind = LayerKind::kMaxPool2D;
  l.name = name;
  l.window_h = l.window_w = l.stride_h = l.stride_w = p;
  return l;
}
LayerSpec Flatten() {
  LayerSpec l;
  l.kind = LayerKind::kFlatten;
  l.name = "flatten";
  return l;
}
LayerSpec Dense(const char* name, int units, Activation a) {
  LayerSpec l;
  l.kind = LayerKind::kDense;
  l.name = name;
  l.units = units;
  l.activation = a;
  return l;
}

// Box-Muller on the variable's own stream: the same numbers with every
// standard library, unlike std::normal_distribution.
double StandardNormal(std::mt19937_64& rng) {
  constexpr double kTwoPi = 6.283185307179586;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double u1;
  do {
    u1 = u(rng);
  } while (u1 <= 0.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u(rng));
}

}  // namespace

namespace {

std::string ShapeText(const ActivationShape& s) {
  return absl::StrCat(s.h, "x", s.w, "x", s.c, s.flat ? " (after Flatten)" : "");
}

const char* MergeName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kAdd: return "Add";
    case LayerKind::kSubtract: return "Subtract";
    case LayerKind::kMultiply: return "Multiply";
    case LayerKind::kAverage: return "Average";
    case LayerKind::kDot:
      return "Dot";
    case LayerKind::kAttention:
      return "Attention";
    case LayerKind::kMultiHeadAttention:
      return "MultiHeadAttention";
    default: return "Concatenate";
  }
}

// An Attention's output over [query, value] or [query, value, key]
// ([steps, features] each), or InvalidArgument beginning with `where`.
// `heads` share the features; with `any_widths` (a MultiHeadAttention's
// inputs, projected before they meet) only the steps must fit.
absl::StatusOr<ActivationShape> AttentionShapeOf(const std::string& where, int heads,
                                                 const std::vector<ActivationShape>& in,
                                                 bool any_widths = false) {
  if (in.size() != 2 && in.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": Attention needs [query, value] or [query, value, key], has ",
                     in.size(), " inputs"));
  }
  for (const ActivationShape& s : in) {
    if (s.flat || s.h != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": Attention of an input shaped ", ShapeText(s),
                       " is not supported ([steps, features] inputs only)"));
    }
  }
  const ActivationShape& q = in[0];
  const ActivationShape& v = in[1];
  const ActivationShape& k = in.size() == 3 ? in[2] : in[1];
  if ((!any_widths && q.c != k.c) || k.w != v.w) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": Attention of query ", ShapeText(q), ", value ", ShapeText(v),
                     " and key ", ShapeText(k),
                     ": the query and the key need as many features, the key and the value as "
                     "many steps"));
  }
  if (heads < 1 || q.c % heads != 0 || v.c % heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": Attention of ", heads, " heads over ",
                                                   q.c, " and ", v.c,
                                                   " features (each must split evenly)"));
  }
  ActivationShape out = q;
  out.c = v.c;
  return out;
}

}  // namespace

bool DotsSequences(const std::vector<ActivationShape>& in) {
  for (const ActivationShape& s : in) {
    if (s.flat || s.h != 1 || s.w < 2) return false;
  }
  return true;
}

bool ConcatenatesSteps(const LayerSpec& l, const std::vector<ActivationShape>& in) {
  if (l.kind != LayerKind::kConcatenate || l.axis != 1) return false;
  for (const ActivationShape& s : in) {
    if (s.flat || s.h != 1) return false;
  }
  return true;
}

namespace {

// The output shape of merge node `l` over `in`, or InvalidArgument
// beginning with `where`.
absl::StatusOr<ActivationShape> MergeShape(const LayerSpec& l, const std::string& where,
                                           const std::vector<ActivationShape>& in) {
  const char* what = MergeName(l.kind);
  if (l.kind == LayerKind::kAttention) return AttentionShapeOf(where, l.heads, in);
  if (l.kind == LayerKind::kMultiHeadAttention) {
    // Before its expansion: the query's shape (Keras's output_shape).
    absl::StatusOr<ActivationShape> core = AttentionShapeOf(where, 1, in, /*any_widths=*/true);
    if (!core.ok()) return core.status();
    return in[0];
  }
  const size_t want = l.kind == LayerKind::kSubtract || l.kind == LayerKind::kDot ? 2 : 0;
  if (in.size() < 2 || (want != 0 && in.size() != want)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", what, " needs ", want != 0 ? "exactly 2" : "at least 2", " inputs, has ",
        in.size()));
  }
  if (l.kind == LayerKind::kDot && in.size() == 2 && DotsSequences(in)) {
    // Keras's batch_dot of rank-3 tensors: each example's matrix product,
    // contracting the axes named (1 the steps, 2 or -1 the features).
    const int ax = l.dot_axes[0] == -1 ? 2 : l.dot_axes[0];
    const int ay = l.dot_axes[1] == -1 ? 2 : l.dot_axes[1];
    const int kx = ax == 2 ? in[0].c : in[0].w, ky = ay == 2 ? in[1].c : in[1].w;
    if (l.normalize || kx != ky) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": Dot of sequences shaped ", ShapeText(in[0]), " and ",
                       ShapeText(in[1]), " along axes ", ax, " and ", ay,
                       l.normalize ? ": normalize on sequences is not supported"
                                   : " (the axes contracted must be as long)"));
    }
    return ActivationShape{1, ax == 2 ? in[0].w : in[0].c, ay == 2 ? in[1].w : in[1].c, false};
  }
  if (l.kind == LayerKind::kDot) {
    // Keras's Dot of rank-2 tensors ([batch, D]): the axes can only be the
    // features'. An image, or a sequence beside a flat input, is refused.
    for (int a : l.dot_axes) {
      if (a != 1 && a != -1) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": Dot along axis ", a, " of flat [features] inputs (only 1 or -1)"));
      }
    }
    for (const ActivationShape& s : in) {
      if (!(s.flat || (s.h == 1 && s.w == 1))) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": Dot of an input shaped ", ShapeText(s),
                         " is not supported (flat [features] inputs only: Flatten or pool first)"));
      }
    }
    if (in[0].c != in[1].c) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": Dot of inputs of ", in[0].c, " and ",
                                                     in[1].c, " features (they must be the same)"));
    }
    ActivationShape out = in[0];
    out.c = 1;
    return out;
  }
  if (ConcatenatesSteps(l, in)) {
    ActivationShape out = in[0];
    out.w = 0;
    for (const ActivationShape& s : in) {
      if (s.c != in[0].c) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": Concatenate along the steps of inputs shaped ", ShapeText(in[0]),
                         " and ", ShapeText(s), " (only the steps may differ)"));
      }
      out.w += s.w;
    }
    return out;
  }
  ActivationShape out = in[0];
  const bool spatial = !(in[0].flat || (in[0].h == 1 && in[0].w == 1));
  const bool steps = !in[0].flat && in[0].h == 1;  // [steps, features]: axis 2 is the last
  if (l.kind == LayerKind::kConcatenate && l.axis != -1 && l.axis != (spatial ? 3 : 1) &&
      !(steps && l.axis == 2)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": Concatenate axis ", l.axis,
                                                   " is not the last axis of its inputs (",
                                                   spatial ? 3 : 1, " or -1)"));
  }
  for (size_t k = 1; k < in.size(); ++k) {
    const bool concat = l.kind == LayerKind::kConcatenate;
    const bool fits = in[k].h == in[0].h && in[k].w == in[0].w && (concat || in[k].c == in[0].c);
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ", what, " of inputs shaped ", ShapeText(in[0]), " and ", ShapeText(in[k]),
          concat ? " (only the channels may differ)" : " (they must be the same)"));
    }
    if (concat) out.c += in[k].c;
  }
  return out;
}

// The output shape of node `l` (not a merge) over `x`.
absl::StatusOr<ActivationShape> LayerShape(const LayerSpec& l, const std::string& where,
                                           ActivationShape x) {
  // One case per layer kind (102 lines): a table would hold the same.
  auto misfit = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", what, " does not fit its input ", ShapeText(x)));
  };
  if (l.one_d && (x.flat || x.h != 1)) {
    return misfit("a 1-D layer (it reads [steps, features])");
  }
  switch (l.kind) {
    case LayerKind::kConv2D:
    case LayerKind::kDepthwiseConv2D:
    case LayerKind::kSeparableConv2D:
    case LayerKind::kMaxPool2D:
    case LayerKind::kAvgPool2D: {
      const bool pool = l.kind == LayerKind::kMaxPool2D || l.kind == LayerKind::kAvgPool2D;
      const bool depthwise = l.kind == LayerKind::kDepthwiseConv2D;
      const std::string what = absl::StrCat(
          pool ? "pool window " : "convolution kernel ", l.window_h, "x", l.window_w, " stride ",
          l.stride_h, "x", l.stride_w, pool ? "" : absl::StrCat(" dilation ", l.dilation_h, "x",
                                                               l.dilation_w));
      const int dh = pool ? 1 : l.dilation_h, dw = pool ? 1 : l.dilation_w;
      if (x.flat || l.window_h < 1 || l.window_w < 1 || l.stride_h < 1 || l.stride_w < 1 ||
          dh < 1 || dw < 1 || (!pool && !depthwise && l.units < 1) ||
          (!pool && l.kind != LayerKind::kConv2D && l.depth_multiplier < 1)) {
        return misfit(what);
      }
      // A dilated window spans (window - 1) * dilation + 1 cells.
      const int oh = OutputSize(x.h, (l.window_h - 1) * dh + 1, l.stride_h, l.padding);
      const int ow = OutputSize(x.w, (l.window_w - 1) * dw + 1, l.stride_w, l.padding);
      if (oh < 1 || ow < 1) return misfit(what);
      const int c = pool ? x.c : depthwise ? x.c * l.depth_multiplier : l.units;
      return ActivationShape{oh, ow, c, false};
    }
    case LayerKind::kLayerNorm: {
      // The last axis's index: 3 on an image, 2 on [steps, features] (which
      // is 1 x steps x features here, as a one-row image), 1 flat.
      const bool steps = !x.flat && x.h == 1;
      const int last = x.flat ? 1 : 3;
      if (l.axis != -1 && l.axis != last && !(steps && l.axis == 2)) {
        const char* allowed = x.flat ? "1" : steps ? "2 or 3" : "3";
        return misfit(absl::StrCat("LayerNormalization over axis ", l.axis,
                                   " (only the last axis, ", allowed, ", or -1)"));
      }
      return x;
    }
    case LayerKind::kGlobalAvgPool2D:
      if (x.flat) return misfit("GlobalAveragePooling2D");
      return ActivationShape{1, 1, x.c, true};
    case LayerKind::kFlatten:
      return ActivationShape{1, 1, x.h * x.w * x.c, true};
    case LayerKind::kEmbedding:
      // Ids [L] (a features vector) -> [L, output_dim].
      if (!x.flat && (x.h != 1 || x.w != 1)) return misfit("Embedding (it reads ids [length])");
      if (l.input_dim < 1 || l.units < 1) {
        return misfit(absl::StrCat("Embedding of input_dim ", l.input_dim, " and output_dim ",
                                   l.units));
      }
      if (l.input_length > 0 && l.input_length != x.c) {
        return misfit(absl::StrCat("Embedding of input_length ", l.input_length));
      }
      return ActivationShape{1, x.c, l.units, false};
    case LayerKind::kGlobalAvgPool1D:
      if (x.flat || x.h != 1) {
        return misfit("GlobalAveragePooling1D (it reads [steps, features])");
      }
      return ActivationShape{1, 1, x.c, true};
    case LayerKind::kLstm:
    case LayerKind::kGru: {
      const char* what = l.kind == LayerKind::kLstm ? "LSTM" : "GRU";
      if (x.flat || x.h != 1) return misfit(absl::StrCat(what, " (it reads [steps, features])"));
      if (l.units < 1) return misfit(absl::StrCat(what, " of ", l.units, " units"));
      if (l.return_sequences) return ActivationShape{1, x.w, l.units, false};
      return ActivationShape{1, 1, l.units, true};
    }
    case LayerKind::kDense:
      // Keras applies Dense to the last axis: on a flat or 1x1 input the
      // whole example, on [steps, features] or [H, W, C] each step or pixel.
      if (l.units < 1) return misfit(absl::StrCat("Dense of ", l.units, " units"));
      if (!x.flat && (x.h != 1 || x.w != 1)) return ActivationShape{x.h, x.w, l.units, false};
      return ActivationShape{1, 1, l.units, true};
    case LayerKind::kZeroPadding2D:
      if (x.flat || l.pad_top < 0 || l.pad_bottom < 0 || l.pad_left < 0 || l.pad_right < 0) {
        return misfit("ZeroPadding2D");
      }
      return ActivationShape{x.h + l.pad_top + l.pad_bottom, x.w + l.pad_left + l.pad_right, x.c,
                             false};
    case LayerKind::kGlobalMaxPool2D:
      if (x.flat) return misfit("GlobalMaxPooling2D");
      return ActivationShape{1, 1, x.c, true};
    case LayerKind::kReshape: {
      // One dimension may be -1: what the others leave.
      std::vector<int> t = l.target_shape;
      int64_t known = 1;
      int unknown = 0;
      for (int d : t) d == -1 ? ++unknown : known *= d;
      if (unknown == 1 && known > 0 && x.size() % known == 0) {
        for (int& d : t) {
          if (d == -1) d = static_cast<int>(x.size() / known);
        }
      }
      int64_t size = 1;
      for (int d : t) size *= d;
      if (t.empty() || t.size() > 3 || size != x.size() || size <= 0) {
        std::string dims;
        for (int d : l.target_shape) absl::StrAppend(&dims, dims.empty() ? "" : ",", d);
        return misfit(absl::StrCat("Reshape to [", dims, "]"));
      }
      if (t.size() == 1) return ActivationShape{1, 1, t[0], true};
      if (t.size() == 2) return ActivationShape{1, t[0], t[1], false};  // [steps, features]
      return ActivationShape{t[0], t[1], t[2], false};
    }
    default:  // BatchNormalization, Dropout, Activation, Rescaling: the same shape
      return x;
  }
}

}  // namespace

ActivationShape InputShapeOf(const ModelSpec& spec, int ref) {
  if (spec.inputs.empty()) {
    return ActivationShape{spec.input_height, spec.input_width, spec.input_channels, false};
  }
  const InputSpec& in = spec.inputs[ModelInputIndex(ref)];
  return ActivationShape{in.h, in.w, in.c, false};
}

absl::StatusOr<std::vector<int>> MaskSources(const ModelSpec& spec) {
  std::vector<int> source(spec.layers.size(), -1);
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    if (l.kind == LayerKind::kEmbedding && l.mask_zero) {
      source[i] = static_cast<int>(i);
      continue;
    }
    std::vector<int> from = l.inputs;
    if (from.empty() && i > 0) from = {static_cast<int>(i) - 1};
    if (l.kind == LayerKind::kAttention || l.kind == LayerKind::kMultiHeadAttention) {
      // The value's mask masks the keys; the query's is the output's. A
      // key's own mask is not read by Attention; MultiHeadAttention reads
      // it, so one of its own is refused.
      const int value = from[1] >= 0 ? source[from[1]] : -1;
      const int key = from.size() == 3 && from[2] >= 0 ? source[from[2]] : -1;
      if ((l.multi_head || l.kind == LayerKind::kMultiHeadAttention) && key >= 0 && key != value) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", l.name, ": its key carries the mask of Embedding '", spec.layers[key].name,
            "' and its value another: MultiHeadAttention reads both, which is not implemented"));
      }
      if (from[0] >= 0) source[i] = source[from[0]];
      continue;
    }
    if (IsMerge(l.kind) && l.kind != LayerKind::kConcatenate && l.kind != LayerKind::kDot) {
      // Add, Subtract, Multiply, Average: Keras ANDs their inputs' masks;
      // one mask (every masked input's the same Embedding's) goes on.
      int merged = -1;
      bool one = true;
      for (int j : from) {
        const int m = j >= 0 ? source[j] : -1;
        if (m < 0) continue;
        if (merged >= 0 && m != merged) one = false;
        merged = m;
      }
      if (!one) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", l.name,
                         " merges the masks of two Embeddings (mask_zero), which is not "
                         "implemented"));
      }
      source[i] = merged;
      continue;
    }
    for (size_t k = 0; k < from.size(); ++k) {
      const int j = from[k];
      if (j < 0 || source[j] < 0) continue;
      // An LSTM or GRU skips the masked steps; with return_sequences its
      // output carries the mask on, as Keras's RNN layer does.
      const bool recurrent = IsRecurrent(l.kind) && from.size() == 1;
      const bool passes = k == 0 && from.size() == 1 &&
                          (l.kind == LayerKind::kDense || l.kind == LayerKind::kActivation ||
                           l.kind == LayerKind::kDropout || l.kind == LayerKind::kLayerNorm ||
                           (recurrent && l.return_sequences));
      const bool ends = (l.kind == LayerKind::kGlobalAvgPool1D || recurrent) && from.size() == 1;
      if (!passes && !ends) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", l.name, " reads the mask of Embedding '", spec.layers[source[j]].name,
            "' (mask_zero): masks are taken only into GlobalAveragePooling1D, Attention, LSTM "
            "and GRU, through Dense, Activation, Dropout and LayerNormalization on the steps"));
      }
      if (passes) source[i] = source[j];
    }
  }
  return source;
}

absl::StatusOr<std::vector<ActivationShape>> NodeShapes(const ModelSpec& spec) {
  std::vector<ActivationShape> shapes;
  const int inputs = std::max<int>(1, static_cast<int>(spec.inputs.size()));
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    const std::string where = absl::StrCat("model \"", spec.name, "\": layer ", l.name);
    std::vector<ActivationShape> in;
    for (int j : l.inputs) {
      if (j < 0 && ModelInputIndex(j) >= inputs) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": reads input ", ModelInputIndex(j), " of ", inputs));
      }
      if (j >= static_cast<int>(i)) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": reads node ", j, ", which does not come before it (a cycle?)"));
      }
      in.push_back(j < 0 ? InputShapeOf(spec, j) : shapes[j]);
    }
    if (!IsMerge(l.kind) && in.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": reads ", in.size(), " inputs; only merging layers read several"));
    }
    absl::StatusOr<ActivationShape> out =
        IsMerge(l.kind) ? MergeShape(l, where, in) : LayerShape(l, where, in[0]);
    if (!out.ok()) return out.status();
    shapes.push_back(*out);
  }
  return shapes;
}

absl::StatusOr<ModelSpec> BuildModelSpec(std::string name, int h, int w, int c,
                                         int num_classes,
                                         std::vector<LayerSpec> layers,
                                         std::vector<InputSpec> inputs) {
  // Checks and lays out a model in one pass over its layers (shapes, variables,
  // offsets), each error naming the layer: one check after another.
  if (!inputs.empty()) {
    int64_t total = 0;
    for (const InputSpec& in : inputs) {
      if (in.h <= 0 || in.w <= 0 || in.c <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("model \"", name, "\": input ", in.name,
                                                       " has shape ", in.h, "x", in.w, "x",
                                                       in.c));
      }
      total += in.size();
    }
    if (total > (int64_t{1} << 26)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model \"", name, "\": inputs of ", total, " values per example"));
    }
    h = w = 1;
    c = static_cast<int>(total);
  }
  ModelSpec spec;
  spec.inputs = std::move(inputs);
  spec.name = std::move(name);
  spec.input_height = h;
  spec.input_width = w;
  spec.input_channels = c;
  spec.num_classes = num_classes;
  spec.layers = std::move(layers);
  if (h <= 0 || w <= 0 || c <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model \"", spec.name, "\": input shape ", h, "x", w, "x",
                     c, " is not positive"));
  }
  if (spec.layers.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model \"", spec.name, "\" has no layers"));
  }
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    std::vector<int>& in = spec.layers[i].inputs;
    if (in.empty()) in.push_back(static_cast<int>(i) - 1);  // -1: kModelInput
  }
  absl::StatusOr<std::vector<ActivationShape>> shapes = NodeShapes(spec);
  if (!shapes.ok()) return shapes.status();
  if (absl::StatusOr<std::vector<int>> masks = MaskSources(spec); !masks.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model \"", spec.name, "\": ", masks.status().message()));
  }
  if (const ActivationShape& out = shapes->back(); num_classes > 0 && out.size() != num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model \"", spec.name, "\": layer ", spec.layers.back().name, ": the output is ",
        ShapeText(out), " per example where the loss reads ", num_classes,
        " (a Dense on [steps, features] or an image maps each step or pixel: Flatten or pool "
        "before the head)"));
  }
  int64_t offset = 0;
  // A layer applied again (a second node of the same name) reuses its
  // variables, which must then have the same shapes.
  absl::Status shared_misfit;
  auto add = [&](const std::string& var, std::vector<int64_t> shape,
                 Initializer init, int64_t fan_in, int64_t fan_out,
                 VariableRole role = VariableRole::kTrainable,
                 float momentum = 0.0f) {
    for (const VariableSpec& v : spec.variables) {
      if (v.name != var) continue;
      if (v.shape != shape && shared_misfit.ok()) {
        shared_misfit = absl::InvalidArgumentError(absl::StrCat(
            "model \"", spec.name, "\": layer ", var.substr(0, var.rfind('/')),
            " is applied to inputs of different shapes: its variable ", var, " would be [",
            absl::StrJoin(shape, ","), "] and [", absl::StrJoin(v.shape, ","), "]"));
      }
      return;
    }
    VariableSpec v;
    v.name = var;
    v.shape = std::move(shape);
    v.initializer = init;
    v.fan_in = fan_in;
    v.fan_out = fan_out;
    v.role = role;
    v.momentum = momentum;
    v.size = 1;
    for (int64_t d : v.shape) v.size *= d;
    v.offset = offset;
    offset += v.size;
    spec.variables.push_back(std::move(v));
  };
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    const int j = l.inputs[0];
    const int in_c = j < 0 ? InputShapeOf(spec, j).c : (*shapes)[j].c;
    switch (l.kind) {
      case LayerKind::kConv2D: {
        const int64_t taps = static_cast<int64_t>(l.window_h) * l.window_w;
        add(l.name + "/kernel", ConvKernelShape(l, in_c), Initializer::GlorotUniform(), taps * in_c,
            taps * l.units);
        if (l.use_bias) add(l.name + "/bias", {l.units}, Initializer(), 0, 0);
        break;
      }
      case LayerKind::kDense:
        add(l.name + "/kernel", {in_c, l.units}, Initializer::GlorotUniform(), in_c, l.units);
        if (l.use_bias) add(l.name + "/bias", {l.units}, Initializer(), 0, 0);
        break;
      case LayerKind::kDepthwiseConv2D:
      case LayerKind::kSeparableConv2D: {
        // Keras's fans of a [kh, kw, in, m] kernel: kh*kw*in and kh*kw*m.
        const int64_t taps = static_cast<int64_t>(l.window_h) * l.window_w;
        const int m = l.depth_multiplier;
        add(l.name + "/depthwise_kernel", {l.window_h, l.window_w, in_c, m},
            Initializer::GlorotUniform(), taps * in_c, taps * m);
        const int out = l.kind == LayerKind::kSeparableConv2D ? l.units : in_c * m;
        if (l.kind == LayerKind::kSeparableConv2D) {
          add(l.name + "/pointwise_kernel", {1, 1, int64_t{in_c} * m, l.units},
              Initializer::GlorotUniform(), int64_t{in_c} * m, l.units);
        }
        if (l.use_bias) add(l.name + "/bias", {out}, Initializer(), 0, 0);
        break;
      }
      case LayerKind::kEmbedding:
        add(l.name + "/embeddings", {l.input_dim, l.units}, Initializer::RandomUniform(),
            l.input_dim, l.units);
        break;
      case LayerKind::kLayerNorm:
        if (l.scale) add(l.name + "/gamma", {in_c}, Initializer::Ones(), 0, 0);
        if (l.center) add(l.name + "/beta", {in_c}, Initializer(), 0, 0);
        break;
      case LayerKind::kLstm:
      case LayerKind::kGru: {
        // Keras's layout: the gates side by side in the columns (LSTM i, f,
        // c, o; GRU z, r, h); GRU's reset_after bias is [2, 3u], the
        // input's row, then the recurrent part's.
        const int64_t u = l.units, gates = (l.kind == LayerKind::kLstm ? 4 : 3) * u;
        add(l.name + "/kernel", {in_c, gates}, Initializer::GlorotUniform(), in_c, gates);
        Initializer orthogonal;
        orthogonal.kind = Initializer::Kind::kOrthogonal;
        add(l.name + "/recurrent_kernel", {u, gates}, orthogonal, u, gates);
        if (l.use_bias) {
          Initializer bias;
          if (l.kind == LayerKind::kLstm && l.unit_forget_bias) {
            bias.ones_begin = u;
            bias.ones_end = 2 * u;
          }
          const bool two = l.kind == LayerKind::kGru && l.reset_after;
          add(l.name + "/bias", two ? std::vector<int64_t>{2, gates} : std::vector<int64_t>{gates},
              bias, 0, 0);
        }
        break;
      }
      case LayerKind::kBatchNorm:
        if (l.scale) add(l.name + "/gamma", {in_c}, Initializer::Ones(), 0, 0);
        if (l.center) add(l.name + "/beta", {in_c}, Initializer(), 0, 0);
        add(l.name + "/moving_mean", {in_c}, Initializer(), 0, 0,
            VariableRole::kMovingMean, l.momentum);
        add(l.name + "/moving_variance", {in_c}, Initializer::Ones(), 0, 0,
            VariableRole::kMovingVariance, l.momentum);
        break;
      default:
        break;
    }
  }
  if (!shared_misfit.ok()) return shared_misfit;
  spec.num_parameters = offset;
  return spec;
}

LossSpec LossSpecOf(const ModelSpec& spec) {
  LossSpec loss;
  loss.kind = spec.loss;
  for (const OutputSpec& out : spec.outputs) {
    if (loss.num_groups == kMaxOutputs) break;  // the parser refuses more
    loss.groups[loss.num_groups++] = out.group;
  }
  return loss;
}

int TargetsOf(const ModelSpec& spec) {
  return TargetsPerExample(LossSpecOf(spec), spec.num_classes);
}

std::vector<std::string> KnownModels() { return {"cnn", "mlp"}; }

absl::StatusOr<ModelSpec> ModelByName(const std::string& name) {
  if (name == "cnn") {
    return BuildModelSpec(
        "cnn", 28, 28, 1, 10,
        {Conv("conv1", 32, 3), Pool("pool1", 2), Conv("conv2", 64, 3),
         Pool("pool2", 2), Flatten(), Dense("dense1", 64, Activation::kRelu),
         Dense("dense2", 10, Activation::kNone)});
  }
  if (name == "mlp") {
    return BuildModelSpec("mlp", 28, 28, 1, 10,
                          {Flatten(), Dense("dense1", 32, Activation::kRelu),
                           Dense("dense2", 10, Activation::kNone)});
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model \"", name,
                   "\"; known: ", absl::StrJoin(KnownModels(), ", ")));
}

namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;  // splitmix64's increment
constexpr double kPi = 3.14159265358979323846;

// The splitmix64 finalizer: a bijection on 64 bits whose every output bit
// depends on every input bit.
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The draws of one element of one row: draw c is splitmix64's output at
// counter c of a stream keyed by (seed, table, id, j). Nothing carries from
// one element to the next, so a row's elements can be made in any order.
class ElementDraws {
 public:
  ElementDraws(uint64_t row_key, int j)
      : key_(Mix64(row_key + (static_cast<uint64_t>(j) + 1) * kGolden)) {}

  // Uniform in [0, 1): the top 24 bits, so that it is exact in a float.
  double Uniform() { return static_cast<double>(Next() >> 40) * 0x1p-24; }

  // Standard normal by Box-Muller; 1 - u keeps the logarithm's argument in (0,
  // 1].
  double Normal() {
    const double u1 = 1.0 - Uniform();
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
  }

  // Redrawn beyond 2 stddev, as Keras's TruncatedNormal.
  double TruncatedNormal() {
    double z;
    do {
      z = Normal();
    } while (std::fabs(z) > 2.0);
    return z;
  }

 private:
  uint64_t Next() { return Mix64(key_ + ++counter_ * kGolden); }

  const uint64_t key_;
  uint64_t counter_ = 0;
};

// Keras's truncated normal of VarianceScaling divides the stddev by the
// stddev of a unit normal truncated at 2 (as InitialParameters).
constexpr double kTruncatedStddev = 0.87962566103423978;

}  // namespace

void InitialRow(const Initializer& init, int64_t fan_in, int64_t fan_out, uint64_t seed, int table,
                int64_t id, int width, float* out) {
  using Kind = Initializer::Kind;
  if (init.kind == Kind::kZeros || init.kind == Kind::kOnes || init.kind == Kind::kConstant) {
    const float value = init.kind == Kind::kZeros  ? 0.0f
                        : init.kind == Kind::kOnes ? 1.0f
                                                   : static_cast<float>(init.value);
    std::fill(out, out + width, value);
    return;
  }
  // Each of seed, table and id is mixed in by its own bijection, so that no
  // two rows of a run share a key unless 64-bit mixes collide.
  const uint64_t row_key =
      Mix64(Mix64(Mix64(seed) ^ static_cast<uint64_t>(table)) ^ static_cast<uint64_t>(id));

  // What to draw, as InitialParameters decides it for a dense variable.
  enum class Draw { kUniform, kNormal, kTruncatedNormal };
  Draw draw = Draw::kUniform;
  double lo = 0.0, hi = 0.0;        // kUniform
  double mean = 0.0, stddev = 0.0;  // the normals
  switch (init.kind) {
    case Kind::kRandomUniform:
      lo = init.minval;
      hi = init.maxval;
      break;
    case Kind::kRandomNormal:
      draw = Draw::kNormal;
      mean = init.mean;
      stddev = init.stddev;
      break;
    case Kind::kTruncatedNormal:
      draw = Draw::kTruncatedNormal;
      mean = init.mean;
      stddev = init.stddev;
      break;
    case Kind::kVarianceScaling: {
      // Keras: n = fan_in, fan_out or their mean (at least 1); uniform on
      // +-sqrt(3 scale / n), a normal of stddev sqrt(scale / n), or that
      // truncated at 2 stddev after Keras's 0.8796 correction.
      double n = init.mode == Initializer::Mode::kFanIn    ? static_cast<double>(fan_in)
                 : init.mode == Initializer::Mode::kFanOut ? static_cast<double>(fan_out)
                                                           : (fan_in + fan_out) / 2.0;
      if (n < 1.0) n = 1.0;
      const double variance = init.scale / n;
      switch (init.distribution) {
        case Initializer::Distribution::kUniform:
          hi = std::sqrt(3.0 * init.scale / n);
          lo = -hi;
          break;
        case Initializer::Distribution::kTruncatedNormal:
          draw = Draw::kTruncatedNormal;
          stddev = std::sqrt(variance) / kTruncatedStddev;
          break;
        case Initializer::Distribution::kUntruncatedNormal:
          draw = Draw::kNormal;
          stddev = std::sqrt(variance);
          break;
      }
      break;
    }
    default:
      break;
  }
  for (int j = 0; j < width; ++j) {
    ElementDraws draws(row_key, j);
    double x = 0.0;
    switch (draw) {
      case Draw::kUniform:
        x = lo + (hi - lo) * draws.Uniform();
        break;
      case Draw::kNormal:
        x = mean + stddev * draws.Normal();
        break;
      case Draw::kTruncatedNormal:
        x = mean + stddev * draws.TruncatedNormal();
        break;
    }
    out[j] = static_cast<float>(x);
  }
}

namespace {

// Keras's Orthogonal: variable `v` as [rows, columns] (the last axis the
// columns); a normal draw a [max, min] of the two, its QR factor q with R's
// diagonal made positive (modified Gram-Schmidt on a's columns gives just
// that), transposed when there are fewer rows; times `gain`.
void Orthogonal(const VariableSpec& v, double gain, std::mt19937_64& rng, float* out) {
  const int64_t cols = v.shape.empty() ? 1 : v.shape.back();
  const int64_t rows = cols > 0 ? v.size / cols : 0;
  const int64_t tall = std::max(rows, cols), narrow = std::min(rows, cols);
  std::vector<double> q(static_cast<size_t>(tall * narrow));  // column-major [tall, narrow]
  for (double& x : q) x = StandardNormal(rng);
  for (int64_t j = 0; j < narrow; ++j) {
    double* qj = q.data() + j * tall;
    for (int64_t k = 0; k < j; ++k) {
      const double* qk = q.data() + k * tall;
      double dot = 0.0;
      for (int64_t i = 0; i < tall; ++i) dot += qk[i] * qj[i];
      for (int64_t i = 0; i < tall; ++i) qj[i] -= dot * qk[i];
    }
    double norm = 0.0;
    for (int64_t i = 0; i < tall; ++i) norm += qj[i] * qj[i];
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < tall; ++i) qj[i] /= norm;  // a normal draw is never degenerate
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double x = rows >= cols ? q[c * tall + r] : q[r * tall + c];
      out[r * cols + c] = static_cast<float>(gain * x);
    }
  }
}

}  // namespace

std::vector<float> InitialParameters(const ModelSpec& spec, uint64_t seed) {
  using Kind = Initializer::Kind;
  std::vector<float> params(spec.num_parameters, 0.0f);
  int table = 0;  // Embedding tables so far
  for (const VariableSpec& v : spec.variables) {
    const Initializer& init = v.initializer;
    float* out = params.data() + v.offset;
    bool embedding = false;
    for (const LayerSpec& l : spec.layers) {
      embedding |= l.kind == LayerKind::kEmbedding && v.name == l.name + "/embeddings";
    }
    if (embedding) {
      const int width = static_cast<int>(v.shape.back());
      for (int64_t id = 0; id < v.size / width; ++id) {
        InitialRow(init, v.fan_in, v.fan_out, seed, table, id, width, out + id * width);
      }
      ++table;
      continue;
    }
    if (init.kind == Kind::kZeros || init.kind == Kind::kOnes ||
        init.kind == Kind::kConstant) {
      const float value = init.kind == Kind::kZeros  ? 0.0f
                          : init.kind == Kind::kOnes ? 1.0f
                                                     : static_cast<float>(init.value);
      std::fill(out, out + v.size, value);
      continue;
    }
    // FNV-1a of the name, mixed with the seed: one stream per variable.
    uint64_t hash = 1469598103934665603ull ^ seed;
    for (char ch : v.name) {
      hash = (hash ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
    }
    std::mt19937_64 rng(hash);
    auto uniform = [&](double lo, double hi) {
      std::uniform_real_distribution<double> dist(lo, hi);
      for (int64_t i = 0; i < v.size; ++i) out[i] = static_cast<float>(dist(rng));
    };
    auto normal = [&](double mean, double stddev, bool truncated) {
      for (int64_t i = 0; i < v.size; ++i) {
        double z;
        do {
          z = StandardNormal(rng);
        } while (truncated && std::fabs(z) > 2.0);
        out[i] = static_cast<float>(mean + stddev * z);
      }
    };
    switch (init.kind) {
      case Kind::kOrthogonal:
        Orthogonal(v, init.scale, rng, out);
        break;
      case Kind::kRandomUniform:
        uniform(init.minval, init.maxval);
        break;
      case Kind::kRandomNormal:
        normal(init.mean, init.stddev, /*truncated=*/false);
        break;
      case Kind::kTruncatedNormal:
        normal(init.mean, init.stddev, /*truncated=*/true);
        break;
      case Kind::kVarianceScaling: {
        // Keras: n = fan_in, fan_out or their mean (at least 1);
        // uniform on +-sqrt(3 scale / n), a normal of stddev sqrt(scale / n),
        // truncated at 2 stddev after the 0.8796 correction Keras applies.
        const int64_t fans = v.fan_in + v.fan_out;
        double n = init.mode == Initializer::Mode::kFanIn    ? v.fan_in
                   : init.mode == Initializer::Mode::kFanOut ? v.fan_out
                                                             : fans / 2.0;
        if (n < 1.0) n = 1.0;
        // 3 * scale / n in one division: for Glorot exactly today's
        // sqrt(6 / (fan_in + fan_out)), so old runs keep their numbers.
        const double variance = init.scale / n;
        switch (init.distribution) {
          case Initializer::Distribution::kUniform: {
            const double limit = std::sqrt(3.0 * init.scale / n);
            uniform(-limit, limit);
            break;
          }
          case Initializer::Distribution::kTruncatedNormal:
            normal(0.0, std::sqrt(variance) / 0.87962566103423978, true);
            break;
          case Initializer::Distribution::kUntruncatedNormal:
            normal(0.0, std::sqrt(variance), false);
            break;
        }
        break;
      }
      default:
        break;
    }
  }
  for (const VariableSpec& v : spec.variables) {
    const Initializer& init = v.initializer;
    if (init.ones_end > init.ones_begin && init.ones_end <= v.size) {
      std::fill(params.begin() + v.offset + init.ones_begin,
                params.begin() + v.offset + init.ones_end, 1.0f);
    }
  }
  return params;
}

std::vector<int64_t> ConvKernelShape(const LayerSpec& l, int64_t in_channels) {
  if (l.one_d) return {l.window_w, in_channels, l.units};
  return {l.window_h, l.window_w, in_channels, l.units};
}

absl::StatusOr<int64_t> VariableOffset(const ModelSpec& spec, const std::string& where,
                                       const std::string& name,
                                       const std::vector<int64_t>& shape) {
  for (const VariableSpec& v : spec.variables) {
    if (v.name != name) continue;
    if (v.shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": variable ", name, " has shape [", absl::StrJoin(v.shape, ","),
          "], the layers need [", absl::StrJoin(shape, ","), "]"));
    }
    if (v.offset < 0 || v.offset + v.size > spec.num_parameters) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": variable ", name, " at offset ", v.offset, " size ", v.size,
                       " lies outside the ", spec.num_parameters, " parameters"));
    }
    return v.offset;
  }
  return absl::InvalidArgumentError(absl::StrCat(where, ": variable ", name, " is missing"));
}

}  // namespace pscluster
