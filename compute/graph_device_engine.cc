#include "compute/graph_device_engine.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compute/kernels/parallel_convolution.h"
#include "compute/kernels/parallel_elementwise.h"
#include "compute/kernels/parallel_kernels.h"
#include "compute/kernels/parallel_normalization.h"

namespace pscluster {

namespace parallel = kernels::parallel;

namespace {

// The sizes of an op's kernel and bias, or gamma and beta (0 for ops
// without variables).
int64_t KernelSize(const GraphOp& op) {
  if (op.kind == LayerKind::kDense) return int64_t{op.dense_in} * op.dense_out;
  if (op.kind == LayerKind::kConv2D) return op.win.patch_size() * op.win.out_c;
  if (op.kind == LayerKind::kDepthwiseConv2D) {
    return int64_t{op.win.window_h} * op.win.window_w * op.win.out_c;
  }
  if (op.kind == LayerKind::kLayerNorm) return op.channels;
  return 0;
}
int64_t Units(const GraphOp& op) {
  if (op.kind == LayerKind::kDense) return op.dense_out;
  if (op.kind == LayerKind::kConv2D || op.kind == LayerKind::kDepthwiseConv2D) {
    return op.win.out_c;
  }
  if (op.kind == LayerKind::kLayerNorm) return op.channels;
  return 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GraphDeviceEngine>> GraphDeviceEngine::Create(
    const ModelSpec& spec, int max_batch, uint64_t seed) {
  absl::StatusOr<std::vector<GraphOp>> ops = PlanGraphOps(spec);
  if (!ops.ok()) return ops.status();
  if (!spec.outputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model \"", spec.name, "\": ", spec.outputs.size(), " outputs (output '",
        spec.outputs[0].name,
        "' and others) do not run on the GPU yet; train this model with --device=cpu"));
  }
  for (const GraphOp& op : *ops) {
    if (op.concat_steps) {
      return absl::InvalidArgumentError(
          absl::StrCat("model \"", spec.name, "\": layer ", op.name,
                       ": Concatenate along the steps does not run on the GPU yet; train this "
                       "model with --device=cpu"));
    }
    if (op.kind == LayerKind::kDot || op.kind == LayerKind::kAttention ||
        op.kind == LayerKind::kSoftmax || IsRecurrent(op.kind)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model \"", spec.name, "\": layer ", op.name, ": ",
                       op.kind == LayerKind::kDot         ? "Dot"
                       : op.kind == LayerKind::kAttention ? "Attention"
                       : op.kind == LayerKind::kSoftmax   ? "Softmax"
                       : op.kind == LayerKind::kLstm      ? "LSTM"
                                                          : "GRU",
                       " does not run on the GPU yet; train this model with --device=cpu"));
    }
    if (op.mask_from >= 0 || op.query_mask_from >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model \"", spec.name, "\": layer ", op.name,
          " reads an Embedding's mask (mask_zero): masks do not run on the GPU yet; train this "
          "model with --device=cpu"));
    }
    if (op.kind == LayerKind::kEmbedding) {
      // Its ids are indexed on the host (IndexIds): they must be the
      // examples' own values, not computed.
      const int j = op.inputs[0];
      if (j != kModelInput && (*ops)[j].kind != LayerKind::kInputSlice) {
        return absl::InvalidArgumentError(
            absl::StrCat("model \"", spec.name, "\": layer ", op.name,
                         ": an Embedding whose ids are computed by another layer (", (*ops)[j].name,
                         ") does not run on the GPU yet; train this model with --device=cpu"));
      }
      if (op.dense_in > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat("model \"", spec.name, "\": layer ", op.name,
                                                       ": input_dim ", op.dense_in,
                                                       " is above the GPU's 2^31 - 1 rows"));
      }
    }
  }
  std::unique_ptr<GraphDeviceEngine> g(new GraphDeviceEngine);
  g->ops_ = *std::move(ops);
  g->max_batch_ = std::max(max_batch, 1);
  g->num_classes_ = spec.num_classes;
  g->loss_ = spec.loss;
  g->seed_ = seed;
  const int64_t n = g->max_batch_;
  auto reserve = [&g](int64_t bytes) {
    const int64_t at = g->arena_bytes_;
    g->arena_bytes_ += (std::max<int64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    return at;
  };
  constexpr int64_t kFloat = sizeof(float);
  int64_t widest = spec.num_classes;
  int64_t workspace = 0;  // bytes
  for (const GraphOp& op : g->ops_) {
    Slots s;
    s.act = reserve(n * op.out_size * kFloat);
    switch (op.kind) {
      case LayerKind::kConv2D: {
        s.columns = reserve(n * op.columns_per_example * kFloat);
        kernels::WindowShape w = op.win;
        w.batch = static_cast<int>(n);
        workspace =
            std::max(workspace, parallel::ConvGeneralBackwardWorkspace(w) * kFloat);
        break;
      }
      case LayerKind::kMaxPool2D:
        s.argmax = reserve(n * op.out_size * static_cast<int64_t>(sizeof(int32_t)));
        break;
      case LayerKind::kGlobalMaxPool2D:
        s.count = reserve(n * op.channels * kFloat);
        break;
      case LayerKind::kDense:
        workspace = std::max(
            workspace, parallel::DenseGeneralBackwardWorkspace(static_cast<int>(n * op.dense_rows),
                                                               static_cast<int>(op.dense_out)) *
                           kFloat);
        break;
      case LayerKind::kBatchNorm:
        workspace =
            std::max(workspace, parallel::BatchNormWorkspaceBytes(n * op.pixels, op.channels));
        break;
      case LayerKind::kDepthwiseConv2D: {
        kernels::WindowShape w = op.win;
        w.batch = static_cast<int>(n);
        workspace = std::max(workspace, parallel::DepthwiseBackwardWorkspace(w) * kFloat);
        break;
      }
      case LayerKind::kLayerNorm:
        s.norms = reserve(2 * n * op.pixels * kFloat);
        workspace = std::max(
            workspace, parallel::LayerNormBackwardWorkspace(n * op.pixels, op.channels) * kFloat);
        break;
      default:
        break;
    }
    for (const GraphOp::Penalty& p : op.penalties) {
      workspace = std::max(workspace, parallel::RegularizerLossWorkspace(p.size) * kFloat);
    }
    g->slots_.push_back(s);
    widest = std::max({widest, op.in_size, op.out_size});
  }
  g->workspace_ = reserve(workspace);
  for (int64_t size : GradSlotSizes(g->ops_)) g->grad_slots_.push_back(reserve(n * size * kFloat));
  g->scratch_ = reserve(n * widest * kFloat);
  int64_t shared = 0;  // the largest shared layer's kernel and bias
  for (const GraphOp& op : g->ops_) {
    if (op.accumulate_params) shared = std::max(shared, KernelSize(op) + Units(op));
  }
  g->param_scratch_ = reserve(shared * kFloat);
  g->has_penalties_ = HasPenalties(g->ops_);
  g->penalty_scratch_ = reserve(kFloat);
  g->softmax_ = reserve(parallel::SoftmaxWorkspaceBytes(static_cast<int>(n)));
  g->embedding_of_.assign(g->ops_.size(), -1);
  for (size_t i = 0; i < g->ops_.size(); ++i) {
    if (g->ops_[i].kind != LayerKind::kEmbedding) continue;
    g->embedding_of_[i] = static_cast<int>(g->embeddings_.size());
    g->embeddings_.push_back(i);
    const int64_t count = n * g->ops_[i].pixels;
    g->max_index_ints_ += 2 * std::min<int64_t>(count, g->ops_[i].dense_in) + 1 + count;
  }
  return g;
}

absl::Status GraphDeviceEngine::IndexIds(const float* images, int batch, IdIndex* index) const {
  index->ints.clear();
  index->at.clear();
  index->uniques.clear();
  std::vector<float>& ids = index->ids;
  kernels::EmbeddingIdIndex& one = index->one;
  for (size_t i : embeddings_) {
    const GraphOp& op = ops_[i];
    // Where the ids are in each example: the whole input, or a slice of it.
    const int j = op.inputs[0];
    const int64_t stride = j == kModelInput ? op.in_size : ops_[j].in_size;
    const int64_t first = j == kModelInput ? 0 : ops_[j].slice_at;
    ids.resize(int64_t{batch} * op.pixels);
    for (int e = 0; e < batch; ++e) {
      const float* from = images + e * stride + first;
      std::copy(from, from + op.pixels, ids.begin() + int64_t{e} * op.pixels);
    }
    const int64_t bad = kernels::IndexEmbeddingIds(static_cast<int64_t>(ids.size()), ids.data(),
                                                   op.dense_in, op.padding_id < 0, &one);
    if (bad >= 0) {
      // DataLoss: the data does not fit the model (the worker exits
      // kExitBadData), in the CPU engine's words.
      return absl::DataLossError(
          absl::StrCat("layer '", op.name, "' (Embedding): id ", ids[bad], " (position ",
                       bad % op.pixels, " of example ", bad / op.pixels,
                       " of the batch) is outside [0, input_dim = ", op.dense_in, ")"));
    }
    index->at.push_back(static_cast<int64_t>(index->ints.size()));
    index->uniques.push_back(one.uniques);
    index->ints.insert(index->ints.end(), one.ints.begin(), one.ints.end());
  }
  return absl::OkStatus();
}

kernels::WindowShape GraphDeviceEngine::Window(const GraphOp& op, int n) const {
  kernels::WindowShape w = op.win;
  w.batch = n;
  return w;
}

void GraphDeviceEngine::ForwardMerge(const kernels::GraphKernels& k, size_t i,
                                     const float* images, int n, float* y) const {
  const GraphOp& op = ops_[i];
  const int64_t size = int64_t{n} * op.out_size;
  const size_t inputs = op.inputs.size();
  switch (op.kind) {
    case LayerKind::kConcatenate: {
      int total = 0, at = 0;
      for (int c : op.input_channels) total += c;
      const int64_t rows = size / total;
      for (size_t m = 0; m < inputs; ++m) {
        const int c = op.input_channels[m];
        k.CopyColumns(rows, c, Input(i, m, images), c, y + at, total);
        at += c;
      }
      return;
    }
    case LayerKind::kMultiply:
      k.Multiply(size, Input(i, 0, images), Input(i, 1, images), y);
      for (size_t m = 2; m < inputs; ++m) k.Multiply(size, y, Input(i, m, images), y);
      return;
    default:  // Add, Subtract, Average
      k.Copy(size, Input(i, 0, images), y);
      for (size_t m = 1; m < inputs; ++m) {
        k.Axpy(size, op.kind == LayerKind::kSubtract ? -1.0f : 1.0f, Input(i, m, images), y);
      }
      if (op.kind == LayerKind::kAverage) k.Scale(size, 1.0f / inputs, y, y);
      return;
  }
}

void GraphDeviceEngine::BackwardMerge(const kernels::GraphKernels& k, size_t i, size_t in,
                                      const float* images, int n, const float* gy,
                                      float* gx) const {
  const GraphOp& op = ops_[i];
  const int64_t size = int64_t{n} * op.in_size;
  switch (op.kind) {
    case LayerKind::kConcatenate: {
      int total = 0, at = 0;
      for (size_t m = 0; m < op.input_channels.size(); ++m) {
        if (m < in) at += op.input_channels[m];
        total += op.input_channels[m];
      }
      const int c = op.input_channels[in];
      k.CopyColumns(int64_t{n} * op.out_size / total, c, gy + at, total, gx, c);
      return;
    }
    case LayerKind::kMultiply:
      k.Copy(size, gy, gx);
      for (size_t m = 0; m < op.inputs.size(); ++m) {
        if (m != in) k.Multiply(size, gx, Input(i, m, images), gx);
      }
      return;
    case LayerKind::kSubtract:
      k.Scale(size, in == 0 ? 1.0f : -1.0f, gy, gx);
      return;
    case LayerKind::kAverage:
      k.Scale(size, 1.0f / op.inputs.size(), gy, gx);
      return;
    default:  // Add
      k.Copy(size, gy, gx);
      return;
  }
}

void GraphDeviceEngine::BackwardOp(const kernels::GraphKernels& k, size_t i, const float* params,
                                   const float* images, int n, uint64_t step_key, float* gy,
                                   float* dx, float* grads, const IdIndex* ids,
                                   const int32_t* ids_d) const {
  const GraphOp& op = ops_[i];
  float* workspace = At(workspace_);
  const float* x = Input(i, 0, images);
  const int64_t outs = int64_t{n} * op.out_size;
  auto grad = [grads](int64_t offset) { return offset >= 0 ? grads + offset : nullptr; };
  // A shared layer's use other than its last adds its gradient: the
  // kernel's and bias's (adjacent when both are there) go to the scratch.
  const bool add = op.accumulate_params;
  float* pscratch = At(param_scratch_);
  float* dw = add ? pscratch : grad(op.kernel);
  float* db = op.bias < 0 ? nullptr : add ? pscratch + KernelSize(op) : grads + op.bias;
  if (op.act_xy) {  // an Activation op: its gradient is all it adds
    if (dx != nullptr) k.ActivationGradXY(outs, op.act, op.alpha, x, At(slots_[i].act), gy, dx);
    return;
  }
  if (op.has_act) k.ActivationGrad(outs, op.act, At(slots_[i].act), gy, gy);
  switch (op.kind) {
    case LayerKind::kConv2D:
      k.ConvBackward(Window(op, n), At(slots_[i].columns), params + op.kernel, gy, dw, db, dx,
                     workspace);
      break;
    case LayerKind::kMaxPool2D:
      if (dx != nullptr) {
        k.MaxPoolBackward(Window(op, n), gy,
                          reinterpret_cast<const int32_t*>(arena_ + slots_[i].argmax), dx);
      }
      break;
    case LayerKind::kAvgPool2D:
      if (dx != nullptr) k.AvgPoolBackward(Window(op, n), gy, dx);
      break;
    case LayerKind::kGlobalAvgPool2D:
      if (dx != nullptr) k.GlobalAvgPoolBackward(n, op.pixels, op.channels, gy, dx);
      break;
    case LayerKind::kDense:
      k.DenseBackward(n * op.dense_rows, op.dense_in, op.dense_out, x, params + op.kernel, gy, dw,
                      db, dx, workspace);
      break;
    case LayerKind::kDropout:
      if (dx != nullptr && op.rate > 0.0f) {
        k.Dropout({0, outs, op.rate, DropoutKey(seed_, step_key, op.key_index)}, gy, dx);
      } else if (dx != nullptr) {
        k.Copy(outs, gy, dx);
      }
      break;
    case LayerKind::kActivation:
      if (dx != nullptr) k.Copy(outs, gy, dx);
      break;
    case LayerKind::kZeroPadding2D:
      if (dx != nullptr) {
        kernels::PaddingShape p = op.pad;
        p.batch = n;
        k.ZeroPad2DBackward(p, gy, dx);
      }
      break;
    case LayerKind::kGlobalMaxPool2D:
      if (dx != nullptr) {
        k.GlobalMaxPoolBackward(n, op.pixels, op.channels, x, At(slots_[i].act),
                                At(slots_[i].count), gy, dx);
      }
      break;
    case LayerKind::kRescaling:
      if (dx != nullptr) k.Scale(int64_t{n} * op.in_size, op.rescale, gy, dx);
      break;
    case LayerKind::kBatchNorm:
      k.BatchNormBackward(int64_t{n} * op.pixels, op.channels, x, gy, grads + op.mean,
                          grads + op.var, op.gamma >= 0 ? params + op.gamma : nullptr,
                          op.epsilon, grad(op.gamma), grad(op.beta), dx, workspace);
      break;
    case LayerKind::kDepthwiseConv2D:
      k.DepthwiseConvBackward(Window(op, n), x, params + op.kernel, gy, dw, db, dx, workspace);
      break;
    case LayerKind::kEmbedding: {
      // Straight into the table's gradient, zeroed by Backward: a shared
      // table's uses add in turn (no scratch of the table's size).
      const int e = embedding_of_[i];
      k.EmbeddingBackward(ids->uniques[e], op.dense_out, ids_d + ids->at[e], gy, grads + op.kernel);
      return;
    }
    case LayerKind::kLayerNorm: {
      // gamma's and beta's gradients where a kernel's and a bias's go.
      const int64_t rows = int64_t{n} * op.pixels;
      float* dgamma = op.gamma < 0 ? nullptr : add ? pscratch : grads + op.gamma;
      float* dbeta = op.beta < 0 ? nullptr : add ? pscratch + op.channels : grads + op.beta;
      k.LayerNormBackward(rows, op.channels, x, gy, At(slots_[i].norms),
                          At(slots_[i].norms) + rows, op.gamma >= 0 ? params + op.gamma : nullptr,
                          dgamma, dbeta, dx, workspace);
      if (add && dgamma != nullptr) k.Axpy(op.channels, 1.0f, dgamma, grads + op.gamma);
      if (add && dbeta != nullptr) k.Axpy(op.channels, 1.0f, dbeta, grads + op.beta);
      return;
    }
    default:
      break;
  }
  if (add) {
    k.Axpy(KernelSize(op), 1.0f, pscratch, grads + op.kernel);
    if (db != nullptr) k.Axpy(Units(op), 1.0f, db, grads + op.bias);
  }
}

void GraphDeviceEngine::ForwardOp(const kernels::GraphKernels& k, size_t i, const float* params,
                                  const float* images, int n, uint64_t step_key,
                                  float* grads) const {
  const bool training = grads != nullptr;
  float* workspace = At(workspace_);
  auto param = [params](int64_t offset) { return offset >= 0 ? params + offset : nullptr; };
  const GraphOp& op = ops_[i];
  const float* in = Input(i, 0, images);
  float* y = At(slots_[i].act);
  const int64_t outs = int64_t{n} * op.out_size;
  switch (op.kind) {
    case LayerKind::kConv2D:
      k.ConvForward(Window(op, n), in, params + op.kernel, param(op.bias),
                    At(slots_[i].columns), y);
      break;
    case LayerKind::kMaxPool2D:
      k.MaxPoolForward(Window(op, n), in, y,
                       reinterpret_cast<int32_t*>(arena_ + slots_[i].argmax));
      break;
    case LayerKind::kAvgPool2D:
      k.AvgPoolForward(Window(op, n), in, y);
      break;
    case LayerKind::kGlobalAvgPool2D:
      k.GlobalAvgPoolForward(n, op.pixels, op.channels, in, y);
      break;
    case LayerKind::kDense:
      k.DenseForward(n * op.dense_rows, op.dense_in, op.dense_out, in, params + op.kernel,
                     param(op.bias), y);
      break;
    case LayerKind::kDropout:
      if (training && op.rate > 0.0f) {
        k.Dropout({0, outs, op.rate, DropoutKey(seed_, step_key, op.key_index)}, in, y);
      } else {
        k.Copy(outs, in, y);
      }
      break;
    case LayerKind::kActivation:
      // One pass, x to y (below); with no function, a copy.
      if (!op.has_act) k.Copy(outs, in, y);
      break;
    case LayerKind::kZeroPadding2D: {
      kernels::PaddingShape p = op.pad;
      p.batch = n;
      k.ZeroPad2DForward(p, in, y);
      break;
    }
    case LayerKind::kGlobalMaxPool2D:
      k.GlobalMaxPoolForward(n, op.pixels, op.channels, in, y, At(slots_[i].count));
      break;
    case LayerKind::kRescaling:
      k.Rescale(outs, op.rescale, op.reshift, in, y);
      break;
    case LayerKind::kEmbedding:
      k.EmbeddingForward(int64_t{n} * op.pixels, op.dense_out, op.padding_id < 0, in,
                         params + op.kernel, y);
      break;
    case LayerKind::kInputSlice:
      k.CopyColumns(n, static_cast<int>(op.out_size), in + op.slice_at,
                    static_cast<int>(op.in_size), y, static_cast<int>(op.out_size));
      break;
    case LayerKind::kDepthwiseConv2D:
      k.DepthwiseConvForward(Window(op, n), in, params + op.kernel, param(op.bias), y);
      break;
    case LayerKind::kLayerNorm: {
      const int64_t rows = int64_t{n} * op.pixels;
      k.LayerNormForward(rows, op.channels, in, param(op.gamma), param(op.beta), op.epsilon,
                         At(slots_[i].norms), At(slots_[i].norms) + rows, y);
      break;
    }
    case LayerKind::kBatchNorm:
      if (training) {
        // The batch statistics go straight to their gradient slots.
        k.BatchNormTraining(int64_t{n} * op.pixels, op.channels, in, param(op.gamma),
                            param(op.beta), op.epsilon, grads + op.mean, grads + op.var,
                            y, workspace);
      } else {
        k.BatchNormInference(int64_t{n} * op.pixels, op.channels, in, params + op.mean,
                             params + op.var, param(op.gamma), param(op.beta),
                             op.epsilon, y);
      }
      break;
    default:
      if (IsMerge(op.kind)) ForwardMerge(k, i, images, n, y);
      break;
  }
  if (op.act_xy) {
    k.ActivationForwardX(outs, op.act, op.alpha, in, y);
  } else if (op.has_act) {
    k.ActivationForward(outs, op.act, op.kind == LayerKind::kActivation ? in : y, y);
  }
}

void GraphDeviceEngine::SumPenalties(const kernels::GraphKernels& k, const float* params,
                                     float* penalty) const {
  float* workspace = At(workspace_);
  bool first = true;
  for (const GraphOp& op : ops_) {
    for (const GraphOp::Penalty& p : op.penalties) {
      k.RegularizerLoss(p.size, p.l1, p.l2, params + p.offset,
                        first ? penalty : At(penalty_scratch_), workspace);
      if (!first) k.Axpy(1, 1.0f, At(penalty_scratch_), penalty);
      first = false;
    }
  }
}

void GraphDeviceEngine::Backward(const kernels::GraphKernels& k, const float* params,
                                 const float* images, int n, uint64_t step_key, float* grads,
                                 const IdIndex* ids, const int32_t* ids_d) const {
  const size_t last = ops_.size() - 1;
  // A table's rows no id names have gradient 0; its uses add the others.
  for (size_t i : embeddings_) {
    const GraphOp& op = ops_[i];
    if (op.owns_variables) k.Fill(int64_t{op.dense_in} * op.dense_out, 0.0f, grads + op.kernel);
  }
  // written[i]: op i's slot holds the gradient at its output: the first op
  // reading it (in backward order) wrote it, the others add theirs.
  std::vector<bool> written(ops_.size(), false);
  written[last] = true;
  float* scratch = At(scratch_);
  for (int i = static_cast<int>(last); i >= 0; --i) {
    const GraphOp& op = ops_[i];
    if (op.grad_slot < 0 || !written[i]) continue;
    float* gy = GradOf(i);
    for (size_t m = 0; m < op.inputs.size(); ++m) {
      if (!op.input_wants_grad[m]) continue;
      const int j = op.inputs[m];
      float* gx = written[j] ? scratch : GradOf(j);
      if (IsMerge(op.kind)) {
        BackwardMerge(k, i, m, images, n, gy, gx);
      } else {
        BackwardOp(k, i, params, images, n, step_key, gy, gx, grads, ids, ids_d);
      }
      if (written[j]) k.Axpy(int64_t{n} * ops_[j].out_size, 1.0f, scratch, GradOf(j));
      written[j] = true;
    }
    if (!op.needs_input_grad && !IsMerge(op.kind)) {
      BackwardOp(k, i, params, images, n, step_key, gy, nullptr, grads, ids, ids_d);
    }
  }
  // Every variable's gradient is whole now: its regularizer's is added once.
  for (const GraphOp& op : ops_) {
    for (const GraphOp::Penalty& p : op.penalties) {
      k.RegularizerGrad(p.size, p.l1, p.l2, params + p.offset, grads + p.offset);
    }
  }
}

void GraphDeviceEngine::Run(const kernels::GraphKernels& k, const float* params,
                            const float* images, const float* targets, int batch, uint64_t step_key,
                            float* grads, double* loss_sum, int* correct, float* outputs,
                            float* penalty, const IdIndex* ids, const int32_t* ids_d) const {
  const int n = batch;
  const bool training = grads != nullptr;
  for (size_t i = 0; i < ops_.size(); ++i) {
    ForwardOp(k, i, params, images, n, step_key, grads);
  }
  const size_t last = ops_.size() - 1;
  k.LossHead(loss_, n, num_classes_, At(slots_[last].act), targets,
             1.0f / static_cast<float>(n), training ? GradOf(last) : nullptr, outputs, loss_sum,
             correct, arena_ + softmax_);
  if (penalty != nullptr && has_penalties_) SumPenalties(k, params, penalty);
  if (!training) return;
  Backward(k, params, images, n, step_key, grads, ids, ids_d);
}

}  // namespace pscluster
