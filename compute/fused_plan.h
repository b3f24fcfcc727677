// The fused engine's plan: the layer sequence of a plain chain of the
// built-in CNN's layers (Conv2D with square kernels, stride 1, "valid";
// MaxPooling2D that tiles; Flatten; Dense), which fused kernels run, with
// every shape and every variable's place in the flat parameter vector
// resolved and checked once. Shared by the CPU (compute/cpu_network.h) and
// the device engine (compute/fused_device_engine.h), so both accept and
// reject the same specs; any other model goes to the graph engine
// (compute/graph_plan.h). Plain values: safe to share between threads.
#ifndef PSCLUSTER_COMPUTE_FUSED_PLAN_H_
#define PSCLUSTER_COMPUTE_FUSED_PLAN_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compute/kernels/conv2d.h"
#include "compute/kernels/dense.h"
#include "compute/kernels/maxpool2d.h"
#include "model/model_spec.h"

namespace pscluster {

// One layer as run. Flatten is a no-op on NHWC activations and is never
// planned. Shapes have batch 0; a backend fills it in per call.
struct FusedLayer {
  LayerKind kind = LayerKind::kDense;  // kConv2D, kMaxPool2D or kDense
  bool relu = false;
  kernels::Conv2DShape conv;     // kConv2D
  kernels::MaxPool2DShape pool;  // kMaxPool2D
  kernels::DenseShape dense;     // kDense
  int64_t in_size = 0;           // floats per example in
  int64_t out_size = 0;          // floats per example out
  int64_t kernel_offset = 0;     // in the flat parameter vector (conv, dense)
  int64_t bias_offset = 0;
  bool needs_input_grad = false;  // some earlier layer has parameters
};

// The layers for `spec`: Conv2D/MaxPool2D layers, then Flatten, then Dense
// layers, the last one num_classes (at most 256) wide. InvalidArgument naming
// the model and the offending layer or variable otherwise.
absl::StatusOr<std::vector<FusedLayer>> PlanFusedLayers(const ModelSpec& spec);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_FUSED_PLAN_H_
