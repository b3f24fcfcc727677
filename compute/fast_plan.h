// The layer sequence a compute backend runs for a model spec, with every
// shape and every variable's place in the flat parameter vector resolved and
// checked once. Shared by the CPU network (compute/cpu_network.h) and the CUDA
// backend (compute/cuda_backend.h), so both accept and reject the same specs.
// Plain values: safe to share between threads.
#ifndef PSCLUSTER_COMPUTE_FAST_PLAN_H_
#define PSCLUSTER_COMPUTE_FAST_PLAN_H_

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
struct FastLayer {
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
absl::StatusOr<std::vector<FastLayer>> PlanFastLayers(const ModelSpec& spec);

// Where a step's gradient becomes final, op by op, for sending it while
// backprop runs (compute/cpu_network.h's gradient listener): ranges[i], the
// [begin, end) ranges of op i's variables in the flat vector, and
// final_from[i], where the suffix of the gradient that holds only
// variables of ops >= i starts (the end of the variables of the ops below
// it).
//
// The same layout tells the forward pass which weights to wait for when
// they are still arriving (model/params_watermark.h): params_to[i], where
// the prefix of the flat vector that holds every variable of ops <= i ends.
struct GradientLayout {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges;
  std::vector<int64_t> final_from;
  std::vector<int64_t> params_to;
};
// `variable_offsets[i]`: the first offsets of op i's variables (-1: none);
// their sizes come from the spec.
GradientLayout PlanGradientLayout(const ModelSpec& spec,
                                  const std::vector<std::vector<int64_t>>& variable_offsets);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_FAST_PLAN_H_
