#include "model/gradient_clipping.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

// Keras 3's clip_by_norm and clip_by_global_norm, in double.
std::vector<double> KerasClipByNorm(const std::vector<double>& g, double c) {
  double sum = 0;
  for (double x : g) sum += x * x;
  const double norm = std::sqrt(sum);
  std::vector<double> out;
  for (double x : g) out.push_back(x * c / std::max(norm, c));
  return out;
}

TEST(GradientClippingTest, ClipnormClipsEachVariableOnItsOwn) {
  // Two variables: [3, 4] (norm 5) and [0.3, 0.4] (norm 0.5), and a moving
  // statistic between them that is not a gradient.
  std::vector<float> g = {3, 4, 123, 0.3f, 0.4f};
  const std::vector<GradientRange> ranges = {{0, 2}, {3, 2}};
  ClipGradient({.clipnorm = 1.0}, ranges, g.data());
  const std::vector<double> a = KerasClipByNorm({3, 4}, 1.0), b = KerasClipByNorm({0.3, 0.4}, 1.0);
  EXPECT_FLOAT_EQ(g[0], a[0]);  // 0.6
  EXPECT_FLOAT_EQ(g[1], a[1]);  // 0.8
  EXPECT_EQ(g[2], 123);
  EXPECT_FLOAT_EQ(g[3], b[0]);  // under the norm: unchanged
  EXPECT_FLOAT_EQ(g[4], b[1]);
}

TEST(GradientClippingTest, GlobalClipnormScalesEveryVariableByOneFactor) {
  std::vector<float> g = {3, 4, 123, 12};  // global norm 13 without the statistic
  ClipGradient({.global_clipnorm = 6.5}, {{0, 2}, {3, 1}}, g.data());
  EXPECT_FLOAT_EQ(g[0], 1.5f);
  EXPECT_FLOAT_EQ(g[1], 2.0f);
  EXPECT_EQ(g[2], 123);
  EXPECT_FLOAT_EQ(g[3], 6.0f);
  std::vector<float> small = {0.3f, 0.4f};
  ClipGradient({.global_clipnorm = 6.5}, {{0, 2}}, small.data());
  EXPECT_FLOAT_EQ(small[0], 0.3f);
  EXPECT_FLOAT_EQ(small[1], 0.4f);
}

TEST(GradientClippingTest, ZerosStayZeroAndNonFiniteGradientsAreLeftForThePsToRefuse) {
  std::vector<float> g = {0, 0};
  ClipGradient({.clipnorm = 1.0}, {{0, 2}}, g.data());
  ClipGradient({.global_clipnorm = 1.0}, {{0, 2}}, g.data());
  EXPECT_EQ(g, (std::vector<float>{0, 0}));
  const float inf = std::numeric_limits<float>::infinity();
  g = {inf, 1};
  ClipGradient({.clipnorm = 1.0}, {{0, 2}}, g.data());
  ClipGradient({.global_clipnorm = 1.0}, {{0, 2}}, g.data());
  EXPECT_EQ(g[0], inf);
  EXPECT_EQ(g[1], 1);
}

TEST(GradientClippingTest, TheTrainableRangesSkipTheMovingStatistics) {
  ModelSpec spec;
  spec.variables.resize(3);
  spec.variables[0].offset = 0;
  spec.variables[0].size = 4;
  spec.variables[1].offset = 4;
  spec.variables[1].size = 2;
  spec.variables[1].role = VariableRole::kMovingMean;
  spec.variables[2].offset = 6;
  spec.variables[2].size = 2;
  const std::vector<GradientRange> r = TrainableRanges(spec);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].offset, 0);
  EXPECT_EQ(r[1].offset, 6);
  EXPECT_EQ(r[1].size, 2);
}

}  // namespace
}  // namespace pscluster
