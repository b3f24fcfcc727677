#include "compute/graph_plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
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

bool HasVariables(const GraphOp& op) {
  return op.kind == LayerKind::kConv2D || op.kind == LayerKind::kDense ||
         op.kind == LayerKind::kBatchNorm || op.kind == LayerKind::kDepthwiseConv2D ||
         op.kind == LayerKind::kLayerNorm || op.kind == LayerKind::kEmbedding ||
         IsRecurrent(op.kind);
}

bool HasPenalties(const std::vector<GraphOp>& ops) {
  for (const GraphOp& op : ops) {
    if (!op.penalties.empty()) return true;
  }
  return false;
}

namespace {

// The first variable of an op with variables: which variables it uses.
int64_t FirstVariable(const GraphOp& op) {
  int64_t first = -1;
  for (int64_t at : {op.kernel, op.recurrent_kernel, op.bias, op.gamma, op.beta, op.mean, op.var}) {
    if (at >= 0 && (first < 0 || at < first)) first = at;
  }
  return first;
}

// Marks which gradients backward needs and which ops share variables.
void PlanBackward(std::vector<GraphOp>* ops) {
  // Ops with variables by their variables (a SeparableConv2D's two ops
  // have one name and different variables; a shared layer's uses the same).
  std::map<int64_t, std::vector<int>> uses;
  for (size_t i = 0; i < ops->size(); ++i) {
    GraphOp& op = (*ops)[i];
    op.input_wants_grad.clear();
    op.needs_input_grad = false;
    for (int j : op.inputs) {
      // No gradient reaches an Embedding's ids (Keras casts them to ints).
      const bool wants = j >= 0 && (*ops)[j].wants_grad && op.kind != LayerKind::kEmbedding;
      op.input_wants_grad.push_back(wants);
      op.needs_input_grad |= wants;
    }
    op.wants_grad = HasVariables(op) || op.needs_input_grad;
    if (HasVariables(op)) uses[FirstVariable(op)].push_back(static_cast<int>(i));
  }
  for (const auto& [first, at] : uses) {
    for (size_t u = 0; u < at.size(); ++u) {
      (*ops)[at[u]].owns_variables = u == 0;
      (*ops)[at[u]].accumulate_params = u + 1 < at.size();
    }
  }
}

// Gives each wanted gradient a slot, reusing a slot once the op whose
// output gradient it held has run its backward (reverse op order).
void PlanGradSlots(std::vector<GraphOp>* ops) {
  std::vector<GraphOp>& o = *ops;
  std::set<int> free;
  int slots = 0;
  auto take = [&]() {
    if (free.empty()) return slots++;
    const int s = *free.begin();
    free.erase(free.begin());
    return s;
  };
  for (GraphOp& op : o) op.grad_slot = -1;
  if (o.empty()) return;
  o.back().grad_slot = take();  // the loss's gradient
  for (int i = static_cast<int>(o.size()) - 1; i >= 0; --i) {
    if (o[i].grad_slot < 0) continue;  // its backward does not run
    for (size_t k = 0; k < o[i].inputs.size(); ++k) {
      const int j = o[i].inputs[k];
      if (o[i].input_wants_grad[k] && o[j].grad_slot < 0) o[j].grad_slot = take();
    }
    free.insert(o[i].grad_slot);
  }
}

// Gives each variable's regularizer to the op that owns the variable.
void PlanPenalties(const ModelSpec& spec, std::vector<GraphOp>* ops) {
  std::map<int64_t, const VariableSpec*> by_offset;
  for (const VariableSpec& v : spec.variables) by_offset[v.offset] = &v;
  for (GraphOp& op : *ops) {
    if (!op.owns_variables) continue;
    for (int64_t at : {op.kernel, op.recurrent_kernel, op.bias, op.gamma, op.beta}) {
      auto it = by_offset.find(at);
      if (at < 0 || it == by_offset.end()) continue;
      const VariableSpec& v = *it->second;
      if (v.l1 != 0.0f || v.l2 != 0.0f) op.penalties.push_back({v.offset, v.size, v.l1, v.l2});
    }
  }
}

}  // namespace

std::vector<int64_t> GradSlotSizes(const std::vector<GraphOp>& ops) {
  std::vector<int64_t> sizes;
  for (const GraphOp& op : ops) {
    if (op.grad_slot < 0) continue;
    if (op.grad_slot >= static_cast<int>(sizes.size())) sizes.resize(op.grad_slot + 1, 0);
    sizes[op.grad_slot] = std::max(sizes[op.grad_slot], op.out_size);
  }
  return sizes;
}

namespace {

// Keras's activation as the kernels' (activation.h): whether the layer
// applies one after its own work, and which.
void KernelActivation(Activation a, bool* has, kernels::ActivationFn* f) {
  using F = kernels::ActivationFn;
  *has = a != Activation::kNone && a != Activation::kSoftmax;
  switch (a) {
    case Activation::kSigmoid: *f = F::kSigmoid; break;
    case Activation::kTanh: *f = F::kTanh; break;
    case Activation::kGelu: *f = F::kGelu; break;
    case Activation::kGeluTanh: *f = F::kGeluTanh; break;
    case Activation::kSwish: *f = F::kSwish; break;
    case Activation::kElu: *f = F::kElu; break;
    case Activation::kLeakyRelu: *f = F::kLeakyRelu; break;
    case Activation::kHardSigmoid: *f = F::kHardSigmoid; break;
    default: *f = F::kRelu; break;
  }
}

// PlanGraphOps's steps over one spec whose nodes' inputs are spelled out
// (`graph`) and shaped (`shapes`): the ops so far and what they need to
// know of one another. One use.
class GraphPlanner {
 public:
  GraphPlanner(const ModelSpec& spec, std::string where, ModelSpec graph,
               std::vector<ActivationShape> shapes)
      : spec_(spec),
        where_(std::move(where)),
        graph_(std::move(graph)),
        shapes_(std::move(shapes)),
        sliced_(spec.inputs.size() >= 2) {}

  absl::StatusOr<std::vector<GraphOp>> Plan() {
    absl::StatusOr<std::vector<int>> masks = MaskSources(graph_);
    if (!masks.ok()) return masks.status();
    masks_ = *std::move(masks);
    CountReaders();
    AddInputSlices();
    for (size_t i = 0; i < graph_.layers.size(); ++i) {
      if (absl::Status st = PlanNode(i); !st.ok()) return st;
    }
    const ActivationShape& out = shapes_.back();
    if (ops_.empty() || op_of_.back() != static_cast<int>(ops_.size()) - 1 || out.h != 1 ||
        out.w != 1 || out.c != spec_.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          where_, ": the model must end in num_classes (", spec_.num_classes, ") logits"));
    }
    // Binary cross-entropy reads logits: the output's sigmoid is fused into
    // the loss (loss_head.h), as softmax is into categorical cross-entropy.
    if (spec_.loss == LossKind::kBinaryCrossentropy && ops_.back().has_act &&
        ops_.back().act == kernels::ActivationFn::kSigmoid) {
      ops_.back().has_act = false;
    }
    PlanBackward(&ops_);
    PlanGradSlots(&ops_);
    PlanPenalties(spec_, &ops_);
    return std::move(ops_);
  }

 private:
  absl::Status Find(const std::string& name, std::vector<int64_t> shape, int64_t* offset) const {
    absl::StatusOr<int64_t> at = VariableOffset(spec_, where_, name, shape);
    if (at.ok()) *offset = *at;
    return at.status();
  }

  void Push(GraphOp&& op, int node) {
    op.key_index = static_cast<int>(ops_.size()) + fused_;
    ops_.push_back(std::move(op));
    node_of_.push_back(node);
  }

  // How many reads each node's output gets (through Flatten and Reshape,
  // which are its values; the loss reads the last).
  void CountReaders() {
    auto alias = [](LayerKind k) { return k == LayerKind::kFlatten || k == LayerKind::kReshape; };
    readers_.assign(graph_.layers.size(), 0);
    readers_.back() = 1;
    for (int i = static_cast<int>(graph_.layers.size()) - 1; i >= 0; --i) {
      for (int j : graph_.layers[i].inputs) {
        if (j >= 0) readers_[j] += alias(graph_.layers[i].kind) ? readers_[i] : 1;
      }
    }
  }

  // Several inputs: an op per input takes its values out of the examples.
  void AddInputSlices() {
    const int64_t example =
        int64_t{spec_.input_height} * spec_.input_width * spec_.input_channels;
    int64_t at = 0;
    for (const InputSpec& in : spec_.inputs) {
      if (spec_.inputs.size() < 2) break;
      GraphOp op;
      op.kind = LayerKind::kInputSlice;
      op.name = in.name;
      op.inputs = {kModelInput};
      op.input_channels = {spec_.input_channels};
      op.in_size = example;
      op.out_size = in.size();
      op.slice_at = at;
      at += in.size();
      Push(std::move(op), -1);
    }
  }

  // The op that a node reading model input `ref` reads.
  int InputOp(int ref) const { return sliced_ ? ModelInputIndex(ref) : kModelInput; }

  // Node i's op(s), or nothing for a Flatten or Reshape (an alias of its
  // input) and an Activation fused into the op it reads.
  absl::Status PlanNode(size_t i) {
    const LayerSpec& l = graph_.layers[i];
    const ActivationShape x =
        l.inputs[0] < 0 ? InputShapeOf(graph_, l.inputs[0]) : shapes_[l.inputs[0]];
    const ActivationShape& y = shapes_[i];
    GraphOp op;
    op.kind = l.kind;
    op.name = l.name;
    for (int j : l.inputs) {
      op.inputs.push_back(j < 0 ? InputOp(j) : op_of_[j]);
      op.input_channels.push_back(j < 0 ? InputShapeOf(graph_, j).c : shapes_[j].c);
    }
    if (l.kind == LayerKind::kFlatten || l.kind == LayerKind::kReshape) {
      op_of_.push_back(op.inputs[0]);  // NHWC rows are the same values either way
      return absl::OkStatus();
    }
    op.in_size = x.size();
    op.out_size = y.size();
    std::vector<ActivationShape> in;
    for (int j : l.inputs) in.push_back(j < 0 ? InputShapeOf(graph_, j) : shapes_[j]);
    if (ConcatenatesSteps(l, in)) {
      // An example's steps follow each other: its values, input by input.
      op.concat_steps = true;
      for (size_t k = 0; k < in.size(); ++k) op.input_channels[k] = static_cast<int>(in[k].size());
    }
    if (absl::Status st = PlanLayer(l, i, x, y, &op); !st.ok()) return st;
    op.alpha = l.alpha;
    op.act_xy = op.has_act && !kernels::ActivationGradFromOutput(op.act);
    if (FuseIntoInput(l, i, op)) return absl::OkStatus();
    if (op.act_xy && op.kind != LayerKind::kActivation) {
      // The layer, then its activation as an op of its own (which keeps
      // the layer's output, the activation's input, for the gradient).
      GraphOp act;
      act.kind = LayerKind::kActivation;
      act.name = l.name;
      act.inputs = {static_cast<int>(ops_.size())};
      act.input_channels = {y.c};
      act.in_size = act.out_size = op.out_size;
      act.has_act = true, act.act = op.act, act.alpha = op.alpha, act.act_xy = true;
      op.has_act = false, op.act_xy = false;
      Push(std::move(op), static_cast<int>(i));
      op = std::move(act);
    }
    op_of_.push_back(static_cast<int>(ops_.size()));
    Push(std::move(op), static_cast<int>(i));
    return absl::OkStatus();
  }

  // An Activation layer's op folded into the op it reads, where that op's
  // output has no other reader: then true, and node i is that op. (The
  // model's last node only into the last op: the loss reads that.)
  bool FuseIntoInput(const LayerSpec& l, size_t i, const GraphOp& op) {
    if (!(l.kind == LayerKind::kActivation && op.has_act && !op.act_xy && op.inputs[0] >= 0 &&
          (i + 1 < graph_.layers.size() || op.inputs[0] + 1 == static_cast<int>(ops_.size())))) {
      return false;
    }
    GraphOp& from = ops_[op.inputs[0]];
    const int node = node_of_[op.inputs[0]];
    // Not into ops whose backward reads their own output (GlobalMaxPool's
    // maxima) or that have no gradient (an input's slice).
    if (node < 0 || readers_[node] != 1 || from.has_act || from.act_xy ||
        from.kind == LayerKind::kGlobalMaxPool2D || from.kind == LayerKind::kInputSlice) {
      return false;
    }
    from.has_act = true;
    from.act = op.act;
    from.alpha = op.alpha;
    op_of_.push_back(op.inputs[0]);
    ++fused_;
    return true;
  }

  // The layer's own fields and variables on `op` (x its input's shape, y
  // its output's).
  absl::Status PlanLayer(const LayerSpec& l, size_t i, const ActivationShape& x,
                         const ActivationShape& y, GraphOp* op) {
    absl::Status st;
    switch (l.kind) {
      case LayerKind::kConv2D:
      case LayerKind::kDepthwiseConv2D:
      case LayerKind::kSeparableConv2D:
      case LayerKind::kMaxPool2D:
      case LayerKind::kAvgPool2D:
        return PlanWindowed(l, i, x, y, op);
      case LayerKind::kSoftmax:  // over each row of the last axis
        op->channels = x.c;
        op->pixels = x.h * x.w;
        break;
      case LayerKind::kLayerNorm:
        op->channels = x.c;
        op->pixels = x.h * x.w;
        op->epsilon = l.epsilon;
        if (l.scale) st = Find(l.name + "/gamma", {x.c}, &op->gamma);
        if (st.ok() && l.center) st = Find(l.name + "/beta", {x.c}, &op->beta);
        break;
      case LayerKind::kGlobalAvgPool1D:  // the 2-D pool over 1 x steps
        op->kind = LayerKind::kGlobalAvgPool2D;
        op->channels = x.c;
        op->pixels = x.h * x.w;
        // Under a mask: the Embedding op whose ids give it (its input's).
        if (l.inputs[0] >= 0 && masks_[l.inputs[0]] >= 0) {
          op->mask_from = op_of_[masks_[l.inputs[0]]];
        }
        break;
      case LayerKind::kGlobalAvgPool2D:
      case LayerKind::kGlobalMaxPool2D:
        op->channels = x.c;
        op->pixels = x.h * x.w;
        break;
      case LayerKind::kEmbedding:
        op->dense_in = l.input_dim;
        op->dense_out = l.units;
        op->pixels = static_cast<int>(x.size());
        op->padding_id = l.padding_id;
        st = Find(l.name + "/embeddings", {l.input_dim, l.units}, &op->kernel);
        break;
      case LayerKind::kDense:
        op->dense_rows = x.flat ? 1 : x.h * x.w;
        op->dense_in = x.flat ? static_cast<int>(x.size()) : x.c;
        op->dense_out = l.units;
        st = Find(l.name + "/kernel", {op->dense_in, l.units}, &op->kernel);
        if (st.ok() && l.use_bias) st = Find(l.name + "/bias", {l.units}, &op->bias);
        KernelActivation(l.activation, &op->has_act, &op->act);
        break;
      case LayerKind::kDropout:
        op->rate = l.rate;
        break;
      case LayerKind::kActivation:
        KernelActivation(l.activation, &op->has_act, &op->act);
        break;
      case LayerKind::kBatchNorm:
        return PlanBatchNorm(l, x, op);
      case LayerKind::kZeroPadding2D:
        op->pad.in_h = x.h, op->pad.in_w = x.w, op->pad.channels = x.c;
        op->pad.top = l.pad_top, op->pad.bottom = l.pad_bottom;
        op->pad.left = l.pad_left, op->pad.right = l.pad_right;
        break;
      case LayerKind::kRescaling:
        op->rescale = l.rescale;
        op->reshift = l.reshift;
        break;
      case LayerKind::kDot: {
        op->normalize = l.normalize;
        std::vector<ActivationShape> in;
        for (int j : l.inputs) in.push_back(j < 0 ? InputShapeOf(graph_, j) : shapes_[j]);
        if (DotsSequences(in)) {
          op->batched_dot = kernels::BatchedDotShape{in[0].w,
                                                     in[0].c,
                                                     in[1].w,
                                                     in[1].c,
                                                     l.dot_axes[0] == -1 ? 2 : l.dot_axes[0],
                                                     l.dot_axes[1] == -1 ? 2 : l.dot_axes[1]};
        }
        break;
      }
      case LayerKind::kAttention:
        PlanAttention(l, op);
        break;
      case LayerKind::kLstm:
      case LayerKind::kGru:
        return PlanRecurrent(l, x, op);
      default:  // other merges; Flatten and Reshape are no ops
        break;
    }
    return st;
  }

  // An Attention's steps and features, and the ops whose ids mask it.
  void PlanAttention(const LayerSpec& l, GraphOp* op) {
    auto shape_of = [&](int j) { return j < 0 ? InputShapeOf(graph_, j) : shapes_[j]; };
    const ActivationShape q = shape_of(l.inputs[0]), v = shape_of(l.inputs[1]);
    op->attention = kernels::AttentionShape{q.w, v.w, q.c, v.c, l.heads};
    op->attention.multi_head = l.multi_head;
    op->attention.scale = l.multi_head ? 1.0f / std::sqrt(static_cast<float>(q.c / l.heads)) : 1.0f;
    auto mask_op = [&](int j) { return j >= 0 && masks_[j] >= 0 ? op_of_[masks_[j]] : -1; };
    op->query_mask_from = mask_op(l.inputs[0]);
    op->mask_from = mask_op(l.inputs[1]);
  }

  // An LSTM's or GRU's cell and variables, and the op whose ids mask it.
  absl::Status PlanRecurrent(const LayerSpec& l, const ActivationShape& x, GraphOp* op) {
    kernels::RecurrentShape& r = op->recurrent;
    r.cell =
        l.kind == LayerKind::kLstm ? kernels::RecurrentCell::kLstm : kernels::RecurrentCell::kGru;
    r.steps = x.w, r.in = x.c, r.units = l.units;
    r.use_bias = l.use_bias;
    r.reset_after = l.reset_after;
    r.return_sequences = l.return_sequences;
    r.go_backwards = l.go_backwards;
    bool has = false;
    KernelActivation(l.activation, &has, &r.activation);
    KernelActivation(l.recurrent_activation, &has, &r.recurrent_activation);
    r.alpha = l.alpha;
    if (l.inputs[0] >= 0 && masks_[l.inputs[0]] >= 0) op->mask_from = op_of_[masks_[l.inputs[0]]];
    const int64_t gates = int64_t{kernels::RecurrentGates(r)} * l.units;
    absl::Status st = Find(l.name + "/kernel", {x.c, gates}, &op->kernel);
    if (st.ok()) st = Find(l.name + "/recurrent_kernel", {l.units, gates}, &op->recurrent_kernel);
    if (st.ok() && l.use_bias) {
      const bool two = l.kind == LayerKind::kGru && l.reset_after;
      st = Find(l.name + "/bias",
                two ? std::vector<int64_t>{2, gates} : std::vector<int64_t>{gates}, &op->bias);
    }
    return st;
  }

  absl::Status PlanBatchNorm(const LayerSpec& l, const ActivationShape& x, GraphOp* op) {
    if (!batch_norms_.insert(l.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          where_, ": layer ", l.name,
          ": a BatchNormalization layer applied twice is not supported (its moving "
          "statistics would be two batches')"));
    }
    op->channels = x.c;
    op->pixels = x.h * x.w;
    op->epsilon = l.epsilon;
    absl::Status st;
    if (l.scale) st = Find(l.name + "/gamma", {x.c}, &op->gamma);
    if (st.ok() && l.center) st = Find(l.name + "/beta", {x.c}, &op->beta);
    if (st.ok()) st = Find(l.name + "/moving_mean", {x.c}, &op->mean);
    if (st.ok()) st = Find(l.name + "/moving_variance", {x.c}, &op->var);
    return st;
  }

  // Convolutions and pooling: the window, and the variables. A
  // SeparableConv2D's depthwise step is pushed here and *op becomes its
  // pointwise step.
  absl::Status PlanWindowed(const LayerSpec& l, size_t i, const ActivationShape& x,
                            const ActivationShape& y, GraphOp* op) {
    const bool conv = l.kind != LayerKind::kMaxPool2D && l.kind != LayerKind::kAvgPool2D;
    kernels::WindowShape& s = op->win;
    s.in_h = x.h, s.in_w = x.w, s.in_c = x.c;
    s.window_h = l.window_h, s.window_w = l.window_w;
    s.stride_h = l.stride_h, s.stride_w = l.stride_w;
    s.dilation_h = conv ? l.dilation_h : 1, s.dilation_w = conv ? l.dilation_w : 1;
    const bool same = l.padding == Padding::kSame;
    kernels::KerasDilatedWindow(x.h, l.window_h, l.stride_h, s.dilation_h, same, &s.out_h,
                                &s.pad_top);
    kernels::KerasDilatedWindow(x.w, l.window_w, l.stride_w, s.dilation_w, same, &s.out_w,
                                &s.pad_left);
    s.out_c = y.c;
    absl::Status st;
    if (l.kind == LayerKind::kConv2D) {
      st = Find(l.name + "/kernel", ConvKernelShape(l, x.c), &op->kernel);
      if (st.ok() && l.use_bias) st = Find(l.name + "/bias", {l.units}, &op->bias);
      KernelActivation(l.activation, &op->has_act, &op->act);
      op->columns_per_example = int64_t{s.out_h} * s.out_w * s.patch_size();
    } else if (conv) {
      const int m = l.depth_multiplier;
      op->kind = LayerKind::kDepthwiseConv2D;
      s.out_c = x.c * m;
      op->out_size = int64_t{s.out_h} * s.out_w * s.out_c;
      st = Find(l.name + "/depthwise_kernel", {l.window_h, l.window_w, x.c, m}, &op->kernel);
      if (l.kind == LayerKind::kDepthwiseConv2D) {
        if (st.ok() && l.use_bias) st = Find(l.name + "/bias", {x.c * m}, &op->bias);
        KernelActivation(l.activation, &op->has_act, &op->act);
      } else if (st.ok()) {
        st = PlanPointwise(l, i, y, op);
      }
    }
    return st;
  }

  // SeparableConv2D: pushes its depthwise step *op, then makes *op a 1x1
  // Conv2D of that step's output (pointwise_kernel, bias, activation).
  absl::Status PlanPointwise(const LayerSpec& l, size_t i, const ActivationShape& y,
                             GraphOp* op) {
    const kernels::WindowShape& s = op->win;
    GraphOp point;
    point.kind = LayerKind::kConv2D;
    point.name = l.name;
    point.inputs = {static_cast<int>(ops_.size())};
    point.input_channels = {s.out_c};
    kernels::WindowShape& p = point.win;
    p.in_h = p.out_h = s.out_h, p.in_w = p.out_w = s.out_w, p.in_c = s.out_c;
    p.window_h = p.window_w = 1;
    p.out_c = l.units;
    point.in_size = op->out_size;
    point.out_size = y.size();
    point.columns_per_example = int64_t{p.out_h} * p.out_w * p.patch_size();
    absl::Status st =
        Find(l.name + "/pointwise_kernel", {1, 1, s.out_c, l.units}, &point.kernel);
    if (st.ok() && l.use_bias) st = Find(l.name + "/bias", {l.units}, &point.bias);
    KernelActivation(l.activation, &point.has_act, &point.act);
    if (!st.ok()) return st;
    Push(std::move(*op), static_cast<int>(i));
    *op = std::move(point);
    return absl::OkStatus();
  }

  // Const after construction.
  const ModelSpec& spec_;
  const std::string where_;
  const ModelSpec graph_;  // spec_ with every node's inputs spelled out
  const std::vector<ActivationShape> shapes_;
  const bool sliced_;  // an op per model input takes it out of the examples

  std::vector<int> readers_;  // node -> reads of its output (CountReaders)
  std::vector<GraphOp> ops_;
  std::vector<int> op_of_;    // node -> the op holding its output
  std::vector<int> masks_;    // node -> the Embedding node of its mask (MaskSources)
  std::vector<int> node_of_;  // op -> the node it computes (or whose input it slices)
  std::set<std::string> batch_norms_;
  int fused_ = 0;  // activations fused so far
};

}  // namespace

absl::StatusOr<std::vector<GraphOp>> PlanGraphOps(const ModelSpec& spec) {
  std::string where = absl::StrCat("model \"", spec.name, "\"");
  if (spec.num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": num_classes ", spec.num_classes, " is not positive"));
  }
  if (spec.input_height < 1 || spec.input_width < 1 || spec.input_channels < 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": input shape is not positive"));
  }
  ModelSpec graph = spec;  // with every node's inputs spelled out
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    if (graph.layers[i].inputs.empty()) graph.layers[i].inputs = {static_cast<int>(i) - 1};
  }
  absl::StatusOr<std::vector<ActivationShape>> shapes = NodeShapes(graph);
  if (!shapes.ok()) return shapes.status();
  return GraphPlanner(spec, std::move(where), std::move(graph), *std::move(shapes)).Plan();
}

}  // namespace pscluster
