// Device resolution and backend creation. Runs everywhere: what it expects
// from "auto" and "cuda" depends on whether this build has CUDA and the
// machine a GPU, and each case checks the message that says which.
#include "compute/backend_factory.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/bad_input.h"
#include "compute/testing/graph_test_models.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using Kind = DeviceChoice::Kind;
using testing_models::LoadTfjsReference;
using testing_models::ReferenceCase;

DeviceChoice Parse(const char* text) { return *ParseDevice(text); }

TEST(ResolveDeviceTest, CpuIsAlwaysTheCpu) {
  absl::StatusOr<ResolvedDevice> r = ResolveDevice(Parse("cpu"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device.kind, Kind::kCpu);
}

TEST(ResolveDeviceTest, AutoTakesTheFirstGpuElseTheCpuSayingWhy) {
  std::string why;
  const int gpus = CudaDevicesAvailable(&why);
  absl::StatusOr<ResolvedDevice> r = ResolveDevice(Parse("auto"));
  ASSERT_TRUE(r.ok()) << r.status();
  if (gpus > 0) {
    EXPECT_EQ(r->device, Parse("cuda:0"));
  } else {
    EXPECT_EQ(r->device.kind, Kind::kCpu);
    EXPECT_FALSE(why.empty());
    EXPECT_NE(r->reason.find(why), std::string::npos) << r->reason;
  }
}

TEST(ResolveDeviceTest, CudaWithoutAGpuIsAClearError) {
  std::string why;
  if (CudaDevicesAvailable(&why) > 0) GTEST_SKIP() << "[gpu] this machine has a GPU";
  absl::StatusOr<ResolvedDevice> r = ResolveDevice(Parse("cuda"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("cuda:0 cannot be used"),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status();
  if (!BuiltWithCuda()) {
    EXPECT_NE(why.find("built without CUDA"), std::string::npos) << why;
  }
}

TEST(ResolveDeviceTest, OrdinalBeyondTheDevicesIsAnError) {
  std::string why;
  const int gpus = CudaDevicesAvailable(&why);
  absl::StatusOr<ResolvedDevice> r = ResolveDevice(Parse("cuda:255"));
  if (gpus > 255) GTEST_SKIP() << "[gpu] 256 GPUs";
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("cuda:255"), std::string::npos)
      << r.status();
}

TEST(CreateBackendTest, CpuBackendTrainsAndNamesItself) {
  const ModelSpec spec = *ModelByName("mlp");
  BackendOptions options;
  options.device = Parse("cpu");
  options.max_batch = 4;
  absl::StatusOr<std::unique_ptr<ComputeBackend>> b =
      CreateBackend(spec, options);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->name().rfind("cpu (1 thread", 0), 0u) << (*b)->name();
  const std::vector<float> params = InitialParameters(spec, 1);
  std::vector<float> images(4 * 28 * 28, 0.5f), grads(spec.num_parameters);
  std::vector<float> labels = {0, 1, 2, 3};
  Batch batch{images.data(), labels.data(), 4};
  float loss = 0;
  int correct = -1;
  ASSERT_TRUE((*b)->TrainStep(params.data(), batch, Batch(), grads.data(),
                              &loss, &correct)
                  .ok());
  EXPECT_GT(loss, 0.0f);
  EXPECT_GE(correct, 0);
  EXPECT_GT((*b)->last_step_times().compute_s, 0.0);
  EXPECT_EQ((*b)->last_step_times().h2d_s, 0.0);
  batch.size = 5;
  EXPECT_EQ((*b)->TrainStep(params.data(), batch, Batch(), grads.data(), &loss,
                            &correct)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CreateBackendTest, CudaWithoutAGpuFailsBeforeCreatingAnything) {
  std::string why;
  if (CudaDevicesAvailable(&why) > 0) GTEST_SKIP() << "[gpu] this machine has a GPU";
  BackendOptions options;
  options.device = Parse("cuda:0");
  absl::StatusOr<std::unique_ptr<ComputeBackend>> b =
      CreateBackend(*ModelByName("cnn"), options);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
}

// Embedding computes on the GPU too: TensorFlow.js's loss and every
// gradient (tests/fixtures/tfjs_reference/embedding.json, DeepFM's shape
// among them), the ids indexed on the host and the rows summed on the card.
// A layer reading an Embedding's mask does not yet: bad input (the daemons
// exit 2, and no launcher restarts them), naming the layer.
TEST(CreateBackendTest, EmbeddingTrainsOnAGpuAndAMaskIsBadInput) {
  std::string why;
  if (CudaDevicesAvailable(&why) == 0) GTEST_SKIP() << "[gpu] no GPU: " << why;
  std::vector<ReferenceCase> cases =
      LoadTfjsReference("tests/fixtures/tfjs_reference/embedding.json");
  ASSERT_EQ(cases.size(), 4u);
  BackendOptions options;
  options.device = Parse("cuda:0");
  for (const ReferenceCase& m : cases) {
    const int batch = static_cast<int>(m.labels.size());
    options.max_batch = batch;
    absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateBackend(m.spec, options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    Batch b;
    b.images = m.images.data();
    b.targets = m.labels.data();
    b.size = batch;
    std::vector<float> grads(m.spec.num_parameters, NAN);
    float loss = 0;
    int correct = 0;
    ASSERT_TRUE(
        (*backend)->TrainStep(m.params.data(), b, Batch(), grads.data(), &loss, &correct).ok());
    EXPECT_NEAR(loss * batch, m.training_loss_sum, 1e-4) << m.spec.name;
    testing_models::ExpectGradientsAreTfjs(m, grads, 1e-5);
    // An id out of range is bad data, as on the CPU.
    std::vector<float> images = m.images;
    images[0] = 1e6f;
    b.images = images.data();
    EXPECT_EQ(
        (*backend)->TrainStep(m.params.data(), b, Batch(), grads.data(), &loss, &correct).code(),
        absl::StatusCode::kDataLoss);
  }
  std::vector<ReferenceCase> masked = LoadTfjsReference("tests/fixtures/masking/masking.json");
  ASSERT_FALSE(masked.empty());
  options.max_batch = 4;
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateBackend(masked[0].spec, options);
  ASSERT_FALSE(backend.ok());
  EXPECT_TRUE(IsBadInput(backend.status())) << backend.status();
  EXPECT_NE(backend.status().message().find("reads an Embedding's mask"), std::string::npos)
      << backend.status();
  options.device = Parse("cpu");
  EXPECT_TRUE(CreateBackend(masked[0].spec, options).ok());
}

// The launcher's question (worker --check_model): on the host, with or
// without a GPU, the answer CreateBackend on a GPU would give. Built
// without CUDA, no model runs on a GPU, saying why.
TEST(CheckGpuRunsModelTest, SaysWhatTheGpuWouldRefuseWithoutAGpu) {
  std::vector<ReferenceCase> embedding =
      LoadTfjsReference("tests/fixtures/tfjs_reference/embedding.json");
  std::vector<ReferenceCase> masked = LoadTfjsReference("tests/fixtures/masking/masking.json");
  ASSERT_FALSE(embedding.empty());
  ASSERT_FALSE(masked.empty());
  if (!BuiltWithCuda()) {
    const absl::Status s = CheckGpuRunsModel(*ModelByName("cnn"));
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("built without CUDA"), std::string::npos) << s;
    return;
  }
  EXPECT_TRUE(CheckGpuRunsModel(*ModelByName("cnn")).ok());  // the fused engine
  for (const ReferenceCase& m : embedding) {                 // the graph engine
    EXPECT_TRUE(CheckGpuRunsModel(m.spec).ok()) << m.spec.name;
  }
  const absl::Status s = CheckGpuRunsModel(masked[0].spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("reads an Embedding's mask"), std::string::npos) << s;
}

}  // namespace
}  // namespace pscluster
