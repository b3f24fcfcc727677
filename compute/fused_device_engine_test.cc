// FusedDeviceEngine on the emulated GPU device (the GPU backend's code path, run
// on the host) and the CPU CpuNetwork, each against the float64 reference of
// the same step (compute/testing/rounding_check.h): the whole gradient of a
// training step, the loss and the number correct, for several models and
// batches, one of them with kernel gradients that sum ~700,000 products.
// Arena, gradients and results start poisoned (NaN), so anything left
// unwritten or read before being written shows up.
#include "compute/fused_device_engine.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compute/cpu_network.h"
#include "compute/fused_plan.h"
#include "compute/kernels/emulated_device.h"
#include "compute/testing/float64_reference.h"
#include "compute/testing/rounding_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using kernels::EmulatedGpuDevice;

// A 64x64 input under one small convolution: its kernel's gradient sums
// batch x 62 x 62 products (692,000 at batch 180), a long sum in few flops.
ModelSpec LongSumModel() {
  LayerSpec conv;
  conv.kind = LayerKind::kConv2D;
  conv.name = "conv";
  conv.units = 2;
  conv.window_h = conv.window_w = 3;
  conv.activation = Activation::kRelu;
  LayerSpec pool;
  pool.kind = LayerKind::kMaxPool2D;
  pool.name = "pool";
  pool.window_h = pool.window_w = pool.stride_h = pool.stride_w = 2;
  LayerSpec flatten;
  flatten.kind = LayerKind::kFlatten;
  flatten.name = "flatten";
  LayerSpec dense;
  dense.name = "dense";
  dense.units = 10;
  return *BuildModelSpec("long_sum", 64, 64, 1, 10, {conv, pool, flatten, dense});
}

ModelSpec SpecOf(const std::string& model) {
  return model == "long_sum" ? LongSumModel() : *ModelByName(model);
}

struct Problem {
  Problem(const std::string& model, int batch, uint32_t seed)
      : spec(SpecOf(model)), batch(batch) {
    params = InitialParameters(spec, seed);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (const VariableSpec& v : spec.variables) {  // non-zero biases
      if (v.initializer.kind == Initializer::Kind::kZeros) {
        for (int64_t i = 0; i < v.size; ++i)
          params[v.offset + i] = u(rng) - 0.5f;
      }
    }
    images.resize(int64_t{batch} * spec.input_height * spec.input_width *
                  spec.input_channels);
    for (float& p : images) p = u(rng);
    labels.resize(batch);
    for (float& l : labels)
      l = static_cast<float>(rng() % spec.num_classes);
  }
  ModelSpec spec;
  int batch;
  std::vector<float> params, images;
  std::vector<float> labels;
};

class FusedDeviceEngineTest
    : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(FusedDeviceEngineTest, TrainStepMatchesCpuNetwork) {
  const auto [model, batch] = GetParam();
  const Problem p(model, batch, 7);
  const int max_batch = batch + 3;  // runs below the buffers' capacity

  CpuNetworkOptions options;
  options.max_batch = max_batch;
  auto net = CpuNetwork::Create(p.spec, options);
  ASSERT_TRUE(net.ok()) << net.status();
  std::vector<float> want(p.spec.num_parameters);
  float want_loss = 0;
  int want_correct = 0;
  ASSERT_TRUE((*net)
                  ->TrainStep(p.params.data(), p.images.data(), p.labels.data(),
                              batch, want.data(), &want_loss, &want_correct)
                  .ok());

  absl::StatusOr<std::vector<FusedLayer>> layers = PlanFusedLayers(p.spec);
  ASSERT_TRUE(layers.ok()) << layers.status();
  FusedDeviceEngine<EmulatedGpuDevice> graph(*layers, max_batch);
  std::vector<double> arena(graph.arena_bytes() / sizeof(double) + 1);
  std::memset(arena.data(), 0xFF, arena.size() * sizeof(double));
  graph.Bind(arena.data());
  kernels::KernelErrors errors;
  const EmulatedGpuDevice d{&errors};
  std::vector<float> got(p.spec.num_parameters, NAN);
  double loss_sum = NAN;
  int correct = -1;
  graph.Run(d, p.params.data(), p.images.data(), p.labels.data(), batch,
            got.data(), &loss_sum, &correct);
  EXPECT_TRUE(errors.ok()) << errors.first();
  absl::StatusOr<reference::ReferenceStep> ref = reference::TrainStep(
      p.spec, p.params.data(), p.images.data(), p.labels.data(), batch);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::string what = std::string(model) + " batch " + std::to_string(batch);
  EXPECT_TRUE(reference::WithinRounding(p.spec, *ref, got.data(), loss_sum / batch,
                                        correct, what + " (emulated)"));
  EXPECT_TRUE(reference::WithinRounding(p.spec, *ref, want.data(), want_loss, want_correct,
                                        what + " (cpu)"));

  // Forward only gives the same loss and writes no gradient.
  double eval_loss = NAN;
  int eval_correct = -1;
  graph.Run(d, p.params.data(), p.images.data(), p.labels.data(), batch,
            nullptr, &eval_loss, &eval_correct);
  EXPECT_EQ(eval_loss, loss_sum);
  EXPECT_EQ(eval_correct, correct);
  EXPECT_TRUE(errors.ok()) << errors.first();
}

INSTANTIATE_TEST_SUITE_P(Models, FusedDeviceEngineTest,
                         ::testing::Values(std::make_tuple("cnn", 1),
                                           std::make_tuple("cnn", 9),
                                           std::make_tuple("mlp", 1),
                                           std::make_tuple("mlp", 33),
                                           std::make_tuple("long_sum", 180)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) +
                                  "_batch" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(FusedDeviceEngineArenaTest, EveryBufferIsAlignedAndSizedForMaxBatch) {
  absl::StatusOr<std::vector<FusedLayer>> layers =
      PlanFusedLayers(*ModelByName("cnn"));
  ASSERT_TRUE(layers.ok());
  FusedDeviceEngine<EmulatedGpuDevice> small(*layers, 1), big(*layers, 1024);
  EXPECT_EQ(small.arena_bytes() % 256, 0);
  EXPECT_EQ(big.arena_bytes() % 256, 0);
  // conv1's output alone: 1024 x 26 x 26 x 32 floats.
  EXPECT_GT(big.arena_bytes(), int64_t{1024} * 26 * 26 * 32 * 4);
  EXPECT_EQ(big.num_classes(), 10);
}

}  // namespace
}  // namespace pscluster
