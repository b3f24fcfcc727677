#include "model/model_spec.h"

#include <cmath>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(ModelSpecTest, SeedsCnnHas121930Parameters) {
  absl::StatusOr<ModelSpec> spec = ModelByName("cnn");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->num_parameters, 121930);
  ASSERT_EQ(spec->variables.size(), 8u);
  EXPECT_EQ(spec->variables[0].name, "conv1/kernel");
  EXPECT_EQ(spec->variables[0].shape, (std::vector<int64_t>{3, 3, 1, 32}));
  EXPECT_EQ(spec->variables[2].shape, (std::vector<int64_t>{3, 3, 32, 64}));
  EXPECT_EQ(spec->variables[4].name, "dense1/kernel");
  EXPECT_EQ(spec->variables[4].shape, (std::vector<int64_t>{1600, 64}));
  EXPECT_EQ(spec->variables[7].offset + spec->variables[7].size, 121930);
}

TEST(ModelSpecTest, UnknownModelNamesIt) {
  absl::StatusOr<ModelSpec> spec = ModelByName("resnet");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("\"resnet\""), std::string::npos);
}

TEST(ModelSpecTest, InitialParametersAreGlorotAndZeroBiases) {
  ModelSpec spec = *ModelByName("cnn");
  std::vector<float> p = InitialParameters(spec, 7);
  ASSERT_EQ(p.size(), 121930u);
  for (const VariableSpec& v : spec.variables) {
    double limit = v.initializer.kind == Initializer::Kind::kZeros
                       ? 0.0
                       : std::sqrt(6.0 / (v.fan_in + v.fan_out));
    double max_abs = 0;
    for (int64_t i = 0; i < v.size; ++i) {
      max_abs = std::max(max_abs, std::fabs(double(p[v.offset + i])));
    }
    EXPECT_LE(max_abs, limit) << v.name;
    if (limit > 0) {
      EXPECT_GT(max_abs, 0.9 * limit) << v.name;
    }
  }
  EXPECT_EQ(p, InitialParameters(spec, 7));
  EXPECT_NE(p, InitialParameters(spec, 8));
}

}  // namespace
}  // namespace pscluster
