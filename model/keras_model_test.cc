#include "model/keras_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

std::string Fixture(const std::string& name) {
  absl::StatusOr<std::string> text = ReadModelFile("tests/fixtures/keras/" + name);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

ModelSpec Parse(const std::string& text, const std::string& source) {
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(text, source);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ModelSpec();
}

void ExpectSameSpec(const ModelSpec& a, const ModelSpec& b) {
  EXPECT_EQ(a.input_height, b.input_height);
  EXPECT_EQ(a.input_width, b.input_width);
  EXPECT_EQ(a.input_channels, b.input_channels);
  EXPECT_EQ(a.num_classes, b.num_classes);
  EXPECT_EQ(a.num_parameters, b.num_parameters);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const LayerSpec &x = a.layers[i], &y = b.layers[i];
    EXPECT_EQ(x.kind, y.kind) << x.name;
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.units, y.units) << x.name;
    EXPECT_EQ(x.window_h, y.window_h) << x.name;
    EXPECT_EQ(x.window_w, y.window_w) << x.name;
    EXPECT_EQ(x.stride_h, y.stride_h) << x.name;
    EXPECT_EQ(x.stride_w, y.stride_w) << x.name;
    EXPECT_EQ(x.padding, y.padding) << x.name;
    EXPECT_EQ(x.use_bias, y.use_bias) << x.name;
    EXPECT_EQ(x.activation, y.activation) << x.name;
  }
  ASSERT_EQ(a.variables.size(), b.variables.size());
  for (size_t i = 0; i < a.variables.size(); ++i) {
    const VariableSpec &x = a.variables[i], &y = b.variables[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.shape, y.shape) << x.name;
    EXPECT_EQ(x.offset, y.offset) << x.name;
    EXPECT_EQ(x.fan_in, y.fan_in) << x.name;
    EXPECT_EQ(x.fan_out, y.fan_out) << x.name;
    EXPECT_EQ(x.initializer.kind, y.initializer.kind) << x.name;
    EXPECT_EQ(x.initializer.scale, y.initializer.scale) << x.name;
    EXPECT_EQ(x.initializer.mode, y.initializer.mode) << x.name;
    EXPECT_EQ(x.initializer.distribution, y.initializer.distribution) << x.name;
  }
}

// The shipped files are the built-in models: the same layout and, so, the
// same initial parameters (the built-in CNN gives today's numbers).
TEST(KerasModelTest, ShippedCnnAndMlpAreTheBuiltInModels) {
  for (const char* name : {"cnn", "mlp"}) {
    absl::StatusOr<std::string> text = ReadModelFile(name);
    ASSERT_TRUE(text.ok()) << text.status();
    absl::StatusOr<std::string> file = ReadModelFile(std::string("model/builtin/") + name + ".json");
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(*text, *file) << "the binary's copy of model/builtin/" << name << ".json differs";
    ModelSpec parsed = Parse(*text, name);
    ModelSpec built = *ModelByName(name);
    ExpectSameSpec(parsed, built);
    EXPECT_EQ(InitialParameters(parsed, 42), InitialParameters(built, 42)) << name;
  }
}

TEST(KerasModelTest, ShippedVggAndLargeMlp) {
  ModelSpec vgg = Parse(*ReadModelFile("vgg_fashion"), "vgg_fashion");
  EXPECT_EQ(vgg.num_classes, 10);
  int bn = 0, dropout = 0;
  for (const LayerSpec& l : vgg.layers) {
    bn += l.kind == LayerKind::kBatchNorm;
    dropout += l.kind == LayerKind::kDropout;
  }
  EXPECT_EQ(bn, 3);
  EXPECT_EQ(dropout, 2);
  EXPECT_EQ(vgg.variables[0].name, "block1_conv/kernel");
  EXPECT_EQ(vgg.variables[0].initializer.mode, Initializer::Mode::kFanIn);  // HeNormal
  EXPECT_EQ(vgg.variables[0].initializer.scale, 2.0);
  ModelSpec large = Parse(*ReadModelFile("mlp_large"), "mlp_large");
  EXPECT_GE(large.num_parameters, 20000000);
  EXPECT_EQ(large.num_parameters, 784 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10);
  ModelSpec deep = Parse(*ReadModelFile("mlp_deep"), "mlp_deep");
  EXPECT_EQ(deep.num_parameters, 784 * 2048 + 2048 + 4 * (2048 * 2048 + 2048) + 2048 * 10 + 10);
  EXPECT_EQ(deep.variables.size(), 12u);  // six Dense layers' kernels and biases
}

TEST(KerasModelTest, TensorFlowJsToJson) {
  ModelSpec s = Parse(Fixture("tfjs_cnn.json"), "tfjs_cnn.json");
  EXPECT_EQ(s.input_height, 28);
  EXPECT_EQ(s.input_channels, 1);
  EXPECT_EQ(s.num_classes, 10);
  ASSERT_EQ(s.layers.size(), 10u);
  EXPECT_EQ(s.layers[0].padding, Padding::kSame);
  EXPECT_EQ(s.layers[1].kind, LayerKind::kBatchNorm);
  EXPECT_FLOAT_EQ(s.layers[1].momentum, 0.9f);
  EXPECT_EQ(s.layers[3].kind, LayerKind::kMaxPool2D);
  EXPECT_EQ(s.layers[3].window_h, 3);
  EXPECT_EQ(s.layers[3].stride_h, 2);
  EXPECT_EQ(s.layers[4].window_h, 3);
  EXPECT_EQ(s.layers[4].window_w, 2);
  EXPECT_EQ(s.layers[4].activation, Activation::kTanh);
  EXPECT_EQ(s.layers[5].kind, LayerKind::kAvgPool2D);
  EXPECT_EQ(s.layers[7].kind, LayerKind::kGlobalAvgPool2D);
  EXPECT_EQ(s.layers[9].activation, Activation::kSoftmax);
  // fc's VarianceScaling(1.5, fanIn, uniform) as tfjs wrote it.
  for (const VariableSpec& v : s.variables) {
    if (v.name != "fc/kernel") continue;
    EXPECT_EQ(v.initializer.kind, Initializer::Kind::kVarianceScaling);
    EXPECT_EQ(v.initializer.scale, 1.5);
    EXPECT_EQ(v.initializer.mode, Initializer::Mode::kFanIn);
    EXPECT_EQ(v.initializer.distribution, Initializer::Distribution::kUniform);
  }
  // 28 -same-> 28 -pool 3/2 same-> 14 -conv 3x2 stride 2 valid-> 6x7.
  EXPECT_EQ(s.variables[0].name, "conv_a/kernel");
  EXPECT_EQ(s.variables[2].name, "bn_a/gamma");
  EXPECT_EQ(s.variables[5].name, "bn_a/moving_variance");
  EXPECT_EQ(s.variables[5].role, VariableRole::kMovingVariance);
  EXPECT_EQ(s.variables[6].shape, (std::vector<int64_t>{3, 2, 8, 16}));
}

TEST(KerasModelTest, TensorFlowJsModelJsonTakesTheTopology) {
  ModelSpec s = Parse(Fixture("tfjs_plain.json"), "tfjs_plain.json");
  EXPECT_EQ(s.num_parameters, (9 * 8 + 8) + (13 * 13 * 8 * 32 + 32) + (32 * 10 + 10));
}

TEST(KerasModelTest, Keras3JsonAndKerasArchiveAgree) {
  ModelSpec json = Parse(Fixture("keras3_cnn.json"), "keras3_cnn.json");
  ModelSpec archive = Parse(Fixture("keras3_cnn.keras"), "keras3_cnn.keras");
  ExpectSameSpec(json, archive);
  EXPECT_EQ(json.layers[1].kind, LayerKind::kBatchNorm);
  EXPECT_EQ(json.variables[0].initializer.mode, Initializer::Mode::kFanIn);  // HeUniform
}

TEST(KerasModelTest, Keras2AndFunctionalChain) {
  ModelSpec k2 = Parse(Fixture("keras2_cnn.json"), "keras2_cnn.json");
  EXPECT_EQ(k2.num_parameters, (9 * 8 + 8) + (13 * 13 * 8 * 10 + 10));
  ModelSpec f = Parse(Fixture("functional_chain.json"), "functional_chain.json");
  EXPECT_EQ(f.num_parameters, (784 * 16 + 16) + (16 * 10 + 10));
}

// A Keras 3 template with one layer that each case replaces.
const char* kTemplate = R"({"class_name": "Sequential", "config": {"name": "m", "layers": [
  {"class_name": "InputLayer", "config": {"batch_shape": [null, 8, 8, 1], "name": "in"}},
  LAYER,
  {"class_name": "Flatten", "config": {"name": "flat"}},
  {"class_name": "Dense", "config": {"name": "out", "units": 3, "activation": "softmax"}}]}})";

std::string WithLayer(const std::string& layer) {
  return absl::StrReplaceAll(kTemplate, {{"LAYER", layer}});
}

// Functional graphs: TensorFlow.js's ResNet-style model (residual blocks,
// projections, BatchNormalization) and Keras 3's node format with
// Subtract, Concatenate and a Dense layer applied twice.
TEST(KerasModelTest, FunctionalGraphs) {
  const ModelSpec resnet = Parse(Fixture("tfjs_resnet.json"), "tfjs_resnet.json");
  EXPECT_EQ(resnet.num_classes, 10);
  EXPECT_EQ(resnet.input_height, 28);
  int adds = 0;
  for (size_t i = 0; i < resnet.layers.size(); ++i) {
    const LayerSpec& l = resnet.layers[i];
    for (int j : l.inputs) EXPECT_LT(j, static_cast<int>(i)) << l.name;  // inputs first
    if (l.kind != LayerKind::kAdd) continue;
    ++adds;
    ASSERT_EQ(l.inputs.size(), 2u) << l.name;
    // The block's second BN and the shortcut (the block's input or its projection).
    EXPECT_EQ(resnet.layers[l.inputs[0]].name, l.name.substr(0, 4) + "_bn2");
  }
  EXPECT_EQ(adds, 3);
  EXPECT_EQ(resnet.layers.back().name, "logits");

  const ModelSpec g = Parse(Fixture("keras3_graph.json"), "keras3_graph.json");
  std::vector<std::string> names;
  for (const LayerSpec& l : g.layers) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"stem", "branch", "diff", "cat", "gap", "shared",
                                             "shared", "skip", "logits"}));
  EXPECT_EQ(g.layers[0].inputs, std::vector<int>{kModelInput});
  EXPECT_EQ(g.layers[2].inputs, (std::vector<int>{1, 0}));  // branch - stem
  EXPECT_EQ(g.layers[3].inputs, (std::vector<int>{2, 0}));
  EXPECT_EQ(g.layers[6].inputs, std::vector<int>{5});  // the second application
  EXPECT_EQ(g.layers[7].inputs, (std::vector<int>{6, 4}));
  EXPECT_EQ(g.num_classes, 5);
  int shared_vars = 0;
  for (const VariableSpec& v : g.variables) shared_vars += v.name.rfind("shared/", 0) == 0;
  EXPECT_EQ(shared_vars, 2);  // one kernel and one bias for both applications
  // stem 3*3*1*4+4, branch 3*3*4*4+4, shared 8*8+8, logits 8*5+5.
  EXPECT_EQ(g.num_parameters, 40 + 148 + 72 + 45);
}

// The loss: from a flag, the file's compile or training config (every
// spelling Keras writes), or the output (sigmoid: binary); outputs of any
// width.
// Several inputs (TensorFlow.js's model in graphs.json: an image and two
// vectors, declared right, image, left): in the model's input order, each
// with its shape, the example their values end to end.
TEST(KerasModelTest, SeveralInputsInTheModelsOrder) {
  std::ifstream in("tests/fixtures/tfjs_reference/graphs.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  const ModelSpec spec = Parse(ref["models"][3]["model_json"].dump(), "inputs");
  ASSERT_EQ(spec.inputs.size(), 3u);
  EXPECT_EQ(spec.inputs[0].name, "right");
  EXPECT_EQ(spec.inputs[1].name, "image");
  EXPECT_EQ(spec.inputs[1].h, 4);
  EXPECT_EQ(spec.inputs[1].w, 3);
  EXPECT_EQ(spec.inputs[1].c, 2);
  EXPECT_EQ(spec.inputs[2].name, "left");
  EXPECT_EQ(spec.inputs[2].c, 5);
  EXPECT_EQ(spec.input_height, 1);
  EXPECT_EQ(spec.input_channels, 5 + 24 + 5);
  for (const LayerSpec& l : spec.layers) {
    if (l.name == "conv") {
      EXPECT_EQ(l.inputs, std::vector<int>{ModelInput(1)});
    }
  }
  // The shared Dense reads left (input 2) and right (input 0).
  std::vector<int> shared;
  for (const LayerSpec& l : spec.layers) {
    if (l.name == "shared") shared.push_back(l.inputs[0]);
  }
  std::sort(shared.begin(), shared.end());
  EXPECT_EQ(shared, (std::vector<int>{ModelInput(2), ModelInput(0)}));
}

TEST(KerasModelTest, LossFromFlagFileOrOutput) {
  auto model = [](const char* activation, int units, const std::string& tail) {
    return absl::StrCat(R"({"class_name": "Sequential", "config": {"layers": [
      {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"}},
      {"class_name": "Dense", "config": {"name": "d", "units": )",
                        units, R"(, "activation": ")", activation, R"("}}]})", tail, "}");
  };
  EXPECT_EQ(Parse(model("softmax", 1000, ""), "m").loss, LossKind::kSparseCategoricalCrossentropy);
  EXPECT_EQ(Parse(model("softmax", 1000, ""), "m").num_classes, 1000);
  EXPECT_EQ(Parse(model("sigmoid", 3, ""), "m").loss, LossKind::kBinaryCrossentropy);
  EXPECT_EQ(Parse(model("linear", 2, R"(, "compile_config": {"loss": "mse"})"), "m").loss,
            LossKind::kMeanSquaredError);
  EXPECT_EQ(Parse(model("linear", 2,
                        R"(, "compile_config": {"loss": {"module": "keras.losses",
                           "class_name": "MeanAbsoluteError", "config": {"reduction":
                           "sum_over_batch_size"}}})"),
                  "m")
                .loss,
            LossKind::kMeanAbsoluteError);
  EXPECT_EQ(Parse(model("softmax", 5, R"(, "training_config": {"loss": "categoricalCrossentropy"})"),
                  "m")
                .loss,
            LossKind::kCategoricalCrossentropy);
  EXPECT_EQ(Parse(model("linear", 1, R"(, "training_config": {"loss": {"class_name":
                        "BinaryCrossentropy", "config": {"from_logits": true}}})"),
                  "m")
                .loss,
            LossKind::kBinaryCrossentropy);
  // TensorFlow.js's model.json keeps the loss in its trainingConfig.
  EXPECT_EQ(Parse(Fixture("../losses/regression/model.json"), "r").loss,
            LossKind::kMeanSquaredError);
  EXPECT_EQ(Parse(Fixture("../losses/regression/model.json"), "r").num_classes, 2);
  EXPECT_EQ(Parse(Fixture("../losses/binary/model.json"), "b").loss,
            LossKind::kBinaryCrossentropy);
  // Logits summed before the loss (DeepFM: the deep tower's Dense and the
  // factorization machine's terms, then one sigmoid): binary, one output.
  const auto summed = [](const char* activation) {
    return absl::StrCat(R"({"class_name": "Functional", "config": {"output_layers":
      [["click", 0, 0]], "layers": [
      {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"},
       "inbound_nodes": []},
      {"class_name": "Dense", "config": {"name": "deep", "units": 1, "activation": ")",
                        activation, R"("}, "inbound_nodes": [[["i", 0, 0, {}]]]},
      {"class_name": "Dense", "config": {"name": "wide", "units": 1},
       "inbound_nodes": [[["i", 0, 0, {}]]]},
      {"class_name": "Add", "config": {"name": "logit"},
       "inbound_nodes": [[["deep", 0, 0, {}], ["wide", 0, 0, {}]]]},
      {"class_name": "Activation", "config": {"name": "click", "activation": "sigmoid"},
       "inbound_nodes": [[["logit", 0, 0, {}]]]}]}})");
  };
  EXPECT_EQ(Parse(summed("linear"), "m").loss, LossKind::kBinaryCrossentropy);
  EXPECT_EQ(Parse(summed("linear"), "m").num_classes, 1);
  absl::StatusOr<ModelSpec> squashed = ParseKerasModel(summed("sigmoid"), "m");
  ASSERT_FALSE(squashed.ok());
  EXPECT_NE(squashed.status().message().find(
                "m: layer 'deep': its outputs are summed by the Add layer 'logit' before the "
                "loss: its activation must be linear (logits)"),
            std::string::npos)
      << squashed.status();
  absl::StatusOr<ModelSpec> flagged =
      ParseKerasModel(model("tanh", 2, R"(, "training_config": {"loss": "mae"})"), "m", "mse");
  ASSERT_TRUE(flagged.ok()) << flagged.status();
  EXPECT_EQ(flagged->loss, LossKind::kMeanSquaredError);  // the flag wins
}

// The modern convolutions and normalisation with Keras 3's spellings:
// variables named and shaped as Keras names and shapes them (get_weights()
// order), dilation, the depth multiplier, and regularizers in each form
// Keras writes (a name, L1, L2, L1L2 with their defaults), ignored on a
// variable the layer lacks.
TEST(KerasModelTest, ModernConvolutionsNormalisationAndRegularizers) {
  const ModelSpec spec = Parse(R"({"class_name": "Sequential", "config": {"name": "m",
    "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 9, 9, 3], "name": "in"}},
    {"module": "keras.layers", "class_name": "Conv2D", "config": {"name": "dil", "filters": 4,
      "kernel_size": [3, 3], "dilation_rate": [2, 2], "padding": "valid", "use_bias": false,
      "kernel_regularizer": "l2", "bias_regularizer": {"class_name": "L1", "config": {}}}},
    {"class_name": "DepthwiseConv2D", "config": {"name": "dw", "kernel_size": 3,
      "strides": 2, "padding": "same", "depth_multiplier": 2, "activation": "relu",
      "depthwise_regularizer": {"module": "keras.regularizers", "class_name": "L1L2",
        "config": {"l1": 0.5}, "registered_name": null}}},
    {"class_name": "SeparableConv2D", "config": {"name": "sep", "filters": 6,
      "kernel_size": [3, 3], "padding": "same",
      "pointwise_regularizer": {"class_name": "L1L2", "config": {"l1": 0.001, "l2": 0.002}}}},
    {"class_name": "LayerNormalization", "config": {"name": "ln", "axis": -1, "epsilon": 1e-5,
      "center": false, "gamma_regularizer": {"class_name": "L2", "config": {"l2": 0.25}}}},
    {"class_name": "GlobalMaxPooling2D", "config": {"name": "gmp"}},
    {"class_name": "LayerNormalization", "config": {"name": "ln2", "axis": [1]}},
    {"class_name": "Dense", "config": {"name": "out", "units": 3, "activation": "softmax"}}]}})",
                               "m");
  struct Want {
    const char* name;
    std::vector<int64_t> shape;
    float l1, l2;
  } want[] = {{"dil/kernel", {3, 3, 3, 4}, 0, 0.01f},
              {"dw/depthwise_kernel", {3, 3, 4, 2}, 0.5f, 0},
              {"dw/bias", {8}, 0, 0},
              {"sep/depthwise_kernel", {3, 3, 8, 1}, 0, 0},
              {"sep/pointwise_kernel", {1, 1, 8, 6}, 0.001f, 0.002f},
              {"sep/bias", {6}, 0, 0},
              {"ln/gamma", {6}, 0, 0.25f},
              {"ln2/gamma", {6}, 0, 0},
              {"ln2/beta", {6}, 0, 0},
              {"out/kernel", {6, 3}, 0, 0},
              {"out/bias", {3}, 0, 0}};
  ASSERT_EQ(spec.variables.size(), std::size(want));
  for (size_t i = 0; i < spec.variables.size(); ++i) {
    const VariableSpec& v = spec.variables[i];
    EXPECT_EQ(v.name, want[i].name);
    EXPECT_EQ(v.shape, want[i].shape) << v.name;
    EXPECT_EQ(v.l1, want[i].l1) << v.name;
    EXPECT_EQ(v.l2, want[i].l2) << v.name;
  }
  EXPECT_EQ(spec.layers[0].dilation_h, 2);
  EXPECT_EQ(spec.layers[1].depth_multiplier, 2);
  EXPECT_EQ(spec.layers[3].epsilon, 1e-5f);
  // Fans as Keras computes them for the Glorot initializers.
  EXPECT_EQ(spec.variables[1].fan_in, 9 * 4);
  EXPECT_EQ(spec.variables[1].fan_out, 9 * 2);
  EXPECT_EQ(spec.variables[4].fan_in, 8);
  EXPECT_EQ(spec.variables[4].fan_out, 6);
  // TensorFlow.js's toJSON of the same kinds (modern_graph.json's models).
  std::ifstream in("tests/fixtures/tfjs_reference/modern_graph.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  for (const nlohmann::json& m : ref["models"]) {
    const ModelSpec tfjs = Parse(m["model_json"].dump(), "modern_graph.json");
    for (const VariableSpec& v : tfjs.variables) {
      EXPECT_TRUE(m["weights"].contains(v.name)) << v.name;
      EXPECT_EQ(m["weights"][v.name].size(), static_cast<size_t>(v.size)) << v.name;
    }
    EXPECT_EQ(tfjs.variables.size(), m["weights"].size());
  }
}

TEST(KerasModelTest, RefusesWhatItCannotRunNamingLayerAndOption) {
  struct Case {
    const char* layer;
    const char* expect;  // in the message
  } cases[] = {
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
          "dilation_rate": [2, 2], "strides": 2}})",
       "layer 'c' (Conv2D): option 'dilation_rate' = [2,2] with 'strides' = 2 is not supported"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
          "dilation_rate": [4, 4]}})",
       "layer c: convolution kernel 3x3 stride 1x1 dilation 4x4 does not fit its input 8x8x1"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
          "kernel_constraint": {"class_name": "MaxNorm", "config": {"max_value": 2}}}})",
       "layer 'c' (Conv2D): option 'kernel_constraint'"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
          "activity_regularizer": {"class_name": "L2", "config": {"l2": 0.01}}}})",
       "layer 'c' (Conv2D): option 'activity_regularizer'"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
          "kernel_regularizer": {"class_name": "OrthogonalRegularizer",
                                 "config": {"factor": 0.01}}}})",
       "layer 'c' (Conv2D): option 'kernel_regularizer' = {\"class_name\":"
       "\"OrthogonalRegularizer\",\"config\":{\"factor\":0.01}} is not supported (L1, L2 or L1L2)"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
          "kernel_regularizer": {"class_name": "L2", "config": {"l2": -1}}}})",
       "layer 'c' (Conv2D): option 'kernel_regularizer'"},
      {R"({"class_name": "DepthwiseConv2D", "config": {"name": "d", "kernel_size": 3,
          "depth_multiplier": 0}})",
       "layer 'd' (DepthwiseConv2D): option 'depth_multiplier' = 0 is not valid"},
      {R"({"class_name": "SeparableConv2D", "config": {"name": "s", "kernel_size": 3}})",
       "layer 's' (SeparableConv2D): option 'filters' = 0 is not valid"},
      {R"({"class_name": "LayerNormalization", "config": {"name": "n", "axis": [1, 2]}})",
       "layer 'n' (LayerNormalization): option 'axis' = [1,2] is not supported"},
      {R"({"class_name": "LayerNormalization", "config": {"name": "n", "axis": 1}})",
       "layer n: LayerNormalization over axis 1 (only the last axis, 3, or -1) does not fit"},
      {R"({"class_name": "LayerNormalization", "config": {"name": "n", "rms_scaling": true}})",
       "layer 'n' (LayerNormalization): option 'rms_scaling' = true"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
          "data_format": "channels_first"}})",
       "layer 'c' (Conv2D): option 'data_format' = \"channels_first\""},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
          "padding": "causal"}})",
       "layer 'c' (Conv2D): option 'padding' = \"causal\""},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
          "activation": "softplus"}})",
       "layer 'c' (Conv2D): option 'activation' = \"softplus\""},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 9}})",
       "layer c: convolution kernel 9x9 stride 1x1 dilation 1x1 does not fit its input 8x8x1"},
      {R"({"class_name": "SimpleRNN", "config": {"name": "l", "units": 4}})",
       "layer 'l' (SimpleRNN): this layer is not supported"},
      {R"({"class_name": "Rescaling", "config": {"name": "r", "scale": [1, 2]}})",
       "layer 'r' (Rescaling): options 'scale' = [1,2]"},
      {R"({"class_name": "Reshape", "config": {"name": "r", "target_shape": [5, 5, 5, 5]}})",
       "layer 'r' (Reshape): option 'target_shape' = [5,5,5,5]"},
      {R"({"class_name": "Reshape", "config": {"name": "r", "target_shape": [5, 5]}})",
       "layer r: Reshape to [5,5] does not fit its input 8x8x1"},
      {R"({"class_name": "Reshape", "config": {"name": "r", "target_shape": [5, 5, 5]}})",
       "layer r: Reshape to [5,5,5] does not fit its input 8x8x1"},
      {R"({"class_name": "ZeroPadding2D", "config": {"name": "z", "padding": -1}})",
       "layer 'z' (ZeroPadding2D): option 'padding' = -1"},
      {R"({"class_name": "Activation", "config": {"name": "a", "activation": "selu"}})",
       "layer 'a' (Activation): option 'activation' = \"selu\" is not supported"},
      {R"({"class_name": "BatchNormalization", "config": {"name": "b", "axis": 1}})",
       "layer 'b' (BatchNormalization): option 'axis' = 1"},
      {R"({"class_name": "BatchNormalization", "config": {"name": "b", "renorm": true}})",
       "layer 'b' (BatchNormalization): option 'renorm' = true"},
      {R"({"class_name": "Dropout", "config": {"name": "d", "rate": 0.5, "noise_shape": [1]}})",
       "layer 'd' (Dropout): option 'noise_shape'"},
      {R"({"class_name": "Dropout", "config": {"name": "d", "rate": 1.5}})",
       "layer 'd' (Dropout): option 'rate' = 1.5"},
      {R"({"class_name": "ReLU", "config": {"name": "r", "max_value": 6.0}})",
       "layer 'r' (ReLU): option 'max_value' = 6.0"},
      {R"({"class_name": "Softmax", "config": {"name": "s", "axis": 1}})",
       "layer 's' (Softmax): option 'axis' = 1 is not supported (only the last axis, -1)"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
          "dtype": {"module": "keras", "class_name": "DTypePolicy",
                    "config": {"name": "mixed_float16"}}}})",
       "layer 'c' (Conv2D): option 'dtype'"},
      {R"({"class_name": "Conv2D", "config": {"name": "out", "filters": 2, "kernel_size": 3}})",
       "layer 'out' (Dense): the layer name is used twice"},
      {R"({"class_name": "Attention", "config": {"name": "a", "use_scale": true}})",
       "layer 'a' (Attention): option 'use_scale' = true is not supported"},
      {R"({"class_name": "Attention", "config": {"name": "a", "score_mode": "concat"}})",
       "layer 'a' (Attention): option 'score_mode' = \"concat\" is not supported"},
      {R"({"class_name": "Attention", "config": {"name": "a", "dropout": 0.1}})",
       "layer 'a' (Attention): option 'dropout' = 0.1 is not supported"},
      {R"({"class_name": "Attention", "config": {"name": "a", "causal": true}})",
       "layer 'a' (Attention): option 'causal' = true is not supported"},
      {R"({"class_name": "MultiHeadAttention", "config": {"name": "m", "num_heads": 2,
          "key_dim": 2, "dropout": 0.1}})",
       "layer 'm' (MultiHeadAttention): option 'dropout' = 0.1 is not supported"},
      {R"({"class_name": "MultiHeadAttention", "config": {"name": "m", "num_heads": 2,
          "key_dim": 2, "attention_axes": [2]}})",
       "layer 'm' (MultiHeadAttention): option 'attention_axes' = [2] is not supported"},
      {R"({"class_name": "MultiHeadAttention", "config": {"name": "m", "num_heads": 2,
          "key_dim": 2, "output_shape": [5]}})",
       "layer 'm' (MultiHeadAttention): option 'output_shape' = [5] is not supported"},
      {R"({"class_name": "MultiHeadAttention", "config": {"name": "m", "key_dim": 2}})",
       "layer 'm' (MultiHeadAttention): option 'num_heads'"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ModelSpec> s = ParseKerasModel(WithLayer(c.layer), "m.json");
    ASSERT_FALSE(s.ok()) << c.layer;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.expect), std::string::npos)
        << "got: " << s.status().message() << "\nwanted: " << c.expect;
    EXPECT_EQ(s.status().message().rfind("m.json", 0), 0u) << s.status().message();
  }
}

// Two linear heads of 3 over one input, with `compiled` (a training_config's
// members) when not empty.
std::string TwoHeads(const std::string& compiled = "") {
  return absl::StrCat(
      R"({"class_name": "Functional", "config": {
    "output_layers": [["a", 0, 0], ["b", 0, 0]], "layers": [
    {"class_name": "InputLayer", "name": "i", "config": {"batch_shape": [null, 4], "name": "i"},
     "inbound_nodes": []},
    {"class_name": "Dense", "name": "a", "config": {"name": "a", "units": 3},
     "inbound_nodes": [[["i", 0, 0, {}]]]},
    {"class_name": "Dense", "name": "b", "config": {"name": "b", "units": 3},
     "inbound_nodes": [[["i", 0, 0, {}]]]}]})",
      compiled.empty() ? "" : absl::StrCat(R"(, "training_config": {)", compiled, "}"), "}");
}

// ESMM's heads: 'ctr' (Dense, sigmoid) read by 'ctcvr', its product with
// 'cvr'; the outputs are ctr and ctcvr.
constexpr char kEsmm[] = R"({"class_name": "Functional", "config": {
    "output_layers": [["ctr", 0, 0], ["ctcvr", 0, 0]], "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"},
     "inbound_nodes": []},
    {"class_name": "Dense", "config": {"name": "ctr", "units": 1, "activation": "sigmoid"},
     "inbound_nodes": [[["i", 0, 0, {}]]]},
    {"class_name": "Dense", "config": {"name": "cvr", "units": 1, "activation": "sigmoid"},
     "inbound_nodes": [[["i", 0, 0, {}]]]},
    {"class_name": "Multiply", "config": {"name": "ctcvr"},
     "inbound_nodes": [[["ctr", 0, 0, {}], ["cvr", 0, 0, {}]]]}]},
    "compile_config": {"loss": {"ctr": "binary_crossentropy", "ctcvr": "binary_crossentropy"},
                       "loss_weights": [1.0, 0.25]}})";

// Several outputs: each with its loss (one for all, a list, a dict, the
// flag's), weight and columns; the model ends in a join of what the losses
// read, a fused sigmoid leaving its Dense linear and becoming a node of its
// own for the layers that read the output.
TEST(KerasModelTest, ReadsSeveralOutputs) {
  absl::StatusOr<ModelSpec> two = ParseKerasModel(TwoHeads(), "m.json");
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->outputs.size(), 2u);
  EXPECT_EQ(two->outputs[0].name, "a");
  EXPECT_EQ(two->outputs[1].name, "b");
  EXPECT_EQ(two->num_classes, 6);
  EXPECT_EQ(TargetsOf(*two), 2);  // a class index each
  EXPECT_EQ(two->outputs[1].group.first, 3);
  EXPECT_EQ(two->outputs[1].group.targets_at, 1);
  EXPECT_EQ(two->layers.back().kind, LayerKind::kConcatenate);
  EXPECT_EQ(two->layers.back().name, "(outputs)");

  absl::StatusOr<ModelSpec> mixed =
      ParseKerasModel(TwoHeads(R"("loss": ["mse", "categorical_crossentropy"],
                                   "loss_weights": {"b": 0.5})"),
                      "m.json");
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->outputs[0].group.loss, LossKind::kMeanSquaredError);
  EXPECT_EQ(mixed->outputs[1].group.loss, LossKind::kCategoricalCrossentropy);
  EXPECT_EQ(mixed->outputs[0].group.weight, 1.0f);
  EXPECT_EQ(mixed->outputs[1].group.weight, 0.5f);
  EXPECT_EQ(TargetsOf(*mixed), 6);
  absl::StatusOr<ModelSpec> flagged = ParseKerasModel(TwoHeads(), "m.json", "b:mae,a:mse");
  ASSERT_TRUE(flagged.ok()) << flagged.status();
  EXPECT_EQ(flagged->outputs[0].group.loss, LossKind::kMeanSquaredError);
  EXPECT_EQ(flagged->outputs[1].group.loss, LossKind::kMeanAbsoluteError);
  absl::StatusOr<ModelSpec> all = ParseKerasModel(TwoHeads(), "m.json", "mse");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->outputs[1].group.loss, LossKind::kMeanSquaredError);

  absl::StatusOr<ModelSpec> esmm = ParseKerasModel(kEsmm, "esmm.json");
  ASSERT_TRUE(esmm.ok()) << esmm.status();
  ASSERT_EQ(esmm->outputs.size(), 2u);
  EXPECT_FALSE(esmm->outputs[0].group.probabilities);  // the click head's logits
  EXPECT_TRUE(esmm->outputs[1].group.probabilities);   // the product
  EXPECT_EQ(esmm->outputs[1].group.weight, 0.25f);
  std::vector<std::string> kinds;
  for (const LayerSpec& l : esmm->layers) {
    kinds.push_back(absl::StrCat(l.name, l.activation == Activation::kSigmoid ? ":sigmoid" : ""));
  }
  // ctr is linear, its sigmoid a node of its own that the product reads.
  EXPECT_EQ(absl::StrJoin(kinds, " "), "ctr ctr:sigmoid cvr:sigmoid ctcvr (outputs)");
  EXPECT_EQ(esmm->layers[1].kind, LayerKind::kActivation);
  EXPECT_EQ(esmm->layers[3].inputs, (std::vector<int>{1, 2}));
  EXPECT_EQ(esmm->layers[4].inputs, (std::vector<int>{0, 3}));
}

// Attention's shapes and call arguments: [steps, features] inputs whose
// query and key have as many features; a causal mask or returned scores
// (a call argument of the node) are refused naming the layer.
TEST(KerasModelTest, AttentionShapesAndCallArguments) {
  auto graph = [](const std::string& query_shape, const std::string& kwargs) {
    return absl::StrCat(R"({"class_name": "Functional", "config": {"name": "m",
      "input_layers": [["q", 0, 0], ["v", 0, 0]], "output_layers": [["out", 0, 0]], "layers": [
      {"class_name": "InputLayer", "config": {"name": "q", "batch_shape": )",
                        query_shape,
                        R"(}, "inbound_nodes": []},
      {"class_name": "InputLayer", "config": {"name": "v", "batch_shape": [null, 5, 3]},
       "inbound_nodes": []},
      {"class_name": "Attention", "config": {"name": "att"}, "inbound_nodes": [{"args": [[
        {"class_name": "__keras_tensor__", "config": {"keras_history": ["q", 0, 0]}},
        {"class_name": "__keras_tensor__", "config": {"keras_history": ["v", 0, 0]}}]],
        "kwargs": )",
                        kwargs, R"(}]},
      {"class_name": "Flatten", "config": {"name": "flat"}, "inbound_nodes": [{"args": [
        {"class_name": "__keras_tensor__", "config": {"keras_history": ["att", 0, 0]}}],
        "kwargs": {}}]},
      {"class_name": "Dense", "config": {"name": "out", "units": 2, "activation": "softmax"},
       "inbound_nodes": [{"args": [
        {"class_name": "__keras_tensor__", "config": {"keras_history": ["flat", 0, 0]}}],
        "kwargs": {}}]}]}})");
  };
  absl::StatusOr<ModelSpec> ok = ParseKerasModel(graph("[null, 2, 3]", "{}"), "m.json");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->layers[0].kind, LayerKind::kAttention);
  EXPECT_EQ(ok->num_parameters, 2 * 3 * 2 + 2);  // out: [2 steps x 3 features, 2]
  for (const auto& [shape, kwargs, expect] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"[null, 2, 4]", "{}",
            "layer att: Attention of query 1x2x4, value 1x5x3 and key 1x5x3: the query and the "
            "key need as many features"},
           {"[null, 2, 3]", R"({"use_causal_mask": true})",
            "layer 'att' (Attention): call argument 'use_causal_mask' = true is not supported"},
           {"[null, 2, 3]", R"({"return_attention_scores": true})",
            "call argument 'return_attention_scores' = true is not supported"}}) {
    absl::StatusOr<ModelSpec> bad = ParseKerasModel(graph(shape, kwargs), "m.json");
    ASSERT_FALSE(bad.ok()) << shape << kwargs;
    EXPECT_NE(bad.status().message().find(expect), std::string::npos) << bad.status();
  }
}

TEST(KerasModelTest, RefusesBadSeveralOutputs) {
  auto refused = [](const std::string& text, const std::string& expect,
                    const std::string& flag = "") {
    absl::StatusOr<ModelSpec> s = ParseKerasModel(text, "m.json", flag);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(expect), std::string::npos)
        << s.status().message() << "\nwanted: " << expect;
  };
  refused(TwoHeads(R"("loss": ["mse"])"), "1 losses for 2 outputs [a, b]");
  refused(TwoHeads(R"("loss": {"a": "mse", "z": "mse"})"),
          "names 'z', which is not one of the outputs [a, b]");
  refused(TwoHeads(R"("loss": "mse", "loss_weights": [1, -1])"),
          "the weight of 'b' is -1, not a number >= 0");
  refused(TwoHeads(R"("loss": "mse", "loss_weights": {"c": 1})"),
          "loss_weights {\"c\":1} names 'c', which is not one of the outputs [a, b]");
  refused(TwoHeads(), "--loss=a:mse: names a loss for some outputs only; the model's are [a, b]",
          "a:mse");
  refused(TwoHeads(), "'q:mse' is not <output>:<loss> for one of the outputs [a, b]",
          "a:mse,q:mse");
  refused(TwoHeads(), "--loss=hinge: not a loss we train on", "hinge");
  std::string esmm = kEsmm;
  esmm.replace(esmm.find(R"("ctcvr": "binary_crossentropy")"), 30,
               R"("ctcvr": "sparse_categorical_crossentropy")");
  refused(esmm, "output 'ctcvr': a Multiply output is read as it is");
  // A softmax output read by other layers: its loss takes the logits in,
  // the readers a Softmax node after them.
  std::string softmax = kEsmm;
  softmax.replace(softmax.find("\"sigmoid\""), 9, "\"softmax\"");
  softmax.replace(softmax.find(R"({"ctr": "binary_crossentropy")"), 29,
                  R"({"ctr": "categorical_crossentropy")");
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(softmax, "m.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->layers[1].kind, LayerKind::kSoftmax);
  EXPECT_EQ(spec->layers[1].inputs, std::vector<int>{0});
  EXPECT_EQ(spec->layers[0].activation, Activation::kNone);
}

TEST(KerasModelTest, RefusesWholeModelProblems) {
  auto refused = [](const std::string& text, const std::string& expect) {
    absl::StatusOr<ModelSpec> s = ParseKerasModel(text, "m.json");
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.status().message().find(expect), std::string::npos)
        << s.status().message() << "\nwanted: " << expect;
  };
  refused("not json", "not a JSON object");
  refused(R"({"class_name": "Sequential", "config": {"layers": [
    {"class_name": "Flatten", "config": {"name": "f"}},
    {"class_name": "Dense", "config": {"name": "d", "units": 3}}]}})",
          "no input shape");
  refused(R"({"class_name": "Sequential", "config": {"layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, null, 8, 1], "name": "i"}},
    {"class_name": "Flatten", "config": {"name": "f"}},
    {"class_name": "Dense", "config": {"name": "d", "units": 3}}]}})",
          "no None");
  // Outputs that do not fit the loss, and losses we do not train on.
  auto with_loss = [](const char* activation, const std::string& loss) {
    return absl::StrCat(R"({"class_name": "Sequential", "config": {"layers": [
      {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"}},
      {"class_name": "Dense", "config": {"name": "d", "units": 3, "activation": ")",
                        activation, R"("}}]}, "training_config": {"loss": )", loss, "}}");
  };
  refused(with_loss("sigmoid", R"("sparse_categorical_crossentropy")"),
          "layer 'd': the output's activation must be softmax or linear (logits) for "
          "sparse_categorical_crossentropy");
  refused(with_loss("softmax", R"("binaryCrossentropy")"),
          "layer 'd': the output's activation must be sigmoid or linear (logits) for "
          "binary_crossentropy");
  refused(with_loss("softmax", R"("mse")"),
          "a softmax output is only supported with categorical cross-entropy, not "
          "mean_squared_error");
  refused(with_loss("linear", R"({"class_name": "BinaryCrossentropy",
                                  "config": {"from_logits": false}})"),
          "binary_crossentropy with from_logits=false on a linear output");
  refused(with_loss("linear", R"({"class_name": "CategoricalCrossentropy",
                                  "config": {"label_smoothing": 0.1}})"),
          "option 'label_smoothing' = 0.1 is not supported");
  refused(with_loss("linear", R"("hinge")"), "loss \"hinge\": is not supported");
  // A Dropout between the output Dense's sigmoid and the loss: Keras would
  // drop probabilities out; refused rather than trained on other math.
  refused(R"({"class_name": "Sequential", "config": {"layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"}},
    {"class_name": "Dense", "config": {"name": "d", "units": 1, "activation": "sigmoid"}},
    {"class_name": "Dropout", "config": {"name": "drop", "rate": 0.5}}]}})",
          "layer 'drop': comes after the output layer 'd', whose sigmoid or softmax the loss "
          "takes in");
  refused(with_loss("linear", R"(["mse", "mae"])"), "is not supported (one loss");
  absl::StatusOr<ModelSpec> flag = ParseKerasModel(with_loss("linear", R"("mse")"), "m.json",
                                                   "poisson");
  ASSERT_FALSE(flag.ok());
  EXPECT_NE(flag.status().message().find("--loss=poisson: not a loss we train on"),
            std::string::npos)
      << flag.status();
  // Graphs we do not run: input_layers that are not the InputLayers, an
  // input without a shape, merges of misfitting shapes, a read of a layer
  // the model lacks, a cycle.
  refused(R"({"class_name": "Functional", "config": {"output_layers": [["d", 0, 0]], "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"}, "inbound_nodes": []},
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "j"}, "inbound_nodes": []},
    {"class_name": "Add", "config": {"name": "s"}, "inbound_nodes": [[["i", 0, 0, {}], ["j", 0, 0, {}]]]},
    {"class_name": "Dense", "config": {"name": "d", "units": 3}, "inbound_nodes": [[["s", 0, 0, {}]]]}],
    "input_layers": [["i", 0, 0], ["i", 0, 0]]}})",
          "input_layers [[\"i\",0,0],[\"i\",0,0]] do not name the model's InputLayers [i, j] once "
          "each");
  refused(R"({"class_name": "Functional", "config": {"output_layers": [["d", 0, 0]], "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"}, "inbound_nodes": []},
    {"class_name": "InputLayer", "config": {"name": "j"}, "inbound_nodes": []},
    {"class_name": "Add", "config": {"name": "s"}, "inbound_nodes": [[["i", 0, 0, {}], ["j", 0, 0, {}]]]},
    {"class_name": "Dense", "config": {"name": "d", "units": 3}, "inbound_nodes": [[["s", 0, 0, {}]]]}]}})",
          "layer 'j' (InputLayer): no declared shape");
  refused(R"({"class_name": "Functional", "config": {"output_layers": [["d", 0, 0]], "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"}, "inbound_nodes": []},
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 5], "name": "j"}, "inbound_nodes": []},
    {"class_name": "Add", "config": {"name": "s"}, "inbound_nodes": [[["i", 0, 0, {}], ["j", 0, 0, {}]]]},
    {"class_name": "Dense", "config": {"name": "d", "units": 3}, "inbound_nodes": [[["s", 0, 0, {}]]]}]}})",
          "layer s: Add of inputs shaped 1x1x4 and 1x1x5 (they must be the same)");
  refused(R"({"class_name": "Functional", "config": {"output_layers": [["d", 0, 0]], "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"}, "inbound_nodes": []},
    {"class_name": "Dense", "config": {"name": "a", "units": 5}, "inbound_nodes": [[["i", 0, 0, {}]]]},
    {"class_name": "Add", "config": {"name": "s"}, "inbound_nodes": [[["i", 0, 0, {}], ["a", 0, 0, {}]]]},
    {"class_name": "Dense", "config": {"name": "d", "units": 3}, "inbound_nodes": [[["s", 0, 0, {}]]]}]}})",
          "layer s: Add of inputs shaped 1x1x4 and 1x1x5 (after Flatten) (they must be the same)");
  refused(R"({"class_name": "Functional", "config": {"output_layers": [["d", 0, 0]], "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"}, "inbound_nodes": []},
    {"class_name": "Dense", "config": {"name": "d", "units": 3}, "inbound_nodes": [[["x", 0, 0, {}]]]}]}})",
          "layer 'd' (Dense): reads layer 'x', which the model lacks");
  refused(R"({"class_name": "Functional", "config": {"output_layers": [["d", 0, 0]], "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"}, "inbound_nodes": []},
    {"class_name": "Add", "config": {"name": "a"}, "inbound_nodes": [[["i", 0, 0, {}], ["d", 0, 0, {}]]]},
    {"class_name": "Dense", "config": {"name": "d", "units": 4}, "inbound_nodes": [[["a", 0, 0, {}]]]}]}})",
          "the layers' graph has a cycle");
  refused(R"({"class_name": "Functional", "config": {"output_layers": [["d", 0, 0]], "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "i"}, "inbound_nodes": []},
    {"class_name": "Dense", "config": {"name": "a", "units": 4}, "inbound_nodes": [[["i", 0, 0, {}]]]},
    {"class_name": "Concatenate", "config": {"name": "c", "axis": 0},
     "inbound_nodes": [[["i", 0, 0, {}], ["a", 0, 0, {}]]]},
    {"class_name": "Dense", "config": {"name": "d", "units": 3}, "inbound_nodes": [[["c", 0, 0, {}]]]}]}})",
          "layer 'c' (Concatenate): option 'axis' = 0");
  absl::StatusOr<std::string> missing = ReadModelFile("/nonexistent/model.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/model.json"), std::string::npos);
  absl::StatusOr<std::string> not_zip = ReadModelFile("tests/fixtures/keras/keras2_cnn.json.keras");
  EXPECT_FALSE(not_zip.ok());
}

// A value of the wrong type anywhere in the file is refused with a message
// naming the file, never an exception out of the parser (found when
// ParseKerasModel was split: nlohmann's type_error escaped it).
TEST(KerasModelTest, ValuesOfTheWrongTypeAreRefusedNotThrown) {
  const std::string mlp = *ReadModelFile("mlp");
  const std::string bool_bias = "\"use_bias\": true";
  const std::string class_name = "\"class_name\": \"GlorotUniform\"";
  ASSERT_NE(mlp.find(bool_bias), std::string::npos);
  ASSERT_NE(mlp.find(class_name), std::string::npos);
  for (const auto& [what, text] :
       {std::pair{"use_bias a string", absl::StrReplaceAll(mlp, {{bool_bias, "\"use_bias\": \"yes\""}})},
        std::pair{"an initializer's class_name a number",
                  absl::StrReplaceAll(mlp, {{class_name, "\"class_name\": 7"}})}}) {
    absl::StatusOr<ModelSpec> spec;
    EXPECT_NO_THROW(spec = ParseKerasModel(text, "odd.json")) << what;
    EXPECT_FALSE(spec.ok()) << what;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(spec.status().message().find("odd.json"), std::string::npos) << spec.status();
  }
}

// A Keras 3 Sequential model over ids [5] (int32, as Keras's Input(dtype=
// "int32") writes them): `embedding`'s config, GlobalAveragePooling1D, a
// softmax Dense of 2.
std::string EmbeddingModel(const std::string& embedding) {
  return absl::StrCat(R"({"class_name": "Sequential", "config": {"name": "seq", "layers": [
      {"class_name": "InputLayer", "config": {"name": "ids", "batch_shape": [null, 5],
                                              "dtype": "int32"}},
      {"class_name": "Embedding", "config": )",
                      embedding, R"(},
      {"class_name": "GlobalAveragePooling1D", "config": {"name": "gap",
                                                          "data_format": "channels_last"}},
      {"class_name": "Dense", "config": {"name": "out", "units": 2,
                                         "activation": "softmax"}}]}})");
}

TEST(KerasModelTest, EmbeddingAndGlobalAveragePooling1D) {
  const ModelSpec spec = Parse(EmbeddingModel(R"({"name": "emb", "input_dim": 11,
      "output_dim": 3, "embeddings_initializer": {"class_name": "RandomUniform",
      "config": {"minval": -0.1, "maxval": 0.1, "seed": null}}, "embeddings_regularizer": null,
      "embeddings_constraint": null, "mask_zero": false, "input_length": 5,
      "dtype": "float32"})"), "emb.json");
  ASSERT_EQ(spec.layers.size(), 3u);
  EXPECT_EQ(spec.layers[0].kind, LayerKind::kEmbedding);
  EXPECT_EQ(spec.layers[0].input_dim, 11);
  EXPECT_EQ(spec.layers[0].units, 3);
  EXPECT_EQ(spec.layers[1].kind, LayerKind::kGlobalAvgPool1D);
  EXPECT_EQ(spec.input_channels, 5);
  ASSERT_EQ(spec.variables.size(), 3u);
  const VariableSpec& table = spec.variables[0];
  EXPECT_EQ(table.name, "emb/embeddings");
  EXPECT_EQ(table.shape, (std::vector<int64_t>{11, 3}));
  EXPECT_EQ(table.initializer.kind, Initializer::Kind::kRandomUniform);
  EXPECT_EQ(table.initializer.minval, -0.1);
  EXPECT_EQ(table.initializer.maxval, 0.1);
  EXPECT_EQ(spec.variables[1].shape, (std::vector<int64_t>{3, 2}));  // after the pooling
  EXPECT_EQ(spec.num_parameters, 33 + 6 + 2);
  // Keras's default initializer: RandomUniform(-0.05, 0.05); initial values inside it.
  const ModelSpec plain =
      Parse(EmbeddingModel(R"({"name": "emb", "input_dim": 11, "output_dim": 3})"), "e.json");
  ASSERT_FALSE(plain.variables.empty());
  EXPECT_EQ(plain.variables[0].initializer.kind, Initializer::Kind::kRandomUniform);
  EXPECT_EQ(plain.variables[0].initializer.minval, -0.05);
  EXPECT_EQ(plain.variables[0].initializer.maxval, 0.05);
  const std::vector<float> params = InitialParameters(plain, 1);
  for (int64_t i = 0; i < plain.variables[0].size; ++i) {
    EXPECT_LE(std::abs(params[i]), 0.05f) << i;
  }
  // Flatten of [5, 3]: 15 features.
  std::string flat = EmbeddingModel(R"({"name": "emb", "input_dim": 11, "output_dim": 3})");
  flat = absl::StrReplaceAll(flat, {{"GlobalAveragePooling1D", "Flatten"}});
  const ModelSpec flattened = Parse(flat, "flat.json");
  ASSERT_EQ(flattened.variables.size(), 3u);
  EXPECT_EQ(flattened.variables[1].shape, (std::vector<int64_t>{15, 2}));
}

TEST(KerasModelTest, EmbeddingRefusesBadOptionsNamingThem) {
  struct Case {
    const char* embedding;
    const char* expect;  // in the message
  } cases[] = {
      {R"({"name": "emb", "input_dim": 11, "output_dim": 3, "mask_zero": 1})",
       "layer 'emb' (Embedding): option 'mask_zero' = 1 is not true or false"},
      {R"({"name": "emb", "input_dim": 0, "output_dim": 3})",
       "layer 'emb' (Embedding): option 'input_dim' = 0 is not valid"},
      {R"({"name": "emb", "input_dim": 16777217, "output_dim": 3})",
       "layer 'emb' (Embedding): option 'input_dim' = 16777217 is not valid"},
      {R"({"name": "emb", "input_dim": 11})",
       "layer 'emb' (Embedding): option 'output_dim' = 0 is not valid"},
      {R"({"name": "emb", "input_dim": 11, "output_dim": -2})",
       "layer 'emb' (Embedding): option 'output_dim' = -2 is not valid"},
      {R"({"name": "emb", "input_dim": 11, "output_dim": "3"})",
       "layer 'emb' (Embedding): option 'output_dim' = \"3\" is not valid"},
      {R"({"name": "emb", "input_dim": 11, "output_dim": 3, "input_length": 6})",
       "layer emb: Embedding of input_length 6 does not fit its input 1x1x5"},
      {R"({"name": "emb", "input_dim": 11, "output_dim": 3,
           "embeddings_regularizer": {"class_name": "L2", "config": {"l2": 0.01}}})",
       "layer 'emb' (Embedding): option 'embeddings_regularizer'"},
      {R"({"name": "emb", "input_dim": 11, "output_dim": 3,
           "embeddings_constraint": {"class_name": "NonNeg", "config": {}}})",
       "layer 'emb' (Embedding): option 'embeddings_constraint'"},
      {R"({"name": "emb", "input_dim": 11, "output_dim": 3,
           "embeddings_initializer": {"class_name": "Orthogonal", "config": {}}})",
       "layer 'emb' (Embedding): option 'embeddings_initializer'"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ModelSpec> spec = ParseKerasModel(EmbeddingModel(c.embedding), "emb.json");
    ASSERT_FALSE(spec.ok()) << c.embedding;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.expect), std::string::npos) << spec.status();
  }
  // GlobalAveragePooling1D reads [steps, features], not an image.
  std::string on_image = EmbeddingModel(R"({"name": "emb", "input_dim": 11, "output_dim": 3})");
  on_image = absl::StrReplaceAll(
      on_image, {{R"("class_name": "Embedding")", R"("class_name": "Dropout")"},
                 {R"("input_dim": 11, "output_dim": 3)", R"("rate": 0.5)"},
                 {"[null, 5]", "[null, 4, 5, 1]"}});
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(on_image, "gap.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("GlobalAveragePooling1D (it reads [steps, features])"),
            std::string::npos)
      << spec.status();
  // Ids may be int32 or int64; other dtypes stay refused.
  std::string f16 = EmbeddingModel(R"({"name": "emb", "input_dim": 11, "output_dim": 3})");
  f16 = absl::StrReplaceAll(f16, {{R"("dtype": "int32")", R"("dtype": "float16")"}});
  spec = ParseKerasModel(f16, "f16.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("layer 'ids' (InputLayer): option 'dtype'"),
            std::string::npos)
      << spec.status();
}

// Orthogonal (Keras's recurrent kernels' default) on a kernel, with its
// gain; refused where Keras has no matrix (a bias) and with a bad gain.
TEST(KerasModelTest, OrthogonalInitializerOnKernelsOnly) {
  auto dense = [](const std::string& options) {
    return std::string(R"({"class_name": "Sequential", "config": {"name": "orth", "layers": [
      {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 6]}},
      {"class_name": "Dense", "config": {"name": "d", "units": 4, )") +
           options + R"(}}]}})";
  };
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(
      dense(R"("kernel_initializer": {"class_name": "Orthogonal", "config": {"gain": 2.0}})"),
      "orth.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->variables[0].name, "d/kernel");
  EXPECT_EQ(spec->variables[0].initializer.kind, Initializer::Kind::kOrthogonal);
  EXPECT_EQ(spec->variables[0].initializer.scale, 2.0);
  const struct {
    std::string options, expect;
  } bad[] = {
      {R"("bias_initializer": "orthogonal")",
       "layer 'd' (Dense): option 'bias_initializer' = Orthogonal is supported for kernels "
       "only (a matrix), not for its bias"},
      {R"("kernel_initializer": {"class_name": "Orthogonal", "config": {"gain": "big"}})",
       "option 'kernel_initializer': Orthogonal gain \"big\" is not a finite number"},
  };
  for (const auto& c : bad) {
    absl::StatusOr<ModelSpec> s = ParseKerasModel(dense(c.options), "orth.json");
    ASSERT_FALSE(s.ok()) << c.options;
    EXPECT_NE(s.status().message().find(c.expect), std::string::npos) << s.status();
  }
}

// LSTM and GRU: Keras's variables (the gates side by side; GRU's
// reset_after bias [2, 3u]; the recurrent kernel Orthogonal; an LSTM's
// forget biases 1), a mask taken through a sequence and ended by the last
// state, and each option that would change the math refused by name.
TEST(KerasModelTest, LstmAndGruLayers) {
  auto model = [](const std::string& lstm, const std::string& after) {
    return R"({"class_name": "Sequential", "config": {"name": "rnn", "layers": [
      {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 6]}},
      {"class_name": "Embedding", "config": {"name": "emb", "input_dim": 9, "output_dim": 3,
                                             "mask_zero": true}},
      {"class_name": "LSTM", "config": {"name": "lstm", "units": 4, "return_sequences": true,
                                        "zero_output_for_mask": false, "seed": null)" +
           lstm + R"(}},)" + after + R"(
      {"class_name": "Dense", "config": {"name": "out", "units": 2, "activation": "softmax"}}
    ]}})";
  };
  const std::string gru = R"({"class_name": "GRU", "config": {"name": "gru", "units": 5}},)";
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(model("", gru), "rnn.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::vector<std::string> vars;
  for (const VariableSpec& v : spec->variables) {
    std::string dims;
    for (int64_t d : v.shape) absl::StrAppend(&dims, dims.empty() ? "" : "x", d);
    vars.push_back(absl::StrCat(v.name, " ", dims));
  }
  EXPECT_EQ(vars, (std::vector<std::string>{"emb/embeddings 9x3", "lstm/kernel 3x16",
                                            "lstm/recurrent_kernel 4x16", "lstm/bias 16",
                                            "gru/kernel 4x15", "gru/recurrent_kernel 5x15",
                                            "gru/bias 2x15", "out/kernel 5x2", "out/bias 2"}));
  EXPECT_EQ(spec->variables[2].initializer.kind, Initializer::Kind::kOrthogonal);
  EXPECT_EQ(spec->layers[1].activation, Activation::kTanh);
  EXPECT_EQ(spec->layers[1].recurrent_activation, Activation::kSigmoid);
  EXPECT_TRUE(spec->layers[2].reset_after);
  const std::vector<float> params = InitialParameters(*spec, 3);
  const VariableSpec& bias = spec->variables[3];
  for (int64_t k = 0; k < bias.size; ++k) {
    EXPECT_EQ(params[bias.offset + k], k >= 4 && k < 8 ? 1.0f : 0.0f) << k;
  }
  absl::StatusOr<std::vector<int>> masks = MaskSources(*spec);
  ASSERT_TRUE(masks.ok()) << masks.status();
  EXPECT_EQ(*masks, (std::vector<int>{0, 0, -1, -1}));  // the GRU's last state ends it

  const struct {
    std::string lstm, after, expect;
  } bad[] = {
      {R"(, "return_state": true)", gru, "layer 'lstm' (LSTM): option 'return_state'"},
      {R"(, "stateful": true)", gru, "layer 'lstm' (LSTM): option 'stateful'"},
      {R"(, "dropout": 0.2)", gru, "layer 'lstm' (LSTM): option 'dropout'"},
      {R"(, "recurrent_dropout": 0.1)", gru, "option 'recurrent_dropout'"},
      {R"(, "zero_output_for_mask": true)", gru, "option 'zero_output_for_mask'"},
      {R"(, "activation": "elu")", gru,
       "option 'activation' = \"elu\" is not supported here (tanh, sigmoid or relu)"},
      {R"(, "recurrent_activation": "relu")", gru,
       "option 'recurrent_activation' = \"relu\" is not supported (sigmoid, hard_sigmoid or "
       "tanh)"},
      {R"(, "go_backwards": 1)", gru, "option 'go_backwards' = 1 is not true or false"},
      {R"(, "units": 0)", gru, "option 'units' = 0 is not valid"},
      // The sequence's mask reaches a Flatten, which Keras would not mask.
      {"", R"({"class_name": "Flatten", "config": {"name": "flat"}},)",
       "layer flat reads the mask of Embedding 'emb' (mask_zero)"},
      // An LSTM's last state is flat: no GRU over it.
      {R"(, "return_sequences": false)", gru, "GRU (it reads [steps, features])"},
  };
  for (const auto& c : bad) {
    absl::StatusOr<ModelSpec> s = ParseKerasModel(model(c.lstm, c.after), "rnn.json");
    ASSERT_FALSE(s.ok()) << c.lstm << c.after;
    EXPECT_NE(s.status().message().find(c.expect), std::string::npos) << s.status();
  }
}

// mask_zero: the mask reaches GlobalAveragePooling1D, through per-step
// Dense, Activation, Dropout and LayerNormalization; any other layer that
// would read it is refused naming it and the Embedding.
TEST(KerasModelTest, MaskZeroReachesOnlyLayersThatTakeIt) {
  const std::string masked =
      EmbeddingModel(R"({"name": "emb", "input_dim": 11, "output_dim": 3, "mask_zero": true})");
  ModelSpec spec = Parse(masked, "m.json");
  ASSERT_EQ(spec.layers.size(), 3u);
  EXPECT_TRUE(spec.layers[0].mask_zero);
  EXPECT_EQ(spec.layers[0].padding_id, 0);
  const std::string through = absl::StrReplaceAll(
      masked, {{R"({"class_name": "GlobalAveragePooling1D")",
                R"({"class_name": "Dense", "config": {"name": "step", "units": 4,
                    "activation": "relu"}},
                  {"class_name": "LayerNormalization", "config": {"name": "ln", "axis": -1}},
                  {"class_name": "Dropout", "config": {"name": "drop", "rate": 0.1}},
                  {"class_name": "Activation", "config": {"name": "act",
                                                          "activation": "tanh"}},
                  {"class_name": "GlobalAveragePooling1D")"}});
  absl::StatusOr<std::vector<int>> sources = MaskSources(Parse(through, "t.json"));
  ASSERT_TRUE(sources.ok()) << sources.status();
  EXPECT_EQ(*sources, (std::vector<int>{0, 0, 0, 0, 0, -1, -1}));
  struct Case {
    const char* gap_becomes;
    const char* layer;
  } cases[] = {
      {R"({"class_name": "Flatten", "config": {"name": "flat"}})", "flat"},
      {R"({"class_name": "GlobalMaxPooling1D", "config": {"name": "gmp"}})", "gmp"},
      {R"({"class_name": "Conv1D", "config": {"name": "conv", "filters": 2, "kernel_size": 2}},
          {"class_name": "GlobalAveragePooling1D", "config": {"name": "gap"}})",
       "conv"},
  };
  for (const Case& c : cases) {
    const std::string text = absl::StrReplaceAll(
        masked, {{R"({"class_name": "GlobalAveragePooling1D", "config": {"name": "gap",
                                                          "data_format": "channels_last"}})",
                  c.gap_becomes}});
    absl::StatusOr<ModelSpec> bad = ParseKerasModel(text, "m.json");
    ASSERT_FALSE(bad.ok()) << c.layer;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(absl::StrCat(
                  "layer ", c.layer,
                  " reads the mask of Embedding 'emb' (mask_zero): masks are taken only into "
                  "GlobalAveragePooling1D")),
              std::string::npos)
        << bad.status();
  }
}

// A Sequential model over a [steps, features] input of `shape` ("[10, 3]")
// with `layers` (JSON objects, comma-separated) and a Dense head.
std::string SequenceModel(const std::string& shape, const std::string& layers) {
  return absl::StrCat(R"({"class_name": "Sequential", "config": {"name": "seq", "layers": [
      {"class_name": "InputLayer", "config": {"name": "x", "batch_shape": [null, )",
                      shape, R"(]}}, )", layers, R"(,
      {"class_name": "Dense", "config": {"name": "out", "units": 2,
                                         "activation": "softmax"}}]}})");
}

TEST(KerasModelTest, OneDimensionalLayersAreTheirWindowsOverSteps) {
  const ModelSpec spec = Parse(SequenceModel("10, 3", R"(
      {"class_name": "Conv1D", "config": {"name": "c", "filters": 4, "kernel_size": 3,
                                          "strides": [1], "padding": "same"}},
      {"class_name": "MaxPooling1D", "config": {"name": "m", "pool_size": 2, "strides": null}},
      {"class_name": "AveragePooling1D", "config": {"name": "a", "pool_size": [2],
                                                    "strides": 1}},
      {"class_name": "GlobalMaxPooling1D", "config": {"name": "g"}})"),
                               "seq.json");
  ASSERT_EQ(spec.layers.size(), 5u);
  EXPECT_EQ(spec.input_height, 1);  // [steps, features] is 1 x steps x features
  EXPECT_EQ(spec.input_width, 10);
  EXPECT_EQ(spec.input_channels, 3);
  const LayerKind kinds[] = {LayerKind::kConv2D, LayerKind::kMaxPool2D, LayerKind::kAvgPool2D,
                             LayerKind::kGlobalMaxPool2D};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(spec.layers[i].kind, kinds[i]) << i;
    EXPECT_TRUE(spec.layers[i].one_d) << i;
  }
  EXPECT_EQ(spec.layers[0].window_h, 1);
  EXPECT_EQ(spec.layers[0].window_w, 3);
  EXPECT_EQ(spec.layers[1].stride_w, 2);  // strides default to pool_size
  EXPECT_EQ(spec.layers[2].stride_w, 1);
  ASSERT_EQ(spec.variables.size(), 4u);
  EXPECT_EQ(spec.variables[0].name, "c/kernel");
  EXPECT_EQ(spec.variables[0].shape, (std::vector<int64_t>{3, 3, 4}));  // Keras's Conv1D shape
  EXPECT_EQ(spec.variables[0].fan_in, 9);
  EXPECT_EQ(spec.variables[0].fan_out, 12);
  EXPECT_EQ(spec.variables[2].shape, (std::vector<int64_t>{4, 2}));  // after GlobalMaxPooling1D
  // Dense on [steps, features] maps each step (Keras's last axis).
  const ModelSpec steps = Parse(SequenceModel("10, 3", R"(
      {"class_name": "Dense", "config": {"name": "d", "units": 4, "activation": "relu"}},
      {"class_name": "GlobalAveragePooling1D", "config": {"name": "g"}})"),
                                "steps.json");
  ASSERT_EQ(steps.variables.size(), 4u);
  EXPECT_EQ(steps.variables[0].shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(steps.variables[2].shape, (std::vector<int64_t>{4, 2}));
}

TEST(KerasModelTest, OneDimensionalLayersRefuseWhatTheyCannotRunNamingIt) {
  struct Case {
    const char* shape;
    const char* layers;
    const char* expect;  // in the message
  } cases[] = {
      {"10, 3", R"({"class_name": "Conv1D", "config": {"name": "c", "filters": 2,
                   "kernel_size": 3, "padding": "causal"}})",
       "layer 'c' (Conv1D): option 'padding' = \"causal\" is not supported (valid or same)"},
      {"10, 3", R"({"class_name": "Conv1D", "config": {"name": "c", "filters": 2,
                   "kernel_size": [3, 3]}})",
       "layer 'c' (Conv1D): option 'kernel_size' = [3,3] is not an integer in [1, 4096] or a "
       "list of one"},
      {"10, 3", R"({"class_name": "Conv1D", "config": {"name": "c", "filters": 2,
                   "kernel_size": 3, "groups": 3}})",
       "layer 'c' (Conv1D): option 'groups' = 3"},
      {"10, 3", R"({"class_name": "Conv1D", "config": {"name": "c", "filters": 2,
                   "kernel_size": 3, "dilation_rate": 2, "strides": 2}})",
       "layer 'c' (Conv1D): option 'dilation_rate' = 2 with 'strides' = 2 is not supported"},
      {"10, 3", R"({"class_name": "Conv1D", "config": {"name": "c", "filters": 2,
                   "kernel_size": 11}})",
       "layer c: convolution kernel 1x11 stride 1x1 dilation 1x1 does not fit its input 1x10x3"},
      {"10, 3", R"({"class_name": "MaxPooling1D", "config": {"name": "m", "pool_size": 0}})",
       "layer 'm' (MaxPooling1D): option 'pool_size' = 0 is not an integer"},
      {"4, 5, 1", R"({"class_name": "MaxPooling1D", "config": {"name": "m"}})",
       "layer m: a 1-D layer (it reads [steps, features]) does not fit its input 4x5x1"},
      {"4, 5, 1", R"({"class_name": "GlobalMaxPooling1D", "config": {"name": "g"}})",
       "layer g: a 1-D layer (it reads [steps, features]) does not fit its input 4x5x1"},
      // Dense maps each step: [10, 2] is no head for a loss of 2 classes.
      {"10, 3", R"({"class_name": "Dropout", "config": {"name": "d", "rate": 0.1}})",
       "layer out: the output is 1x10x2 per example where the loss reads 2 (a Dense on [steps, "
       "features] or an image maps each step or pixel: Flatten or pool before the head)"},
      {"2, 10, 3, 1", R"({"class_name": "Dropout", "config": {"name": "d", "rate": 0.1}})",
       "input shape [2,10,3,1] is not supported ([height, width, channels], [steps, features] "
       "or [features])"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ModelSpec> spec = ParseKerasModel(SequenceModel(c.shape, c.layers), "s.json");
    ASSERT_FALSE(spec.ok()) << c.layers;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.expect), std::string::npos) << spec.status();
  }
}

// Dot: two flat inputs of one size along their features (axes 1 or -1,
// as a number or a pair), a linear head; two sequences along the axes
// named (steps_test's batch_dot); anything else refused naming the layer
// and the option or the shapes (tests/fixtures/tfjs_reference/
// towers.json's two_tower, edited).
TEST(KerasModelTest, DotTakesFlatInputsAndRefusesOtherAxes) {
  std::ifstream in("tests/fixtures/tfjs_reference/towers.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  const nlohmann::json two_tower = doc["models"][0]["model_json"];
  ModelSpec spec = Parse(two_tower.dump(), "t.json");
  EXPECT_EQ(spec.num_classes, 1);
  EXPECT_EQ(spec.loss, LossKind::kBinaryCrossentropy);  // the sigmoid after the Dot
  struct Case {
    const char* option;  // the Dot's config key, or "inbound" for its first input
    nlohmann::json value;
    const char* expect;
  } cases[] = {
      {"axes", 3,
       "layer 'dot' (Dot): option 'axes' = 3 is not supported (1, 2 or -1, or a pair of them)"},
      {"axes", 2, "layer dot: Dot along axis 2 of flat [features] inputs (only 1 or -1)"},
      {"axes", {1, 2}, "layer dot: Dot along axis 2 of flat [features] inputs"},
      {"normalize", "yes", "layer 'dot' (Dot): option 'normalize' = \"yes\" is not true or false"},
      {"inbound", "emb",
       "layer dot: Dot of an input shaped 1x4x4 is not supported (flat "
       "[features] inputs only: Flatten or pool first)"},
      {"inbound", "flat", "layer dot: Dot of inputs of 16 and 3 features (they must be the same)"},
  };
  for (const Case& c : cases) {
    nlohmann::json m = two_tower;
    for (nlohmann::json& l : m["config"]["layers"]) {
      if (l["name"] != "dot") continue;
      if (std::string(c.option) == "inbound") {
        l["inbound_nodes"][0][0][0] = c.value;
      } else {
        l["config"][c.option] = c.value;
      }
    }
    absl::StatusOr<ModelSpec> bad = ParseKerasModel(m.dump(), "t.json");
    ASSERT_FALSE(bad.ok()) << c.option << " " << c.value;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(c.expect), std::string::npos) << bad.status();
  }
}

}  // namespace
}  // namespace pscluster
