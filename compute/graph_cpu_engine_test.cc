// The graph engine on the CPU (compute/graph_cpu_engine.h, through
// CpuNetwork): gradients of whole models holding every layer of issue 11
// against central finite differences of the training loss, independence
// from the thread count, BatchNormalization's statistics in the moving
// slots, and inference with the moving values.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compute/cpu_network.h"
#include "compute/graph_plan.h"
#include "compute/kernels/testing/gradient_check.h"
#include "compute/testing/arriving_weights_check.h"
#include "compute/testing/graph_test_models.h"
#include "gtest/gtest.h"
#include "model/keras_model.h"
#include "model/sparse_layout.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

using kernels::testing::GradientsNear;
using testing_models::Bn;
using testing_models::Dense;
using testing_models::Drop;
using testing_models::EveryLayer;
using testing_models::FlattenModel;
using testing_models::L;
using testing_models::LoadTfjsReference;
using testing_models::Make;
using testing_models::Problem;
using testing_models::ReferenceCase;

std::unique_ptr<CpuNetwork> Net(const ModelSpec& spec, int max_batch, int threads) {
  CpuNetworkOptions o;
  o.max_batch = max_batch;
  o.num_threads = threads;
  o.seed = 17;
  absl::StatusOr<std::unique_ptr<CpuNetwork>> net = CpuNetwork::Create(spec, o);
  EXPECT_TRUE(net.ok()) << net.status();
  EXPECT_TRUE((*net)->on_graph_engine());
  return *std::move(net);
}

// eps: small enough that no ReLU input crosses zero between the two sides.
void CheckGradients(const ModelSpec& spec, float eps) {
  Problem p = Make(spec, 6, 3);
  std::unique_ptr<CpuNetwork> net = Net(p.spec, 6, 2);
  std::vector<float> grads(p.spec.num_parameters);
  float loss = 0;
  int correct = 0;
  constexpr uint64_t kStep = 5;
  ASSERT_TRUE(net->TrainStep(p.params.data(), p.images.data(), p.labels.data(), p.batch,
                             grads.data(), &loss, &correct, kStep)
                  .ok());
  std::vector<float> scratch(p.spec.num_parameters);
  auto objective = [&]() {
    float l = 0;
    int c = 0;
    EXPECT_TRUE(net->TrainStep(p.params.data(), p.images.data(), p.labels.data(), p.batch,
                               scratch.data(), &l, &c, kStep)
                    .ok());
    return static_cast<double>(l);
  };
  std::vector<double> numeric =
      kernels::testing::NumericalGradient(objective, &p.params, eps);
  for (const VariableSpec& v : p.spec.variables) {
    if (v.role != VariableRole::kTrainable) continue;
    std::vector<double> part(numeric.begin() + v.offset, numeric.begin() + v.offset + v.size);
    EXPECT_TRUE(GradientsNear(grads.data() + v.offset, part, 2e-3, 3e-2)) << v.name;
  }
}

TEST(GraphCpuEngineTest, GradientsOfEveryLayerMatchFiniteDifferences) {
  CheckGradients(EveryLayer(), 1e-2f);
}

TEST(GraphCpuEngineTest, GradientsWithFlattenReluAndBnWithoutGamma) {
  CheckGradients(FlattenModel(), 1e-3f);
}

TEST(GraphCpuEngineTest, GradientsThroughStridedWindows) {
  CheckGradients(testing_models::StridedModel(), 1e-3f);
}

TEST(GraphCpuEngineTest, GradientsThroughAGraph) {
  const ModelSpec spec = testing_models::GraphModel();
  // The shared layer's two applications have one set of variables.
  int shared = 0;
  for (const VariableSpec& v : spec.variables) shared += v.name.rfind("shared/", 0) == 0;
  EXPECT_EQ(shared, 2);
  CheckGradients(spec, 1e-3f);
}

TEST(GraphCpuEngineTest, GradientsThroughModernLayers) {
  CheckGradients(testing_models::ModernModel(), 1e-3f);
}

TEST(GraphCpuEngineTest, GradientsThroughModernConvolutionsAndRegularizers) {
  CheckGradients(testing_models::ModernConvModel(), 1e-3f);
}

// The 1-D layers' cases TensorFlow.js cannot check (its gradients refuse a
// dilation, and get a same-padded average wrong at the edges): a dilated
// same Conv1D, same-padded AveragePooling1D and MaxPooling1D with stride
// 1, and GlobalMaxPooling1D, over a [10, 3] sequence.
TEST(GraphCpuEngineTest, GradientsOfOneDimensionalLayersWhereTfjsHasNone) {
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(R"({"class_name": "Sequential", "config": {
    "name": "one_d", "layers": [
      {"class_name": "InputLayer", "config": {"name": "x", "batch_shape": [null, 10, 3]}},
      {"class_name": "Conv1D", "config": {"name": "c1", "filters": 4, "kernel_size": 3,
       "dilation_rate": 2, "padding": "same", "activation": "tanh"}},
      {"class_name": "AveragePooling1D", "config": {"name": "p1", "pool_size": 3, "strides": 1,
       "padding": "same"}},
      {"class_name": "MaxPooling1D", "config": {"name": "p2", "pool_size": 2, "strides": 1,
       "padding": "same"}},
      {"class_name": "Conv1D", "config": {"name": "c2", "filters": 5, "kernel_size": [2],
       "strides": [2]}},
      {"class_name": "GlobalMaxPooling1D", "config": {"name": "gmp"}},
      {"class_name": "Dense", "config": {"name": "out", "units": 3, "activation": "softmax"}}]}})",
                                                   "one_d.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  CheckGradients(*spec, 1e-3f);
}

TEST(GraphCpuEngineTest, GradientsOfAModelWithTwoInputs) {
  CheckGradients(testing_models::InputsModel(), 1e-3f);
}

// The ResNet-style model's ReLU layers fuse into the ops they read (each
// BatchNormalization or Add read by nothing else); a Dropout after a fused
// activation keeps the mask key it had unfused.
TEST(GraphCpuEngineTest, ActivationLayersFuseIntoTheOpsTheyRead) {
  absl::StatusOr<std::string> text = ReadModelFile("tests/fixtures/keras/tfjs_resnet.json");
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<ModelSpec> resnet = ParseKerasModel(*text, "tfjs_resnet");
  ASSERT_TRUE(resnet.ok()) << resnet.status();
  absl::StatusOr<std::vector<GraphOp>> ops = PlanGraphOps(*resnet);
  ASSERT_TRUE(ops.ok()) << ops.status();
  int activations = 0, fused = 0;
  for (const GraphOp& op : *ops) {
    activations += op.kind == LayerKind::kActivation;
    fused += op.has_act && (op.kind == LayerKind::kBatchNorm || op.kind == LayerKind::kAdd);
  }
  EXPECT_EQ(activations, 0);
  EXPECT_EQ(fused, 7);  // the stem's and each block's BN, each block's Add
  const ModelSpec chain = *BuildModelSpec(
      "chain", 4, 4, 1, 3,
      {testing_models::Conv("conv", 2, 3, 3, 1, Padding::kSame, Activation::kNone),
       testing_models::Act("relu", Activation::kRelu), Drop("drop", 0.5f),
       L(LayerKind::kFlatten, "flat"), Dense("out", 3, Activation::kNone)});
  absl::StatusOr<std::vector<GraphOp>> planned = PlanGraphOps(chain);
  ASSERT_TRUE(planned.ok()) << planned.status();
  ASSERT_EQ(planned->size(), 3u);  // conv with its ReLU, Dropout, Dense
  EXPECT_TRUE((*planned)[0].has_act);
  EXPECT_EQ((*planned)[1].kind, LayerKind::kDropout);
  EXPECT_EQ((*planned)[1].key_index, 2);
}

TEST(GraphCpuEngineTest, ThreadCountChangesOnlyRounding) {
  for (const ModelSpec& spec : {EveryLayer(), FlattenModel(), testing_models::GraphModel(),
                                testing_models::ModernModel(),
                                testing_models::ModernConvModel(),
                                testing_models::InputsModel()}) {
    Problem p = Make(spec, 11, 9);
    std::vector<std::vector<float>> all;
    std::vector<float> losses;
    for (int threads : {1, 2, 3}) {
      std::unique_ptr<CpuNetwork> net = Net(p.spec, 11, threads);
      std::vector<float> grads(p.spec.num_parameters);
      float loss = 0;
      int correct = 0;
      ASSERT_TRUE(net->TrainStep(p.params.data(), p.images.data(), p.labels.data(), p.batch,
                                 grads.data(), &loss, &correct, 123)
                      .ok());
      all.push_back(grads);
      losses.push_back(loss);
    }
    for (size_t k = 1; k < all.size(); ++k) {
      EXPECT_NEAR(losses[k], losses[0], 1e-5) << spec.name;
      for (int64_t i = 0; i < p.spec.num_parameters; ++i) {
        ASSERT_NEAR(all[k][i], all[0][i], 1e-5 + 1e-4 * std::fabs(all[0][i]))
            << spec.name << " parameter " << i << " with " << k + 1 << " threads";
      }
    }
  }
}

// As CpuNetwork's test: what the listener calls final is final, on the
// graph engine too (BatchNormalization's whole-batch gradients and
// statistics included).
TEST(GraphCpuEngineTest, GradientListenerIsToldOnlyWhatIsFinal) {
  for (const ModelSpec& spec : {EveryLayer(), FlattenModel(), testing_models::StridedModel(),
                                testing_models::GraphModel()}) {
    Problem p = Make(spec, 11, 9);
    for (int threads : {1, 2, 3}) {
      std::unique_ptr<CpuNetwork> net = Net(p.spec, 11, threads);
      const int64_t n = p.spec.num_parameters;
      std::vector<float> plain(n), grads(n, NAN);
      float loss = 0;
      int correct = 0;
      ASSERT_TRUE(net->TrainStep(p.params.data(), p.images.data(), p.labels.data(), p.batch,
                                 plain.data(), &loss, &correct, 123)
                      .ok());
      std::vector<int64_t> from;
      std::vector<std::vector<float>> suffix;
      net->set_gradient_listener([&](int64_t f) {
        from.push_back(f);
        suffix.emplace_back(grads.begin() + f, grads.end());
      });
      ASSERT_TRUE(net->TrainStep(p.params.data(), p.images.data(), p.labels.data(), p.batch,
                                 grads.data(), &loss, &correct, 123)
                      .ok());
      const std::string what = spec.name + " on " + std::to_string(threads) + " threads";
      ASSERT_FALSE(from.empty()) << what;
      EXPECT_EQ(from.back(), 0) << what;
      EXPECT_GT(from.size(), 2u) << what << ": the gradient should leave layer by layer";
      for (size_t k = 0; k < from.size(); ++k) {
        if (k > 0) {
          EXPECT_LE(from[k], from[k - 1]) << what;
        }
        ASSERT_EQ(suffix[k], std::vector<float>(grads.begin() + from[k], grads.end()))
            << what << ": the suffix from " << from[k] << " changed after it was called final";
      }
      EXPECT_EQ(grads, plain) << what;
    }
  }
}

// As CpuNetwork's test: the forward pass waits for each layer's weights.
TEST(GraphCpuEngineTest, ForwardWaitsForEachLayersWeightsAsTheyArrive) {
  for (const ModelSpec& spec : {EveryLayer(), FlattenModel(), testing_models::StridedModel(),
                                testing_models::GraphModel()}) {
    Problem p = Make(spec, 11, 9);
    for (int threads : {1, 2, 3}) {
      std::unique_ptr<CpuNetwork> net = Net(p.spec, 11, threads);
      testing_models::CheckStepOnArrivingWeights(
          *net, p.params.data(), p.images.data(), p.labels.data(), p.batch,
          spec.name + " on " + std::to_string(threads) + " threads");
    }
  }
}

// The BN layer right after the input sees the images themselves: its
// moving slots must hold their per-channel mean and biased variance.
TEST(GraphCpuEngineTest, BatchStatisticsGoToTheMovingSlots) {
  ModelSpec spec = *BuildModelSpec(
      "bn_first", 3, 2, 2, 2,
      {Bn("bn"), L(LayerKind::kFlatten, "flatten"), Dense("out", 2, Activation::kNone)});
  Problem p = Make(spec, 5, 4);
  std::unique_ptr<CpuNetwork> net = Net(spec, 5, 2);
  std::vector<float> grads(spec.num_parameters);
  float loss = 0;
  int correct = 0;
  ASSERT_TRUE(net->TrainStep(p.params.data(), p.images.data(), p.labels.data(), 5, grads.data(),
                             &loss, &correct)
                  .ok());
  for (int ch = 0; ch < 2; ++ch) {
    double sum = 0, sq = 0;
    const int n = 5 * 3 * 2;
    for (int i = 0; i < n; ++i) sum += p.images[i * 2 + ch];
    const double mean = sum / n;
    for (int i = 0; i < n; ++i) sq += (p.images[i * 2 + ch] - mean) * (p.images[i * 2 + ch] - mean);
    EXPECT_NEAR(grads[spec.variables[2].offset + ch], mean, 1e-6);    // bn/moving_mean
    EXPECT_NEAR(grads[spec.variables[3].offset + ch], sq / n, 1e-6);  // bn/moving_variance
  }
}

// Inference normalises with the moving values and drops no unit: computed
// here by hand for a BN + Dropout + Dense model.
TEST(GraphCpuEngineTest, EvaluateUsesMovingStatisticsAndNoDropout) {
  ModelSpec spec = *BuildModelSpec(
      "eval", 1, 1, 3, 2,
      {Bn("bn"), Drop("drop", 0.9f), Dense("out", 2, Activation::kNone)});
  Problem p = Make(spec, 4, 8);
  std::unique_ptr<CpuNetwork> net = Net(spec, 4, 2);
  double loss_sum = 0;
  int correct = 0;
  ASSERT_TRUE(net->Evaluate(p.params.data(), p.images.data(), p.labels.data(), 4, &loss_sum,
                            &correct)
                  .ok());
  auto var = [&](int i) { return p.params.data() + spec.variables[i].offset; };
  double expect = 0;
  for (int n = 0; n < 4; ++n) {
    double z[2] = {var(5)[0], var(5)[1]};
    for (int c = 0; c < 3; ++c) {
      const double x = (p.images[n * 3 + c] - var(2)[c]) / std::sqrt(var(3)[c] + 1e-3) *
                           var(0)[c] + var(1)[c];
      for (int o = 0; o < 2; ++o) z[o] += x * var(4)[c * 2 + o];
    }
    const double m = std::max(z[0], z[1]);
    expect += m + std::log(std::exp(z[0] - m) + std::exp(z[1] - m)) - z[static_cast<int>(p.labels[n])];
  }
  EXPECT_NEAR(loss_sum, expect, 1e-4);
}

// The same step key gives the same masks; another key, others.
TEST(GraphCpuEngineTest, DropoutIsKeyedByTheStep) {
  Problem p = Make(FlattenModel(), 8, 2);
  std::unique_ptr<CpuNetwork> net = Net(p.spec, 8, 1);
  auto step = [&](uint64_t key) {
    std::vector<float> grads(p.spec.num_parameters);
    float loss = 0;
    int correct = 0;
    EXPECT_TRUE(net->TrainStep(p.params.data(), p.images.data(), p.labels.data(), 8,
                               grads.data(), &loss, &correct, key)
                    .ok());
    return grads;
  };
  EXPECT_EQ(step(1), step(1));
  EXPECT_NE(step(1), step(2));
}

// Keras semantics from an independent implementation: TensorFlow.js
// computed these models' losses (tests/fixtures/tfjs_reference) for fixed
// weights and inputs, in inference mode (moving statistics) and training
// mode (batch statistics): "same" convolutions and pooling with strides on
// odd sizes, rectangular windows, overlapping max pooling, average pooling
// that does not count the padding, global average pooling, sigmoid, tanh.
TEST(GraphCpuEngineTest, LossesMatchTensorFlowJs) {
  std::vector<ReferenceCase> cases = LoadTfjsReference();
  ASSERT_EQ(cases.size(), 2u);
  // Functional graphs (graphs.json): Add, Multiply, Average and
  // Concatenate, a Dense layer applied twice, residual blocks with
  // projections and BatchNormalization, three inputs.
  for (ReferenceCase& c : LoadTfjsReference("tests/fixtures/tfjs_reference/graphs.json")) {
    cases.push_back(std::move(c));
  }
  // Modern CNNs' layers (modern_graph.json): a dilated Conv2D,
  // DepthwiseConv2D, SeparableConv2D, LayerNormalization, L1/L2 penalties.
  for (ReferenceCase& c : LoadTfjsReference("tests/fixtures/tfjs_reference/modern_graph.json")) {
    cases.push_back(std::move(c));
  }
  ASSERT_EQ(cases.size(), 8u);
  for (const ReferenceCase& m : cases) {
    const ModelSpec* spec = &m.spec;
    const std::vector<float>& params = m.params;
    const std::vector<float>& images = m.images;
    const std::vector<float>& labels = m.labels;
    const int batch = static_cast<int>(labels.size());
    for (int threads : {1, 2}) {
      std::unique_ptr<CpuNetwork> net = Net(*spec, batch, threads);
      double eval_sum = 0;
      int correct = 0;
      ASSERT_TRUE(
          net->Evaluate(params.data(), images.data(), labels.data(), batch, &eval_sum, &correct)
              .ok());
      const double want_eval = m.inference_loss_sum;
      EXPECT_NEAR(eval_sum, want_eval, 1e-4 * std::fabs(want_eval)) << spec->name;
      std::vector<float> grads(spec->num_parameters);
      float loss = 0;
      ASSERT_TRUE(net->TrainStep(params.data(), images.data(), labels.data(), batch,
                                 grads.data(), &loss, &correct)
                      .ok());
      const double want_train = m.training_loss_sum;
      EXPECT_NEAR(loss * batch, want_train, 1e-4 * std::fabs(want_train)) << spec->name;
    }
  }
}

// TensorFlow.js's trainOnBatch with plain SGD on the modern layers'
// model: each step's loss (the batch's mean cross-entropy plus the
// regularizers) before the step, so every gradient, the regularizers'
// included, shows in the next step's loss.
TEST(GraphCpuEngineTest, SgdStepsMatchTensorFlowJs) {
  int checked = 0;
  for (ReferenceCase& m : LoadTfjsReference("tests/fixtures/tfjs_reference/modern_graph.json")) {
    if (m.sgd_losses.empty()) continue;
    const int batch = static_cast<int>(m.labels.size());
    std::unique_ptr<CpuNetwork> net = Net(m.spec, batch, 2);
    std::vector<float> grads(m.spec.num_parameters);
    for (size_t step = 0; step < m.sgd_losses.size(); ++step) {
      float loss = 0;
      int correct = 0;
      ASSERT_TRUE(net->TrainStep(m.params.data(), m.images.data(), m.labels.data(), batch,
                                 grads.data(), &loss, &correct)
                      .ok());
      EXPECT_NEAR(loss, m.sgd_losses[step], 1e-4 * m.sgd_losses[step])
          << m.spec.name << " step " << step;
      for (int64_t i = 0; i < m.spec.num_parameters; ++i) {
        m.params[i] -= static_cast<float>(m.sgd_learning_rate) * grads[i];
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 1);
}

// Every model of a tfjs reference file (its outputs, loss sums and every
// gradient) on one thread and on two; prints the largest differences under
// `title`.
void ExpectMatchesTfjs(const std::vector<ReferenceCase>& cases, const char* title) {
  double max_output = 0, max_grad = 0, max_loss = 0;
  for (const ReferenceCase& m : cases) {
    const int batch = static_cast<int>(m.labels.size());
    const std::vector<float>& outputs = m.outputs;
    ASSERT_FALSE(outputs.empty()) << m.spec.name;
    for (int threads : {1, 2}) {
      std::unique_ptr<CpuNetwork> net = Net(m.spec, batch, threads);
      double loss_sum = 0;
      int correct = 0;
      std::vector<float> got(outputs.size());
      ASSERT_TRUE(net->Evaluate(m.params.data(), m.images.data(), m.labels.data(), batch,
                                &loss_sum, &correct, got.data())
                      .ok());
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_NEAR(got[k], outputs[k], 1e-6) << m.spec.name << " output " << k;
        max_output = std::max(max_output, std::fabs(double{got[k]} - outputs[k]));
      }
      EXPECT_NEAR(loss_sum, m.inference_loss_sum, 1e-5) << m.spec.name;
      max_loss = std::max(max_loss, std::fabs(loss_sum - m.inference_loss_sum));
      std::vector<float> grads(m.spec.num_parameters, 7.0f);  // all overwritten
      float loss = 0;
      ASSERT_TRUE(net->TrainStep(m.params.data(), m.images.data(), m.labels.data(), batch,
                                 grads.data(), &loss, &correct)
                      .ok());
      EXPECT_NEAR(loss * batch, m.training_loss_sum, 1e-5) << m.spec.name;
      max_grad = std::max(max_grad, testing_models::ExpectGradientsAreTfjs(m, grads));
    }
  }
  std::printf("tfjs %s: max |output diff| %.3g, |loss sum diff| %.3g, |gradient diff| %.3g\n",
              title, max_output, max_loss, max_grad);
}

// Models with several outputs (tests/fixtures/tfjs_reference/heads.json,
// written by make_heads_reference.js): ESMM's click head and its product
// with the conversion head (binary cross-entropy on logits and on
// probabilities, weights 1 and 0.5), and three heads of a shared layer
// (softmax classes, a sigmoid after its Dense, a regression; weights as a
// dict). Every output, the weighted loss and every gradient match tfjs's,
// on one thread and on two.
TEST(GraphCpuEngineTest, SeveralOutputsMatchTensorFlowJs) {
  std::ifstream in("tests/fixtures/tfjs_reference/heads.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json ref = nlohmann::json::parse(in);
  double max_output = 0, max_loss = 0, max_grad = 0;
  int models = 0;
  for (const nlohmann::json& m : ref["models"]) {
    absl::StatusOr<ModelSpec> spec = ParseKerasModel(m["model_json"].dump(), "heads");
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_GE(spec->outputs.size(), 2u);
    std::vector<float> params(spec->num_parameters);
    for (const VariableSpec& v : spec->variables) {
      const std::vector<float> w = m["weights"].at(v.name).get<std::vector<float>>();
      ASSERT_EQ(static_cast<int64_t>(w.size()), v.size) << v.name;
      std::copy(w.begin(), w.end(), params.begin() + v.offset);
    }
    const std::vector<float> images = m["images"].get<std::vector<float>>();
    const std::vector<float> targets = m["targets"].get<std::vector<float>>();
    const std::vector<float> outputs = m["outputs"].get<std::vector<float>>();
    const int batch = static_cast<int>(targets.size()) / TargetsOf(*spec);
    ASSERT_EQ(outputs.size(), static_cast<size_t>(batch) * spec->num_classes);
    const double want_loss = m["loss_sum"].get<double>();
    for (int threads : {1, 2}) {
      std::unique_ptr<CpuNetwork> net = Net(*spec, batch, threads);
      double loss_sum = 0;
      int correct = 0;
      std::vector<float> got(outputs.size());
      ASSERT_TRUE(net->Evaluate(params.data(), images.data(), targets.data(), batch, &loss_sum,
                                &correct, got.data())
                      .ok());
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_NEAR(got[k], outputs[k], 1e-6) << spec->name << " output " << k;
        max_output = std::max(max_output, std::fabs(double{got[k]} - outputs[k]));
      }
      EXPECT_NEAR(loss_sum, want_loss, 2e-6 * std::fabs(want_loss)) << spec->name;
      max_loss = std::max(max_loss, std::fabs(loss_sum - want_loss));
      std::vector<float> grads(spec->num_parameters, 7.0f);  // all overwritten
      float loss = 0;
      ASSERT_TRUE(net->TrainStep(params.data(), images.data(), targets.data(), batch, grads.data(),
                                 &loss, &correct)
                      .ok());
      EXPECT_NEAR(loss * batch, want_loss, 2e-6 * std::fabs(want_loss)) << spec->name;
      for (const VariableSpec& v : spec->variables) {
        const std::vector<float> g = m["gradients"].at(v.name).get<std::vector<float>>();
        ASSERT_EQ(static_cast<int64_t>(g.size()), v.size) << v.name;
        for (int64_t k = 0; k < v.size; ++k) {
          EXPECT_NEAR(grads[v.offset + k], g[k], 1e-6) << spec->name << " " << v.name << k;
          max_grad = std::max(max_grad, std::fabs(double{grads[v.offset + k]} - g[k]));
        }
      }
    }
    ++models;
  }
  EXPECT_EQ(models, 2);
  std::printf(
      "tfjs several outputs: max |output diff| %.3g, |loss sum diff| %.3g, "
      "|gradient diff| %.3g\n",
      max_output, max_loss, max_grad);
}

// Keras's Embedding from TensorFlow.js (tests/fixtures/tfjs_reference/
// embedding.json): Embedding -> GlobalAveragePooling1D -> Dense; ids
// -> Embedding -> Flatten beside dense features -> Concatenate -> Dense;
// deploy/models/ctr_deepfm.json's factorization-machine block (one
// tensor fed twice to a Multiply, Rescaling by -4, Add); and that model's
// whole shape (two tables over the same ids, the pairs summed through a
// Reshape to [steps, features], a deep Dense's logit added to the
// factorization machine's terms before one sigmoid: binary
// cross-entropy), with ids repeated
// within and across examples. The outputs, the loss and
// every gradient (the table's rows summed over each id's uses, untouched
// rows 0) match tfjs's, on one thread and on two.
TEST(GraphCpuEngineTest, EmbeddingMatchesTensorFlowJs) {
  std::vector<ReferenceCase> cases =
      LoadTfjsReference("tests/fixtures/tfjs_reference/embedding.json");
  ASSERT_EQ(cases.size(), 4u);
  EXPECT_EQ(cases[3].spec.loss, LossKind::kBinaryCrossentropy);
  ExpectMatchesTfjs(cases, "Embedding");
}

// Keras's 1-D layers over [steps, features] from TensorFlow.js
// (tests/fixtures/tfjs_reference/sequence.json, written by
// make_embedding_reference.js): Conv1D (same and valid, strided, without
// bias, fused relu, tanh, swish and sigmoid) over float sequences and over
// an Embedding's rows, MaxPooling1D, AveragePooling1D, GlobalMaxPooling1D
// and GlobalAveragePooling1D, with a softmax and a sigmoid head (no
// same-padded average: tfjs's CPU gradient of one divides by the whole
// window at the edges, where its forward divides by the steps inside);
// Dense on the last axis of [steps, features] and of an image, as Keras
// applies it to each step or pixel; LayerNormalization over each step's
// features (tfjs writes its axis as [2]).
TEST(GraphCpuEngineTest, OneDimensionalLayersMatchTensorFlowJs) {
  std::vector<ReferenceCase> cases =
      LoadTfjsReference("tests/fixtures/tfjs_reference/sequence.json");
  ASSERT_EQ(cases.size(), 6u);
  EXPECT_EQ(cases[2].spec.loss, LossKind::kBinaryCrossentropy);
  for (size_t k = 0; k < 3; ++k) {
    const ReferenceCase& c = cases[k];
    for (const LayerSpec& l : c.spec.layers) {
      if (l.kind == LayerKind::kConv2D || l.kind == LayerKind::kMaxPool2D) EXPECT_TRUE(l.one_d);
    }
    // Conv1D's kernel has Keras's shape, [window, in, filters].
    for (const VariableSpec& v : c.spec.variables) {
      if (v.name == "c1/kernel") EXPECT_EQ(v.shape.size(), 3u) << c.spec.name;
    }
  }
  // A Dense per step or pixel has Keras's [features, units] kernel.
  for (const VariableSpec& v : cases[3].spec.variables) {
    if (v.name == "d1/kernel") EXPECT_EQ(v.shape, (std::vector<int64_t>{3, 5}));
  }
  for (const VariableSpec& v : cases[4].spec.variables) {
    if (v.name == "d1/kernel") EXPECT_EQ(v.shape, (std::vector<int64_t>{2, 3}));
  }
  ExpectMatchesTfjs(cases, "1-D layers");
}

// Keras's Dot and DCN-v2's cross network from TensorFlow.js
// (tests/fixtures/tfjs_reference/towers.json, written by
// make_embedding_reference.js): a user tower over an Embedding's rows
// dotted with an item tower (Dot(axes 1) -> sigmoid: binary
// cross-entropy); their cosine (normalize) feeding a softmax head beside
// the features; two cross layers x0 * (W x + b) + x; a Dot of two Dense
// layers over one input. The outputs, the loss and every gradient match
// tfjs's.
TEST(GraphCpuEngineTest, DotAndCrossNetworkMatchTensorFlowJs) {
  std::vector<ReferenceCase> cases = LoadTfjsReference("tests/fixtures/tfjs_reference/towers.json");
  ASSERT_EQ(cases.size(), 4u);
  EXPECT_EQ(cases[0].spec.loss, LossKind::kBinaryCrossentropy);
  int dots = 0;
  for (const ReferenceCase& c : cases) {
    for (const LayerSpec& l : c.spec.layers) {
      if (l.kind != LayerKind::kDot) continue;
      ++dots;
      EXPECT_EQ(l.normalize, c.spec.name == "cosine") << c.spec.name;
    }
  }
  EXPECT_EQ(dots, 3);
  ExpectMatchesTfjs(cases, "Dot and cross network");
}

// A softmax that no loss takes in (tests/fixtures/tfjs_reference/
// softmax.json, written by make_embedding_reference.js): a Dense gate's
// softmax activation times an expert, the Softmax layer on each step of a
// sequence, and an Activation(softmax) read by a Concatenate. Each is a
// Softmax node of its own; outputs, loss and every gradient match tfjs's.
TEST(GraphCpuEngineTest, SoftmaxLayersMatchTensorFlowJs) {
  std::vector<ReferenceCase> cases =
      LoadTfjsReference("tests/fixtures/tfjs_reference/softmax.json");
  ASSERT_EQ(cases.size(), 3u);
  for (const ReferenceCase& c : cases) {
    int softmaxes = 0;
    for (const LayerSpec& l : c.spec.layers) softmaxes += l.kind == LayerKind::kSoftmax;
    EXPECT_EQ(softmaxes, 1) << c.spec.name;
  }
  ExpectMatchesTfjs(cases, "Softmax not fused");
}

// Cases [k, end) of *cases, which keeps [0, k).
std::vector<ReferenceCase> TakeFrom(std::vector<ReferenceCase>* cases, size_t k) {
  std::vector<ReferenceCase> rest(std::make_move_iterator(cases->begin() + k),
                                  std::make_move_iterator(cases->end()));
  cases->resize(k);
  return rest;
}

// How many of the ops planned for `spec` `counted` counts (-1: no plan).
int CountPlannedOps(const ModelSpec& spec, const std::function<bool(const GraphOp&)>& counted) {
  absl::StatusOr<std::vector<GraphOp>> ops = PlanGraphOps(spec);
  if (!ops.ok()) return -1;
  return static_cast<int>(std::count_if(ops->begin(), ops->end(), counted));
}

// Sequences joined along their steps (tests/fixtures/tfjs_reference/
// steps.json, make_embedding_reference.js): two inputs' steps into a
// Conv1D, and a target item's Embedding row put before its history's (one
// Embedding applied twice), as BST's sequence is made; and Dots of
// sequences. Outputs, loss and every gradient match tfjs's.
TEST(GraphCpuEngineTest, SequenceConcatenateAndDotMatchTensorFlowJs) {
  std::vector<ReferenceCase> cases = LoadTfjsReference("tests/fixtures/tfjs_reference/steps.json");
  ASSERT_EQ(cases.size(), 4u);
  std::vector<ReferenceCase> dots = TakeFrom(&cases, 2);
  for (const ReferenceCase& c : cases) {
    EXPECT_EQ(CountPlannedOps(c.spec, [](const GraphOp& op) { return op.concat_steps; }), 1)
        << c.spec.name;
  }
  ExpectMatchesTfjs(cases, "Concatenate(axis=1) of sequences");
  // Dot of sequences (Keras's batch_dot): attention from plain layers
  // (Dot [2, 2], Softmax, Dot [2, 1]), and Dots over the steps (axes 1,
  // and [1, 2]).
  for (const ReferenceCase& c : dots) {
    EXPECT_EQ(CountPlannedOps(c.spec, [](const GraphOp& op) { return op.batched_dot.rows_x > 0; }),
              2)
        << c.spec.name;
  }
  ExpectMatchesTfjs(dots, "Dot of sequences");
}

// Keras's LSTM and GRU from TensorFlow.js (tests/fixtures/tfjs_reference/
// recurrent.json, written by make_embedding_reference.js): an LSTM's last
// state with sigmoid gates; an LSTM over an Embedding's rows read
// backwards, every step's output into the mean; a GRU (reset_after false,
// hard_sigmoid gates of slope 0.2); a GRU's sequence into an LSTM (relu,
// no bias). Outputs, loss and every gradient match tfjs's, on one thread
// and on two.
TEST(GraphCpuEngineTest, RecurrentLayersMatchTensorFlowJs) {
  std::vector<ReferenceCase> cases =
      LoadTfjsReference("tests/fixtures/tfjs_reference/recurrent.json");
  ASSERT_EQ(cases.size(), 4u);
  std::vector<std::string> kinds;
  for (const ReferenceCase& c : cases) {
    for (const LayerSpec& l : c.spec.layers) {
      if (!IsRecurrent(l.kind)) continue;
      kinds.push_back(absl::StrCat(c.spec.name, ":", l.kind == LayerKind::kLstm ? "lstm" : "gru",
                                   l.return_sequences ? "/seq" : "", l.go_backwards ? "/back" : "",
                                   l.kind == LayerKind::kGru && !l.reset_after ? "/v2" : "",
                                   l.use_bias ? "" : "/nobias"));
    }
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"lstm_last:lstm", "lstm_backwards:lstm/seq/back",
                                             "gru_hard:gru/v2", "stacked:gru/seq/v2",
                                             "stacked:lstm/nobias"}));
  EXPECT_FLOAT_EQ(cases[2].spec.layers[0].alpha, 0.2f);  // hard_sigmoid's slope in a tfjs file
  ExpectMatchesTfjs(cases, "LSTM and GRU");
}

// An LSTM or GRU over Embedding(mask_zero) ids skips the padded steps, as
// Keras does: a batch with padding at the start, in the middle and at the
// end gives what the same layers give on the ids without it (a model of 3
// steps, the same weights). The last state, read forwards and backwards,
// and the masked mean of the steps' outputs (return_sequences into
// GlobalAveragePooling1D); LSTM and GRU (Keras 3's reset_after).
TEST(GraphCpuEngineTest, RecurrentLayersSkipMaskedSteps) {
  auto model = [](int steps, const std::string& cls, const std::string& options, bool mean) {
    return absl::StrCat(
        R"({"class_name": "Sequential", "config": {"name": "rnn", "layers": [
        {"class_name": "InputLayer", "config": {"batch_input_shape": [null, )",
        steps, R"(]}},
        {"class_name": "Embedding", "config": {"name": "emb", "input_dim": 9, "output_dim": 3,
                                               "mask_zero": true}},
        {"class_name": ")",
        cls, R"(", "config": {"name": "rnn", "units": 4, )", options, R"(}},)",
        mean ? R"({"class_name": "GlobalAveragePooling1D", "config": {"name": "mean"}},)" : "",
        R"({"class_name": "Dense", "config": {"name": "out", "units": 2,
                                           "activation": "softmax"}}]}})");
  };
  // Three ids an example, padded to 6 three ways.
  const std::vector<float> short_ids = {3, 1, 7, 5, 5, 2, 8, 6, 4};
  const std::vector<float> padded = {0, 0, 3, 1, 0, 7, 5, 0, 5, 2, 0, 0, 8, 6, 4, 0, 0, 0};
  const std::vector<float> labels = {0, 1, 1};
  const struct {
    std::string cls, options;
    bool mean;
  } cases[] = {
      {"LSTM", R"("return_sequences": false)", false},
      {"LSTM", R"("go_backwards": true)", false},
      {"GRU", R"("reset_after": true)", false},
      {"GRU", R"("reset_after": true, "go_backwards": true)", false},
      {"LSTM", R"("return_sequences": true)", true},
      {"GRU", R"("return_sequences": true, "reset_after": true)", true},
  };
  for (const auto& c : cases) {
    absl::StatusOr<ModelSpec> three = ParseKerasModel(model(3, c.cls, c.options, c.mean), "3");
    absl::StatusOr<ModelSpec> six = ParseKerasModel(model(6, c.cls, c.options, c.mean), "6");
    ASSERT_TRUE(three.ok()) << three.status();
    ASSERT_TRUE(six.ok()) << six.status();
    ASSERT_EQ(three->num_parameters, six->num_parameters);
    const std::vector<float> params = InitialParameters(*three, 5);
    std::vector<float> want(6), got(6);
    double loss = 0;
    int correct = 0;
    ASSERT_TRUE(Net(*three, 3, 1)
                    ->Evaluate(params.data(), short_ids.data(), labels.data(), 3, &loss, &correct,
                               want.data())
                    .ok());
    for (int threads : {1, 2}) {
      ASSERT_TRUE(Net(*six, 3, threads)
                      ->Evaluate(params.data(), padded.data(), labels.data(), 3, &loss, &correct,
                                 got.data())
                      .ok());
      for (int k = 0; k < 6; ++k) {
        EXPECT_NEAR(got[k], want[k], 1e-6) << c.cls << " " << c.options << " output " << k;
      }
    }
    EXPECT_NE(want[0], want[2]) << "the examples differ";
  }
}

// The cases with each Embedding a sparse table's window: the examples'
// ids renumbered by RowWindow (padding negative, its id 0 a row like any),
// the window's rows the tables' rows of those ids. The loss and every
// gradient are Keras's (row 0's where padding is read, as in an Attention
// whose keys are all padding).
void ExpectWindowedMatchesKeras(const std::vector<ReferenceCase>& cases) {
  for (const ReferenceCase& c : cases) {
    absl::StatusOr<std::vector<SparseTableInfo>> found = FindSparseTables(c.spec);
    ASSERT_TRUE(found.ok()) << found.status();
    ASSERT_FALSE(found->empty());
    const int batch = static_cast<int>(c.labels.size());
    const int64_t example = static_cast<int64_t>(c.images.size()) / batch;
    const int64_t window = 64;
    std::vector<SparseTableInfo> tables = *found;
    const ModelSpec spec = WithSparseTables(c.spec, window, &tables);
    RowWindow rows(tables);
    std::vector<float> mapped;
    ASSERT_TRUE(rows.Map(c.images.data(), batch, example, window, &mapped).ok());
    int padded = 0;
    for (float v : mapped) padded += v < 0;
    bool masked = false;
    for (const SparseTableInfo& t : tables) masked |= t.mask_zero;
    if (masked) EXPECT_GT(padded, 0) << c.spec.name;
    std::vector<float> params(spec.num_parameters, 0.0f);
    auto table_of = [&](const std::string& name) -> int {
      for (size_t t = 0; t < tables.size(); ++t) {
        if (tables[t].variable == name) return static_cast<int>(t);
      }
      return -1;
    };
    for (const VariableSpec& v : spec.variables) {
      for (const VariableSpec& w : c.spec.variables) {
        if (w.name != v.name) continue;
        if (const int t = table_of(v.name); t >= 0) {
          const std::vector<int64_t>& ids = rows.ids(t);
          const int width = tables[t].width;
          for (size_t k = 0; k < ids.size(); ++k) {
            std::copy_n(c.params.begin() + w.offset + ids[k] * width, width,
                        params.begin() + v.offset + static_cast<int64_t>(k) * width);
          }
        } else {
          std::copy_n(c.params.begin() + w.offset, w.size, params.begin() + v.offset);
        }
      }
    }
    std::unique_ptr<CpuNetwork> net = Net(spec, batch, 2);
    std::vector<float> grads(spec.num_parameters);
    float loss = 0;
    int correct = 0;
    ASSERT_TRUE(net->TrainStep(params.data(), mapped.data(), c.labels.data(), batch, grads.data(),
                               &loss, &correct)
                    .ok());
    EXPECT_NEAR(loss * batch, c.training_loss_sum, 1e-5 * std::max(1.0, c.training_loss_sum))
        << c.spec.name;
    for (const VariableSpec& v : spec.variables) {
      const std::vector<float>& want = c.gradients.at(v.name);
      const int t = table_of(v.name);
      if (t < 0) {
        for (int64_t k = 0; k < v.size; ++k) {
          EXPECT_NEAR(grads[v.offset + k], want[k], 1e-6) << c.spec.name << " " << v.name;
        }
        continue;
      }
      const std::vector<int64_t>& ids = rows.ids(t);
      const int width = tables[t].width;
      for (size_t r = 0; r < ids.size(); ++r) {
        for (int d = 0; d < width; ++d) {
          EXPECT_NEAR(grads[v.offset + static_cast<int64_t>(r) * width + d],
                      want[ids[r] * width + d], 1e-6)
              << c.spec.name << " " << v.name << " id " << ids[r];
        }
      }
    }
  }
}

// Keras's Attention (tests/fixtures/attention/attention.json: Keras 3
// files and what Keras 3 computes for them in float64 PyTorch, by
// make_attention_reference.py): DIN's target attention over a masked
// history (one history all padding), a masked sequence attending to itself
// into a masked mean, and [query, value, key] with keys of their own. The
// outputs, the loss and every gradient match, on one thread and on two.
TEST(GraphCpuEngineTest, AttentionMatchesKeras3) {
  std::vector<ReferenceCase> cases = LoadTfjsReference("tests/fixtures/attention/attention.json");
  ASSERT_EQ(cases.size(), 5u);
  std::vector<ReferenceCase> multi_head = TakeFrom(&cases, 3);
  ExpectMatchesTfjs(cases, "Attention (float64 Keras 3)");
  // MultiHeadAttention: BST's block (self-attention of a masked sequence,
  // Add, LayerNormalization, a per-step Dense, the masked mean) and a
  // cross attention of 3 heads with keys of their own and no biases. The
  // parser made each its projections and a core of its heads.
  for (const ReferenceCase& c : multi_head) {
    std::vector<std::string> names;
    for (const LayerSpec& l : c.spec.layers) {
      if (l.name.rfind("mha", 0) == 0) names.push_back(l.name);
    }
    EXPECT_EQ(names, (std::vector<std::string>{"mha/query", "mha/key", "mha/value", "mha",
                                               "mha/attention_output"}))
        << c.spec.name;
  }
  ExpectMatchesTfjs(multi_head, "MultiHeadAttention (float64 Keras 3)");
  // Through sparse tables' windows: the same figures, the all-padding
  // history's Attention reading (and training) row 0 as Keras does.
  ExpectWindowedMatchesKeras(cases);
  ExpectWindowedMatchesKeras(multi_head);
}

// Keras 3's masking (tests/fixtures/masking/masking.json: models written by
// TensorFlow.js, what Keras 3 computes for them in float64 PyTorch, by
// make_masking_reference.py): Embedding(mask_zero) into
// GlobalAveragePooling1D, directly, through Dense, LayerNormalization and
// Dropout per step, and beside dense features; ids padded at the end, in
// the middle, and not at all. The outputs, the loss and every gradient
// match, row 0 (padding) getting none; and the same through a sparse
// table's window, where padding is negative.
TEST(GraphCpuEngineTest, MaskZeroMatchesKeras3) {
  std::vector<ReferenceCase> cases = LoadTfjsReference("tests/fixtures/masking/masking.json");
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[1].spec.loss, LossKind::kBinaryCrossentropy);
  for (const ReferenceCase& c : cases) {
    const VariableSpec* table = nullptr;
    for (const VariableSpec& v : c.spec.variables) {
      if (v.name == "emb/embeddings") table = &v;
    }
    ASSERT_NE(table, nullptr);
    const std::vector<float>& g = c.gradients.at("emb/embeddings");
    for (int64_t k = 0; k < table->shape[1]; ++k) EXPECT_EQ(g[k], 0.0f) << c.spec.name;
  }
  ExpectMatchesTfjs(cases, "mask_zero (float64 Keras 3)");

  ExpectWindowedMatchesKeras(cases);
}

// An id outside [0, input_dim) is an error naming the layer, the id and
// input_dim, as Keras raises; never clamped. The next batch runs.
TEST(GraphCpuEngineTest, EmbeddingIdOutOfRangeIsAnError) {
  std::vector<ReferenceCase> cases =
      LoadTfjsReference("tests/fixtures/tfjs_reference/embedding.json");
  ASSERT_FALSE(cases.empty());
  const ReferenceCase& m = cases[0];  // ids [5], input_dim 11
  const int batch = static_cast<int>(m.labels.size());
  std::unique_ptr<CpuNetwork> net = Net(m.spec, batch, 2);
  std::vector<float> grads(m.spec.num_parameters);
  float loss = 0;
  int correct = 0;
  for (float bad : {11.0f, -1.0f, std::nanf("")}) {
    std::vector<float> images = m.images;
    images[3 * 5 + 2] = bad;  // example 3 (the second thread's), position 2
    absl::Status s = net->TrainStep(m.params.data(), images.data(), m.labels.data(), batch,
                                    grads.data(), &loss, &correct);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_NE(s.message().find("layer 'emb' (Embedding): id "), std::string::npos) << s;
    EXPECT_NE(s.message().find("of example 3 of the batch) is outside [0, input_dim = 11)"),
              std::string::npos)
        << s;
    double sum = 0;
    EXPECT_EQ(net->Evaluate(m.params.data(), images.data(), m.labels.data(), batch, &sum,
                            &correct)
                  .code(),
              absl::StatusCode::kDataLoss);
  }
  EXPECT_TRUE(net->TrainStep(m.params.data(), m.images.data(), m.labels.data(), batch,
                             grads.data(), &loss, &correct)
                  .ok());
}

// Embedding's gradient against finite differences, with the table shared
// by two applications (one set of variables) and a fused activation.
TEST(GraphCpuEngineTest, EmbeddingGradientsOfASharedTable) {
  const std::string text = R"({"class_name": "Functional", "config": {"name": "shared_emb",
    "layers": [
      {"class_name": "InputLayer", "name": "a", "config": {"name": "a", "batch_shape": [null, 3]},
       "inbound_nodes": []},
      {"class_name": "InputLayer", "name": "b", "config": {"name": "b", "batch_shape": [null, 3]},
       "inbound_nodes": []},
      {"class_name": "Embedding", "name": "emb", "config": {"name": "emb", "input_dim": 5,
       "output_dim": 2}, "inbound_nodes": [[["a", 0, 0, {}]], [["b", 0, 0, {}]]]},
      {"class_name": "Activation", "name": "act", "config": {"name": "act",
       "activation": "tanh"}, "inbound_nodes": [[["emb", 0, 0, {}]]]},
      {"class_name": "Flatten", "name": "fa", "config": {"name": "fa"},
       "inbound_nodes": [[["act", 0, 0, {}]]]},
      {"class_name": "GlobalAveragePooling1D", "name": "gb", "config": {"name": "gb"},
       "inbound_nodes": [[["emb", 1, 0, {}]]]},
      {"class_name": "Concatenate", "name": "cat", "config": {"name": "cat"},
       "inbound_nodes": [[["fa", 0, 0, {}], ["gb", 0, 0, {}]]]},
      {"class_name": "Dense", "name": "out", "config": {"name": "out", "units": 3},
       "inbound_nodes": [[["cat", 0, 0, {}]]]}],
    "input_layers": [["a", 0, 0], ["b", 0, 0]], "output_layers": [["out", 0, 0]]}})";
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(text, "shared_emb.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const int batch = 4;
  std::vector<float> params = InitialParameters(*spec, 3);
  for (float& p : params) p *= 10.0f;  // the table's +-0.05 is too flat a test
  const std::vector<float> images = {0, 4, 0, 4, 4, 1,  2, 2, 2, 3, 0, 3,
                                     1, 0, 1, 1, 1, 1,  3, 4, 0, 0, 0, 0};
  const std::vector<float> labels = {0, 2, 1, 2};
  std::unique_ptr<CpuNetwork> net = Net(*spec, batch, 2);
  std::vector<float> grads(spec->num_parameters), scratch(spec->num_parameters);
  float loss = 0;
  int correct = 0;
  ASSERT_TRUE(net->TrainStep(params.data(), images.data(), labels.data(), batch, grads.data(),
                             &loss, &correct)
                  .ok());
  auto objective = [&]() {
    float l = 0;
    int c = 0;
    EXPECT_TRUE(net->TrainStep(params.data(), images.data(), labels.data(), batch,
                               scratch.data(), &l, &c)
                    .ok());
    return static_cast<double>(l);
  };
  std::vector<double> numeric = kernels::testing::NumericalGradient(objective, &params, 1e-2f);
  EXPECT_TRUE(GradientsNear(grads.data(), numeric, 2e-3, 3e-2));
}

}  // namespace
}  // namespace pscluster
