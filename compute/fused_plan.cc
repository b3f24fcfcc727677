#include "compute/fused_plan.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// The activations between layers: h x w x c per example (NHWC); after a
// Flatten, `flat` and h * w * c features.
struct ActShape {
  int h = 0, w = 0, c = 0;
  bool flat = false;
};

absl::Status CheckInputAndClasses(const ModelSpec& spec, const std::string& where) {
  if (spec.input_height <= 0 || spec.input_width <= 0 ||
      spec.input_channels <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": input shape ", spec.input_height, "x", spec.input_width, "x",
        spec.input_channels, " is not positive"));
  }
  if (spec.num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": num_classes ", spec.num_classes, " is not positive"));
  }
  if (!spec.inputs.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(where, ": not on the fast path (the model has several inputs)"));
  }
  for (const VariableSpec& v : spec.variables) {
    if (v.l1 != 0.0f || v.l2 != 0.0f) {
      return absl::UnimplementedError(absl::StrCat(
          where, ": not on the fast path (variable ", v.name, " has a regularizer)"));
    }
  }
  if (!spec.outputs.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(where, ": not on the fast path (the model has several outputs)"));
  }
  if (spec.loss != LossKind::kSparseCategoricalCrossentropy) {
    return absl::UnimplementedError(absl::StrCat(
        where, ": not on the fast path (it trains on sparse categorical cross-entropy only)"));
  }
  return absl::OkStatus();
}

// Whether the fused kernels run `l` (`last`: the model's last layer). What
// they do not goes to the graph engine (compute/graph_cpu_engine.h on
// the CPU).
bool FusedEngineCovers(const LayerSpec& l, bool last) {
  const bool plain_conv = l.kind == LayerKind::kConv2D && l.window_h == l.window_w &&
                          l.stride_h == 1 && l.stride_w == 1 && l.padding == Padding::kValid &&
                          l.dilation_h == 1 && l.dilation_w == 1;
  const bool plain_pool = l.kind == LayerKind::kMaxPool2D && l.window_h == l.window_w &&
                          l.stride_h == l.window_h && l.stride_w == l.window_w &&
                          l.padding == Padding::kValid;
  const bool plain_act = l.activation == Activation::kNone ||
                         l.activation == Activation::kRelu ||
                         (l.activation == Activation::kSoftmax && last &&
                          l.kind == LayerKind::kDense);
  return (plain_conv || plain_pool || l.kind == LayerKind::kFlatten ||
          l.kind == LayerKind::kDense) &&
         plain_act && l.use_bias;
}

// Sets op's kernel_offset and bias_offset: where layer `l`'s kernel (of
// `kernel_shape`) and bias (of l.units) lie in the flat parameter vector.
absl::Status FindKernelAndBias(const ModelSpec& spec, const std::string& where,
                               const LayerSpec& l, const std::vector<int64_t>& kernel_shape,
                               FusedLayer* op) {
  absl::StatusOr<int64_t> kernel = VariableOffset(spec, where, l.name + "/kernel", kernel_shape);
  if (!kernel.ok()) return kernel.status();
  op->kernel_offset = *kernel;
  absl::StatusOr<int64_t> bias = VariableOffset(spec, where, l.name + "/bias", {l.units});
  if (!bias.ok()) return bias.status();
  op->bias_offset = *bias;
  return absl::OkStatus();
}

// The Plan* functions fill `op` for layer `l` (named `layer` in errors) on
// the activations `*act`, and advance `*act` to the layer's output.
absl::Status PlanConv2D(const ModelSpec& spec, const std::string& where, const LayerSpec& l,
                        const std::string& layer, ActShape* act, FusedLayer* op) {
  const int h = act->h, w = act->w, c = act->c;
  const int k = l.window_h;
  if (act->flat || k < 1 || k > h || k > w || l.units < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(layer, ": Conv2D kernel ", k, " with ", l.units,
                     " filters does not fit its ", h, "x", w, "x", c,
                     " input", act->flat ? " (after Flatten)" : ""));
  }
  op->conv = {0, h, w, c, k, l.units};
  if (absl::Status st = FindKernelAndBias(spec, where, l, ConvKernelShape(l, c), op); !st.ok()) {
    return st;
  }
  act->h = op->conv.out_h();
  act->w = op->conv.out_w();
  act->c = l.units;
  return absl::OkStatus();
}

absl::Status PlanMaxPool2D(const LayerSpec& l, const std::string& layer, ActShape* act,
                           FusedLayer* op) {
  const int h = act->h, w = act->w, c = act->c;
  const int p = l.window_h;
  if (act->flat || p < 1 || p > h || p > w || op->relu) {
    return absl::InvalidArgumentError(absl::StrCat(
        layer, ": MaxPool2D window ", p, " does not fit its ", h, "x", w,
        " input", act->flat ? " (after Flatten)" : "",
        op->relu ? " or has an activation" : ""));
  }
  op->pool = {0, h, w, c, p};
  act->h = op->pool.out_h();
  act->w = op->pool.out_w();
  return absl::OkStatus();
}

absl::Status PlanDense(const ModelSpec& spec, const std::string& where, const LayerSpec& l,
                       const std::string& layer, ActShape* act, FusedLayer* op) {
  if (!act->flat) {  // Keras applies it to the last axis of each step or pixel
    return absl::UnimplementedError(absl::StrCat(layer, ": not on the fast path (a Dense on a ",
                                                 act->h, "x", act->w, "x", act->c, " activation)"));
  }
  if (l.units < 1) {
    return absl::InvalidArgumentError(absl::StrCat(layer, ": Dense with ", l.units, " units"));
  }
  const int features = act->h * act->w * act->c;
  op->dense = {0, features, l.units};
  if (absl::Status st = FindKernelAndBias(spec, where, l, {features, l.units}, op); !st.ok()) {
    return st;
  }
  act->h = act->w = 1;
  act->c = l.units;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<FusedLayer>> PlanFusedLayers(const ModelSpec& spec) {
  const std::string where = absl::StrCat("model \"", spec.name, "\"");
  if (absl::Status s = CheckInputAndClasses(spec, where); !s.ok()) return s;
  std::vector<FusedLayer> ops;
  ActShape act;
  act.h = spec.input_height, act.w = spec.input_width, act.c = spec.input_channels;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    const std::string layer = absl::StrCat(where, ": layer ", l.name);
    const bool chained = l.inputs.empty() || l.inputs == std::vector<int>{static_cast<int>(i) - 1};
    if (!chained) {
      return absl::UnimplementedError(
          absl::StrCat(layer, ": not on the fast path (it runs chains of layers only)"));
    }
    if (!FusedEngineCovers(l, i + 1 == spec.layers.size())) {
      return absl::UnimplementedError(absl::StrCat(
          layer, ": not on the fast path (it runs Conv2D with square kernels, stride 1 and "
                 "valid padding, MaxPooling2D with stride = window, Flatten and Dense, with "
                 "relu or linear activations and biases)"));
    }
    FusedLayer op;
    op.kind = l.kind;
    op.relu = l.activation == Activation::kRelu;
    op.in_size = static_cast<int64_t>(act.h) * act.w * act.c;
    absl::Status st;
    switch (l.kind) {
      case LayerKind::kConv2D:
        st = PlanConv2D(spec, where, l, layer, &act, &op);
        break;
      case LayerKind::kMaxPool2D:
        st = PlanMaxPool2D(l, layer, &act, &op);
        break;
      case LayerKind::kFlatten:
        act.flat = true;
        continue;  // a no-op on NHWC
      case LayerKind::kDense:
        st = PlanDense(spec, where, l, layer, &act, &op);
        break;
      default:  // FusedEngineCovers lets no other kind through
        return absl::InternalError(absl::StrCat(layer, ": passed the fast-path check"));
    }
    if (!st.ok()) return st;
    op.out_size = static_cast<int64_t>(act.h) * act.w * act.c;
    ops.push_back(op);
  }
  if (ops.empty() || ops.back().kind != LayerKind::kDense ||
      ops.back().dense.out != spec.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": the last layer must be a Dense layer with num_classes (",
        spec.num_classes, ") units"));
  }
  bool params_below = false;
  for (FusedLayer& op : ops) {
    op.needs_input_grad = params_below;
    params_below |= op.kind != LayerKind::kMaxPool2D;
  }
  return ops;
}

}  // namespace pscluster
