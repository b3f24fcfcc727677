// FusedDeviceEngine: the fused engine on a device. It runs a planned model
// (compute/fused_plan.h) forward, through the softmax cross-entropy loss
// and backward, on a device whose kernels have the GPU signatures
// (compute/kernels/gpu_kernels.h): GpuDevice in the CUDA backend,
// EmulatedGpuDevice in tests. The whole batch runs at once;
// every activation, pooling index and workspace lives in one arena of
// device memory that the owner allocates once (arena_bytes()) and binds.
// The includer declares Device's kernel specialisations before using this.
//
// Not thread-safe: one Run at a time per engine (they share the arena). The
// arena and every pointer passed to Run are borrowed.
#ifndef PSCLUSTER_COMPUTE_FUSED_DEVICE_ENGINE_H_
#define PSCLUSTER_COMPUTE_FUSED_DEVICE_ENGINE_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "compute/fused_plan.h"
#include "compute/kernels/bias_activation.h"
#include "compute/kernels/conv2d.h"
#include "compute/kernels/dense.h"
#include "compute/kernels/maxpool2d.h"
#include "compute/kernels/softmax_xent.h"

namespace pscluster {

template <typename Device>
class FusedDeviceEngine {
 public:
  // Precondition: `layers` came from PlanFusedLayers; max_batch >= 1.
  FusedDeviceEngine(std::vector<FusedLayer> layers, int max_batch)
      : layers_(std::move(layers)), max_batch_(max_batch) {
    auto reserve = [this](int64_t bytes) {
      const int64_t at = arena_bytes_;
      arena_bytes_ +=
          (std::max<int64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
      return at;
    };
    int64_t widest = 0;
    for (const FusedLayer& l : layers_) {
      Slots s;
      s.act = reserve(FloatBytes(max_batch_ * l.out_size));
      if (l.kind == LayerKind::kMaxPool2D) {
        s.argmax = reserve(max_batch_ * l.out_size * sizeof(int32_t));
      }
      s.workspace = reserve(FloatBytes(WorkspaceSize(l, max_batch_)));
      slots_.push_back(s);
      widest = std::max({widest, l.in_size, l.out_size});
    }
    grad_a_ = reserve(FloatBytes(max_batch_ * widest));
    grad_b_ = reserve(FloatBytes(max_batch_ * widest));
    softmax_ = reserve(
        kernels::SoftmaxCrossEntropy<Device>::WorkspaceBytes(max_batch_));
  }

  int max_batch() const { return max_batch_; }
  int num_classes() const { return static_cast<int>(layers_.back().out_size); }
  // Bytes Bind() needs, a multiple of 256.
  int64_t arena_bytes() const { return arena_bytes_; }

  // `arena`: arena_bytes() bytes of the device's memory, 256-byte aligned.
  void Bind(void* arena) { arena_ = static_cast<char*>(arena); }

  // Forward and loss for `batch` (in [1, max_batch]) examples and, when
  // `grads` is not null, backward: grads = d(mean loss)/d(params), every
  // parameter written. Writes *loss_sum (the sum of the examples' losses)
  // and *correct. params, images (NHWC floats), labels (class indices as
  // floats, each < num_classes),
  // grads, loss_sum and correct are device memory; the work is queued on
  // `d`. Precondition: Bind() was called.
  void Run(const Device& d, const float* params, const float* images,
           const float* labels, int batch, float* grads, double* loss_sum,
           int* correct) {
    const int n = batch;
    const float* in = images;
    for (size_t i = 0; i < layers_.size(); ++i) {
      const FusedLayer& l = layers_[i];
      float* out = Act(i);
      switch (l.kind) {
        case LayerKind::kConv2D:
          kernels::Conv2DForward<Device>()(
              d, Conv(l, n), in, params + l.kernel_offset,
              params + l.bias_offset, l.relu, out, Workspace(i));
          break;
        case LayerKind::kMaxPool2D:
          kernels::MaxPool2DForward<Device>()(d, Pool(l, n), in, out,
                                              Argmax(i));
          break;
        case LayerKind::kDense:
          kernels::DenseForward<Device>()(d, Dense(l, n), in,
                                          params + l.kernel_offset,
                                          params + l.bias_offset, l.relu, out);
          break;
        default:
          break;  // PlanFusedLayers plans only Conv2D, MaxPool2D and Dense
      }
      in = out;
    }
    float* g = At(grad_a_);     // dLoss/d(output of layer i)
    float* next = At(grad_b_);  // becomes dLoss/d(input of layer i)
    kernels::SoftmaxCrossEntropy<Device>()(
        d, n, num_classes(), in, labels, 1.0f / static_cast<float>(n),
        grads != nullptr ? g : nullptr, loss_sum, correct, arena_ + softmax_);
    if (grads == nullptr) return;
    bool relu_applied = false;  // the layer above fused this one's ReLU
    for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) {
      const FusedLayer& l = layers_[i];
      const float* x = i == 0 ? images : Act(i - 1);
      float* dx = l.needs_input_grad ? next : nullptr;
      if (l.relu && !relu_applied) {
        kernels::ReluGrad<Device>()(d, n * l.out_size, Act(i), g);
      }
      relu_applied = false;
      switch (l.kind) {
        case LayerKind::kConv2D:
          // The forward left im2col(x) in this layer's workspace.
          kernels::Conv2DBackwardFilter<Device>()(
              d, Conv(l, n), x, g, /*accumulate=*/false,
              /*columns_ready=*/true, grads + l.kernel_offset,
              grads + l.bias_offset, Workspace(i));
          if (dx != nullptr) {
            kernels::Conv2DBackwardInput<Device>()(
                d, Conv(l, n), params + l.kernel_offset, g, dx, Workspace(i));
          }
          break;
        case LayerKind::kMaxPool2D:
          if (dx != nullptr) {
            // A ReLU below: its gradient in the same pass.
            relu_applied = i > 0 && layers_[i - 1].relu;
            kernels::MaxPool2DBackward<Device>()(
                d, Pool(l, n), g, Argmax(i), dx,
                relu_applied ? Act(i) : nullptr);
          }
          break;
        case LayerKind::kDense:
          kernels::DenseBackward<Device>()(
              d, Dense(l, n), x, params + l.kernel_offset, g,
              /*accumulate=*/false, grads + l.kernel_offset,
              grads + l.bias_offset, dx, Workspace(i));
          break;
        default:
          break;  // PlanFusedLayers plans only Conv2D, MaxPool2D and Dense
      }
      if (dx == nullptr) break;  // nothing below has parameters
      std::swap(g, next);
    }
  }

 private:
  static constexpr int64_t kAlign = 256;

  // Byte offsets into the arena.
  struct Slots {
    int64_t act = 0;
    int64_t argmax = 0;
    int64_t workspace = 0;
  };

  static int64_t FloatBytes(int64_t n) {
    return n * static_cast<int64_t>(sizeof(float));
  }

  static kernels::Conv2DShape Conv(const FusedLayer& l, int n) {
    kernels::Conv2DShape s = l.conv;
    s.batch = n;
    return s;
  }
  static kernels::MaxPool2DShape Pool(const FusedLayer& l, int n) {
    kernels::MaxPool2DShape s = l.pool;
    s.batch = n;
    return s;
  }
  static kernels::DenseShape Dense(const FusedLayer& l, int n) {
    kernels::DenseShape s = l.dense;
    s.batch = n;
    return s;
  }

  // Floats of workspace layer `l` needs at batch n, forward and backward.
  static int64_t WorkspaceSize(const FusedLayer& l, int n) {
    switch (l.kind) {
      case LayerKind::kConv2D: {
        const kernels::Conv2DShape s = Conv(l, n);
        return std::max(
            {kernels::Conv2DForward<Device>::WorkspaceSize(s),
             kernels::Conv2DBackwardFilter<Device>::WorkspaceSize(s),
             kernels::Conv2DBackwardInput<Device>::WorkspaceSize(s)});
      }
      case LayerKind::kDense:
        return kernels::DenseBackward<Device>::WorkspaceSize(Dense(l, n));
      default:
        return 0;
    }
  }

  float* At(int64_t offset) const {
    return reinterpret_cast<float*>(arena_ + offset);
  }
  float* Act(size_t i) const { return At(slots_[i].act); }
  float* Workspace(size_t i) const { return At(slots_[i].workspace); }
  int32_t* Argmax(size_t i) const {
    return reinterpret_cast<int32_t*>(arena_ + slots_[i].argmax);
  }

  // Const after construction.
  const std::vector<FusedLayer> layers_;
  const int max_batch_;
  std::vector<Slots> slots_;
  int64_t grad_a_ = 0;
  int64_t grad_b_ = 0;
  int64_t softmax_ = 0;
  int64_t arena_bytes_ = 0;

  char* arena_ = nullptr;  // borrowed, set by Bind
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_FUSED_DEVICE_ENGINE_H_
