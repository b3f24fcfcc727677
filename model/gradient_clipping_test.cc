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
  const std::vector<GradientRange> ranges = {{0, 2, 0}, {3, 2, 1}};
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
  ClipGradient({.global_clipnorm = 6.5}, {{0, 2, 0}, {3, 1, 1}}, g.data());
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
  EXPECT_EQ(r[0].variable, 0);
  EXPECT_EQ(r[1].variable, 1);
}

// A sync step's gradient held in parts by two ps: the parts' squared norms
// added up across them give the scales that clip the whole, and each part
// scaled by them is the whole gradient clipped.
TEST(GradientClippingTest, PartsHeldApartClipAsTheWhole) {
  const std::vector<float> whole = {3, 4, 123, 0.3f, 0.4f, 2, -1, 5};
  // Variables: 0 = [0, 2), a moving statistic at 2, 1 = [3, 5), 2 = [5, 8).
  const std::vector<GradientRange> ranges = {{0, 2, 0}, {3, 2, 1}, {5, 3, 2}};
  // ps A holds variable 0 and the first value of variable 2; ps B holds
  // variable 1 and the rest of variable 2, each in its own layout.
  const std::vector<GradientRange> a_ranges = {{0, 2, 0}, {2, 1, 2}};
  const std::vector<GradientRange> b_ranges = {{0, 2, 1}, {2, 2, 2}};
  for (GradientClipping clipping :
       {GradientClipping{.clipnorm = 1.5}, GradientClipping{.global_clipnorm = 2.0}}) {
    std::vector<float> expected = whole;
    ClipGradient(clipping, ranges, expected.data());
    std::vector<float> a = {whole[0], whole[1], whole[5]};
    std::vector<float> b = {whole[3], whole[4], whole[6], whole[7]};
    std::vector<double> sums(3, 0.0);
    AddSquaredNorms(a_ranges, a.data(), &sums);
    AddSquaredNorms(b_ranges, b.data(), &sums);
    const std::vector<float> scales = ClipScales(clipping, sums);
    ASSERT_EQ(scales.size(), clipping.clipnorm > 0 ? 3u : 1u);
    ApplyClipScales(clipping, a_ranges, scales, a.data());
    ApplyClipScales(clipping, b_ranges, scales, b.data());
    EXPECT_FLOAT_EQ(a[0], expected[0]);
    EXPECT_FLOAT_EQ(a[1], expected[1]);
    EXPECT_FLOAT_EQ(a[2], expected[5]);
    EXPECT_FLOAT_EQ(b[0], expected[3]);
    EXPECT_FLOAT_EQ(b[1], expected[4]);
    EXPECT_FLOAT_EQ(b[2], expected[6]);
    EXPECT_FLOAT_EQ(b[3], expected[7]);
    EXPECT_NE(expected[0], whole[0]);  // it did clip
  }
}

}  // namespace
}  // namespace pscluster
