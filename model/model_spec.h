// The model *spec*: the layer list, the variables with names, shapes and
// initializers, and where each variable sits in the flat parameter vector.
// A spec comes from a Keras model file (model/keras_model.h) or, for the
// two models the tests build in code, from ModelByName; the chief ships the
// model file's text in the plan and every daemon parses it the same way, so
// the chief, the parameter servers and the workers agree on the layout.
// Plain value types: safe to share between threads once built.
#ifndef PSCLUSTER_MODEL_MODEL_SPEC_H_
#define PSCLUSTER_MODEL_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/loss.h"

namespace pscluster {

enum class LayerKind {
  kConv2D,
  kMaxPool2D,
  kAvgPool2D,
  kGlobalAvgPool2D,
  kFlatten,
  kDense,
  kDropout,
  kActivation,  // Keras Activation and ReLU layers
  kBatchNorm,
  // Merges of several inputs of one shape (Keras's merging layers):
  // element-wise sum, difference of two, product, mean; Concatenate joins
  // them along the channel (last) axis.
  kAdd,
  kSubtract,
  kMultiply,
  kAverage,
  kConcatenate,
  // Dot of two flat vectors of one size: [D], [D] -> [1], each example's
  // inner product (cosine with `normalize`).
  kDot,
  // Keras's Attention over sequences: [query, value] or [query, value,
  // key] ([Tq, D], [Tv, Dv], [Tv, D]; the value is the key when there is
  // none) -> [Tq, Dv], softmax(query key^T) value, the value's mask
  // masking keys and the query's zeroing its rows (kernels/attention.h).
  kAttention,
  // Keras's MultiHeadAttention as the parser reads it; it expands each
  // into Dense projections (<name>/query, /key, /value), a kAttention
  // node of `heads` heads with MultiHeadAttention's scale and masks, and
  // the Dense <name>/attention_output (model/keras_model.cc), so no spec
  // that reaches a backend holds one.
  kMultiHeadAttention,
  // Modern CNNs' layers without variables.
  kZeroPadding2D,    // pad_* rows and columns of zeros
  kGlobalMaxPool2D,  // the max over the pixels (ties share the gradient)
  kRescaling,        // y = x * rescale + reshift
  kReshape,          // the same values as target_shape (NHWC order)
  // Modern CNNs' layers with variables.
  kDepthwiseConv2D,  // one window per input channel, depth_multiplier outputs each
  kSeparableConv2D,  // depthwise (no bias), then a 1x1 Conv2D of `units` filters
  kLayerNorm,        // LayerNormalization over the last axis
  // The softmax over the last axis as a node of its own: Keras's Softmax
  // layer, or a softmax activation that is not fused into the loss (a
  // gate, a head read by other layers).
  kSoftmax,
  // Sequences. A [steps, features] activation is 1 x steps x features.
  kEmbedding,        // ids [L] -> rows of embeddings [input_dim, units]: 1 x L x units
  kGlobalAvgPool1D,  // [L, C] -> [C], the mean over the steps
  // Keras's recurrent layers over [steps, features] (compute/kernels/
  // recurrent.h): [steps, units] with return_sequences, else the last
  // state [units]. Variables <name>/kernel, /recurrent_kernel, /bias.
  kLstm,
  kGru,
  // Not a Keras layer: a plan's op that takes one input's values out of
  // the examples of a model with several inputs (compute/graph_plan.h).
  kInputSlice,
};

// Whether `kind` merges several inputs.
inline bool IsMerge(LayerKind kind) {
  return kind == LayerKind::kAdd || kind == LayerKind::kSubtract || kind == LayerKind::kMultiply ||
         kind == LayerKind::kAverage || kind == LayerKind::kConcatenate ||
         kind == LayerKind::kDot || kind == LayerKind::kAttention ||
         kind == LayerKind::kMultiHeadAttention;
}

// kSoftmax on an output's last layer (or a last Activation layer) is fused
// with the cross-entropy loss (the layer below it produces logits);
// anywhere else the parser makes it a LayerKind::kSoftmax node.
enum class Activation {
  kNone, kRelu, kSigmoid, kTanh, kSoftmax,
  // LayerSpec::alpha: elu's alpha, leaky_relu's negative slope,
  // hard_sigmoid's slope (Keras 3: 1/6; Keras 2 and TensorFlow.js: 0.2).
  kGelu,      // Keras's default: 0.5 x (1 + erf(x / sqrt 2))
  kGeluTanh,  // gelu(approximate=True)
  kSwish,     // swish / silu: x sigmoid(x)
  kElu,
  kLeakyRelu,
  kHardSigmoid,
};

// Keras padding: kValid drops what does not fit; kSame pads so that
// out = ceil(in / stride), the extra row or column going to the bottom and
// right (pad_total = max((out - 1) * stride + window - in, 0), top/left get
// pad_total / 2).
enum class Padding { kValid, kSame };

// One layer, or one application of a layer: a model is a graph whose
// nodes are these, in an order where every node comes after its inputs.
// A Keras layer applied twice is two nodes with the same name, and so the
// same variables (its weights are shared). Activations are NHWC (Keras
// channels_last).
struct LayerSpec {
  LayerKind kind = LayerKind::kDense;
  std::string name;      // the Keras layer name; variables are "<name>/<var>"
  // The nodes this one reads, by index in ModelSpec::layers; a negative
  // ModelInput(k) for the model's input k. BuildModelSpec makes an empty
  // list {i - 1} (a chain, as a Sequential model). The last node is the
  // model's output.
  std::vector<int> inputs;
  int units = 0;         // kConv2D, kSeparableConv2D: filters; kDense: output units;
                         // kEmbedding: output_dim
  int input_dim = 0;     // kEmbedding: the ids' count (ids are in [0, input_dim))
  int input_length = 0;  // kEmbedding: Keras 2's input_length (0: not given)
  // kEmbedding: Keras's mask_zero: id 0 is padding, and the layers that
  // read the mask (a GlobalAveragePooling1D, through per-step Dense,
  // Activation, Dropout and LayerNormalization) leave its steps out. In a
  // sparse table's window (WithSparseTables) padding arrives negative
  // (`padding_id` -1: id 0's window row k as -(k + 1)).
  bool mask_zero = false;
  int padding_id = 0;
  int window_h = 0;      // convolutions: kernel; pools: pool window
  int window_w = 0;
  int stride_h = 1;      // convolutions and pools
  int stride_w = 1;
  // Convolutions: the window's cells are dilation apart (1 when strided).
  int dilation_h = 1, dilation_w = 1;
  int depth_multiplier = 1;  // kDepthwiseConv2D, kSeparableConv2D
  Padding padding = Padding::kValid;
  bool use_bias = true;  // kConv2D, kDense
  Activation activation = Activation::kNone;  // kConv2D, kDense, kActivation
  float rate = 0.0f;     // kDropout: fraction of units dropped in training
  // kBatchNorm and kLayerNorm, over the channel (last) axis. Keras defaults.
  float momentum = 0.99f;  // kBatchNorm only
  float epsilon = 1e-3f;
  bool center = true;    // has beta
  bool scale = true;     // has gamma
  // kConcatenate, kLayerNorm, kDot: -1 or the last axis's index (batch
  // axis 0).
  int axis = -1;
  bool normalize = false;  // kDot: each input L2-normalised first (Keras's normalize)
  // kDot: its axes as the file gives them (-1: the last), one per input.
  int dot_axes[2] = {-1, -1};
  // kAttention: its heads (the inputs' features split evenly among them)
  // and, for MultiHeadAttention's core (`multi_head`), its rules: the
  // queries scaled by 1/sqrt(their features a head), and every mask in the
  // scores (a masked query's row weighs every key alike, as Keras's masked
  // softmax makes it) where the Attention layer zeroes a masked query's row.
  // kMultiHeadAttention: heads, units = key_dim, value_dim, use_bias.
  int heads = 1;
  bool multi_head = false;
  int value_dim = 0;
  float alpha = 0.0f;    // the activation's parameter (Activation above)
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;  // kZeroPadding2D
  float rescale = 1.0f, reshift = 0.0f;                            // kRescaling
  std::vector<int> target_shape;  // kReshape: [H, W, C] or [F]
  // Keras's 1-D form of kConv2D, kMaxPool2D, kAvgPool2D and
  // kGlobalMaxPool2D (Conv1D, MaxPooling1D, ...): it reads [steps,
  // features], 1 x steps x features, and its window runs along the steps
  // (window_h, stride_h and dilation_h are 1). Conv1D's kernel is
  // [window_w, in, filters], Keras's shape, the same values in the same
  // order as the 2-D [1, window_w, in, filters].
  bool one_d = false;
  // kLstm, kGru (units: the state's size; activation: the candidate's and
  // LSTM's output's, Keras's default tanh). An Embedding's mask skips the
  // masked steps (the state carried over) and, with return_sequences,
  // goes on with the output.
  Activation recurrent_activation = Activation::kSigmoid;  // the gates'
  bool return_sequences = false;
  bool go_backwards = false;
  bool reset_after = true;       // kGru: Keras 3's default (Keras 2's and tfjs's: false)
  bool unit_forget_bias = true;  // kLstm: the forget gate's biases start at 1
};

// Whether `kind` is a recurrent layer (LSTM, GRU).
inline bool IsRecurrent(LayerKind kind) {
  return kind == LayerKind::kLstm || kind == LayerKind::kGru;
}

// Keras initializers. The named ones (GlorotUniform, HeNormal, ...) are
// VarianceScaling with fixed arguments and are stored as that.
struct Initializer {
  enum class Kind {
    kZeros,
    kOnes,
    kConstant,         // value
    kVarianceScaling,  // scale, mode, distribution
    kRandomNormal,     // mean, stddev
    kRandomUniform,    // minval, maxval
    kTruncatedNormal,  // mean, stddev; redrawn beyond 2 stddev
    // A random orthogonal matrix times `scale` (Keras's gain): the
    // variable as [rows, columns] (its last axis the columns), made of a
    // normal draw's QR factor with R's diagonal positive, as Keras does;
    // rows or columns orthonormal, whichever are fewer. Rank >= 2 only.
    kOrthogonal,
  };
  enum class Mode { kFanIn, kFanOut, kFanAvg };
  enum class Distribution { kUniform, kTruncatedNormal, kUntruncatedNormal };

  Kind kind = Kind::kZeros;
  double value = 0.0;
  double scale = 1.0;
  Mode mode = Mode::kFanAvg;
  Distribution distribution = Distribution::kUniform;
  double mean = 0.0, stddev = 0.05;
  double minval = -0.05, maxval = 0.05;
  // Elements [ones_begin, ones_end) are 1 whatever the draw: an LSTM's
  // forget gate's biases with unit_forget_bias (Keras's default).
  int64_t ones_begin = 0, ones_end = 0;

  static Initializer Zeros() { return Initializer(); }
  static Initializer Ones() {
    Initializer i;
    i.kind = Kind::kOnes;
    return i;
  }
  static Initializer GlorotUniform() {
    Initializer i;
    i.kind = Kind::kVarianceScaling;
    return i;
  }
  static Initializer RandomUniform() {  // Keras's default: [-0.05, 0.05]
    Initializer i;
    i.kind = Kind::kRandomUniform;
    return i;
  }
};

// What a variable is for. Trainable variables are updated by the ps's
// optimizer from gradients. A BatchNormalization layer's moving statistics
// are not trainable: a worker pushes its batch's mean (kMovingMean) or
// biased variance (kMovingVariance) in the variable's gradient slot and the
// ps sets v = momentum * v + (1 - momentum) * pushed, Keras's update, where
// "pushed" is, like a gradient, the average of the step's replicas in sync
// mode and one worker's value in async mode.
enum class VariableRole { kTrainable, kMovingMean, kMovingVariance };

// A variable and its place in the flat parameter vector. Kernel layouts
// follow Keras: Conv2D is [kh, kw, in, out] (HWIO), Dense is [in, out],
// Embedding is [input_dim, output_dim] (row k: id k's vector).
struct VariableSpec {
  std::string name;  // "<layer>/kernel", "/bias", "/gamma", "/beta",
                     // "/moving_mean", "/moving_variance", "/embeddings"
  std::vector<int64_t> shape;
  Initializer initializer;
  int64_t fan_in = 0;   // Keras's fans: kh*kw*in and kh*kw*out for Conv2D
  int64_t fan_out = 0;  // kernels, in and out for Dense kernels
  VariableRole role = VariableRole::kTrainable;
  float momentum = 0.0f;  // the moving statistics' momentum
  // Keras's L1L2 regularizer on it (the layer's kernel_regularizer,
  // bias_regularizer, ...): the loss gains l1 sum |w| + l2 sum w^2 and the
  // gradient l1 sign(w) + 2 l2 w, once per step. 0 and 0: none.
  float l1 = 0.0f, l2 = 0.0f;
  int64_t offset = 0;     // first element in the flat parameter vector
  int64_t size = 0;       // number of elements
  // A sparse embedding table made a window (model/sparse_layout.h): the
  // table's own input_dim, its shape being the window's; kUnboundedTable
  // for an unbounded one (ids any int64 >= 0). 0: not a table.
  int64_t table_rows = 0;
  // An unbounded table in a run's final weights (StrategyRun::FinalLayout):
  // the ids of its rows that exist, increasing, row k of the variable
  // ([row_ids.size(), width]) being id row_ids[k]'s.
  std::vector<int64_t> row_ids;
};

// VariableSpec::table_rows of an unbounded sparse table.
inline constexpr int64_t kUnboundedTable = -1;

// LayerSpec::inputs' name for the model's input (its first, when it has
// several), and for its input k.
inline constexpr int kModelInput = -1;
inline constexpr int ModelInput(int k) { return -1 - k; }
inline constexpr int ModelInputIndex(int ref) { return -1 - ref; }

// One input of a model with several: its Keras name and its shape per
// example (1 x 1 x F for features).
struct InputSpec {
  std::string name;
  int h = 0, w = 0, c = 0;
  int64_t size() const { return int64_t{h} * w * c; }
};

// One output of a model with several (Keras's output_layers): what the
// loss head needs (LossGroup: its columns, loss, weight) and its name.
struct OutputSpec {
  std::string name;  // the output layer's name: metrics' and labels' (y_train_<name>)
  LossGroup group;
};

struct ModelSpec {
  std::string name;
  // The shape of an example. With several inputs an example is their
  // values one after the other, in `inputs`' order (each input's values in
  // its NHWC order), and this is 1 x 1 x their total.
  int input_height = 0;
  int input_width = 0;
  int input_channels = 0;
  std::vector<InputSpec> inputs;  // empty: one input, of the shape above
  int num_classes = 0;  // the output's width: classes, or K outputs
  LossKind loss = LossKind::kSparseCategoricalCrossentropy;
  // Several outputs: each one's loss and columns, in the model's output
  // order; the last node then joins their columns (num_classes in all)
  // and `loss` is unused. Empty for a model with one output.
  std::vector<OutputSpec> outputs;
  std::vector<LayerSpec> layers;
  // In layer order; within a layer in Keras's get_weights() order: kernel,
  // bias; gamma, beta, moving_mean, moving_variance.
  std::vector<VariableSpec> variables;
  int64_t num_parameters = 0;
};

// The loss head's view of the spec's loss (one, or one per output).
LossSpec LossSpecOf(const ModelSpec& spec);

// Target values per example: TargetsPerExample(LossSpecOf(spec), num_classes).
int TargetsOf(const ModelSpec& spec);

// An activation's shape per example: height x width x channels, NHWC;
// `flat` after a Flatten (then h = w = 1).
struct ActivationShape {
  int h = 0, w = 0, c = 0;
  bool flat = false;
  int64_t size() const { return int64_t{h} * w * c; }
};

// Whether Concatenate node `l` over inputs shaped `in` joins them along
// the steps (Keras's axis 1 of [steps, features] sequences, which a
// [1, features] one is too): then its output is [the steps' total,
// features].
bool ConcatenatesSteps(const LayerSpec& l, const std::vector<ActivationShape>& in);

// Whether a Dot over inputs shaped `in` is Keras's batch_dot of sequences
// (both [steps, features] of 2 steps or more), rather than of flat vectors.
bool DotsSequences(const std::vector<ActivationShape>& in);

// Per node, the Embedding node (mask_zero) whose mask its output carries,
// or -1. A mask passes through Dense, Activation, Dropout and
// LayerNormalization (applied per step, as Keras propagates it), through
// Add, Subtract, Multiply and Average when every masked input's is one
// Embedding's (Keras ANDs them), and ends in a GlobalAveragePooling1D (the
// mean over the steps not masked). An Attention takes its value's mask for
// the keys (a key's mask is not read, as in Keras; MultiHeadAttention's
// key must carry the value's or none) and carries its query's. Any other layer reading a masked
// output is InvalidArgument naming it and the Embedding (Keras 3 would
// drop the mask there, or use it in ways not implemented here).
absl::StatusOr<std::vector<int>> MaskSources(const ModelSpec& spec);

// Each node's output shape, in node order, and checks the graph: inputs
// that come before the node (no cycles), the right number of them, merges
// of fitting shapes, windows that fit. InvalidArgument naming the node
// otherwise. Used by BuildModelSpec and by every backend's plan.
absl::StatusOr<std::vector<ActivationShape>> NodeShapes(const ModelSpec& spec);

// Derives every variable (name, shape, fans, role, offset) of `layers` over
// the input shape, with Keras's default initializers (Glorot-uniform
// kernels, zero biases and betas, unit gammas and moving variances, zero
// moving means); a parser overrides initializers afterwards. InvalidArgument
// naming the layer when a layer does not fit the shape coming into it (a
// window larger than a "valid" input, Dense before Flatten on a 4-D
// activation, ...). The layers' own options are not range-checked here
// beyond what the shapes need.
//
// `inputs`, for a model with several inputs (nodes read ModelInput(k)):
// then the input shape given is ignored and the example's is 1 x 1 x the
// inputs' total.
absl::StatusOr<ModelSpec> BuildModelSpec(std::string name, int input_height,
                                         int input_width, int input_channels,
                                         int num_classes,
                                         std::vector<LayerSpec> layers,
                                         std::vector<InputSpec> inputs = {});

// The shape of model input `ref` (kModelInput or ModelInput(k)).
ActivationShape InputShapeOf(const ModelSpec& spec, int ref);

// Names accepted by ModelByName, for --help texts and error messages.
std::vector<std::string> KnownModels();

// "cnn": the built-in CNN for 28x28x1 inputs, 121,930 parameters:
//   Conv2D(32,3,relu) MaxPool2 Conv2D(64,3,relu) MaxPool2 Flatten
//   Dense(64,relu) Dense(10).
// "mlp": Flatten Dense(32,relu) Dense(10), small and fast for tests.
// The same models ship as model files (model/builtin/cnn.json, model/builtin/mlp.json);
// these builders stay for unit tests that need a spec without a file.
// InvalidArgument naming the model when it is unknown.
absl::StatusOr<ModelSpec> ModelByName(const std::string& name);

// Fills every variable from its initializer. Deterministic in `seed`: every
// variable draws from its own stream derived from the seed and the
// variable's name, so adding a variable does not shift the others. A seed
// written in the model file is ignored: the run's seed decides. An
// Embedding table (the k-th of the model's, in variable order) is made row
// by row with InitialRow(..., table k, id, ...), as a sparse table's rows
// are on the ps (model/sparse_layout.h): a model starts the same whether
// its tables travel whole or as rows.
std::vector<float> InitialParameters(const ModelSpec& spec, uint64_t seed);

// A row of an embedding table's initial values: a pure function of (seed,
// table, id) and the initializer, so that every ps, backup and restarted
// process makes the same row with nothing sent. Element j is drawn from a
// counter-based generator keyed by (seed, table, id, j): a uniform in
// [0, 1) is the top 24 bits of a splitmix64 output, a normal is Box-Muller
// of two of them, and a truncated normal beyond 2 stddev is redrawn from
// the next counters. The limits and stddevs are Keras's, as
// InitialParameters computes them for other variables. out: `width` floats.
void InitialRow(const Initializer& init, int64_t fan_in, int64_t fan_out, uint64_t seed, int table,
                int64_t id, int width, float* out);

// A convolution's kernel shape as Keras holds it: Conv2D's [window_h,
// window_w, in_channels, filters]; Conv1D's (LayerSpec::one_d) [window_w,
// in_channels, filters], the same values in the same order.
std::vector<int64_t> ConvKernelShape(const LayerSpec& l, int64_t in_channels);

// Where variable `name` starts in the flat parameter vector, checked to
// have `shape` and to lie inside the parameters: what a backend's plan of
// the layers looks up. InvalidArgument beginning with `where` otherwise.
absl::StatusOr<int64_t> VariableOffset(const ModelSpec& spec, const std::string& where,
                                       const std::string& name,
                                       const std::vector<int64_t>& shape);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_MODEL_SPEC_H_
