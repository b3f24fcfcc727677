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

// Keras's Orthogonal: the kernel as [rows, columns] has orthonormal
// columns (more rows) or rows (more columns), times the gain; the draw
// follows the seed. The cnn's conv2 kernel [3, 3, 32, 64] is 288 x 64,
// dense2's [64, 10] 64 x 10; conv1's [3, 3, 1, 32] is 9 x 32: rows.
TEST(ModelSpecTest, OrthogonalKernelsHaveOrthonormalRowsOrColumnsTimesTheGain) {
  ModelSpec spec = *ModelByName("cnn");
  Initializer orthogonal;
  orthogonal.kind = Initializer::Kind::kOrthogonal;
  orthogonal.scale = 1.5;
  for (VariableSpec& v : spec.variables) {
    if (v.shape.size() >= 2) v.initializer = orthogonal;
  }
  const std::vector<float> p = InitialParameters(spec, 3);
  int checked = 0;
  for (const VariableSpec& v : spec.variables) {
    if (v.shape.size() < 2) continue;
    const int64_t cols = v.shape.back(), rows = v.size / cols;
    const float* w = p.data() + v.offset;
    // The Gram matrix of the fewer vectors: gain^2 I.
    const bool by_columns = rows >= cols;
    const int64_t count = by_columns ? cols : rows, length = by_columns ? rows : cols;
    auto at = [&](int64_t vec, int64_t i) {
      return static_cast<double>(by_columns ? w[i * cols + vec] : w[vec * cols + i]);
    };
    double worst = 0.0;
    for (int64_t a = 0; a < count; ++a) {
      for (int64_t b = 0; b <= a; ++b) {
        double dot = 0.0;
        for (int64_t i = 0; i < length; ++i) dot += at(a, i) * at(b, i);
        worst = std::max(worst, std::fabs(dot - (a == b ? 2.25 : 0.0)));
      }
    }
    EXPECT_LT(worst, 1e-5) << v.name << " (" << rows << " x " << cols << ")";
    ++checked;
  }
  EXPECT_EQ(checked, 4);
  EXPECT_EQ(p, InitialParameters(spec, 3));
  EXPECT_NE(p, InitialParameters(spec, 4));
}

}  // namespace
}  // namespace pscluster
