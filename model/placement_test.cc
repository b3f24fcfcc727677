#include "model/placement.h"

#include <numeric>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(PlacementTest, EveryParameterIsPlacedExactlyOnce) {
  ModelSpec spec = *ModelByName("cnn");
  for (int num_ps : {1, 2, 3, 5}) {
    Placement p = PlaceVariables(spec, num_ps);
    std::vector<int> covered(spec.num_parameters, 0);
    for (const Shard& s : p.shards) {
      for (int64_t i = 0; i < s.size; ++i) covered[s.offset + i]++;
    }
    for (int64_t i = 0; i < spec.num_parameters; ++i) {
      ASSERT_EQ(covered[i], 1) << "num_ps=" << num_ps << " element " << i;
    }
    EXPECT_EQ(std::accumulate(p.floats_of_ps.begin(), p.floats_of_ps.end(),
                              int64_t{0}),
              spec.num_parameters);
  }
}

TEST(PlacementTest, BatchNormMovingStatisticsAreMarkedWithTheirMomentum) {
  LayerSpec flatten, bn, dense;
  flatten.kind = LayerKind::kFlatten;
  flatten.name = "flatten";
  bn.kind = LayerKind::kBatchNorm;
  bn.name = "bn";
  bn.momentum = 0.9f;
  dense.kind = LayerKind::kDense;
  dense.name = "dense";
  dense.units = 10;
  absl::StatusOr<ModelSpec> spec =
      BuildModelSpec("bn_mlp", 4, 4, 1, 10, {flatten, bn, dense});
  ASSERT_TRUE(spec.ok()) << spec.status();
  Placement p = PlaceVariables(*spec, 2);
  int moving = 0;
  for (const Shard& s : p.shards) {
    const bool stat = s.variable == "bn/moving_mean" || s.variable == "bn/moving_variance";
    EXPECT_EQ(s.moving_statistic, stat) << s.variable;
    if (stat) {
      EXPECT_EQ(s.momentum, 0.9f);
      ++moving;
    }
  }
  EXPECT_EQ(moving, 2);
}

TEST(PlacementTest, LargeVariableIsSplitAlongFirstAxis) {
  ModelSpec spec = *ModelByName("cnn");
  Placement p = PlaceVariables(spec, 2);
  std::vector<const Shard*> dense1;
  for (const Shard& s : p.shards) {
    if (s.variable == "dense1/kernel") dense1.push_back(&s);
  }
  ASSERT_EQ(dense1.size(), 2u);
  EXPECT_EQ(dense1[0]->size, 800 * 64);  // 1600 rows split in two
  EXPECT_EQ(dense1[1]->offset, dense1[0]->offset + 800 * 64);
  EXPECT_NE(dense1[0]->ps, dense1[1]->ps);
  // Small variables stay whole.
  for (const Shard& s : p.shards) {
    if (s.variable == "conv1/bias") EXPECT_EQ(s.num_parts, 1);
  }
}

TEST(PlacementTest, DeterministicAndFingerprintTracksLayout) {
  ModelSpec spec = *ModelByName("cnn");
  EXPECT_EQ(PlaceVariables(spec, 2).fingerprint, PlaceVariables(spec, 2).fingerprint);
  EXPECT_NE(PlaceVariables(spec, 2).fingerprint, PlaceVariables(spec, 3).fingerprint);
  EXPECT_NE(PlaceVariables(spec, 2).fingerprint,
            PlaceVariables(*ModelByName("mlp"), 2).fingerprint);
}

TEST(PlacementTest, BalancedWithinTheLargestShard) {
  ModelSpec spec = *ModelByName("cnn");
  Placement p = PlaceVariables(spec, 2);
  int64_t largest = 0;
  for (const Shard& s : p.shards) largest = std::max(largest, s.size);
  EXPECT_LE(std::abs(p.floats_of_ps[0] - p.floats_of_ps[1]), largest);
}

TEST(PlacementTest, GatherScatterRoundTrip) {
  ModelSpec spec = *ModelByName("cnn");
  Placement p = PlaceVariables(spec, 3);
  std::vector<float> flat(spec.num_parameters);
  std::iota(flat.begin(), flat.end(), 0.0f);
  std::vector<float> back(spec.num_parameters, -1.0f);
  for (int ps = 0; ps < 3; ++ps) {
    std::vector<float> wire(p.floats_of_ps[ps]);
    GatherForPs(p, ps, flat.data(), wire.data());
    ScatterFromPs(p, ps, wire.data(), back.data());
  }
  EXPECT_EQ(flat, back);
}

}  // namespace
}  // namespace pscluster
