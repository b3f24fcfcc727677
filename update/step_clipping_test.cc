// Sync clipping over several ps (update/step_clipping.h): the ps agree on
// the norms of the step's whole gradient through the decider, and each
// applies its part clipped as the whole would be, whichever ps holds which
// part; the scales travel to backups and to a decider promoted mid-step.
#include "update/step_clipping.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "update/parameter_store.h"

namespace pscluster {
namespace {

constexpr uint64_t kLayout = 11;

// The model: trainable variables 0 = [0, 2), 1 = [2, 4), 2 = [4, 5). The
// decider holds variable 0 and the first value of variable 1; the follower
// the second value of variable 1 and variable 2.
const std::vector<GradientRange> kWhole = {{0, 2, 0}, {2, 2, 1}, {4, 1, 2}};
const std::vector<float> kInit = {1, 2, 3, 4, 5};

StoreConfig Config(int ps, const GradientClipping& clipping, int num_ps = 2) {
  StoreConfig c;
  c.layout_fingerprint = kLayout;
  c.rule = UpdateRule::kSync;
  c.num_workers = 2;
  c.replicas_to_aggregate = 2;
  c.optimizer.name = "sgd";
  c.optimizer.learning_rate = 1.0f;
  c.clipping.clipping = clipping;
  c.clipping.num_trainable = 3;
  c.clipping.num_ps = num_ps;
  if (num_ps == 1) {
    c.num_floats = 5;
    c.clipping.ranges = kWhole;
  } else if (ps == 0) {
    c.num_floats = 3;
    c.clipping.ranges = {{0, 2, 0}, {2, 1, 1}};
  } else {
    c.num_floats = 2;
    c.step_role = StepRole::kFollow;
    c.clipping.ranges = {{0, 1, 1}, {1, 1, 2}};
  }
  return c;
}

// ps `ps`'s part of a whole vector.
std::vector<float> Part(const std::vector<float>& whole, int ps) {
  return ps == 0 ? std::vector<float>(whole.begin(), whole.begin() + 3)
                 : std::vector<float>(whole.begin() + 3, whole.end());
}

absl::StatusOr<PushResult> Push(ParameterStore& store, int worker, std::vector<float> g,
                                int examples, int64_t version = 0) {
  PushArgs a;
  a.layout_fingerprint = kLayout;
  a.worker = worker;
  a.version = version;
  a.request_id = static_cast<uint64_t>(10 * version + worker + 1);
  a.num_examples = examples;
  a.gradients = g.data();
  a.num_floats = static_cast<int64_t>(g.size());
  return store.Push(a);
}

std::vector<float> Values(ParameterStore& store) {
  std::string bytes;
  int64_t version = 0;
  EXPECT_TRUE(store.Pull(kLayout, 0, absl::Now() + absl::Seconds(1), &bytes, &version).ok());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// Two workers' gradients (examples 1 and 3) and what SGD at rate 1 makes of
// the step: init - clip(mean), the whole gradient clipped at once.
const std::vector<float> kG0 = {3, 4, 1, -2, 6}, kG1 = {1, 0, 2, 2, -2};
std::vector<float> Expected(const GradientClipping& clipping) {
  std::vector<float> mean(5);
  for (int i = 0; i < 5; ++i) mean[i] = (1 * kG0[i] + 3 * kG1[i]) / 4;
  ClipGradient(clipping, kWhole, mean.data());
  std::vector<float> out(5);
  for (int i = 0; i < 5; ++i) out[i] = kInit[i] - mean[i];
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "at " << i;
}

class StepClippingTest : public ::testing::TestWithParam<GradientClipping> {
 protected:
  void Init() {
    bool already = false;
    const std::vector<float> a = Part(kInit, 0), b = Part(kInit, 1);
    ASSERT_TRUE(decider_.Init(Config(0, GetParam()), a.data(), &already).ok());
    ASSERT_TRUE(follower_.Init(Config(1, GetParam()), b.data(), &already).ok());
  }
  StepDecision Next(int64_t after) {
    StepDecision d;
    EXPECT_TRUE(decider_.NextDecision(after, absl::Now() + absl::Seconds(1), &d));
    return d;
  }
  ParameterStore decider_, follower_;
};

TEST_P(StepClippingTest, TwoPsClipTheirPartsAsTheWholeGradient) {
  Init();
  ASSERT_TRUE(Push(decider_, 0, Part(kG0, 0), 1).ok());
  ASSERT_TRUE(Push(decider_, 1, Part(kG1, 0), 3).ok());
  // The step is closed, but waits for the follower's norms.
  const StepDecision ask = Next(0);
  EXPECT_TRUE(ask.clipped);
  EXPECT_TRUE(ask.clip_scales.empty());
  EXPECT_EQ(ask.members, (std::vector<bool>{true, true}));
  EXPECT_EQ(decider_.stats().version, 0);
  // The follower lacks worker 1's gradient: no norms yet.
  ASSERT_TRUE(Push(follower_, 0, Part(kG0, 1), 1).ok());
  std::vector<double> norms;
  absl::Status s =
      follower_.Commit(kLayout, ask, &norms, absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  ASSERT_TRUE(Push(follower_, 1, Part(kG1, 1), 3).ok());
  s = follower_.Commit(kLayout, ask, &norms, absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(norms.size(), 3u);
  EXPECT_EQ(norms[0], 0.0);  // holds none of variable 0
  EXPECT_GT(norms[1], 0.0);
  EXPECT_EQ(follower_.stats().version, 0);  // waits for the scales
  ASSERT_TRUE(decider_.AddClipNorms(kLayout, 1, ask.generation, ask.version, norms).ok());
  EXPECT_EQ(decider_.stats().version, 1);
  const StepDecision apply = Next(ask.sequence);
  EXPECT_TRUE(apply.clipped);
  ASSERT_EQ(apply.clip_scales.size(), GetParam().clipnorm > 0 ? 3u : 1u);
  ASSERT_TRUE(follower_.Commit(kLayout, apply).ok());
  EXPECT_EQ(follower_.stats().version, 1);
  std::vector<float> got = Values(decider_);
  const std::vector<float> tail = Values(follower_);
  got.insert(got.end(), tail.begin(), tail.end());
  ExpectNear(got, Expected(GetParam()));
  EXPECT_NE(got[0], kInit[0] - (kG0[0] + 3 * kG1[0]) / 4) << "not clipped";
  EXPECT_EQ(decider_.stats().applied_digest, follower_.stats().applied_digest);
  // Asked again after the step (a decider promoted in this one's place):
  // the same norms.
  std::vector<double> again;
  ASSERT_TRUE(follower_.Commit(kLayout, ask, &again, absl::Now() + absl::Seconds(1)).ok());
  EXPECT_EQ(again, norms);
  // A step it never kept norms of (applied long ago): answered, no norms.
  StepDecision old = ask;
  old.generation = ask.generation;
  old.version = -1;
  std::vector<double> none;
  ASSERT_TRUE(follower_.Commit(kLayout, old, &none, absl::Now() + absl::Seconds(1)).ok());
  EXPECT_TRUE(none.empty());
  // The follower keeps the decision with its scales.
  absl::StatusOr<StepDecision> kept = follower_.DecisionFor(kLayout, 0);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->clip_scales, apply.clip_scales);
}

TEST_P(StepClippingTest, AStaleOrMalformedAnswerChangesNothing) {
  Init();
  ASSERT_TRUE(Push(decider_, 0, Part(kG0, 0), 1).ok());
  ASSERT_TRUE(Push(decider_, 1, Part(kG1, 0), 3).ok());
  const StepDecision ask = Next(0);
  EXPECT_EQ(decider_.AddClipNorms(kLayout, 1, ask.generation, ask.version, {1, 2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decider_.AddClipNorms(kLayout, 2, ask.generation, ask.version, {1, 2, 3}).code(),
            absl::StatusCode::kInvalidArgument);
  // Another step's or generation's: ignored.
  EXPECT_TRUE(decider_.AddClipNorms(kLayout, 1, ask.generation, 7, {1, 2, 3}).ok());
  EXPECT_TRUE(decider_.AddClipNorms(kLayout, 1, 5, ask.version, {1, 2, 3}).ok());
  EXPECT_EQ(decider_.stats().version, 0);
}

TEST_P(StepClippingTest, AloneTheStepIsClippedAtOnceAndItsRecordCarriesTheScales) {
  ParameterStore primary, backup;
  StoreConfig c = Config(0, GetParam(), /*num_ps=*/1);
  bool already = false;
  ASSERT_TRUE(primary.Init(c, kInit.data(), &already).ok());
  std::vector<AppliedUpdate> records;
  primary.SetUpdateListener([&records](AppliedUpdate u) { records.push_back(std::move(u)); });
  StoreState seed;
  ASSERT_TRUE(primary.Snapshot(kLayout, &seed).ok());
  StoreConfig b = c;
  b.store_role = StoreRole::kBackup;
  ASSERT_TRUE(backup.Restore(b, seed, RestoreKind::kContinue).ok());
  ASSERT_TRUE(Push(primary, 0, kG0, 1).ok());
  ASSERT_TRUE(Push(primary, 1, kG1, 3).ok());
  EXPECT_EQ(primary.stats().version, 1);
  ExpectNear(Values(primary), Expected(GetParam()));
  ASSERT_EQ(records.size(), 1u);
  EXPECT_FALSE(records[0].clip_scales.empty());
  ASSERT_TRUE(backup.ApplyReplicated(kLayout, records[0]).ok());
  EXPECT_EQ(Values(backup), Values(primary));
}

TEST_P(StepClippingTest, ADeciderPromotedMidStepGathersTheNormsAgain) {
  Init();
  // The decider's backup, seeded before the step.
  ParameterStore backup;
  StoreConfig b = Config(0, GetParam());
  b.store_role = StoreRole::kBackup;
  StoreState seed;
  ASSERT_TRUE(decider_.Snapshot(kLayout, &seed).ok());
  ASSERT_TRUE(backup.Restore(b, seed, RestoreKind::kContinue).ok());
  ASSERT_TRUE(Push(decider_, 0, Part(kG0, 0), 1).ok());
  ASSERT_TRUE(Push(decider_, 1, Part(kG1, 0), 3).ok());
  const StepDecision ask = Next(0);
  ASSERT_TRUE(Push(follower_, 0, Part(kG0, 1), 1).ok());
  ASSERT_TRUE(Push(follower_, 1, Part(kG1, 1), 3).ok());
  std::vector<double> norms;
  ASSERT_TRUE(follower_.Commit(kLayout, ask, &norms, absl::Now() + absl::Seconds(1)).ok());
  // The decider is lost before the norms reach it. The chief takes the
  // decision in flight from the follower and promotes the backup with it.
  absl::StatusOr<StepDecision> in_flight = follower_.DecisionFor(kLayout, 0);
  ASSERT_TRUE(in_flight.ok());
  EXPECT_TRUE(in_flight->clip_scales.empty());
  ASSERT_TRUE(follower_.FenceDecisions(kLayout, 1).ok());
  ASSERT_TRUE(backup.Promote(kLayout, 0, StepRole::kDecide, *in_flight, 1).ok());
  // The workers push to it again; it sends the decision on again, asking
  // for the norms, and applies once they come.
  ASSERT_TRUE(Push(backup, 0, Part(kG0, 0), 1).ok());
  ASSERT_TRUE(Push(backup, 1, Part(kG1, 0), 3).ok());
  StepDecision resent;
  ASSERT_TRUE(backup.NextDecision(0, absl::Now() + absl::Seconds(1), &resent));
  EXPECT_TRUE(resent.clip_scales.empty());
  std::vector<double> again;
  ASSERT_TRUE(follower_.Commit(kLayout, resent, &again, absl::Now() + absl::Seconds(1)).ok());
  EXPECT_EQ(again, norms);
  ASSERT_TRUE(backup.AddClipNorms(kLayout, 1, resent.generation, resent.version, again).ok());
  EXPECT_EQ(backup.stats().version, 1);
  StepDecision apply;
  ASSERT_TRUE(backup.NextDecision(resent.sequence, absl::Now() + absl::Seconds(1), &apply));
  EXPECT_EQ(apply.decider_epoch, 1);
  ASSERT_TRUE(follower_.Commit(kLayout, apply).ok());
  std::vector<float> got = Values(backup);
  const std::vector<float> tail = Values(follower_);
  got.insert(got.end(), tail.begin(), tail.end());
  ExpectNear(got, Expected(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Clippings, StepClippingTest,
                         ::testing::Values(GradientClipping{.clipnorm = 1.5},
                                           GradientClipping{.global_clipnorm = 2.0}),
                         [](const ::testing::TestParamInfo<GradientClipping>& p) {
                           return std::string(p.param.clipnorm > 0 ? "Clipnorm" : "Global");
                         });

TEST(StepClippingConfigTest, BadConfigurationsAreRefused) {
  StoreConfig c = Config(0, {.clipnorm = 1.0});
  c.rule = UpdateRule::kAsync;
  ParameterStore store;
  bool already = false;
  EXPECT_EQ(store.Init(c, kInit.data(), &already).code(), absl::StatusCode::kInvalidArgument);
  c = Config(0, {.clipnorm = 1.0});
  c.clipping.ranges = {{2, 2, 0}};  // past the 3 values
  EXPECT_EQ(store.Init(c, kInit.data(), &already).code(), absl::StatusCode::kInvalidArgument);
  c = Config(0, {.clipnorm = 1.0});
  c.clipping.ranges = {{0, 1, 3}};  // variable 3 of 3
  EXPECT_EQ(store.Init(c, kInit.data(), &already).code(), absl::StatusCode::kInvalidArgument);
  c = Config(0, {.clipnorm = 1.0});
  c.clipping.num_ps = 0;
  EXPECT_EQ(store.Init(c, kInit.data(), &already).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pscluster
