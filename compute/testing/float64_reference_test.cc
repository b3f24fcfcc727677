// The float64 reference checked against sources independent of it: PyTorch
// autograd in float64 on a model holding every layer kind it computes
// (testdata/torch_reference.json, from make_torch_reference.py), and central
// differences of its own loss; and its magnitudes bound its values.
#include "compute/testing/float64_reference.h"

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "compute/testing/graph_test_models.h"
#include "gtest/gtest.h"
#include "model/model_spec.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace reference {
namespace {

using testing_models::Act;
using testing_models::Bn;
using testing_models::Conv;
using testing_models::Dense;
using testing_models::Drop;
using testing_models::L;
using testing_models::Pool;

// make_torch_reference.py's model.
ModelSpec TorchModel() {
  return *BuildModelSpec(
      "torch_check", 6, 6, 2, 3,
      {Conv("conv_a", 3, 3, 3, 2, Padding::kSame, Activation::kTanh), Bn("bn_a"),
       Act("relu", Activation::kRelu), Pool(LayerKind::kMaxPool2D, "max", 2, 1, Padding::kSame),
       Conv("conv_b", 4, 2, 2, 1, Padding::kValid, Activation::kSigmoid, /*bias=*/false),
       Pool(LayerKind::kAvgPool2D, "avg", 2, 1, Padding::kSame), L(LayerKind::kFlatten, "flatten"),
       Drop("drop", 0.3f), Dense("fc", 5, Activation::kNone), Bn("bn_fc", /*center=*/false),
       Dense("out", 3, Activation::kSoftmax)});
}

struct TorchCase {
  ModelSpec spec = TorchModel();
  std::vector<float> params, images;
  std::vector<float> labels;
  nlohmann::json json;
};

TorchCase LoadTorchCase() {
  TorchCase c;
  std::ifstream in("compute/testing/testdata/torch_reference.json");
  EXPECT_TRUE(in.good()) << "cannot read compute/testing/testdata/torch_reference.json";
  c.json = nlohmann::json::parse(in);
  c.params.assign(c.spec.num_parameters, 0.0f);
  for (const VariableSpec& v : c.spec.variables) {
    const std::vector<double> w = c.json["params"].at(v.name).get<std::vector<double>>();
    EXPECT_EQ(static_cast<int64_t>(w.size()), v.size) << v.name;
    for (int64_t i = 0; i < v.size && i < static_cast<int64_t>(w.size()); ++i) {
      c.params[v.offset + i] = static_cast<float>(w[i]);
    }
  }
  for (double x : c.json["images"]) c.images.push_back(static_cast<float>(x));
  for (int l : c.json["labels"]) c.labels.push_back(static_cast<float>(l));
  return c;
}

TEST(Float64ReferenceTest, MatchesPyTorchFloat64) {
  const TorchCase c = LoadTorchCase();
  const int batch = static_cast<int>(c.labels.size());
  absl::StatusOr<ReferenceStep> got =
      TrainStep(c.spec, c.params.data(), c.images.data(), c.labels.data(), batch,
                c.json["seed"].get<uint64_t>(), c.json["step_key"].get<uint64_t>());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(got->loss, c.json["loss"].get<double>(), 1e-12);
  EXPECT_EQ(got->correct, c.json["correct"].get<int>());
  for (const VariableSpec& v : c.spec.variables) {
    const std::vector<double> want = c.json["grads"].at(v.name).get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(want.size()), v.size) << v.name;
    for (int64_t i = 0; i < v.size; ++i) {
      EXPECT_NEAR(got->grads[v.offset + i], want[i], 1e-12 + 1e-10 * std::fabs(want[i]))
          << v.name << "[" << i << "]";
    }
  }
}

// Central differences of the reference's own mean loss, with steps that
// are exact in float (the parameters are floats), Dropout's masks fixed.
TEST(Float64ReferenceTest, GradientsMatchCentralDifferences) {
  TorchCase c = LoadTorchCase();
  const int batch = static_cast<int>(c.labels.size());
  auto loss = [&]() {
    return TrainStep(c.spec, c.params.data(), c.images.data(), c.labels.data(), batch, 17, 123)
        ->loss;
  };
  absl::StatusOr<ReferenceStep> at =
      TrainStep(c.spec, c.params.data(), c.images.data(), c.labels.data(), batch, 17, 123);
  ASSERT_TRUE(at.ok()) << at.status();
  for (const VariableSpec& v : c.spec.variables) {
    if (v.role != VariableRole::kTrainable) continue;
    for (int64_t i = 0; i < v.size; ++i) {
      float& p = c.params[v.offset + i];
      const float p0 = p;
      const float up = p0 + 1e-3f, down = p0 - 1e-3f;
      p = up;
      const double l_up = loss();
      p = down;
      const double l_down = loss();
      p = p0;
      const double numeric = (l_up - l_down) / (double{up} - double{down});
      EXPECT_NEAR(at->grads[v.offset + i], numeric, 1e-6 + 1e-4 * std::fabs(numeric))
          << v.name << "[" << i << "]";
    }
  }
}

// Each value's magnitude is at least the value (a sum's terms in absolute
// value), and positive where a BatchNormalization-fed bias has an exact
// gradient of zero.
TEST(Float64ReferenceTest, MagnitudesBoundValues) {
  const TorchCase c = LoadTorchCase();
  const int batch = static_cast<int>(c.labels.size());
  absl::StatusOr<ReferenceStep> r =
      TrainStep(c.spec, c.params.data(), c.images.data(), c.labels.data(), batch, 17, 123);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int64_t i = 0; i < c.spec.num_parameters; ++i) {
    EXPECT_GE(r->grad_scale[i], std::fabs(r->grads[i]) * (1 - 1e-12)) << i;
    EXPECT_GE(r->grad_terms[i], 1) << i;
  }
  EXPECT_GE(r->loss_scale, std::fabs(r->loss));
  for (const VariableSpec& v : c.spec.variables) {
    if (v.name != "fc/bias") continue;  // feeds bn_fc: sums to zero exactly
    for (int64_t i = 0; i < v.size; ++i) {
      EXPECT_NEAR(r->grads[v.offset + i], 0.0, 1e-15);
      EXPECT_GT(r->grad_scale[v.offset + i], 0.0);
    }
  }
}

}  // namespace
}  // namespace reference
}  // namespace pscluster
