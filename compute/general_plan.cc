#include "compute/general_plan.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t DropoutKey(uint64_t seed, uint64_t step_key, size_t op) {
  return Mix(Mix(seed, step_key), op);
}

absl::StatusOr<std::vector<GeneralOp>> PlanGeneralOps(const ModelSpec& spec) {
  const std::string where = absl::StrCat("model \"", spec.name, "\"");
  if (spec.num_classes < 1 || spec.num_classes > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": num_classes ", spec.num_classes, " is not in [1, 256]"));
  }
  auto find = [&](const std::string& name, std::vector<int64_t> shape,
                  int64_t* offset) -> absl::Status {
    absl::StatusOr<int64_t> at = VariableOffset(spec, where, name, shape);
    if (at.ok()) *offset = *at;
    return at.status();
  };
  auto fn = [](Activation a, bool* has, kernels::ActivationFn* f) {
    *has = a == Activation::kRelu || a == Activation::kSigmoid || a == Activation::kTanh;
    *f = a == Activation::kSigmoid ? kernels::ActivationFn::kSigmoid
         : a == Activation::kTanh  ? kernels::ActivationFn::kTanh
                                   : kernels::ActivationFn::kRelu;
  };
  std::vector<GeneralOp> ops;
  int h = spec.input_height, w = spec.input_width, c = spec.input_channels;
  if (h < 1 || w < 1 || c < 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": input shape is not positive"));
  }
  bool params_below = false;
  for (const LayerSpec& l : spec.layers) {
    const std::string layer = absl::StrCat(where, ": layer ", l.name);
    GeneralOp op;
    op.kind = l.kind;
    op.name = l.name;
    op.in_size = int64_t{h} * w * c;
    op.needs_input_grad = params_below;
    absl::Status st;
    switch (l.kind) {
      case LayerKind::kFlatten:
        c = h * w * c;
        h = w = 1;
        continue;
      case LayerKind::kConv2D:
      case LayerKind::kMaxPool2D:
      case LayerKind::kAvgPool2D: {
        kernels::WindowShape& s = op.win;
        s.in_h = h, s.in_w = w, s.in_c = c;
        s.window_h = l.window_h, s.window_w = l.window_w;
        s.stride_h = l.stride_h, s.stride_w = l.stride_w;
        const bool same = l.padding == Padding::kSame;
        kernels::KerasWindow(h, l.window_h, l.stride_h, same, &s.out_h, &s.pad_top);
        kernels::KerasWindow(w, l.window_w, l.stride_w, same, &s.out_w, &s.pad_left);
        if (s.out_h < 1 || s.out_w < 1 || l.stride_h < 1 || l.stride_w < 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(layer, ": window ", l.window_h, "x", l.window_w,
                           " does not fit its ", h, "x", w, "x", c, " input"));
        }
        s.out_c = l.kind == LayerKind::kConv2D ? l.units : c;
        if (l.kind == LayerKind::kConv2D) {
          st = find(l.name + "/kernel", {l.window_h, l.window_w, c, l.units}, &op.kernel);
          if (st.ok() && l.use_bias) st = find(l.name + "/bias", {l.units}, &op.bias);
          fn(l.activation, &op.has_act, &op.act);
          op.columns_per_example = int64_t{s.out_h} * s.out_w * s.patch_size();
          params_below = true;
        }
        h = s.out_h, w = s.out_w, c = s.out_c;
        break;
      }
      case LayerKind::kGlobalAvgPool2D:
        op.channels = c;
        op.pixels = h * w;
        h = w = 1;
        break;
      case LayerKind::kDense:
        if (h != 1 || w != 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(layer, ": Dense needs a Flatten before it"));
        }
        op.dense_in = c;
        op.dense_out = l.units;
        st = find(l.name + "/kernel", {c, l.units}, &op.kernel);
        if (st.ok() && l.use_bias) st = find(l.name + "/bias", {l.units}, &op.bias);
        fn(l.activation, &op.has_act, &op.act);
        c = l.units;
        params_below = true;
        break;
      case LayerKind::kDropout:
        op.rate = l.rate;
        break;
      case LayerKind::kActivation:
        fn(l.activation, &op.has_act, &op.act);
        break;
      case LayerKind::kBatchNorm:
        op.channels = c;
        op.pixels = h * w;
        op.epsilon = l.epsilon;
        if (l.scale) st = find(l.name + "/gamma", {c}, &op.gamma);
        if (st.ok() && l.center) st = find(l.name + "/beta", {c}, &op.beta);
        if (st.ok()) st = find(l.name + "/moving_mean", {c}, &op.mean);
        if (st.ok()) st = find(l.name + "/moving_variance", {c}, &op.var);
        params_below = true;
        break;
    }
    if (!st.ok()) return st;
    op.out_size = int64_t{h} * w * c;
    ops.push_back(std::move(op));
  }
  if (ops.empty() || h != 1 || w != 1 || c != spec.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": the model must end in num_classes (", spec.num_classes, ") logits"));
  }
  return ops;
}

}  // namespace pscluster
