#include "model/placement.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
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

PlacementOptions Elastic(int max_ps) {
  PlacementOptions opt;
  opt.max_ps = max_ps;
  return opt;
}

// Two layers of 2,000 units: large variables of several sizes.
ModelSpec Wide() {
  LayerSpec flatten, hidden1, hidden2, out;
  flatten.kind = LayerKind::kFlatten;
  flatten.name = "flatten";
  hidden1.kind = hidden2.kind = out.kind = LayerKind::kDense;
  hidden1.name = "hidden1";
  hidden2.name = "hidden2";
  out.name = "out";
  hidden1.units = hidden2.units = 2000;
  out.units = 10;
  return *BuildModelSpec("wide", 28, 28, 1, 10, {flatten, hidden1, hidden2, out});
}

ModelSpec SpecOf(const std::string& model) {
  return model == "wide" ? Wide() : *ModelByName(model);
}

int64_t LargestShard(const Placement& p) {
  int64_t largest = 0;
  for (const Shard& s : p.shards) largest = std::max(largest, s.size);
  return largest;
}

TEST(PlacementTest, ElasticPlacesEveryParameterOnceAndBalancesEveryCount) {
  for (const char* model : {"mlp", "cnn", "wide"}) {
    const ModelSpec spec = SpecOf(model);
    for (int max_ps : {2, 3, 5, 8}) {
      for (int num_ps = 1; num_ps <= max_ps; ++num_ps) {
        const Placement p = PlaceVariables(spec, num_ps, Elastic(max_ps));
        SCOPED_TRACE(absl::StrCat(model, ": ", num_ps, " of ", max_ps, " ps"));
        EXPECT_EQ(p.max_ps, max_ps);
        std::vector<int> covered(spec.num_parameters, 0);
        for (const Shard& s : p.shards) {
          for (int64_t i = 0; i < s.size; ++i) covered[s.offset + i]++;
        }
        EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), spec.num_parameters);
        const auto [lo, hi] = std::minmax_element(p.floats_of_ps.begin(), p.floats_of_ps.end());
        EXPECT_LE(*hi - *lo, LargestShard(p));
        // The cut is the same for every count.
        const Placement one = PlaceVariables(spec, 1, Elastic(max_ps));
        ASSERT_EQ(p.shards.size(), one.shards.size());
        for (size_t i = 0; i < p.shards.size(); ++i) {
          EXPECT_EQ(p.shards[i].offset, one.shards[i].offset);
          EXPECT_EQ(p.shards[i].size, one.shards[i].size);
        }
      }
    }
  }
}

TEST(PlacementTest, ElasticMovesOnlyWhatTheAddedPsTakes) {
  for (const char* model : {"mlp", "cnn", "wide"}) {
    const ModelSpec spec = SpecOf(model);
    for (int n = 1; n < 6; ++n) {
      SCOPED_TRACE(absl::StrCat(model, ": ", n, " to ", n + 1, " ps of 6"));
      const Placement before = PlaceVariables(spec, n, Elastic(6));
      const Placement after = PlaceVariables(spec, n + 1, Elastic(6));
      for (size_t i = 0; i < after.shards.size(); ++i) {
        if (after.shards[i].ps != n) EXPECT_EQ(after.shards[i].ps, before.shards[i].ps) << i;
      }
      // Adding ps n moves its share; draining it moves the same back.
      EXPECT_EQ(MovedFloats(before, after), after.floats_of_ps[n]);
      EXPECT_EQ(MovedFloats(after, before), after.floats_of_ps[n]);
      EXPECT_LE(after.floats_of_ps[n], spec.num_parameters / (n + 1) + LargestShard(after));
    }
  }
}

TEST(PlacementTest, ElasticMovesAThirdOfTheCnnForAThirdPsWhereTheFixedMovesMost) {
  // docs/benchmarks/ps-resize.md: the fixed placement, cut again for each
  // count, moves 86% of the CNN for a third ps.
  const ModelSpec spec = *ModelByName("cnn");
  const double fixed =
      static_cast<double>(MovedFloats(PlaceVariables(spec, 2), PlaceVariables(spec, 3))) /
      spec.num_parameters;
  const double elastic = static_cast<double>(MovedFloats(PlaceVariables(spec, 2, Elastic(3)),
                                                         PlaceVariables(spec, 3, Elastic(3)))) /
                         spec.num_parameters;
  EXPECT_GT(fixed, 0.8);
  // A third, within a piece (29.1% as cut).
  EXPECT_GT(elastic, 0.28);
  EXPECT_LT(elastic, 0.34);
}

TEST(PlacementTest, ElasticIsAnotherLayoutThanFixed) {
  const ModelSpec spec = *ModelByName("cnn");
  EXPECT_EQ(PlaceVariables(spec, 2).max_ps, 0);
  EXPECT_NE(PlaceVariables(spec, 2).fingerprint, PlaceVariables(spec, 2, Elastic(3)).fingerprint);
  EXPECT_EQ(PlaceVariables(spec, 2, Elastic(3)).fingerprint,
            PlaceVariables(spec, 2, Elastic(3)).fingerprint);
  // max_ps below the count is taken as the count.
  EXPECT_EQ(PlaceVariables(spec, 3, Elastic(2)).max_ps, 3);
}

}  // namespace
}  // namespace pscluster
