#include "compute/general_device_graph.h"

#include <algorithm>
#include <utility>

#include "compute/kernels/parallel_general.h"

namespace pscluster {

namespace parallel = kernels::parallel;

absl::StatusOr<std::unique_ptr<GeneralDeviceGraph>> GeneralDeviceGraph::Create(
    const ModelSpec& spec, int max_batch, uint64_t seed) {
  absl::StatusOr<std::vector<GeneralOp>> ops = PlanGeneralOps(spec);
  if (!ops.ok()) return ops.status();
  std::unique_ptr<GeneralDeviceGraph> g(new GeneralDeviceGraph);
  g->ops_ = *std::move(ops);
  g->max_batch_ = std::max(max_batch, 1);
  g->num_classes_ = spec.num_classes;
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
  for (const GeneralOp& op : g->ops_) {
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
      case LayerKind::kDense:
        workspace = std::max(
            workspace, parallel::DenseGeneralBackwardWorkspace(static_cast<int>(n),
                                                         static_cast<int>(op.dense_out)) *
                           kFloat);
        break;
      case LayerKind::kBatchNorm:
        workspace =
            std::max(workspace, parallel::BatchNormWorkspaceBytes(n * op.pixels, op.channels));
        break;
      default:
        break;
    }
    g->slots_.push_back(s);
    widest = std::max({widest, op.in_size, op.out_size});
  }
  g->workspace_ = reserve(workspace);
  g->grad_a_ = reserve(n * widest * kFloat);
  g->grad_b_ = reserve(n * widest * kFloat);
  g->softmax_ = reserve(parallel::SoftmaxWorkspaceBytes(static_cast<int>(n)));
  return g;
}

kernels::WindowShape GeneralDeviceGraph::Window(const GeneralOp& op, int n) const {
  kernels::WindowShape w = op.win;
  w.batch = n;
  return w;
}

void GeneralDeviceGraph::Run(const kernels::GeneralKernels& k, const float* params,
                           const float* images, const uint8_t* labels, int batch,
                           uint64_t step_key, float* grads, double* loss_sum,
                           int* correct) const {
  const int n = batch;
  const bool training = grads != nullptr;
  float* workspace = At(workspace_);
  auto param = [params](int64_t offset) { return offset >= 0 ? params + offset : nullptr; };
  auto grad = [grads](int64_t offset) { return offset >= 0 ? grads + offset : nullptr; };
  auto act = [this](size_t i) { return At(slots_[i].act); };
  auto argmax = [this](size_t i) {
    return reinterpret_cast<int32_t*>(arena_ + slots_[i].argmax);
  };
  const float* in = images;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const GeneralOp& op = ops_[i];
    float* y = act(i);
    const int64_t outs = int64_t{n} * op.out_size;
    switch (op.kind) {
      case LayerKind::kConv2D:
        k.ConvForward(Window(op, n), in, params + op.kernel, param(op.bias),
                      At(slots_[i].columns), y);
        break;
      case LayerKind::kMaxPool2D:
        k.MaxPoolForward(Window(op, n), in, y, argmax(i));
        break;
      case LayerKind::kAvgPool2D:
        k.AvgPoolForward(Window(op, n), in, y);
        break;
      case LayerKind::kGlobalAvgPool2D:
        k.GlobalAvgPoolForward(n, op.pixels, op.channels, in, y);
        break;
      case LayerKind::kDense:
        k.DenseForward(n, op.dense_in, op.dense_out, in, params + op.kernel,
                       param(op.bias), y);
        break;
      case LayerKind::kDropout:
        if (training && op.rate > 0.0f) {
          k.Dropout({0, outs, op.rate, DropoutKey(seed_, step_key, i)}, in, y);
        } else {
          k.Copy(outs, in, y);
        }
        break;
      case LayerKind::kActivation:
        // One pass, x to y (below); with no function, a copy.
        if (!op.has_act) k.Copy(outs, in, y);
        break;
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
      case LayerKind::kFlatten:
        break;  // never planned
    }
    if (op.has_act) {
      k.ActivationForward(outs, op.act, op.kind == LayerKind::kActivation ? in : y, y);
    }
    in = y;
  }
  float* g = At(grad_a_);     // dLoss/d(output of op i)
  float* next = At(grad_b_);  // becomes dLoss/d(input of op i)
  k.SoftmaxCrossEntropy(n, num_classes_, in, labels, 1.0f / static_cast<float>(n),
                        training ? g : nullptr, loss_sum, correct, arena_ + softmax_);
  if (!training) return;
  for (int i = static_cast<int>(ops_.size()) - 1; i >= 0; --i) {
    const GeneralOp& op = ops_[i];
    const float* x = i == 0 ? images : act(i - 1);
    float* dx = op.needs_input_grad ? next : nullptr;
    const int64_t outs = int64_t{n} * op.out_size;
    // An Activation layer's gradient goes to dx in the same pass.
    const bool act_into_dx = op.kind == LayerKind::kActivation && op.has_act && dx != nullptr;
    if (op.has_act) k.ActivationGrad(outs, op.act, act(i), g, act_into_dx ? dx : g);
    switch (op.kind) {
      case LayerKind::kConv2D:
        k.ConvBackward(Window(op, n), At(slots_[i].columns), params + op.kernel, g,
                       grads + op.kernel, grad(op.bias), dx, workspace);
        break;
      case LayerKind::kMaxPool2D:
        if (dx != nullptr) k.MaxPoolBackward(Window(op, n), g, argmax(i), dx);
        break;
      case LayerKind::kAvgPool2D:
        if (dx != nullptr) k.AvgPoolBackward(Window(op, n), g, dx);
        break;
      case LayerKind::kGlobalAvgPool2D:
        if (dx != nullptr) k.GlobalAvgPoolBackward(n, op.pixels, op.channels, g, dx);
        break;
      case LayerKind::kDense:
        k.DenseBackward(n, op.dense_in, op.dense_out, x, params + op.kernel, g,
                        grads + op.kernel, grad(op.bias), dx, workspace);
        break;
      case LayerKind::kDropout:
        if (dx != nullptr && op.rate > 0.0f) {
          k.Dropout({0, outs, op.rate, DropoutKey(seed_, step_key, i)}, g, dx);
        } else if (dx != nullptr) {
          k.Copy(outs, g, dx);
        }
        break;
      case LayerKind::kActivation:
        if (dx != nullptr && !act_into_dx) k.Copy(outs, g, dx);
        break;
      case LayerKind::kBatchNorm:
        k.BatchNormBackward(int64_t{n} * op.pixels, op.channels, x, g, grads + op.mean,
                            grads + op.var, param(op.gamma), op.epsilon, grad(op.gamma),
                            grad(op.beta), dx, workspace);
        break;
      case LayerKind::kFlatten:
        break;
    }
    if (dx == nullptr) break;  // nothing below has parameters
    std::swap(g, next);
  }
}

}  // namespace pscluster
