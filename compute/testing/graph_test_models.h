// Models and problems for the tests of the graph engine, on the CPU
// (compute/graph_cpu_engine_test.cc) and on the emulated GPU
// (compute/graph_device_engine_test.cc): specs holding every layer of the
// graph engine, random parameters with non-trivial BatchNormalization
// variables, and the TensorFlow.js reference cases
// (tests/fixtures/tfjs_reference). Tests only.
#ifndef PSCLUSTER_COMPUTE_TESTING_GRAPH_TEST_MODELS_H_
#define PSCLUSTER_COMPUTE_TESTING_GRAPH_TEST_MODELS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"
#include "model/keras_model.h"
#include "model/model_spec.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace testing_models {

using kernels::testing::RandomFloats;

inline LayerSpec L(LayerKind kind, const char* name) {
  LayerSpec l;
  l.kind = kind;
  l.name = name;
  return l;
}
inline LayerSpec Conv(const char* name, int filters, int kh, int kw, int stride, Padding p,
               Activation a, bool bias = true) {
  LayerSpec l = L(LayerKind::kConv2D, name);
  l.units = filters;
  l.window_h = kh, l.window_w = kw;
  l.stride_h = l.stride_w = stride;
  l.padding = p;
  l.activation = a;
  l.use_bias = bias;
  return l;
}
inline LayerSpec Pool(LayerKind kind, const char* name, int window, int stride, Padding p) {
  LayerSpec l = L(kind, name);
  l.window_h = l.window_w = window;
  l.stride_h = l.stride_w = stride;
  l.padding = p;
  return l;
}
inline LayerSpec Act(const char* name, Activation a) {
  LayerSpec l = L(LayerKind::kActivation, name);
  l.activation = a;
  return l;
}
inline LayerSpec Drop(const char* name, float rate) {
  LayerSpec l = L(LayerKind::kDropout, name);
  l.rate = rate;
  return l;
}
inline LayerSpec Dense(const char* name, int units, Activation a) {
  LayerSpec l = L(LayerKind::kDense, name);
  l.units = units;
  l.activation = a;
  return l;
}
inline LayerSpec Bn(const char* name, bool center = true, bool scale = true) {
  LayerSpec l = L(LayerKind::kBatchNorm, name);
  l.center = center;
  l.scale = scale;
  l.momentum = 0.9f;
  return l;
}

// Every new layer: strided "same" and rectangular convolutions, BN on 4-D
// and 2-D activations, max and average pooling with overlapping windows
// and padding, Dropout, global average pooling, sigmoid and tanh.
inline ModelSpec EveryLayer() {
  return *BuildModelSpec(
      "every_layer", 7, 6, 2, 3,
      {Conv("conv_a", 3, 3, 2, 2, Padding::kSame, Activation::kTanh), Bn("bn_a"),
       Pool(LayerKind::kMaxPool2D, "max", 3, 1, Padding::kSame),
       Conv("conv_b", 4, 2, 2, 1, Padding::kValid, Activation::kNone, /*bias=*/false),
       Act("sig", Activation::kSigmoid),
       Pool(LayerKind::kAvgPool2D, "avg", 2, 1, Padding::kSame), Drop("drop", 0.3f),
       L(LayerKind::kGlobalAvgPool2D, "gap"), Dense("fc", 5, Activation::kTanh),
       Bn("bn_fc", /*center=*/false), Dense("out", 3, Activation::kSoftmax)});
}

// Flatten, a ReLU layer, BN without gamma, and Dense straight on a
// Flatten of a "same" convolution.
inline ModelSpec FlattenModel() {
  return *BuildModelSpec("flatten_model", 5, 5, 1, 4,
                         {Conv("conv", 3, 3, 3, 1, Padding::kSame, Activation::kNone),
                          Bn("bn", true, /*scale=*/false), Act("relu", Activation::kRelu),
                          L(LayerKind::kFlatten, "flatten"), Drop("drop", 0.5f),
                          Dense("out", 4, Activation::kNone)});
}

// Strided windows below a layer with parameters, so that their backward
// passes run: average pooling, convolution and max pooling, each 3x3 with
// stride 2 and "same" padding (odd total padding, at the bottom/right).
inline ModelSpec StridedModel() {
  return *BuildModelSpec(
      "strided", 9, 9, 2, 3,
      {Conv("conv0", 3, 2, 2, 1, Padding::kValid, Activation::kTanh),
       Pool(LayerKind::kAvgPool2D, "avg", 3, 2, Padding::kSame),
       Conv("conv_s", 4, 3, 3, 2, Padding::kSame, Activation::kTanh),
       Pool(LayerKind::kMaxPool2D, "max", 3, 2, Padding::kSame), L(LayerKind::kFlatten, "flatten"),
       Dense("out", 3, Activation::kNone)});
}

// `l` reading nodes `inputs` (kModelInput: the image).
inline LayerSpec From(LayerSpec l, std::vector<int> inputs) {
  l.inputs = std::move(inputs);
  return l;
}

// A graph with every merge, a layer applied twice (its weights shared and
// its gradient the sum of both uses'), a node read by several others and
// one read twice by a merge, BN and Dropout on branches.
inline ModelSpec GraphModel() {
  const int in = kModelInput;
  return *BuildModelSpec(
      "graph", 6, 5, 2, 3,
      {From(Conv("conv_a", 3, 3, 3, 1, Padding::kSame, Activation::kTanh), {in}),      // 0
       From(Conv("conv_b", 3, 3, 2, 1, Padding::kSame, Activation::kNone), {in}),      // 1
       From(L(LayerKind::kAdd, "sum"), {0, 1}),                                        // 2
       From(L(LayerKind::kSubtract, "diff"), {0, 1}),                                  // 3
       From(L(LayerKind::kMultiply, "prod"), {2, 3, 0}),                               // 4
       From(L(LayerKind::kAverage, "mean"), {1, 2, 2}),                                // 5
       From(Bn("bn"), {4}),                                                            // 6
       From(L(LayerKind::kConcatenate, "cat"), {6, 5, 0}),                             // 7
       From(Conv("shared", 9, 1, 1, 1, Padding::kValid, Activation::kSigmoid), {7}),   // 8
       From(Conv("shared", 9, 1, 1, 1, Padding::kValid, Activation::kSigmoid), {8}),   // 9
       From(Drop("drop", 0.25f), {9}),                                                 // 10
       From(L(LayerKind::kAdd, "skip"), {10, 7}),                                      // 11
       From(L(LayerKind::kGlobalAvgPool2D, "gap"), {11}),                              // 12
       From(Dense("out", 3, Activation::kNone), {12})});                               // 13
}

// The modern layers without variables and every activation: Rescaling,
// ZeroPadding2D, gelu in a convolution (an op of its own), Reshape,
// swish, elu and hard_sigmoid layers, GlobalMaxPooling2D beside global
// average pooling, leaky_relu in a Dense layer.
inline ModelSpec ModernModel() {
  const int in = kModelInput;
  LayerSpec rescale = L(LayerKind::kRescaling, "rescale");
  rescale.rescale = 2.0f, rescale.reshift = -1.0f;
  LayerSpec pad = L(LayerKind::kZeroPadding2D, "pad");
  pad.pad_top = 1, pad.pad_bottom = 0, pad.pad_left = 2, pad.pad_right = 1;
  LayerSpec reshape = L(LayerKind::kReshape, "reshape");
  reshape.target_shape = {4, 6, -1};
  LayerSpec elu = Act("elu", Activation::kElu);
  elu.alpha = 0.7f;
  LayerSpec hard = Act("hard", Activation::kHardSigmoid);
  hard.alpha = 1.0f / 6;
  LayerSpec fc = Dense("fc", 5, Activation::kLeakyRelu);
  fc.alpha = 0.2f;
  return *BuildModelSpec(
      "modern", 5, 4, 2, 3,
      {From(rescale, {in}),                                                       // 0
       From(pad, {0}),                                                            // 1: 6x7x2
       From(Conv("conv", 4, 3, 3, 1, Padding::kSame, Activation::kGelu), {1}),   // 2: 6x7x4
       From(reshape, {2}),                                                        // 3: 4x6x7
       From(Act("swish", Activation::kSwish), {3}),                              // 4
       From(elu, {4}),                                                            // 5
       From(hard, {3}),                                                           // 6
       From(L(LayerKind::kGlobalMaxPool2D, "gmp"), {5}),                         // 7
       From(L(LayerKind::kGlobalAvgPool2D, "gap"), {6}),                         // 8
       From(L(LayerKind::kConcatenate, "cat"), {7, 8}),                          // 9
       From(fc, {9}),                                                             // 10
       From(Dense("out", 3, Activation::kNone), {10})});                         // 11
}

// The modern CNNs' layers with variables, and regularizers: a dilated
// "same" Conv2D, LayerNormalization on 4-D and 2-D activations,
// DepthwiseConv2D (strided, depth multiplier 2) and SeparableConv2D side by
// side into an Add, a SeparableConv2D applied twice (one set of variables),
// L1 and L2 penalties on kernels, a depthwise kernel, a pointwise kernel
// and a beta.
inline ModelSpec ModernConvModel() {
  const int in = kModelInput;
  LayerSpec dilated = Conv("dilated", 4, 3, 3, 1, Padding::kSame, Activation::kTanh);
  dilated.dilation_h = 2, dilated.dilation_w = 2;
  auto window = [](LayerKind kind, const char* name, int units, int stride, int multiplier,
                   Activation a) {
    LayerSpec l = L(kind, name);
    l.units = units;
    l.window_h = l.window_w = 3;
    l.stride_h = l.stride_w = stride;
    l.padding = Padding::kSame;
    l.depth_multiplier = multiplier;
    l.activation = a;
    return l;
  };
  LayerSpec depthwise =
      window(LayerKind::kDepthwiseConv2D, "depthwise", 0, 2, 2, Activation::kSwish);
  LayerSpec separable =
      window(LayerKind::kSeparableConv2D, "separable", 8, 2, 1, Activation::kElu);
  separable.alpha = 1.0f;
  LayerSpec shared = window(LayerKind::kSeparableConv2D, "shared", 8, 1, 1, Activation::kTanh);
  ModelSpec spec = *BuildModelSpec(
      "modern_conv", 7, 6, 3, 3,
      {From(dilated, {in}),                                       // 0: 7x6x4
       From(L(LayerKind::kLayerNorm, "ln"), {0}),                 // 1
       From(depthwise, {1}),                                      // 2: 4x3x8
       From(separable, {1}),                                      // 3: 4x3x8
       From(L(LayerKind::kAdd, "add"), {2, 3}),                   // 4
       From(shared, {4}),                                         // 5
       From(shared, {5}),                                         // 6: shared's second use
       From(L(LayerKind::kGlobalAvgPool2D, "gap"), {6}),          // 7: 8
       From(L(LayerKind::kLayerNorm, "ln_flat"), {7}),            // 8
       From(Dense("out", 3, Activation::kNone), {8})});           // 9
  for (VariableSpec& v : spec.variables) {
    if (v.name == "dilated/kernel" || v.name == "shared/pointwise_kernel") v.l2 = 0.01f;
    if (v.name == "depthwise/depthwise_kernel" || v.name == "out/kernel") {
      v.l1 = 0.001f, v.l2 = 0.002f;
    }
    if (v.name == "ln_flat/beta") v.l1 = 0.01f;
  }
  return spec;
}

// Two inputs, declared vector then image (the example: the vector's 4
// values, then the image's 5x4x2): a convolution on the image, a Flatten
// of it, a Dense on the vector, added.
inline ModelSpec InputsModel() {
  return *BuildModelSpec(
      "inputs", 0, 0, 0, 3,
      {From(Conv("conv", 3, 3, 3, 1, Padding::kSame, Activation::kTanh), {ModelInput(1)}),  // 0
       From(L(LayerKind::kGlobalAvgPool2D, "gap"), {0}),                                    // 1
       From(Dense("vec", 3, Activation::kTanh), {ModelInput(0)}),                          // 2
       From(L(LayerKind::kFlatten, "flat"), {ModelInput(1)}),                              // 3
       From(Dense("img", 3, Activation::kSigmoid), {3}),                                   // 4
       From(L(LayerKind::kAdd, "add"), {1, 2, 4}),                                         // 5
       From(Dense("out", 3, Activation::kNone), {5})},                                     // 6
      {InputSpec{"vector", 1, 1, 4}, InputSpec{"image", 5, 4, 2}});
}

struct Problem {
  ModelSpec spec;
  std::vector<float> params, images;
  std::vector<float> labels;  // class indices
  int batch;
};

inline Problem Make(ModelSpec spec, int batch, uint32_t seed) {
  Problem p{std::move(spec), {}, {}, {}, batch};
  p.params = InitialParameters(p.spec, seed);
  // Non-trivial gammas, betas and moving statistics.
  for (const VariableSpec& v : p.spec.variables) {
    if (v.initializer.kind == Initializer::Kind::kVarianceScaling) continue;
    std::vector<float> r = RandomFloats(v.size, seed + static_cast<uint32_t>(v.offset), 0.5f,
                                        1.5f);
    for (int64_t i = 0; i < v.size; ++i) {
      p.params[v.offset + i] =
          v.role == VariableRole::kMovingMean ? r[i] - 1.0f : r[i];
    }
  }
  const int64_t in = int64_t{p.spec.input_height} * p.spec.input_width * p.spec.input_channels;
  p.images = RandomFloats(batch * in, seed + 1, 0.0f, 1.0f);
  for (int i = 0; i < batch; ++i) p.labels.push_back(static_cast<float>(i % p.spec.num_classes));
  return p;
}

// A model TensorFlow.js ran on fixed weights and inputs, with the summed
// losses it computed in inference and in training mode, each plus batch
// times the regularizers' sum (Keras's loss is the mean loss plus them;
// ours is too). sgd_losses, where given: what tfjs's trainOnBatch reported
// (mean loss plus regularizers) before each of its steps of plain SGD with
// sgd_learning_rate on that batch.
struct ReferenceCase {
  ModelSpec spec;
  std::vector<float> params, images;
  std::vector<float> labels;  // class indices
  double inference_loss_sum = 0;
  double training_loss_sum = 0;
  double sgd_learning_rate = 0;
  std::vector<double> sgd_losses;
  // What tfjs computed, where the file has it: the outputs of the batch,
  // and the gradient of its mean loss by variable name.
  std::vector<float> outputs;
  std::map<std::string, std::vector<float>> gradients;
};

// tests/fixtures/tfjs_reference/reference.json; throws std::runtime_error
// naming what is wrong with it.
// `path`: reference.json (chains), graphs.json (Functional graphs) or
// modern_graph.json (modern CNNs' layers and regularizers).
inline std::vector<ReferenceCase> LoadTfjsReference(
    const std::string& path = "tests/fixtures/tfjs_reference/reference.json") {
  std::ifstream in(path);
  if (!in.good()) throw std::runtime_error("cannot read " + path);
  const nlohmann::json ref = nlohmann::json::parse(in);
  std::vector<ReferenceCase> cases;
  for (const nlohmann::json& m : ref["models"]) {
    absl::StatusOr<ModelSpec> spec = ParseKerasModel(m["model_json"].dump(), "ref");
    if (!spec.ok()) throw std::runtime_error(std::string(spec.status().message()));
    ReferenceCase c;
    c.spec = *std::move(spec);
    c.params.assign(c.spec.num_parameters, 0.0f);
    for (const VariableSpec& v : c.spec.variables) {
      const std::vector<float> w = m["weights"].at(v.name).get<std::vector<float>>();
      if (static_cast<int64_t>(w.size()) != v.size) {
        throw std::runtime_error("reference weights of " + v.name + " have the wrong size");
      }
      std::copy(w.begin(), w.end(), c.params.begin() + v.offset);
    }
    c.images = m["images"].get<std::vector<float>>();
    for (int l : m["labels"]) c.labels.push_back(static_cast<float>(l));
    const double penalty = m.value("regularization_loss", 0.0) * c.labels.size();
    c.inference_loss_sum = m["inference_loss_sum"].get<double>() + penalty;
    c.training_loss_sum = m["training_loss_sum"].get<double>() + penalty;
    c.sgd_learning_rate = m.value("sgd_learning_rate", 0.0);
    if (m.contains("sgd_losses")) c.sgd_losses = m["sgd_losses"].get<std::vector<double>>();
    if (m.contains("outputs")) c.outputs = m["outputs"].get<std::vector<float>>();
    if (m.contains("gradients")) {
      c.gradients = m["gradients"].get<std::map<std::string, std::vector<float>>>();
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

// Every variable's gradient in `grads` is TensorFlow.js's for `m` within
// `tolerance` (a test failure names the variable and element); returns the
// largest difference.
inline double ExpectGradientsAreTfjs(const ReferenceCase& m, const std::vector<float>& grads,
                                     double tolerance = 1e-6) {
  double largest = 0;
  for (const VariableSpec& v : m.spec.variables) {
    EXPECT_EQ(m.gradients.count(v.name), 1u) << m.spec.name << " " << v.name;
    if (m.gradients.count(v.name) != 1) continue;
    const std::vector<float>& g = m.gradients.at(v.name);
    EXPECT_EQ(static_cast<int64_t>(g.size()), v.size) << m.spec.name << " " << v.name;
    if (static_cast<int64_t>(g.size()) != v.size) continue;
    for (int64_t k = 0; k < v.size; ++k) {
      EXPECT_NEAR(grads[v.offset + k], g[k], tolerance) << m.spec.name << " " << v.name << k;
      largest = std::max(largest, std::fabs(double{grads[v.offset + k]} - g[k]));
    }
  }
  return largest;
}

}  // namespace testing_models
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_TESTING_GRAPH_TEST_MODELS_H_
