#include "compute/fast_plan.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace pscluster {

absl::StatusOr<std::vector<FastLayer>> PlanFastLayers(const ModelSpec& spec) {
  const std::string where = absl::StrCat("model \"", spec.name, "\"");
  if (spec.input_height <= 0 || spec.input_width <= 0 ||
      spec.input_channels <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": input shape ", spec.input_height, "x", spec.input_width, "x",
        spec.input_channels, " is not positive"));
  }
  if (spec.num_classes < 1 || spec.num_classes > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": num_classes ", spec.num_classes,
                     " is not in [1, 256] (labels are bytes)"));
  }
  auto find = [&](const std::string& name, std::vector<int64_t> shape,
                  int64_t* offset) -> absl::Status {
    absl::StatusOr<int64_t> at = VariableOffset(spec, where, name, shape);
    if (at.ok()) *offset = *at;
    return at.status();
  };

  std::vector<FastLayer> ops;
  int h = spec.input_height, w = spec.input_width, c = spec.input_channels;
  bool flat = false;  // after Flatten: features = h * w * c
  for (const LayerSpec& l : spec.layers) {
    const std::string layer = absl::StrCat(where, ": layer ", l.name);
    // What the fast kernels do not run goes to the general path
    // (compute/general_cpu_network.h on the CPU).
    const bool plain_conv = l.kind == LayerKind::kConv2D && l.window_h == l.window_w &&
                            l.stride_h == 1 && l.stride_w == 1 && l.padding == Padding::kValid;
    const bool plain_pool = l.kind == LayerKind::kMaxPool2D && l.window_h == l.window_w &&
                            l.stride_h == l.window_h && l.stride_w == l.window_w &&
                            l.padding == Padding::kValid;
    const bool plain_act = l.activation == Activation::kNone ||
                           l.activation == Activation::kRelu ||
                           (l.activation == Activation::kSoftmax && &l == &spec.layers.back() &&
                            l.kind == LayerKind::kDense);
    const bool fast = (plain_conv || plain_pool || l.kind == LayerKind::kFlatten ||
                       l.kind == LayerKind::kDense) &&
                      plain_act && l.use_bias;
    if (!fast) {
      return absl::UnimplementedError(absl::StrCat(
          layer, ": not on the fast path (it runs Conv2D with square kernels, stride 1 and "
                 "valid padding, MaxPooling2D with stride = window, Flatten and Dense, with "
                 "relu or linear activations and biases)"));
    }
    FastLayer op;
    op.kind = l.kind;
    op.relu = l.activation == Activation::kRelu;
    op.in_size = static_cast<int64_t>(h) * w * c;
    switch (l.kind) {
      case LayerKind::kConv2D: {
        const int k = l.window_h;
        if (flat || k < 1 || k > h || k > w || l.units < 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(layer, ": Conv2D kernel ", k, " with ", l.units,
                           " filters does not fit its ", h, "x", w, "x", c,
                           " input", flat ? " (after Flatten)" : ""));
        }
        op.conv = {0, h, w, c, k, l.units};
        absl::Status st =
            find(l.name + "/kernel", {k, k, c, l.units}, &op.kernel_offset);
        if (st.ok()) st = find(l.name + "/bias", {l.units}, &op.bias_offset);
        if (!st.ok()) return st;
        h = op.conv.out_h();
        w = op.conv.out_w();
        c = l.units;
        break;
      }
      case LayerKind::kMaxPool2D: {
        const int p = l.window_h;
        if (flat || p < 1 || p > h || p > w || op.relu) {
          return absl::InvalidArgumentError(absl::StrCat(
              layer, ": MaxPool2D window ", p, " does not fit its ", h, "x", w,
              " input", flat ? " (after Flatten)" : "",
              op.relu ? " or has an activation" : ""));
        }
        op.pool = {0, h, w, c, p};
        h = op.pool.out_h();
        w = op.pool.out_w();
        break;
      }
      case LayerKind::kFlatten:
        flat = true;
        continue;  // a no-op on NHWC
      case LayerKind::kDense: {
        if (!flat || l.units < 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(layer, ": Dense with ", l.units,
                           " units needs a Flatten before it"));
        }
        const int features = h * w * c;
        op.dense = {0, features, l.units};
        absl::Status st =
            find(l.name + "/kernel", {features, l.units}, &op.kernel_offset);
        if (st.ok()) st = find(l.name + "/bias", {l.units}, &op.bias_offset);
        if (!st.ok()) return st;
        h = w = 1;
        c = l.units;
        break;
      }
      case LayerKind::kAvgPool2D:
      case LayerKind::kGlobalAvgPool2D:
      case LayerKind::kDropout:
      case LayerKind::kActivation:
      case LayerKind::kBatchNorm:
        return absl::InternalError(absl::StrCat(layer, ": passed the fast-path check"));
    }
    op.out_size = static_cast<int64_t>(h) * w * c;
    ops.push_back(op);
  }
  if (ops.empty() || ops.back().kind != LayerKind::kDense ||
      ops.back().dense.out != spec.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": the last layer must be a Dense layer with num_classes (",
        spec.num_classes, ") units"));
  }
  bool params_below = false;
  for (FastLayer& op : ops) {
    op.needs_input_grad = params_below;
    params_below |= op.kind != LayerKind::kMaxPool2D;
  }
  return ops;
}

GradientLayout PlanGradientLayout(const ModelSpec& spec,
                                  const std::vector<std::vector<int64_t>>& variable_offsets) {
  std::map<int64_t, int64_t> size_at;
  for (const VariableSpec& v : spec.variables) size_at[v.offset] = v.size;
  GradientLayout layout;
  int64_t below = 0;  // the end of the variables of the ops so far
  for (const std::vector<int64_t>& offsets : variable_offsets) {
    layout.final_from.push_back(below);
    std::vector<std::pair<int64_t, int64_t>>& ranges = layout.ranges.emplace_back();
    for (int64_t offset : offsets) {
      if (offset < 0) continue;
      ranges.emplace_back(offset, offset + size_at[offset]);
      below = std::max(below, ranges.back().second);
    }
    layout.params_to.push_back(below);
  }
  return layout;
}

}  // namespace pscluster
