#include "update/model_replica.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "update/optimizer.h"

namespace pscluster {
namespace {

// A model of two shards: 5 trainable values, then 3 moving statistics.
InitRequest ReplicaSetup(const std::string& optimizer) {
  InitRequest setup;
  setup.set_layout_fingerprint(42);
  ShardSpec* kernel = setup.add_shards();
  kernel->set_variable("dense/kernel");
  kernel->set_size(5);
  ShardSpec* mean = setup.add_shards();
  mean->set_variable("bn/moving_mean");
  mean->set_offset(5);
  mean->set_size(3);
  mean->set_moving_statistic(true);
  mean->set_momentum(0.75f);
  setup.mutable_optimizer()->set_name(optimizer);
  setup.mutable_optimizer()->set_learning_rate(0.1f);
  setup.mutable_optimizer()->set_beta1(0.9f);
  setup.mutable_optimizer()->set_beta2(0.999f);
  setup.mutable_optimizer()->set_epsilon(1e-7f);
  setup.set_mode(ASYNC);
  setup.set_num_workers(1);
  setup.set_replicas_to_aggregate(1);
  return setup;
}

ShardState StateAt(const std::vector<float>& values, int64_t step) {
  ShardState s;
  s.set_layout_fingerprint(42);
  s.set_version(step);
  s.set_values(values.data(), values.size() * sizeof(float));
  s.set_optimizer_iterations(step);
  return s;
}

TEST(ModelReplicaTest, AppliesTheExampleWeightedMeanWithTheParameterServersRule) {
  const std::vector<float> start = {1, -2, 3, 0.5f, -0.25f, 10, 20, 30};
  ModelReplica r;
  InitRequest setup = ReplicaSetup("adam");
  ShardState state = StateAt(start, 7);
  // Adam's slots start at zero; the state carries them.
  for (const char* name : {"m", "v"}) {
    SlotValues* slot = state.add_slots();
    slot->set_name(name);
    std::vector<float> zeros(8, 0.0f);
    slot->set_values(zeros.data(), zeros.size() * sizeof(float));
  }
  ASSERT_TRUE(r.Restore(setup, state).ok());
  EXPECT_EQ(r.step(), 7);

  // Two members' gradients, 3 and 5 examples, summed as the ring does.
  const std::vector<float> g1 = {0.1f, 0.2f, -0.3f, 0.4f, 0.5f, 1, 2, 3};
  const std::vector<float> g2 = {-0.5f, 0.25f, 0.125f, 1, -1, 4, 5, 6};
  std::vector<float> sum(8);
  for (int i = 0; i < 8; ++i) sum[i] = 3 * g1[i] + 5 * g2[i];
  std::vector<float> mean = sum;
  for (float& x : mean) x *= 1.0f / 8.0f;

  // The reference: Keras's Adam on the trainable values, the moving
  // statistics' rule on the rest.
  OptimizerOptions o;
  o.name = "adam";
  o.learning_rate = 0.1f;
  o.beta1 = 0.9f;
  o.beta2 = 0.999f;
  o.epsilon = 1e-7f;
  auto opt = Optimizer::Create(o, 8);
  ASSERT_TRUE(opt.ok());
  OptimizerState os;
  os.iterations = 7;
  os.slots = {{"m", std::vector<float>(8)}, {"v", std::vector<float>(8)}};
  ASSERT_TRUE((*opt)->RestoreState(os).ok());
  std::vector<float> want = start;
  (*opt)->Apply(mean.data(), want.data());
  for (int i = 5; i < 8; ++i) want[i] = 0.75f * start[i] + (1 - 0.75f) * mean[i];

  std::vector<float> params(8);
  ASSERT_TRUE(r.Apply(sum.data(), 8, params.data()).ok());
  EXPECT_EQ(r.step(), 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(params[i], want[i]) << i;
}

// With Keras's global_clipnorm, the step's mean gradient is clipped, not
// the ring's sum, and the moving statistics' values are left alone.
TEST(ModelReplicaTest, ClipsTheStepsMeanGradientAsKeras) {
  const std::vector<float> start = {1, -2, 3, 0.5f, -0.25f, 10, 20, 30};
  ModelReplica r;
  ASSERT_TRUE(r.Restore(ReplicaSetup("sgd"), StateAt(start, 0)).ok());
  std::vector<float> sum = {3, 4, 0, 0, 0, 8, 8, 8};  // 2 examples: mean norm 2.5
  std::vector<float> params(8);
  ASSERT_TRUE(r.Apply(sum.data(), 2, params.data(), {.global_clipnorm = 0.5}, {{0, 5}}).ok());
  // The mean [1.5, 2] scaled to norm 0.5: [0.3, 0.4], times the rate 0.1.
  EXPECT_FLOAT_EQ(params[0], 1 - 0.1f * 0.3f);
  EXPECT_FLOAT_EQ(params[1], -2 - 0.1f * 0.4f);
  EXPECT_EQ(params[2], 3);
  // The moving statistics move toward the mean of their values, unclipped.
  for (int i = 5; i < 8; ++i) EXPECT_FLOAT_EQ(params[i], 0.75f * start[i] + 0.25f * 4) << i;
}

TEST(ModelReplicaTest, ReplicasApplyingTheSameSumsStayBitForBitTheSame) {
  std::vector<float> start(8);
  for (int i = 0; i < 8; ++i) start[i] = 0.1f * static_cast<float>(i) - 0.3f;
  ModelReplica a, b(/*update_threads=*/2);
  ASSERT_TRUE(a.Restore(ReplicaSetup("sgd"), StateAt(start, 0)).ok());
  ASSERT_TRUE(b.Restore(ReplicaSetup("sgd"), StateAt(start, 0)).ok());
  std::vector<float> pa(8), pb(8);
  for (int step = 0; step < 20; ++step) {
    std::vector<float> sa(8), sb;
    for (int i = 0; i < 8; ++i) sa[i] = std::sin(static_cast<float>(step * 8 + i));
    sb = sa;
    ASSERT_TRUE(a.Apply(sa.data(), 3 + step, pa.data()).ok());
    ASSERT_TRUE(b.Apply(sb.data(), 3 + step, pb.data()).ok());
  }
  EXPECT_EQ(std::memcmp(pa.data(), pb.data(), sizeof(float) * 8), 0);
  EXPECT_EQ(a.Digest(), b.Digest());
  EXPECT_NE(a.Digest(), 0u);
  EXPECT_EQ(a.step(), 20);
}

TEST(ModelReplicaTest, HandsOutItsStateOnlyAtTheStepAsked) {
  ModelReplica r;
  ReplicaRequest req;
  EXPECT_TRUE(absl::IsUnavailable(r.State(req).status()));
  EXPECT_EQ(r.step(), -1);
  const std::vector<float> start(8, 1.0f);
  ASSERT_TRUE(r.Restore(ReplicaSetup("momentum"), [&] {
                 ShardState s = StateAt(start, 3);
                 SlotValues* v = s.add_slots();
                 v->set_name("momentum");
                 v->set_values(start.data(), start.size() * sizeof(float));
                 return s;
               }()).ok());
  req.set_step(2);
  absl::StatusOr<ShardState> s = r.State(req);
  ASSERT_TRUE(absl::IsFailedPrecondition(s.status()));
  EXPECT_NE(s.status().message().find("at step 3, not 2"), std::string::npos) << s.status();
  req.set_at_least(true);
  s = r.State(req);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->version(), 3);
  EXPECT_EQ(s->layout_fingerprint(), 42u);
  EXPECT_EQ(s->shards_size(), 2);
  ASSERT_EQ(s->slots_size(), 1);
  EXPECT_EQ(s->values().size(), 8 * sizeof(float));
  req.set_step(4);
  EXPECT_TRUE(absl::IsFailedPrecondition(r.State(req).status()));
  req.set_step(3);
  req.set_at_least(false);
  req.set_values_only(true);
  s = r.State(req);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->slots_size(), 0);

  // A state from another layout, or of the wrong size, changes nothing.
  ShardState other = StateAt(start, 9);
  other.set_layout_fingerprint(7);
  absl::Status bad = r.Restore(ReplicaSetup("momentum"), other);
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_NE(bad.message().find("layout 7"), std::string::npos) << bad;
  EXPECT_TRUE(absl::IsInvalidArgument(
      r.Restore(ReplicaSetup("momentum"), StateAt(std::vector<float>(6, 0.0f), 9))));
  EXPECT_EQ(r.step(), 3);
}

TEST(ModelReplicaTest, TheInitialStateIsStepZeroWithZeroSlots) {
  std::vector<float> values(8);
  for (int i = 0; i < 8; ++i) values[i] = static_cast<float>(i);
  absl::StatusOr<ShardState> s = ModelReplica::InitialState(ReplicaSetup("adam"), values);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->version(), 0);
  EXPECT_EQ(s->optimizer_iterations(), 0);
  ASSERT_EQ(s->slots_size(), 2);
  EXPECT_EQ(s->slots(0).values(), std::string(8 * sizeof(float), '\0'));
  ModelReplica r;
  ASSERT_TRUE(r.Restore(ReplicaSetup("adam"), *s).ok());
  std::vector<float> params(8);
  ASSERT_TRUE(r.CopyWeights(params.data()).ok());
  EXPECT_EQ(params, values);
  EXPECT_TRUE(absl::IsInvalidArgument(
      ModelReplica::InitialState(ReplicaSetup("adam"), std::vector<float>(7)).status()));
}

TEST(ModelReplicaTest, RefusesAStepWithoutExamplesAndANonFiniteGradient) {
  ModelReplica r;
  ASSERT_TRUE(r.Restore(ReplicaSetup("sgd"), StateAt(std::vector<float>(8, 1.0f), 0)).ok());
  std::vector<float> sum(8, 1.0f), params(8);
  EXPECT_TRUE(absl::IsInvalidArgument(r.Apply(sum.data(), 0, params.data())));
  sum[2] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(absl::IsInvalidArgument(r.Apply(sum.data(), 4, params.data())));
  EXPECT_EQ(r.step(), 0);
}

}  // namespace
}  // namespace pscluster
