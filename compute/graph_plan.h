// The graph engine's plan: the op graph of a model that the fused engine
// (compute/fused_plan.h) does not cover, with every shape and every
// variable's place in the flat parameter vector resolved and checked once.
// Shared by the graph engine on the CPU (compute/graph_cpu_engine.h) and on
// a data-parallel device (compute/graph_device_engine.h), so both accept and
// reject the same specs and agree on every offset. Plain values: safe to
// share between threads.
#ifndef PSCLUSTER_COMPUTE_GRAPH_PLAN_H_
#define PSCLUSTER_COMPUTE_GRAPH_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compute/kernels/activation.h"
#include "compute/kernels/attention.h"
#include "compute/kernels/dot.h"
#include "compute/kernels/recurrent.h"
#include "compute/kernels/reshaping.h"
#include "compute/kernels/window.h"
#include "model/model_spec.h"

namespace pscluster {

// One node of the model's graph as run, in the spec's order (every op
// after the ops it reads). Flatten is not an op (NHWC rows are already
// flat): a node reading a Flatten reads what the Flatten read. Offsets are
// -1 where the layer has no such variable.
struct GraphOp {
  LayerKind kind = LayerKind::kDense;
  std::string name;
  // The ops it reads, by index; kModelInput for the examples. Merges read
  // several; in_size is the first's size. A model with several inputs
  // starts with a kInputSlice op per input, which the layers read.
  std::vector<int> inputs;
  // kConcatenate: each input's channels, or, joining steps
  // (concat_steps), each input's values per example.
  std::vector<int> input_channels;
  bool concat_steps = false;
  // Conv2D, DepthwiseConv2D (out_c = in_c * depth multiplier) and the
  // pools (batch set per call). A SeparableConv2D is two ops of its name:
  // a DepthwiseConv2D without bias or activation, then a 1x1 Conv2D.
  kernels::WindowShape win;
  // Dense: in and out units. Embedding: dense_in is input_dim (the table's
  // rows), dense_out output_dim, and `pixels` the ids per example.
  int dense_in = 0, dense_out = 0;
  // Dense: the rows of dense_in values it maps per example: 1 on a flat
  // input; the steps or pixels of a [steps, features] or [H, W, C] input,
  // where Keras applies it to the last axis of each.
  int dense_rows = 1;
  bool has_act = false;  // applies `act` after the layer's own work
  kernels::ActivationFn act = kernels::ActivationFn::kRelu;
  int channels = 0;   // BN, LayerNormalization, global pools
  int pixels = 0;     // BN and LayerNormalization rows per example; global pools' pixels;
                      // Embedding: ids
  float rate = 0.0f;  // Dropout
  bool normalize = false;  // Dot: the cosine
  // Dot of two sequences (Keras's batch_dot): its shapes and axes; rows_x
  // 0 for a Dot of flat vectors.
  kernels::BatchedDotShape batched_dot;
  // Embedding with mask_zero: the id of a padded step (0; -1 in a sparse
  // table's window, where every negative id is padding, its row the
  // sign's complement: LayerSpec::padding_id, -1 only there).
  int padding_id = 0;
  // A GlobalAveragePooling over steps that reads a mask: the Embedding op
  // whose ids give it (a step is left out where its id is that op's
  // padding_id), or -1. An Attention: the op whose ids mask its keys (its
  // value's mask), and query_mask_from its query's, or -1.
  int mask_from = -1;
  int query_mask_from = -1;
  kernels::AttentionShape attention;  // Attention: its steps and features
  // LSTM, GRU: the cell, its sizes and options (kernel, recurrent_kernel
  // and bias its variables; mask_from the op whose ids mask its steps).
  kernels::RecurrentShape recurrent;
  float epsilon = 0.0f;
  float alpha = 0.0f;  // the activation's parameter
  // Whether the activation's gradient needs its input (gelu, swish, elu,
  // leaky_relu, hard_sigmoid): then it is an op of its own (kActivation),
  // whose backward reads its input and output.
  bool act_xy = false;
  kernels::PaddingShape pad;            // ZeroPadding2D (batch set per call)
  // A variable's L1L2 regularizer (VariableSpec::l1, l2), on the op that
  // owns the variable: added to the loss and the gradient once per step.
  struct Penalty {
    int64_t offset = 0, size = 0;
    float l1 = 0.0f, l2 = 0.0f;
  };
  std::vector<Penalty> penalties;
  float rescale = 1.0f, reshift = 0.0f;  // Rescaling
  int64_t slice_at = 0;  // kInputSlice: its input's first value in an example
  int64_t kernel = -1, bias = -1, gamma = -1, beta = -1, mean = -1, var = -1;
  int64_t recurrent_kernel = -1;
  int64_t in_size = 0, out_size = 0;  // floats per example
  int64_t columns_per_example = 0;    // conv: im2col floats
  // Backward. wants_grad: the gradient at this op's output is needed (the
  // op has parameters, or reads one that wants it); input_wants_grad[k]:
  // that of input k is; needs_input_grad: any is. grad_slot: the buffer of
  // GradSlotSizes that holds the gradient at this op's output (-1 when not
  // wanted); slots are reused once an op's backward is done.
  bool wants_grad = false;
  std::vector<bool> input_wants_grad;
  bool needs_input_grad = false;
  int grad_slot = -1;
  // What Dropout's masks are keyed by (DropoutKey): the op's index in the
  // plan as it would be without the fused activations (below), so fusing
  // changes no mask.
  int key_index = 0;
  // A layer applied more than once: owns_variables on its first op only
  // (whose backward runs last and finishes its gradient); the others add
  // their gradient to it (accumulate_params on every op but the last one).
  bool owns_variables = true;
  bool accumulate_params = false;
};

// The ops for `spec`; the last one's output is num_classes (at most 256)
// logits. InvalidArgument naming the model and the layer otherwise. An
// Activation layer whose function needs only its output (relu, sigmoid,
// tanh) is fused into the op it reads when nothing else reads that op and
// it has no activation of its own (a BatchNormalization, a convolution, an
// Add, ...): one pass over the activations fewer each way and no copy.
absl::StatusOr<std::vector<GraphOp>> PlanGraphOps(const ModelSpec& spec);

// The floats per example of each gradient slot (GraphOp::grad_slot).
std::vector<int64_t> GradSlotSizes(const std::vector<GraphOp>& ops);

// Whether `op` has variables (kernel, bias, gamma, beta, moving statistics).
bool HasVariables(const GraphOp& op);

// Whether any op has a regularizer (GraphOp::penalties).
bool HasPenalties(const std::vector<GraphOp>& ops);

// The key of op `op`'s Dropout masks in the step named `step_key` of a run
// seeded `seed` (dropout.h): the same on every backend.
uint64_t DropoutKey(uint64_t seed, uint64_t step_key, size_t op);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_GRAPH_PLAN_H_
