// The CUDA compute backend through ComputeBackend: a whole training step
// (every gradient element, loss, correct count) of the GPU and of the CPU
// backend, each judged against a float64 reference of the same step within
// what float32 summation in any order can produce
// (compute/testing/rounding_check.h), with and without the prefetched next
// batch; evaluation, argument errors, and a short training run on MNIST that
// must converge. The CPU backend's cases run everywhere (CpuBackendTest and
// the "Cpu" training run), which checks the test itself on machines without
// a GPU; the CUDA cases skip there, saying why (no device, or a binary built
// without CUDA).
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compute/backend_factory.h"
#include "compute/compute_backend.h"
#include "compute/testing/float64_reference.h"
#include "compute/testing/rounding_check.h"
#include "gtest/gtest.h"
#include "model/idx_dataset.h"
#include "model/keras_model.h"
#include "model/model_spec.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace {

// Why the CUDA cases cannot run here; empty when they can. "[gpu] " marks
// the skip as one for want of a GPU (tests/run_all.sh: not a failure on CI).
std::string NoGpuReason() {
  std::string why;
  if (CudaDevicesAvailable(&why) > 0) return "";
  return "[gpu] no CUDA device: " + why;
}

std::unique_ptr<ComputeBackend> Make(const std::string& device,
                                     const ModelSpec& spec, int max_batch) {
  BackendOptions o;
  o.device = *ParseDevice(device);
  o.max_batch = max_batch;
  absl::StatusOr<std::unique_ptr<ComputeBackend>> b = CreateBackend(spec, o);
  EXPECT_TRUE(b.ok()) << device << ": " << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

// Random examples and non-trivial parameters for a model.
struct Problem {
  Problem(const ModelSpec& s, int batch, uint32_t seed)
      : spec(s), batch(batch) {
    params = InitialParameters(spec, seed);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (const VariableSpec& v : spec.variables) {
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
  Batch AsBatch() const { return Batch{images.data(), labels.data(), batch}; }

  ModelSpec spec;
  int batch;
  std::vector<float> params, images;
  std::vector<float> labels;
};

struct StepOut {
  std::vector<float> grads;
  float loss = NAN;
  int correct = -1;
};

// One TrainStep into NaN-poisoned outputs.
StepOut Step(ComputeBackend& b, const Problem& p, const Batch& next = Batch()) {
  StepOut out;
  out.grads.assign(p.spec.num_parameters, NAN);
  absl::Status s = b.TrainStep(p.params.data(), p.AsBatch(), next,
                               out.grads.data(), &out.loss, &out.correct);
  EXPECT_TRUE(s.ok()) << b.name() << ": " << s;
  return out;
}

// The float64 reference of p's step (Dropout keyed as BackendOptions' and
// Batch's defaults key it: seed 0, step 0).
reference::ReferenceStep Reference(const Problem& p) {
  absl::StatusOr<reference::ReferenceStep> r = reference::TrainStep(
      p.spec, p.params.data(), p.images.data(), p.labels.data(), p.batch);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : reference::ReferenceStep();
}

// Every gradient element (the moving slots' batch statistics included),
// the loss and the correct count within rounding of the reference; an
// unwritten (NaN) element fails.
void ExpectMatchesReference(const StepOut& got, const reference::ReferenceStep& ref,
                            const ModelSpec& spec, const std::string& what) {
  ASSERT_EQ(ref.grads.size(), got.grads.size()) << what;
  EXPECT_TRUE(reference::WithinRounding(spec, ref, got.grads.data(), got.loss,
                                        got.correct, what));
}

// The GPU's step and the CPU's, each against the reference.
void ExpectBothMatchReference(const StepOut& gpu, const StepOut& cpu,
                              const reference::ReferenceStep& ref,
                              const ModelSpec& spec, const std::string& what) {
  ExpectMatchesReference(gpu, ref, spec, what + " (gpu)");
  ExpectMatchesReference(cpu, ref, spec, what + " (cpu)");
}

class GpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = NoGpuReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

// The models and batches of the step comparisons: the fused engine (cnn,
// mlp), the graph engine (vgg_fashion: "same" convolutions,
// BatchNormalization, whose conv and dense biases have a zero gradient, and
// Dropout), and a batch whose kernel gradients sum about 700,000 products
// (cnn, 1024).
struct StepCase {
  const char* model;
  int batch;
  uint32_t seed;
};
constexpr StepCase kFusedCases[] = {{"cnn", 1, 11},  {"cnn", 37, 11}, {"cnn", 128, 11},
                                    {"mlp", 1, 11},  {"mlp", 37, 11}, {"mlp", 128, 11}};
constexpr StepCase kGraphCases[] = {
    {"vgg_fashion", 1, 5}, {"vgg_fashion", 37, 5}, {"vgg_fashion", 128, 5}};
constexpr StepCase kLargeCase = {"cnn", 1024, 12};

ModelSpec SpecOf(const char* model) {
  if (std::string(model) == "vgg_fashion") {
    return *ParseKerasModel(*ReadModelFile(model), model);
  }
  return *ModelByName(model);
}

std::string CaseName(const StepCase& c) {
  return absl::StrCat(c.model, " batch ", c.batch);
}

// The CPU backend against the reference, on every machine: the same cases
// as the GPU's below, so that the reference and the bound are exercised
// where no GPU is.
TEST(CpuBackendTest, StepsMatchFloat64Reference) {
  std::vector<StepCase> cases(std::begin(kFusedCases), std::end(kFusedCases));
  cases.insert(cases.end(), std::begin(kGraphCases), std::end(kGraphCases));
  cases.push_back(kLargeCase);
  for (const StepCase& c : cases) {
    const ModelSpec spec = SpecOf(c.model);
    const Problem p(spec, c.batch, c.seed);
    auto cpu = Make("cpu", spec, c.batch);
    ASSERT_TRUE(cpu);
    ExpectMatchesReference(Step(*cpu, p), Reference(p), spec, CaseName(c) + " (cpu)");
  }
}

TEST_F(GpuBackendTest, FullTrainingStepMatchesCpu) {
  for (const StepCase& c : kFusedCases) {
    const ModelSpec spec = SpecOf(c.model);
    const Problem p(spec, c.batch, c.seed);
    const reference::ReferenceStep ref = Reference(p);
    auto gpu = Make("cuda", spec, 128);
    auto cpu = Make("cpu", spec, 128);
    ASSERT_TRUE(gpu && cpu);
    ExpectBothMatchReference(Step(*gpu, p), Step(*cpu, p), ref, spec, CaseName(c));
    // Repeated steps reuse the same buffers and give the same answer.
    ExpectMatchesReference(Step(*gpu, p), ref, spec, CaseName(c) + " again (gpu)");
  }
}

// A model beyond the fused engine's layers (the graph engine: "same" and
// strided windows, BatchNormalization, Dropout) trains and evaluates as on
// the CPU, its batch statistics in the moving slots included.
TEST_F(GpuBackendTest, GraphModelMatchesCpu) {
  for (const StepCase& c : kGraphCases) {
    const ModelSpec spec = SpecOf(c.model);
    const Problem p(spec, c.batch, c.seed);
    auto gpu = Make("cuda", spec, 128);
    auto cpu = Make("cpu", spec, 128);
    ASSERT_TRUE(gpu && cpu);
    ExpectBothMatchReference(Step(*gpu, p), Step(*cpu, p), Reference(p), spec, CaseName(c));
    // Inference (the moving statistics, no Dropout): GPU against CPU.
    double gpu_sum = NAN, cpu_sum = NAN;
    int gpu_right = -1, cpu_right = -2;
    ASSERT_TRUE(gpu->Evaluate(p.params.data(), p.AsBatch(), &gpu_sum, &gpu_right).ok());
    ASSERT_TRUE(cpu->Evaluate(p.params.data(), p.AsBatch(), &cpu_sum, &cpu_right).ok());
    EXPECT_NEAR(gpu_sum, cpu_sum, 1e-5 * std::fabs(cpu_sum));
    EXPECT_EQ(gpu_right, cpu_right);
  }
}

TEST_F(GpuBackendTest, LargeBatchMatchesCpu) {
  const StepCase c = kLargeCase;
  const ModelSpec spec = SpecOf(c.model);
  const Problem p(spec, c.batch, c.seed);
  auto gpu = Make("cuda", spec, c.batch);
  auto cpu = Make("cpu", spec, c.batch);
  ASSERT_TRUE(gpu && cpu);
  ExpectBothMatchReference(Step(*gpu, p), Step(*cpu, p), Reference(p), spec, CaseName(c));
}

TEST_F(GpuBackendTest, PrefetchedNextBatchIsTheOneUsed) {
  const ModelSpec spec = *ModelByName("cnn");
  const Problem a(spec, 64, 13), b(spec, 64, 14), c(spec, 50, 15);
  auto gpu = Make("cuda", spec, 64);
  auto cpu = Make("cpu", spec, 64);
  ASSERT_TRUE(gpu && cpu);
  // a (staging b); b (prefetched; staging a); c (a is staged but not asked
  // for; staging b); b (prefetched while c ran).
  const reference::ReferenceStep ref_a = Reference(a), ref_b = Reference(b),
                                  ref_c = Reference(c);
  ExpectBothMatchReference(Step(*gpu, a, b.AsBatch()), Step(*cpu, a), ref_a, spec, "a");
  ExpectBothMatchReference(Step(*gpu, b, a.AsBatch()), Step(*cpu, b), ref_b, spec,
                           "b (prefetched)");
  ExpectBothMatchReference(Step(*gpu, c, b.AsBatch()), Step(*cpu, c), ref_c, spec,
                           "c (not the staged one)");
  ExpectBothMatchReference(Step(*gpu, b), Step(*cpu, b), ref_b, spec, "b (staged during c)");
  const StepTimes t = gpu->last_step_times();
  EXPECT_GT(t.compute_s, 0.0);
  EXPECT_GT(t.h2d_s, 0.0);
  EXPECT_GT(t.d2h_s, 0.0);
}

TEST_F(GpuBackendTest, EvaluateMatchesCpu) {
  const ModelSpec spec = *ModelByName("cnn");
  const Problem p(spec, 500, 16);
  auto gpu = Make("cuda", spec, 500);
  auto cpu = Make("cpu", spec, 500);
  ASSERT_TRUE(gpu && cpu);
  double gpu_loss = NAN, cpu_loss = NAN;
  int gpu_correct = -1, cpu_correct = -1;
  ASSERT_TRUE(
      gpu->Evaluate(p.params.data(), p.AsBatch(), &gpu_loss, &gpu_correct)
          .ok());
  ASSERT_TRUE(
      cpu->Evaluate(p.params.data(), p.AsBatch(), &cpu_loss, &cpu_correct)
          .ok());
  // The cnn evaluates as it trains (no BatchNormalization, no Dropout): the
  // mean loss and the correct count against the training step's reference.
  const reference::ReferenceStep ref = Reference(p);
  EXPECT_TRUE(reference::WithinRounding(spec, ref, nullptr, gpu_loss / p.batch,
                                        gpu_correct, "evaluate (gpu)"));
  EXPECT_TRUE(reference::WithinRounding(spec, ref, nullptr, cpu_loss / p.batch,
                                        cpu_correct, "evaluate (cpu)"));
}

TEST_F(GpuBackendTest, BadArgumentsAreInvalidArgumentAndLeaveItUsable) {
  const ModelSpec spec = *ModelByName("mlp");
  Problem p(spec, 8, 17);
  auto gpu = Make("cuda", spec, 4);
  ASSERT_TRUE(gpu);
  std::vector<float> grads(spec.num_parameters);
  float loss = 0;
  int correct = 0;
  absl::Status s = gpu->TrainStep(p.params.data(), p.AsBatch(), Batch(),
                                  grads.data(), &loss, &correct);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  p.batch = 4;
  p.labels[2] = 10;
  s = gpu->TrainStep(p.params.data(), p.AsBatch(), Batch(), grads.data(), &loss,
                     &correct);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("label 10"), std::string::npos) << s;
  p.labels[2] = 1;
  EXPECT_TRUE(gpu->TrainStep(p.params.data(), p.AsBatch(), Batch(),
                             grads.data(), &loss, &correct)
                  .ok());
}

TEST_F(GpuBackendTest, EveryGpuComputesTheSameStep) {
  std::string why;
  const int gpus = CudaDevicesAvailable(&why);
  const ModelSpec spec = *ModelByName("cnn");
  const Problem p(spec, 32, 18);
  auto cpu = Make("cpu", spec, 32);
  ASSERT_TRUE(cpu);
  const reference::ReferenceStep ref = Reference(p);
  ExpectMatchesReference(Step(*cpu, p), ref, spec, "cpu");
  for (int i = 0; i < gpus; ++i) {
    auto gpu = Make(absl::StrCat("cuda:", i), spec, 32);
    ASSERT_TRUE(gpu);
    EXPECT_EQ(gpu->name().rfind(absl::StrCat("cuda:", i, " ("), 0), 0u)
        << gpu->name();
    ExpectMatchesReference(Step(*gpu, p), ref, spec, gpu->name());
  }
  BackendOptions o;
  o.device = *ParseDevice(absl::StrCat("cuda:", gpus));
  EXPECT_EQ(CreateBackend(spec, o).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A few hundred steps of plain SGD with momentum on MNIST, computed by the
// backend under test: the loss must fall well below its starting ~2.3 and
// the model must classify held-out digits.
class TrainingRunTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TrainingRunTest, CnnConvergesOnMnist) {
  const std::string device = GetParam();
  if (device != "cpu") {
    const std::string why = NoGpuReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }
  const std::string dir = testing::TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(dir);
  absl::StatusOr<Dataset> train = LoadMnist(dir, Split::kTrain);
  absl::StatusOr<Dataset> test = LoadMnist(dir, Split::kTest);
  ASSERT_TRUE(train.ok() && test.ok());
  const ModelSpec spec = *ModelByName("cnn");
  constexpr int kBatch = 64, kSteps = 300;
  auto backend = Make(device, spec, 500);
  ASSERT_TRUE(backend);
  std::vector<float> params = InitialParameters(spec, 1);
  std::vector<float> grads(spec.num_parameters), velocity(spec.num_parameters);
  const std::vector<int32_t> order = EpochPermutation(train->count, 1, 0);
  const int pixels = train->height * train->width;
  std::vector<float> images[2];
  std::vector<float> labels[2];
  auto fill = [&](int step, int buf) {
    images[buf].resize(size_t{kBatch} * pixels);
    labels[buf].resize(kBatch);
    for (int i = 0; i < kBatch; ++i) {
      const int e = order[step * kBatch + i];
      std::copy_n(&train->images[size_t(e) * pixels], pixels,
                  &images[buf][size_t(i) * pixels]);
      labels[buf][i] = train->targets[e];
    }
  };
  double late_loss = 0;
  fill(0, 0);
  for (int step = 0; step < kSteps; ++step) {
    const int cur = step % 2;
    if (step + 1 < kSteps) fill(step + 1, 1 - cur);
    const Batch next = step + 1 < kSteps ? Batch{images[1 - cur].data(),
                                                 labels[1 - cur].data(), kBatch}
                                         : Batch();
    float loss = 0;
    int correct = 0;
    ASSERT_TRUE(
        backend
            ->TrainStep(params.data(),
                        Batch{images[cur].data(), labels[cur].data(), kBatch},
                        next, grads.data(), &loss, &correct)
            .ok());
    ASSERT_TRUE(std::isfinite(loss)) << "step " << step;
    if (step >= kSteps - 50) late_loss += loss / 50;
    for (int64_t i = 0; i < spec.num_parameters; ++i) {
      velocity[i] = 0.9f * velocity[i] + grads[i];
      params[i] -= 0.02f * velocity[i];
    }
  }
  double loss_sum = 0;
  int correct = 0;
  for (int begin = 0; begin < 2000; begin += 500) {
    double l = 0;
    int c = 0;
    const int pixels_test = test->height * test->width;
    ASSERT_TRUE(backend
                    ->Evaluate(params.data(),
                               Batch{&test->images[size_t(begin) * pixels_test],
                                     &test->targets[begin], 500},
                               &l, &c)
                    .ok());
    loss_sum += l;
    correct += c;
  }
  EXPECT_LT(late_loss, 0.35) << device;
  EXPECT_GT(correct / 2000.0, 0.9)
      << device << ": test loss " << loss_sum / 2000;
  std::printf(
      "%s: mean loss of the last 50 steps %.3f, test accuracy %.3f on 2000\n",
      backend->name().c_str(), late_loss, correct / 2000.0);
}

INSTANTIATE_TEST_SUITE_P(Devices, TrainingRunTest,
                         ::testing::Values("cpu", "cuda"),
                         [](const auto& info) {
                           return std::string(info.param) == "cpu" ? "Cpu"
                                                                   : "Cuda";
                         });

}  // namespace
}  // namespace pscluster
