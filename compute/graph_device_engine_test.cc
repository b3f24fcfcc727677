// The GPU backend's graph engine for models beyond the built-in CNN
// (compute/graph_device_engine.h over compute/kernels/parallel_graph_kernels.h),
// run on the emulated GPU device: its losses, gradients and batch statistics
// and the CPU graph engine's, each against the float64 reference of the same
// step within float32 rounding (compute/testing/rounding_check.h; the test
// models and vgg_fashion), inference as on the CPU, its own gradients
// against finite differences, the TensorFlow.js reference losses, and
// Dropout masks equal to the CPU's.
#include "compute/graph_device_engine.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "compute/cpu_network.h"
#include "compute/kernels/embedding.h"
#include "compute/kernels/emulated_device.h"
#include "compute/kernels/testing/gradient_check.h"
#include "compute/testing/float64_reference.h"
#include "compute/testing/graph_test_models.h"
#include "compute/testing/rounding_check.h"
#include "gtest/gtest.h"
#include "model/keras_model.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

using kernels::EmulatedGpuDevice;
using kernels::testing::GradientsNear;
using testing_models::Act;
using testing_models::Bn;
using testing_models::Conv;
using testing_models::Dense;
using testing_models::Drop;
using testing_models::EveryLayer;
using testing_models::ExpectGradientsAreTfjs;
using testing_models::FlattenModel;
using testing_models::L;
using testing_models::LoadTfjsReference;
using testing_models::Make;
using testing_models::Pool;
using testing_models::Problem;
using testing_models::ReferenceCase;
using testing_models::StridedModel;

constexpr uint64_t kSeed = 17;  // the run's seed, as Net() gives the CPU

// A graph on the emulated device with its arena (poisoned, so a read of
// anything not written first shows).
class Emulated {
 public:
  Emulated(const ModelSpec& spec, int max_batch) {
    auto graph = GraphDeviceEngine::Create(spec, max_batch, kSeed);
    EXPECT_TRUE(graph.ok()) << graph.status();
    graph_ = *std::move(graph);
    arena_.resize(graph_->arena_bytes() / sizeof(double) + 1);
    std::memset(arena_.data(), 0xFF, arena_.size() * sizeof(double));
    graph_->Bind(arena_.data());
    kernels_ = kernels::MakeEmulatedGraphKernels(EmulatedGpuDevice{&errors_});
  }

  // Training when grads is not null. Returns the summed loss. The ids of a
  // model with Embeddings are indexed first, as the CUDA backend does
  // (host and device memory are one here).
  double Run(const std::vector<float>& params, const std::vector<float>& images,
             const std::vector<float>& labels, int batch, uint64_t step_key, float* grads,
             int* correct) {
    double loss_sum = NAN;
    float penalty = NAN;
    *correct = -1;
    GraphDeviceEngine::IdIndex ids;
    const absl::Status indexed = graph_->IndexIds(images.data(), batch, &ids);
    EXPECT_TRUE(indexed.ok()) << indexed;
    graph_->Run(*kernels_, params.data(), images.data(), labels.data(), batch, step_key, grads,
                &loss_sum, correct, nullptr, &penalty, &ids, ids.ints.data());
    EXPECT_TRUE(errors_.ok()) << errors_.first();
    // As the CUDA backend adds them: Keras's loss holds the regularizers.
    return loss_sum + (graph_->has_penalties() ? double{penalty} * batch : 0.0);
  }

  const GraphDeviceEngine& graph() const { return *graph_; }

 private:
  std::unique_ptr<GraphDeviceEngine> graph_;
  std::vector<double> arena_;  // 8-byte aligned is enough on the host
  kernels::KernelErrors errors_;
  std::unique_ptr<kernels::GraphKernels> kernels_;
};

std::unique_ptr<CpuNetwork> CpuNet(const ModelSpec& spec, int max_batch) {
  CpuNetworkOptions o;
  o.max_batch = max_batch;
  o.num_threads = 2;
  o.seed = kSeed;
  absl::StatusOr<std::unique_ptr<CpuNetwork>> net = CpuNetwork::Create(spec, o);
  EXPECT_TRUE(net.ok()) << net.status();
  EXPECT_TRUE((*net)->on_graph_engine());
  return *std::move(net);
}

// One training step on the CPU path and on the emulated device, each
// judged against the float64 reference (every variable, the moving
// statistics' slots included, the loss, the correct count), then inference
// on both. `max_batch` above `batch` runs below the buffers' capacity.
void ExpectStepMatchesReference(const Problem& p, int max_batch, const std::string& what) {
  constexpr uint64_t kStepKey = 123;
  const int batch = p.batch;
  std::unique_ptr<CpuNetwork> cpu = CpuNet(p.spec, max_batch);
  std::vector<float> want(p.spec.num_parameters, NAN);
  float want_loss = 0;
  int want_correct = 0;
  ASSERT_TRUE(cpu->TrainStep(p.params.data(), p.images.data(), p.labels.data(), batch,
                             want.data(), &want_loss, &want_correct, kStepKey)
                  .ok());
  Emulated gpu(p.spec, max_batch);
  std::vector<float> got(p.spec.num_parameters, NAN);
  int correct = 0;
  const double loss =
      gpu.Run(p.params, p.images, p.labels, batch, kStepKey, got.data(), &correct);
  absl::StatusOr<reference::ReferenceStep> ref = reference::TrainStep(
      p.spec, p.params.data(), p.images.data(), p.labels.data(), batch, kSeed, kStepKey);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_TRUE(reference::WithinRounding(p.spec, *ref, got.data(), loss / batch, correct,
                                        what + " (emulated)"));
  EXPECT_TRUE(reference::WithinRounding(p.spec, *ref, want.data(), want_loss, want_correct,
                                        what + " (cpu)"));

  double want_sum = 0;
  ASSERT_TRUE(cpu->Evaluate(p.params.data(), p.images.data(), p.labels.data(), batch, &want_sum,
                            &want_correct)
                  .ok());
  const double eval = gpu.Run(p.params, p.images, p.labels, batch, 0, nullptr, &correct);
  EXPECT_NEAR(eval, want_sum, 1e-5 * std::fabs(want_sum)) << what;
  EXPECT_EQ(correct, want_correct) << what;
}

TEST(GraphDeviceEngineTest, TrainStepsMatchFloat64Reference) {
  for (const ModelSpec& spec : {EveryLayer(), FlattenModel(), StridedModel()}) {
    for (int batch : {1, 7}) {
      ExpectStepMatchesReference(Make(spec, batch, 9), 9,
                                 spec.name + " batch " + std::to_string(batch));
    }
  }
}

// Tiled max pooling (stride = window) on odd sizes after a ReLU layer:
// "same" padding (the last row and column of windows hold a cell fewer)
// and "valid" (a row and a column no window covers, gradient 0); and
// BatchNormalization over 210 * 81 = 17,010 rows, more groups than one
// level of partial sums takes (GroupSumsFn runs).
TEST(GraphDeviceEngineTest, TiledPoolingAndLongBatchNormSumsMatchReference) {
  for (Padding pool_padding : {Padding::kSame, Padding::kValid}) {
    const ModelSpec spec = *BuildModelSpec(
        "tiled", 9, 9, 1, 3,
        {Conv("conv", 4, 3, 3, 1, Padding::kSame, Activation::kNone), Bn("bn"),
         Act("relu", Activation::kRelu),
         Pool(LayerKind::kMaxPool2D, "pool", 2, 2, pool_padding),
         L(LayerKind::kFlatten, "flatten"), Dense("out", 3, Activation::kNone)});
    ExpectStepMatchesReference(
        Make(spec, 210, 13), 210,
        pool_padding == Padding::kSame ? "same pooling" : "valid pooling");
  }
}

// The shipped graph-engine model: "same" convolutions and a Dense layer
// feeding BatchNormalization (biases whose exact gradient is zero),
// Dropout, 28x28 inputs; small batches (the emulated device is slow).
TEST(GraphDeviceEngineTest, VggFashionMatchesFloat64Reference) {
  const ModelSpec spec = *ParseKerasModel(*ReadModelFile("vgg_fashion"), "vgg_fashion");
  for (int batch : {1, 3}) {
    ExpectStepMatchesReference(Make(spec, batch, 5), 4,
                               "vgg_fashion batch " + std::to_string(batch));
  }
}

// The device path's own gradients against central differences of its own
// training loss (Dropout's masks fixed by the step key).
TEST(GraphDeviceEngineTest, GradientsMatchFiniteDifferences) {
  struct Case {
    ModelSpec spec;
    float eps;
  };
  for (const Case& c :
       {Case{EveryLayer(), 1e-2f}, Case{FlattenModel(), 1e-3f}, Case{StridedModel(), 1e-3f},
        Case{testing_models::GraphModel(), 1e-3f}, Case{testing_models::ModernModel(), 1e-3f},
        Case{testing_models::ModernConvModel(), 1e-3f}, Case{testing_models::InputsModel(), 1e-3f}}) {
    Problem p = Make(c.spec, 6, 3);
    Emulated gpu(p.spec, 6);
    constexpr uint64_t kStep = 5;
    std::vector<float> grads(p.spec.num_parameters);
    int correct = 0;
    gpu.Run(p.params, p.images, p.labels, 6, kStep, grads.data(), &correct);
    std::vector<float> scratch(p.spec.num_parameters);
    auto objective = [&]() {
      int right = 0;
      return gpu.Run(p.params, p.images, p.labels, 6, kStep, scratch.data(), &right) / 6;
    };
    std::vector<double> numeric =
        kernels::testing::NumericalGradient(objective, &p.params, c.eps);
    for (const VariableSpec& v : p.spec.variables) {
      if (v.role != VariableRole::kTrainable) continue;
      std::vector<double> part(numeric.begin() + v.offset, numeric.begin() + v.offset + v.size);
      EXPECT_TRUE(GradientsNear(grads.data() + v.offset, part, 2e-3, 3e-2))
          << c.spec.name << " " << v.name;
    }
  }
}

// Keras semantics from TensorFlow.js (see graph_cpu_engine_test's test of the
// same name): inference with the moving statistics, training with the
// batch's.
TEST(GraphDeviceEngineTest, LossesMatchTensorFlowJs) {
  std::vector<ReferenceCase> cases = LoadTfjsReference();
  ASSERT_EQ(cases.size(), 2u);
  for (ReferenceCase& c : LoadTfjsReference("tests/fixtures/tfjs_reference/graphs.json")) {
    cases.push_back(std::move(c));
  }
  for (ReferenceCase& c : LoadTfjsReference("tests/fixtures/tfjs_reference/modern_graph.json")) {
    cases.push_back(std::move(c));
  }
  ASSERT_EQ(cases.size(), 8u);
  for (const ReferenceCase& m : cases) {
    const int batch = static_cast<int>(m.labels.size());
    Emulated gpu(m.spec, batch);
    int correct = 0;
    const double eval = gpu.Run(m.params, m.images, m.labels, batch, 0, nullptr, &correct);
    EXPECT_NEAR(eval, m.inference_loss_sum, 1e-4 * std::fabs(m.inference_loss_sum))
        << m.spec.name;
    std::vector<float> grads(m.spec.num_parameters);
    const double train = gpu.Run(m.params, m.images, m.labels, batch, 0, grads.data(), &correct);
    EXPECT_NEAR(train, m.training_loss_sum, 1e-4 * std::fabs(m.training_loss_sum))
        << m.spec.name;
  }
}

// A graph (every merge, a shared layer, branches; the float64 reference
// runs chains only): the device's step and inference equal the CPU path's
// to rounding, gradient by gradient.
TEST(GraphDeviceEngineTest, GraphStepsMatchTheCpuPath) {
  for (int batch : {1, 7, 2, 5, 3, 6, 4, 8}) {
    Problem p = Make(batch <= 1 || batch == 7   ? testing_models::GraphModel()
                     : batch == 2 || batch == 5 ? testing_models::ModernModel()
                     : batch == 3 || batch == 6 ? testing_models::ModernConvModel()
                                                : testing_models::InputsModel(),
                     batch, 4);
    std::unique_ptr<CpuNetwork> cpu = CpuNet(p.spec, 9);
    std::vector<float> want(p.spec.num_parameters, NAN);
    float want_loss = 0;
    int want_correct = 0;
    ASSERT_TRUE(cpu->TrainStep(p.params.data(), p.images.data(), p.labels.data(), batch,
                               want.data(), &want_loss, &want_correct, 77)
                    .ok());
    Emulated gpu(p.spec, 9);
    std::vector<float> got(p.spec.num_parameters, NAN);
    int correct = 0;
    const double loss = gpu.Run(p.params, p.images, p.labels, batch, 77, got.data(), &correct);
    EXPECT_NEAR(loss / batch, want_loss, 1e-5 * std::fabs(want_loss)) << "batch " << batch;
    EXPECT_EQ(correct, want_correct);
    for (const VariableSpec& v : p.spec.variables) {
      for (int64_t i = 0; i < v.size; ++i) {
        ASSERT_NEAR(got[v.offset + i], want[v.offset + i],
                    1e-6 + 1e-4 * std::fabs(want[v.offset + i]))
            << v.name << "[" << i << "] batch " << batch;
      }
    }
    double want_sum = 0;
    ASSERT_TRUE(cpu->Evaluate(p.params.data(), p.images.data(), p.labels.data(), batch,
                              &want_sum, &want_correct)
                    .ok());
    EXPECT_NEAR(gpu.Run(p.params, p.images, p.labels, batch, 0, nullptr, &correct), want_sum,
                1e-5 * std::fabs(want_sum));
    EXPECT_EQ(correct, want_correct);
  }
}

// A rate-0.9 Dropout before the logits: the masks decide the loss, so
// equal losses on both paths for several keys mean equal masks.
TEST(GraphDeviceEngineTest, DropoutMasksAreTheCpuPaths) {
  ModelSpec spec = *BuildModelSpec("drop", 2, 2, 3, 3,
                                   {Bn("bn"), testing_models::L(LayerKind::kFlatten, "flatten"),
                                    Drop("drop", 0.9f), Dense("out", 3, Activation::kNone)});
  Problem p = Make(spec, 8, 6);
  std::unique_ptr<CpuNetwork> cpu = CpuNet(spec, 8);
  Emulated gpu(spec, 8);
  std::vector<float> losses;
  for (uint64_t key : {1, 2, 3}) {
    std::vector<float> grads(spec.num_parameters);
    float want = 0;
    int correct = 0;
    ASSERT_TRUE(cpu->TrainStep(p.params.data(), p.images.data(), p.labels.data(), 8,
                               grads.data(), &want, &correct, key)
                    .ok());
    const double got = gpu.Run(p.params, p.images, p.labels, 8, key, grads.data(), &correct) / 8;
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << "key " << key;
    losses.push_back(want);
  }
  EXPECT_NE(losses[0], losses[1]);
  EXPECT_NE(losses[1], losses[2]);
}

// The 1-D layers (tests/fixtures/tfjs_reference/sequence.json; see
// graph_cpu_engine_test's test of the same name) run on the device as the
// 2-D windows over 1 x steps, and Dense on the last axis as a Dense over
// each step or pixel: the losses and every gradient are TensorFlow.js's.
// The models over an Embedding's rows too.
TEST(GraphDeviceEngineTest, OneDimensionalLayersMatchTensorFlowJs) {
  std::vector<ReferenceCase> cases =
      LoadTfjsReference("tests/fixtures/tfjs_reference/sequence.json");
  ASSERT_EQ(cases.size(), 6u);
  for (size_t c = 0; c < cases.size(); ++c) {
    const ReferenceCase& m = cases[c];
    const int batch = static_cast<int>(m.labels.size());
    Emulated gpu(m.spec, batch);
    int correct = 0;
    const double eval = gpu.Run(m.params, m.images, m.labels, batch, 0, nullptr, &correct);
    EXPECT_NEAR(eval, m.inference_loss_sum, 1e-5) << m.spec.name;
    std::vector<float> grads(m.spec.num_parameters);
    const double train = gpu.Run(m.params, m.images, m.labels, batch, 0, grads.data(), &correct);
    EXPECT_NEAR(train, m.training_loss_sum, 1e-5) << m.spec.name;
    ExpectGradientsAreTfjs(m, grads);
  }
}

// Dot runs on the CPU only for now: refused at Create naming the layer
// (tests/fixtures/tfjs_reference/towers.json's dot_only: no Embedding).
TEST(GraphDeviceEngineTest, RefusesDotNamingTheLayer) {
  std::vector<ReferenceCase> cases = LoadTfjsReference("tests/fixtures/tfjs_reference/towers.json");
  ASSERT_EQ(cases.size(), 4u);
  auto graph = GraphDeviceEngine::Create(cases[3].spec, 4, kSeed);
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(graph.status().message().find("layer dot: Dot does not run on the GPU yet"),
            std::string::npos)
      << graph.status();
}

// Attention and several outputs run on the CPU only for now: refused at
// Create naming the layer or the outputs.
TEST(GraphDeviceEngineTest, RefusesAttentionAndSeveralOutputs) {
  const std::string attention = R"({"class_name": "Functional", "config": {"name": "att",
    "input_layers": [["q", 0, 0], ["v", 0, 0]], "output_layers": [["out", 0, 0]], "layers": [
    {"class_name": "InputLayer", "config": {"name": "q", "batch_shape": [null, 2, 3]},
     "inbound_nodes": []},
    {"class_name": "InputLayer", "config": {"name": "v", "batch_shape": [null, 4, 3]},
     "inbound_nodes": []},
    {"class_name": "Attention", "config": {"name": "att"},
     "inbound_nodes": [[["q", 0, 0, {}], ["v", 0, 0, {}]]]},
    {"class_name": "Flatten", "config": {"name": "flat"}, "inbound_nodes": [[["att", 0, 0, {}]]]},
    {"class_name": "Dense", "config": {"name": "out", "units": 2, "activation": "softmax"},
     "inbound_nodes": [[["flat", 0, 0, {}]]]}]}})";
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(attention, "att");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto graph = GraphDeviceEngine::Create(*spec, 4, kSeed);
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find("layer att: Attention does not run on the GPU yet"),
            std::string::npos)
      << graph.status();

  std::ifstream in("tests/fixtures/tfjs_reference/heads.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json heads = nlohmann::json::parse(in);
  spec = ParseKerasModel(heads["models"][1]["model_json"].dump(), "mixed");
  ASSERT_TRUE(spec.ok()) << spec.status();
  graph = GraphDeviceEngine::Create(*spec, 4, kSeed);
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find(
                "3 outputs (output 'kind' and others) do not run on the GPU yet; train this model "
                "with --device=cpu"),
            std::string::npos)
      << graph.status();
}

// The Embedding kernels on the device against the CPU's (embedding.h), bit
// for bit: the gather, and the backward's sums per row, which the device
// makes one row per thread in the order of the ids' positions (the host's
// index) where the CPU adds each position in turn. Ids repeated within and
// across examples, a table gradient already holding a shared use's part,
// and a window's padded ids -(k + 1).
TEST(GraphDeviceEngineTest, EmbeddingKernelsAreTheCpusBitForBit) {
  kernels::KernelErrors errors;
  std::unique_ptr<kernels::GraphKernels> k =
      kernels::MakeEmulatedGraphKernels(EmulatedGpuDevice{&errors});
  std::mt19937 rng(5);
  for (const bool padding : {false, true}) {
    constexpr int kRows = 37, kDim = 5;
    const int count = 400;
    std::uniform_int_distribution<int> row(0, kRows - 1);
    std::normal_distribution<float> value(0.0f, 1.0f);
    std::vector<float> ids(count), table(kRows * kDim), dy(count * kDim), base(kRows * kDim);
    for (float& id : ids) {
      const int r = row(rng) % (padding ? kRows : 7);  // few rows: many repeats
      id = padding && r % 3 == 0 ? -static_cast<float>(r + 1) : static_cast<float>(r);
    }
    for (float& v : table) v = value(rng);
    for (float& v : dy) v = value(rng);
    for (float& v : base) v = value(rng);

    std::vector<float> want_y(count * kDim), got_y(count * kDim, NAN);
    kernels::EmbeddingForward(count, ids.data(), table.data(), kDim, want_y.data(), padding);
    k->EmbeddingForward(count, kDim, padding, ids.data(), table.data(), got_y.data());
    EXPECT_EQ(std::memcmp(want_y.data(), got_y.data(), want_y.size() * sizeof(float)), 0);

    kernels::EmbeddingIdIndex index;
    ASSERT_EQ(kernels::IndexEmbeddingIds(count, ids.data(), kRows, padding, &index), -1);
    std::vector<float> want = base, got = base;
    kernels::EmbeddingBackward(count, ids.data(), dy.data(), kDim, want.data(), padding);
    k->EmbeddingBackward(index.uniques, kDim, index.ints.data(), dy.data(), got.data());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0)
          << "row " << i / kDim << " padding " << padding << ": " << want[i] << " " << got[i];
    }
  }
  EXPECT_TRUE(errors.ok()) << errors.first();
}

// Keras's Embedding from TensorFlow.js (tests/fixtures/tfjs_reference/
// embedding.json: pooled rows, rows beside dense features, DeepFM's
// factorization machine and its whole shape with two tables over the same
// ids) on the device: the losses and every gradient (a table's rows summed
// over each id's uses, untouched rows 0, written over the poisoned buffer)
// are tfjs's, and the CPU's within rounding.
TEST(GraphDeviceEngineTest, EmbeddingMatchesTensorFlowJsAndTheCpuPath) {
  std::vector<ReferenceCase> cases =
      LoadTfjsReference("tests/fixtures/tfjs_reference/embedding.json");
  ASSERT_EQ(cases.size(), 4u);
  for (const ReferenceCase& m : cases) {
    const int batch = static_cast<int>(m.labels.size());
    Emulated gpu(m.spec, batch);
    EXPECT_TRUE(gpu.graph().has_embeddings());
    int correct = 0;
    const double eval = gpu.Run(m.params, m.images, m.labels, batch, 0, nullptr, &correct);
    EXPECT_NEAR(eval, m.inference_loss_sum, 1e-5) << m.spec.name;
    std::vector<float> grads(m.spec.num_parameters, NAN);
    const double train = gpu.Run(m.params, m.images, m.labels, batch, 0, grads.data(), &correct);
    EXPECT_NEAR(train, m.training_loss_sum, 1e-5) << m.spec.name;

    std::unique_ptr<CpuNetwork> cpu = CpuNet(m.spec, batch);
    std::vector<float> want(m.spec.num_parameters, NAN);
    float want_loss = 0;
    int want_correct = 0;
    ASSERT_TRUE(cpu->TrainStep(m.params.data(), m.images.data(), m.labels.data(), batch,
                               want.data(), &want_loss, &want_correct)
                    .ok());
    EXPECT_NEAR(train / batch, want_loss, 1e-6) << m.spec.name;
    ExpectGradientsAreTfjs(m, grads);
    for (int64_t k = 0; k < m.spec.num_parameters; ++k) {
      EXPECT_NEAR(grads[k], want[k], 1e-6) << m.spec.name << " parameter " << k;
    }
  }
}

// The click-through-rate models users take from deploy/models, their
// tables shrunk to 50 rows: DeepFM, Wide&Deep and DCN-v2 train a step on
// the device to the CPU path's loss and every gradient within rounding
// (ids repeated across the batch); the others are refused at Create naming
// what the GPU lacks (two towers' Dot, ESMM's and MMoE's several outputs,
// DIN's mask and Attention).
TEST(GraphDeviceEngineTest, ClickThroughRateModelsMatchTheCpuPath) {
  constexpr int kRows = 50, kBatch = 8;  // rows above the ids: untouched ones stay 0
  for (const std::string name : {"ctr_deepfm", "ctr_wide_deep", "ctr_dcn_v2", "ctr_two_tower",
                                 "ctr_esmm", "ctr_mmoe", "ctr_din"}) {
    std::ifstream in("deploy/models/" + name + ".json");
    ASSERT_TRUE(in.good()) << name;
    nlohmann::json file = nlohmann::json::parse(in);
    for (nlohmann::json& l : file["config"]["layers"]) {
      if (l["class_name"] == "Embedding") l["config"]["input_dim"] = kRows;
    }
    absl::StatusOr<ModelSpec> spec = ParseKerasModel(file.dump(), name);
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    const bool runs = name == "ctr_deepfm" || name == "ctr_wide_deep" || name == "ctr_dcn_v2";
    auto graph = GraphDeviceEngine::Create(*spec, kBatch, kSeed);
    if (!runs) {
      ASSERT_FALSE(graph.ok()) << name;
      EXPECT_NE(graph.status().message().find("on the GPU yet"), std::string::npos)
          << graph.status();
      continue;
    }
    ASSERT_TRUE(graph.ok()) << name << ": " << graph.status();
    Problem p = Make(*spec, kBatch, 3);
    // Every value a whole number in [0, 6): ids where the model reads ids
    // (each named many times in the batch), small counts where it reads
    // features.
    for (size_t i = 0; i < p.images.size(); ++i)
      p.images[i] = static_cast<float>((i * 7 + i / 13) % 6);
    for (int i = 0; i < kBatch; ++i) p.labels[i] = static_cast<float>(i % 2);

    std::unique_ptr<CpuNetwork> cpu = CpuNet(p.spec, kBatch);
    std::vector<float> want(p.spec.num_parameters, NAN);
    float want_loss = 0;
    int want_correct = 0;
    ASSERT_TRUE(cpu->TrainStep(p.params.data(), p.images.data(), p.labels.data(), kBatch,
                               want.data(), &want_loss, &want_correct, 5)
                    .ok())
        << name;
    Emulated gpu(p.spec, kBatch);
    std::vector<float> got(p.spec.num_parameters, NAN);
    int correct = 0;
    const double loss = gpu.Run(p.params, p.images, p.labels, kBatch, 5, got.data(), &correct);
    EXPECT_NEAR(loss / kBatch, want_loss, 1e-5 * std::fabs(want_loss)) << name;
    EXPECT_EQ(correct, want_correct) << name;
    int64_t table_rows_trained = 0;
    for (const VariableSpec& v : p.spec.variables) {
      for (int64_t i = 0; i < v.size; ++i) {
        ASSERT_NEAR(got[v.offset + i], want[v.offset + i],
                    1e-6 + 1e-4 * std::fabs(want[v.offset + i]))
            << name << " " << v.name << "[" << i << "]";
        if (v.name.find("embeddings") != std::string::npos && got[v.offset + i] != 0.0f) {
          ++table_rows_trained;
        }
      }
    }
    EXPECT_GT(table_rows_trained, 0) << name;
  }
}

// An id outside [0, input_dim) is bad data in the CPU's words, found on the
// host before anything runs; never clamped.
TEST(GraphDeviceEngineTest, EmbeddingIdOutOfRangeIsAnError) {
  std::vector<ReferenceCase> cases =
      LoadTfjsReference("tests/fixtures/tfjs_reference/embedding.json");
  ASSERT_FALSE(cases.empty());
  const ReferenceCase& m = cases[0];  // ids [5], input_dim 11
  const int batch = static_cast<int>(m.labels.size());
  auto graph = GraphDeviceEngine::Create(m.spec, batch, kSeed);
  ASSERT_TRUE(graph.ok()) << graph.status();
  GraphDeviceEngine::IdIndex ids;
  for (float bad : {11.0f, -1.0f, std::nanf("")}) {
    std::vector<float> images = m.images;
    images[3 * 5 + 2] = bad;
    const absl::Status s = (*graph)->IndexIds(images.data(), batch, &ids);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_NE(s.message().find("layer 'emb' (Embedding): id "), std::string::npos) << s;
    EXPECT_NE(s.message().find("(position 2 of example 3 of the batch) is outside [0, "
                               "input_dim = 11)"),
              std::string::npos)
        << s;
  }
  EXPECT_TRUE((*graph)->IndexIds(m.images.data(), batch, &ids).ok());
  EXPECT_LE(static_cast<int64_t>(ids.ints.size()), (*graph)->max_index_ints());
}

// What the device does not run yet is refused at Create naming the layer:
// a layer reading an Embedding's mask (mask_zero), and an Embedding whose
// ids another layer computes (they are indexed on the host).
TEST(GraphDeviceEngineTest, RefusesMasksAndComputedIdsNamingTheLayer) {
  std::vector<ReferenceCase> masked = LoadTfjsReference("tests/fixtures/masking/masking.json");
  ASSERT_FALSE(masked.empty());
  auto graph = GraphDeviceEngine::Create(masked[0].spec, 4, kSeed);
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(graph.status().message().find("reads an Embedding's mask (mask_zero): masks do not "
                                          "run on the GPU yet; train this model with "
                                          "--device=cpu"),
            std::string::npos)
      << graph.status();

  const std::string computed = R"({"class_name": "Functional", "config": {"name": "cid",
    "input_layers": [["x", 0, 0]], "output_layers": [["out", 0, 0]], "layers": [
    {"class_name": "InputLayer", "config": {"name": "x", "batch_shape": [null, 3]},
     "inbound_nodes": []},
    {"class_name": "Rescaling", "config": {"name": "twice", "scale": 2.0, "offset": 0.0},
     "inbound_nodes": [[["x", 0, 0, {}]]]},
    {"class_name": "Embedding", "config": {"name": "emb", "input_dim": 10, "output_dim": 2},
     "inbound_nodes": [[["twice", 0, 0, {}]]]},
    {"class_name": "Flatten", "config": {"name": "flat"}, "inbound_nodes": [[["emb", 0, 0, {}]]]},
    {"class_name": "Dense", "config": {"name": "out", "units": 2, "activation": "softmax"},
     "inbound_nodes": [[["flat", 0, 0, {}]]]}]}})";
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(computed, "cid");
  ASSERT_TRUE(spec.ok()) << spec.status();
  graph = GraphDeviceEngine::Create(*spec, 4, kSeed);
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find("layer emb: an Embedding whose ids are computed by "
                                          "another layer (twice) does not run on the GPU yet"),
            std::string::npos)
      << graph.status();
}

}  // namespace
}  // namespace pscluster
