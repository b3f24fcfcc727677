// A backup store that applies its primary's AppliedUpdate records holds
// what the primary holds, bit for bit (values, Adam's slots, the moving
// statistics, version, applied digest), whichever way the primary made its
// updates (a deciding or following sync store, steps computed ahead,
// skipped and torn steps, async pushes); and once promoted it answers the
// pushes the primary applied as the primary did and fences off the old
// generation.
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "update/parameter_store.h"

namespace pscluster {
namespace {

constexpr uint64_t kLayout = 7;
constexpr int64_t kFloats = 40;

StoreConfig AdamConfig(UpdateRule rule, int workers, int replicas) {
  StoreConfig c;
  c.layout_fingerprint = kLayout;
  c.num_floats = kFloats;
  c.rule = rule;
  c.num_workers = workers;
  c.replicas_to_aggregate = replicas;
  c.optimizer.name = "adam";
  c.optimizer.learning_rate = 0.01f;
  c.skip_nonfinite = true;
  c.moving_statistics = {{8, 4, 0.9f}, {30, 2, 0.5f}};
  return c;
}

std::vector<float> RandomVector(std::mt19937* rng) {
  std::normal_distribution<float> normal;
  std::vector<float> v(kFloats);
  for (float& x : v) x = normal(*rng);
  return v;
}

absl::StatusOr<PushResult> Push(ParameterStore& store, int worker, int64_t version,
                                const std::vector<float>& g, int examples, uint64_t id = 0,
                                int64_t generation = 0) {
  PushArgs a;
  a.layout_fingerprint = kLayout;
  a.worker = worker;
  a.version = version;
  a.request_id = id;
  a.num_examples = examples;
  a.gradients = g.data();
  a.num_floats = static_cast<int64_t>(g.size());
  a.generation = generation;
  return store.Push(a);
}

// A primary initialised with random values that records its updates, and
// a backup seeded from it.
class BackupStoreTest : public ::testing::Test {
 protected:
  void Start(const StoreConfig& config) {
    config_ = config;
    std::vector<float> init = RandomVector(&rng_);
    bool already = false;
    ASSERT_TRUE(primary_.Init(config, init.data(), &already).ok());
    primary_.SetUpdateListener([this](AppliedUpdate u) { log_.push_back(std::move(u)); });
    StoreState seed;
    ASSERT_TRUE(primary_.Snapshot(kLayout, &seed).ok());
    StoreConfig b = config;
    b.store_role = StoreRole::kBackup;
    ASSERT_TRUE(backup_.Restore(b, seed).ok());
  }

  // Applies the records not applied yet, in order.
  void Replicate() {
    for (; applied_ < log_.size(); ++applied_) {
      absl::Status s = backup_.ApplyReplicated(kLayout, log_[applied_]);
      ASSERT_TRUE(s.ok()) << "record " << applied_ << ": " << s;
    }
  }

  // The two stores hold the same bits.
  void ExpectSameState() {
    StoreState p, b;
    ASSERT_TRUE(primary_.Snapshot(kLayout, &p).ok());
    ASSERT_TRUE(backup_.Snapshot(kLayout, &b).ok());
    EXPECT_EQ(p.version, b.version);
    ASSERT_EQ(p.values.size(), b.values.size());
    EXPECT_EQ(0, std::memcmp(p.values.data(), b.values.data(), p.values.size() * sizeof(float)));
    EXPECT_EQ(p.optimizer.iterations, b.optimizer.iterations);
    ASSERT_EQ(p.optimizer.slots.size(), b.optimizer.slots.size());
    for (size_t i = 0; i < p.optimizer.slots.size(); ++i) {
      const std::vector<float>& ps = p.optimizer.slots[i].values;
      const std::vector<float>& bs = b.optimizer.slots[i].values;
      ASSERT_EQ(ps.size(), bs.size());
      EXPECT_EQ(0, std::memcmp(ps.data(), bs.data(), ps.size() * sizeof(float)))
          << "slot " << p.optimizer.slots[i].name;
    }
    const StoreStats ps = primary_.stats(), bs = backup_.stats();
    EXPECT_EQ(ps.applied_digest, bs.applied_digest);
    EXPECT_EQ(ps.pushes_applied, bs.pushes_applied);
    EXPECT_EQ(ps.steps_applied, bs.steps_applied);
    // (An async push skipped for a NaN or Inf changes nothing: no record.)
    if (config_.rule == UpdateRule::kSync) {
      EXPECT_EQ(ps.steps_skipped_nonfinite, bs.steps_skipped_nonfinite);
    }
  }

  std::mt19937 rng_{1234};
  StoreConfig config_;
  ParameterStore primary_{1};
  ParameterStore backup_{1};
  std::vector<AppliedUpdate> log_;
  size_t applied_ = 0;
};

TEST_F(BackupStoreTest, ABackupOfADecidingSyncStoreHoldsTheSameBits) {
  Start(AdamConfig(UpdateRule::kSync, 3, 2));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t v = 0; v < 12; ++v) {
    std::vector<float> g0 = RandomVector(&rng_), g1 = RandomVector(&rng_);
    if (v == 5) g1[3] = nan;  // the step is skipped
    // Workers 0 and 1 close the step (weighted 3:5); worker 2's is late.
    ASSERT_TRUE(Push(primary_, (v % 2 == 0) ? 0 : 1, v, g0, 3).ok());
    ASSERT_TRUE(Push(primary_, (v % 2 == 0) ? 1 : 0, v, g1, 5).ok());
    ASSERT_TRUE(Push(primary_, 2, v, RandomVector(&rng_), 4).ok());
    if (v % 4 == 3) Replicate();
  }
  // One worker taken out: the next step closes with the other alone.
  ASSERT_TRUE(primary_.SetActiveWorkers(kLayout, {true, false, false}).ok());
  ASSERT_TRUE(Push(primary_, 0, 12, RandomVector(&rng_), 2).ok());
  Replicate();
  EXPECT_EQ(primary_.stats().version, 13);
  EXPECT_EQ(primary_.stats().steps_skipped_nonfinite, 1);
  ExpectSameState();
  // The backup knows the step outcomes the primary gave.
  EXPECT_EQ(backup_.StepOutcome(0, 12), std::optional<bool>(true));
}

TEST_F(BackupStoreTest, ABackupOfAFollowingStoreHoldsTheSameBitsWithStepsComputedAhead) {
  StoreConfig c = AdamConfig(UpdateRule::kSync, 3, 2);
  c.step_role = StepRole::kFollow;
  Start(c);
  for (int64_t v = 0; v < 8; ++v) {
    StepDecision d;
    d.layout_fingerprint = kLayout;
    d.version = v;
    d.members = {true, v % 3 != 0, v % 3 == 0};
    ASSERT_TRUE(Push(primary_, 0, v, RandomVector(&rng_), 2).ok());
    const int second = d.members[1] ? 1 : 2;
    if (v % 2 == 0) {
      // Both gradients first: the update is computed ahead of the decision.
      ASSERT_TRUE(Push(primary_, second, v, RandomVector(&rng_), 6).ok());
      ASSERT_TRUE(primary_.Commit(kLayout, d).ok());
    } else {
      ASSERT_TRUE(primary_.Commit(kLayout, d).ok());
      ASSERT_TRUE(Push(primary_, second, v, RandomVector(&rng_), 6).ok());
    }
  }
  // A member lost before its gradient came: the step is torn.
  StepDecision d;
  d.layout_fingerprint = kLayout;
  d.version = 8;
  d.members = {false, true, false};
  ASSERT_TRUE(primary_.Commit(kLayout, d).ok());
  ASSERT_TRUE(primary_.SetActiveWorkers(kLayout, {true, false, true}).ok());
  Replicate();
  ASSERT_EQ(primary_.stats().version, 9);
  EXPECT_GT(primary_.stats().steps_ahead, 0);
  EXPECT_EQ(primary_.stats().steps_torn, 1);
  EXPECT_TRUE(log_.back().gradient.empty());
  ExpectSameState();
}

TEST_F(BackupStoreTest, AnAsyncBackupHoldsTheSameBitsAndOncePromotedAnswersAppliedPushesAsTheyWere) {
  Start(AdamConfig(UpdateRule::kAsync, 2, 1));
  uint64_t id = 100;
  std::vector<std::pair<uint64_t, PushResult>> answers;
  for (int i = 0; i < 10; ++i) {
    const int64_t version = primary_.stats().version;
    absl::StatusOr<PushResult> r = Push(primary_, i % 2, std::max<int64_t>(0, version - i % 3),
                                        RandomVector(&rng_), 1, ++id);
    ASSERT_TRUE(r.ok()) << r.status();
    answers.push_back({id, *r});
  }
  std::vector<float> bad = RandomVector(&rng_);
  bad[0] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(Push(primary_, 0, primary_.stats().version, bad, 1, ++id).ok());  // skipped
  Replicate();
  EXPECT_EQ(log_.size(), 10u);  // the skipped push changed nothing
  ExpectSameState();

  // The primary is lost; its backup takes over under generation 1.
  ASSERT_TRUE(backup_.Promote(kLayout, 1, StepRole::kDecide).ok());
  const int64_t version = backup_.stats().version;
  // A worker resends a push the old primary applied (its answer was lost):
  // answered as it was, not applied again, old generation or not.
  const auto& [resent_id, resent_answer] = answers[7];
  absl::StatusOr<PushResult> r = Push(backup_, 7 % 2, 0, RandomVector(&rng_), 1, resent_id);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->applied);
  EXPECT_EQ(r->version, resent_answer.version);
  EXPECT_EQ(backup_.stats().version, version);
  EXPECT_EQ(backup_.stats().pushes_duplicate, 1);
  // A new push computed on the old generation's weights is fenced off.
  EXPECT_EQ(Push(backup_, 0, version, RandomVector(&rng_), 1, ++id).status().code(),
            absl::StatusCode::kAborted);
  std::string bytes;
  int64_t pulled = 0;
  EXPECT_EQ(backup_.Pull(kLayout, 0, absl::Now() + absl::Seconds(1), &bytes, &pulled, 0)
                .code(),
            absl::StatusCode::kAborted);
  // One of the new generation is applied.
  r = Push(backup_, 0, version, RandomVector(&rng_), 1, ++id, /*generation=*/1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->applied);
  EXPECT_EQ(backup_.stats().version, version + 1);
  EXPECT_EQ(backup_.stats().generation, 1);
}

TEST_F(BackupStoreTest, ABackupPromotedUnderTheSameGenerationTakesThePushesInFlight) {
  // A fail-over that rolls nothing back: the workers' pushes computed on
  // the old primary's weights stand, and a resend of one it applied is
  // answered as it was.
  Start(AdamConfig(UpdateRule::kAsync, 2, 1));
  absl::StatusOr<PushResult> first = Push(primary_, 0, 0, RandomVector(&rng_), 1, /*id=*/21);
  ASSERT_TRUE(first.ok()) << first.status();
  Replicate();
  ASSERT_TRUE(backup_.Promote(kLayout, 0, StepRole::kDecide).ok());
  absl::StatusOr<PushResult> resent = Push(backup_, 0, 0, RandomVector(&rng_), 1, 21);
  ASSERT_TRUE(resent.ok()) << resent.status();
  EXPECT_TRUE(resent->applied);
  EXPECT_EQ(resent->version, first->version);
  EXPECT_EQ(backup_.stats().pushes_duplicate, 1);
  absl::StatusOr<PushResult> next = Push(backup_, 1, 1, RandomVector(&rng_), 1, /*id=*/22);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->applied);
  EXPECT_EQ(backup_.stats().version, 2);
  EXPECT_EQ(backup_.stats().generation, 0);
}

TEST_F(BackupStoreTest, ABackupPromotedToDecideClosesTheStepInFlightAsTheFollowersDid) {
  // The decider closed step 0 with worker 0 alone (one replica to
  // aggregate) and sent the decision to its followers, then was lost
  // before its backup got the record: the promoted backup closes step 0
  // with the same members, whoever pushes first now, and sends the
  // decision on again for the followers that lack it.
  Start(AdamConfig(UpdateRule::kSync, 2, 1));
  const std::vector<float> g0 = RandomVector(&rng_);
  ASSERT_TRUE(Push(primary_, 0, 0, g0, 1, /*id=*/31).ok());
  ASSERT_EQ(primary_.stats().version, 1);
  absl::StatusOr<StepDecision> took = primary_.DecisionFor(kLayout, 0);
  ASSERT_TRUE(took.ok()) << took.status();
  ASSERT_EQ(took->members, std::vector<bool>({true, false}));
  // Not for the backup's version, or for a follower: refused.
  StepDecision wrong = *took;
  wrong.version = 1;
  EXPECT_EQ(backup_.Promote(kLayout, 0, StepRole::kDecide, wrong).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backup_.Promote(kLayout, 0, StepRole::kFollow, *took).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(backup_.Promote(kLayout, 0, StepRole::kDecide, *took).ok());
  // Worker 1 pushes first: left out, as in the followers' step.
  ASSERT_TRUE(Push(backup_, 1, 0, RandomVector(&rng_), 1, /*id=*/32).ok());
  EXPECT_EQ(backup_.stats().version, 0);
  ASSERT_TRUE(Push(backup_, 0, 0, g0, 1, /*id=*/31).ok());
  EXPECT_EQ(backup_.stats().version, 1);
  ExpectSameState();
  StepDecision sent;
  ASSERT_TRUE(backup_.NextDecision(0, absl::Now() + absl::Seconds(1), &sent));
  EXPECT_EQ(sent.version, 0);
  EXPECT_EQ(sent.members, took->members);
  // The next step it decides itself.
  ASSERT_TRUE(Push(backup_, 1, 1, RandomVector(&rng_), 1, /*id=*/33).ok());
  EXPECT_EQ(backup_.stats().version, 2);
  absl::StatusOr<StepDecision> own = backup_.DecisionFor(kLayout, 1);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->members, std::vector<bool>({false, true}));
}

TEST_F(BackupStoreTest, ABackupPromotedToDecideSendsTheStepsItHoldsAgainUnderItsEpoch) {
  // The decider applied steps 0 and 1, its backup got both records, and
  // the follower got the decision of step 0 only: the decider was lost
  // before it sent the next. The promoted backup sends both again, under
  // its decider epoch; the follower takes what it lacks, once.
  Start(AdamConfig(UpdateRule::kSync, 2, 1));
  StoreConfig fc = config_;
  fc.step_role = StepRole::kFollow;
  ParameterStore follower(1);
  const std::vector<float> init = RandomVector(&rng_);
  bool already = false;
  ASSERT_TRUE(follower.Init(fc, init.data(), &already).ok());
  ASSERT_TRUE(Push(primary_, 0, 0, RandomVector(&rng_), 1, 50).ok());
  ASSERT_TRUE(Push(follower, 0, 0, RandomVector(&rng_), 1, 50).ok());
  absl::StatusOr<StepDecision> first = primary_.DecisionFor(kLayout, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(follower.Commit(kLayout, *first).ok());
  ASSERT_EQ(follower.stats().version, 1);
  ASSERT_TRUE(Push(primary_, 1, 1, RandomVector(&rng_), 1, 51).ok());
  ASSERT_TRUE(Push(follower, 1, 1, RandomVector(&rng_), 1, 51).ok());
  ASSERT_EQ(follower.stats().version, 1);  // waiting for the decision
  Replicate();
  ASSERT_EQ(backup_.stats().version, 2);
  // The follower's decision of step 0, handed over as the one in flight:
  // the backup holds that step already, and ignores it.
  ASSERT_TRUE(backup_.Promote(kLayout, 0, StepRole::kDecide, *first, /*decider_epoch=*/3).ok());
  EXPECT_EQ(backup_.stats().decider_epoch, 3);
  ASSERT_TRUE(follower.FenceDecisions(kLayout, 3).ok());
  std::vector<int64_t> versions;
  StepDecision d;
  for (int64_t after = 0; backup_.NextDecision(after, absl::Now(), &d); after = d.sequence) {
    versions.push_back(d.version);
    EXPECT_EQ(d.decider_epoch, 3);
    ASSERT_TRUE(follower.Commit(kLayout, d).ok()) << "step " << d.version;
  }
  EXPECT_EQ(versions, std::vector<int64_t>({0, 1}));
  EXPECT_EQ(follower.stats().version, 2);
  EXPECT_EQ(follower.stats().pushes_applied, 2);
  EXPECT_EQ(follower.stats().applied_digest, primary_.stats().applied_digest);
}

TEST_F(BackupStoreTest, AFollowerFencedAtANewEpochRefusesTheOldDecidersDecisions) {
  StoreConfig fc = AdamConfig(UpdateRule::kSync, 2, 2);
  fc.step_role = StepRole::kFollow;
  Start(fc);
  StepDecision d;
  d.layout_fingerprint = kLayout;
  d.version = 0;
  d.members = {true, true};
  ASSERT_TRUE(primary_.Commit(kLayout, d).ok());  // epoch 0
  ASSERT_TRUE(Push(primary_, 0, 0, RandomVector(&rng_), 1, 61).ok());
  ASSERT_TRUE(Push(primary_, 1, 0, RandomVector(&rng_), 1, 62).ok());
  ASSERT_EQ(primary_.stats().version, 1);
  // A backup is about to decide: the follower is fenced at epoch 1, and the
  // old decider's next decision, which its backup never saw, is refused.
  ASSERT_TRUE(primary_.FenceDecisions(kLayout, 1).ok());
  EXPECT_EQ(primary_.stats().decider_epoch, 1);
  d.version = 1;
  d.members = {true, false};
  absl::Status old = primary_.Commit(kLayout, d);
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(old.message().find("was replaced as the decider"), std::string::npos) << old;
  ASSERT_TRUE(Push(primary_, 0, 1, RandomVector(&rng_), 1, 63).ok());
  EXPECT_EQ(primary_.stats().version, 1);
  EXPECT_TRUE(absl::IsNotFound(primary_.DecisionFor(kLayout, 1).status()));
  // The new decider's, of epoch 1, is taken.
  d.members = {true, true};
  d.decider_epoch = 1;
  ASSERT_TRUE(primary_.Commit(kLayout, d).ok());
  ASSERT_TRUE(Push(primary_, 1, 1, RandomVector(&rng_), 1, 64).ok());
  EXPECT_EQ(primary_.stats().version, 2);
  // An epoch is never lowered: not by a fence, not by a restore.
  ASSERT_TRUE(primary_.FenceDecisions(kLayout, 0).ok());
  EXPECT_EQ(primary_.stats().decider_epoch, 1);
  StoreState snap;
  ASSERT_TRUE(primary_.Snapshot(kLayout, &snap).ok());
  EXPECT_EQ(snap.decider_epoch, 1);
  snap.decider_epoch = 0;
  ASSERT_TRUE(primary_.Restore(fc, snap).ok());
  EXPECT_EQ(primary_.stats().decider_epoch, 1);
  // A restarted follower takes the epoch the chief gives with its state.
  ParameterStore fresh(1);
  snap.decider_epoch = 2;
  ASSERT_TRUE(fresh.Restore(fc, snap, RestoreKind::kContinue).ok());
  EXPECT_EQ(fresh.stats().decider_epoch, 2);
  // The decider itself is not fenced.
  ParameterStore decider(1);
  const std::vector<float> init = RandomVector(&rng_);
  bool already = false;
  ASSERT_TRUE(decider.Init(AdamConfig(UpdateRule::kSync, 2, 2), init.data(), &already).ok());
  EXPECT_EQ(decider.FenceDecisions(kLayout, 1).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(BackupStoreTest, ASeedTakenWhileAStepGathersLeavesItsPushesToBePushedAgain) {
  // A backup seeded while worker 0's push waits in the step being gathered,
  // then promoted before the step closed (the shards moved back to it): it
  // does not hold that gradient, so the push resent to it is taken, not
  // answered as taken, and the step closes with both members.
  Start(AdamConfig(UpdateRule::kSync, 2, 2));
  ASSERT_TRUE(Push(primary_, 0, 0, RandomVector(&rng_), 1, /*id=*/71).ok());
  ASSERT_EQ(primary_.stats().version, 0);
  StoreState seed;
  ASSERT_TRUE(primary_.Snapshot(kLayout, &seed).ok());
  for (const StoreState::Answered& a : seed.answered) EXPECT_NE(a.request_id, 71u);
  ParameterStore backup(1);
  StoreConfig b = config_;
  b.store_role = StoreRole::kBackup;
  ASSERT_TRUE(backup.Restore(b, seed).ok());
  ASSERT_TRUE(backup.Promote(kLayout, 0, StepRole::kDecide).ok());
  absl::StatusOr<PushResult> resent = Push(backup, 0, 0, RandomVector(&rng_), 1, 71);
  ASSERT_TRUE(resent.ok()) << resent.status();
  EXPECT_EQ(backup.stats().pushes_duplicate, 0);
  ASSERT_TRUE(Push(backup, 1, 0, RandomVector(&rng_), 1, /*id=*/72).ok());
  EXPECT_EQ(backup.stats().version, 1);
  EXPECT_EQ(backup.stats().pushes_applied, 2);
}

TEST_F(BackupStoreTest, ADeciderDemotedAndPromotedAgainSendsItsLastDecisionsUnderTheNewEpoch) {
  // The shards were to move back: the decider was demoted after it applied
  // step 0, the followers were fenced at epoch 1 (refusing its decision of
  // step 0 if it had not arrived), and the promotion elsewhere failed. It
  // decides again under epoch 2 and sends the steps it applied again.
  Start(AdamConfig(UpdateRule::kSync, 2, 1));
  ASSERT_TRUE(Push(primary_, 0, 0, RandomVector(&rng_), 1, /*id=*/81).ok());
  ASSERT_EQ(primary_.stats().version, 1);
  ASSERT_TRUE(primary_.Demote(kLayout).ok());
  ASSERT_TRUE(primary_.Promote(kLayout, 0, StepRole::kDecide, std::nullopt, 2).ok());
  StepDecision d;
  std::vector<std::pair<int64_t, int64_t>> sent;  // version, epoch
  for (int64_t after = 0; primary_.NextDecision(after, absl::Now(), &d); after = d.sequence) {
    sent.push_back({d.version, d.decider_epoch});
  }
  EXPECT_EQ(sent, (std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {0, 2}}));
  // A restore replaces the state, and the decisions of the old one go.
  StoreState snap;
  ASSERT_TRUE(primary_.Snapshot(kLayout, &snap).ok());
  ASSERT_TRUE(primary_.Restore(config_, snap).ok());
  EXPECT_TRUE(absl::IsNotFound(primary_.DecisionFor(kLayout, 0).status()));
}

TEST_F(BackupStoreTest, AFollowerKeepsTheDecisionsItTakes) {
  StoreConfig follower = AdamConfig(UpdateRule::kSync, 2, 2);
  follower.step_role = StepRole::kFollow;
  Start(follower);
  StepDecision d;
  d.layout_fingerprint = kLayout;
  d.version = 0;
  d.members = {true, false};
  ASSERT_TRUE(primary_.Commit(kLayout, d).ok());  // waiting for worker 0's push
  absl::StatusOr<StepDecision> kept = primary_.DecisionFor(kLayout, 0);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->members, d.members);
  ASSERT_TRUE(Push(primary_, 0, 0, RandomVector(&rng_), 1, /*id=*/41).ok());
  EXPECT_EQ(primary_.stats().version, 1);
  EXPECT_TRUE(primary_.DecisionFor(kLayout, 0).ok());  // applied, still kept
  EXPECT_TRUE(absl::IsNotFound(primary_.DecisionFor(kLayout, 1).status()));
}

TEST_F(BackupStoreTest, APromotedSyncBackupDecidesTheNextStepsUnderItsGeneration) {
  Start(AdamConfig(UpdateRule::kSync, 2, 2));
  ASSERT_TRUE(Push(primary_, 0, 0, RandomVector(&rng_), 1, /*id=*/11).ok());
  ASSERT_TRUE(Push(primary_, 1, 0, RandomVector(&rng_), 1, /*id=*/12).ok());
  Replicate();
  ASSERT_TRUE(backup_.Promote(kLayout, 3, StepRole::kDecide).ok());
  // A member's push resent (its answer was lost): answered as applied,
  // not taken again.
  absl::StatusOr<PushResult> resent = Push(backup_, 1, 0, RandomVector(&rng_), 1, 12);
  ASSERT_TRUE(resent.ok()) << resent.status();
  EXPECT_TRUE(resent->applied);
  EXPECT_EQ(resent->version, 1);
  EXPECT_EQ(backup_.stats().pushes_duplicate, 1);
  EXPECT_EQ(Push(backup_, 0, 1, RandomVector(&rng_), 1, 0, 0).status().code(),
            absl::StatusCode::kAborted);
  ASSERT_TRUE(Push(backup_, 0, 1, RandomVector(&rng_), 1, 0, 3).ok());
  ASSERT_TRUE(Push(backup_, 1, 1, RandomVector(&rng_), 1, 0, 3).ok());
  EXPECT_EQ(backup_.stats().version, 2);
  EXPECT_EQ(backup_.StepOutcome(1, 1), std::optional<bool>(true));
}

// A restarted primary restored from its backup (RestoreKind::kContinue)
// continues it: same bits, counters and digest, and a push the lost
// process applied is answered as it was when resent, under the same
// generation; a checkpoint restore (kRollback) takes none of that.
TEST_F(BackupStoreTest, APrimaryRestoredFromItsBackupContinuesIt) {
  Start(AdamConfig(UpdateRule::kAsync, 2, 1));
  std::vector<std::pair<uint64_t, PushResult>> answers;
  for (uint64_t id = 1; id <= 6; ++id) {
    absl::StatusOr<PushResult> r =
        Push(primary_, static_cast<int>(id % 2), primary_.stats().version, RandomVector(&rng_),
             1, id);
    ASSERT_TRUE(r.ok()) << r.status();
    answers.push_back({id, *r});
  }
  Replicate();
  StoreState kept;
  ASSERT_TRUE(backup_.Snapshot(kLayout, &kept).ok());
  EXPECT_EQ(kept.answered.size(), 6u);

  ParameterStore restarted{1};
  ASSERT_TRUE(restarted.Restore(config_, kept, RestoreKind::kContinue).ok());
  const StoreStats st = restarted.stats();
  EXPECT_EQ(st.version, 6);
  EXPECT_EQ(st.generation, 0);
  EXPECT_EQ(st.pushes_applied, 6);
  EXPECT_EQ(st.applied_digest, primary_.stats().applied_digest);
  absl::StatusOr<PushResult> resent = Push(restarted, 1, 0, RandomVector(&rng_), 1, 5);
  ASSERT_TRUE(resent.ok()) << resent.status();
  EXPECT_TRUE(resent->applied);
  EXPECT_EQ(resent->version, answers[4].second.version);
  EXPECT_EQ(restarted.stats().version, 6);
  EXPECT_EQ(restarted.stats().pushes_duplicate, 1);
  // New pushes of the same generation go on being applied.
  ASSERT_TRUE(Push(restarted, 0, 6, RandomVector(&rng_), 1, 7).ok());
  EXPECT_EQ(restarted.stats().version, 7);

  ParameterStore rolled_back{1};
  ASSERT_TRUE(rolled_back.Restore(config_, kept).ok());
  EXPECT_EQ(rolled_back.stats().pushes_applied, 0);
  resent = Push(rolled_back, 1, 6, RandomVector(&rng_), 1, 5);
  ASSERT_TRUE(resent.ok()) << resent.status();
  EXPECT_EQ(rolled_back.stats().pushes_duplicate, 0);  // applied: nothing remembered
  EXPECT_EQ(rolled_back.stats().version, 7);
}

// A deciding store keeps its newest decisions for a follower restored
// from its backup, which needs the one of the step it is at again.
TEST_F(BackupStoreTest, ADecidingStoreGivesAKeptDecisionAgain) {
  Start(AdamConfig(UpdateRule::kSync, 2, 2));
  EXPECT_TRUE(absl::IsNotFound(primary_.DecisionFor(kLayout, 0).status()));
  ASSERT_TRUE(Push(primary_, 0, 0, RandomVector(&rng_), 1, 1).ok());
  ASSERT_TRUE(Push(primary_, 1, 0, RandomVector(&rng_), 1, 2).ok());
  absl::StatusOr<StepDecision> d = primary_.DecisionFor(kLayout, 0);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->version, 0);
  EXPECT_EQ(d->members, std::vector<bool>({true, true}));
  EXPECT_TRUE(absl::IsNotFound(primary_.DecisionFor(kLayout, 1).status()));
  EXPECT_EQ(primary_.DecisionFor(kLayout + 1, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(BackupStoreTest, ABackupSeededByAPromotedStoreRefusesTheReplacedPrimarysRecords) {
  // --ps_replicas=2: the primary keeps two backups, backup_ and `second`.
  Start(AdamConfig(UpdateRule::kAsync, 2, 1));
  StoreConfig b = config_;
  b.store_role = StoreRole::kBackup;
  ParameterStore second(1);
  {
    StoreState seed;
    ASSERT_TRUE(primary_.Snapshot(kLayout, &seed).ok());
    ASSERT_TRUE(second.Restore(b, seed).ok());
  }
  uint64_t id = 100;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Push(primary_, i % 2, primary_.stats().version, RandomVector(&rng_), 1, ++id).ok());
  }
  Replicate();
  for (const AppliedUpdate& u : log_) ASSERT_TRUE(second.ApplyReplicated(kLayout, u).ok());
  EXPECT_EQ(primary_.stats().primary_term, 0);

  // Cut off from backup_ (promoted) but not from `second`, the old primary
  // goes on applying pushes (it answers none: backup_ refuses it).
  EXPECT_EQ(backup_.Promote(kLayout, 0, StepRole::kDecide, std::nullopt, 0, /*primary_term=*/0)
                .code(),
            absl::StatusCode::kOk);
  EXPECT_EQ(backup_.stats().primary_term, 1);  // 0: one above its own
  ASSERT_TRUE(Push(primary_, 0, primary_.stats().version, RandomVector(&rng_), 1, ++id).ok());
  const AppliedUpdate stale = log_.back();
  EXPECT_EQ(stale.primary_term, 0);
  // The promoted store applies a push of its own, then seeds `second`.
  ASSERT_TRUE(Push(backup_, 1, backup_.stats().version, RandomVector(&rng_), 1, ++id).ok());
  StoreState seed;
  ASSERT_TRUE(backup_.Snapshot(kLayout, &seed).ok());
  EXPECT_EQ(seed.primary_term, 1);
  ASSERT_TRUE(second.Restore(b, seed).ok());
  EXPECT_EQ(second.stats().primary_term, 1);
  const StoreStats before = second.stats();
  // The old primary's record, at the version `second` holds now, is
  // refused: it would otherwise apply an update the new primary never made.
  AppliedUpdate at = stale;
  at.version = before.version;
  EXPECT_EQ(second.ApplyReplicated(kLayout, at).code(), absl::StatusCode::kAlreadyExists);
  // And so is its seed.
  StoreState old_seed;
  ASSERT_TRUE(primary_.Snapshot(kLayout, &old_seed).ok());
  EXPECT_EQ(second.Restore(b, old_seed).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(second.stats().version, before.version);
  EXPECT_EQ(second.stats().applied_digest, before.applied_digest);
  // A record of a term it has not been seeded at wants a fresh seed.
  at.primary_term = 2;
  EXPECT_EQ(second.ApplyReplicated(kLayout, at).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(BackupStoreTest, APromotionMustRaiseThePrimaryTermAndARestoreNeverLowersIt) {
  Start(AdamConfig(UpdateRule::kAsync, 2, 1));
  StoreState seed;
  ASSERT_TRUE(primary_.Snapshot(kLayout, &seed).ok());
  seed.primary_term = 3;
  StoreConfig b = config_;
  b.store_role = StoreRole::kBackup;
  ASSERT_TRUE(backup_.Restore(b, seed).ok());
  EXPECT_EQ(backup_.stats().primary_term, 3);
  // At or below its own it would fence nothing.
  EXPECT_EQ(backup_.Promote(kLayout, 0, StepRole::kDecide, std::nullopt, 0, 3).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(backup_.stats().backup);  // nothing changed
  ASSERT_TRUE(backup_.Promote(kLayout, 0, StepRole::kDecide, std::nullopt, 0, 5).ok());
  EXPECT_EQ(backup_.stats().primary_term, 5);
  // A checkpoint's state of an older term leaves it.
  StoreState checkpoint;
  ASSERT_TRUE(primary_.Snapshot(kLayout, &checkpoint).ok());
  checkpoint.generation = 1;
  ASSERT_TRUE(backup_.Restore(config_, checkpoint).ok());
  EXPECT_EQ(backup_.stats().primary_term, 5);
}

TEST_F(BackupStoreTest, APullWaitingOnAPrimaryFailsAtOnceWhenItIsDemoted) {
  // A move back (docs/replication.md): the store that served the shards is
  // demoted while a worker's pull waits for the next version there; it
  // must fail then, so that the worker asks where the shards are, not wait
  // for its deadline.
  Start(AdamConfig(UpdateRule::kAsync, 2, 1));
  const int64_t next = primary_.stats().version + 1;
  absl::Status pulled;
  std::thread waiter([&] {
    std::string bytes;
    int64_t version = 0;
    pulled = primary_.Pull(kLayout, next, absl::Now() + absl::Seconds(60), &bytes, &version, 0);
  });
  // Demoted while the pull waits, or before it waits (a backup makes no
  // version for a caller): the same answer either way.
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(primary_.Demote(kLayout).ok());
  waiter.join();
  EXPECT_EQ(pulled.code(), absl::StatusCode::kUnavailable) << pulled;
  EXPECT_NE(pulled.message().find("demoted"), absl::string_view::npos) << pulled;
}

TEST_F(BackupStoreTest, EachRoleRefusesWhatIsNotItsOwn) {
  Start(AdamConfig(UpdateRule::kSync, 2, 2));
  // A backup takes no pushes and no step decisions: Unavailable, so that
  // the sender looks for the primary and asks again.
  EXPECT_EQ(Push(backup_, 0, 0, RandomVector(&rng_), 1).status().code(),
            absl::StatusCode::kUnavailable);
  StepDecision d;
  d.layout_fingerprint = kLayout;
  d.members = {true, true};
  EXPECT_EQ(backup_.Commit(kLayout, d).code(), absl::StatusCode::kUnavailable);
  // A primary takes no replicated updates and cannot be promoted.
  ASSERT_TRUE(Push(primary_, 0, 0, RandomVector(&rng_), 1).ok());
  ASSERT_TRUE(Push(primary_, 1, 0, RandomVector(&rng_), 1).ok());
  ASSERT_TRUE(Push(primary_, 0, 1, RandomVector(&rng_), 1).ok());
  ASSERT_TRUE(Push(primary_, 1, 1, RandomVector(&rng_), 1).ok());
  ASSERT_EQ(log_.size(), 2u);
  EXPECT_EQ(primary_.ApplyReplicated(kLayout, log_[0]).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(primary_.Promote(kLayout, 1, StepRole::kDecide).code(),
            absl::StatusCode::kFailedPrecondition);
  // A gap: the backup is behind and must be seeded again.
  absl::Status gap = backup_.ApplyReplicated(kLayout, log_[1]);
  EXPECT_EQ(gap.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(gap.message().find("at version 0"), std::string::npos) << gap;
  // Malformed records change nothing.
  AppliedUpdate wrong = log_[0];
  wrong.gradient.pop_back();
  EXPECT_EQ(backup_.ApplyReplicated(kLayout, wrong).code(), absl::StatusCode::kInvalidArgument);
  wrong = log_[0];
  wrong.members.push_back(true);
  EXPECT_EQ(backup_.ApplyReplicated(kLayout, wrong).code(), absl::StatusCode::kInvalidArgument);
  wrong = log_[0];
  wrong.member_request_ids.push_back(9);
  EXPECT_EQ(backup_.ApplyReplicated(kLayout, wrong).code(), absl::StatusCode::kInvalidArgument);
  wrong = log_[0];
  wrong.generation = 4;
  EXPECT_EQ(backup_.ApplyReplicated(kLayout, wrong).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(backup_.ApplyReplicated(kLayout + 1, log_[0]).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backup_.stats().version, 0);
  // In order, and a resent record once more: applied once.
  ASSERT_TRUE(backup_.ApplyReplicated(kLayout, log_[0]).ok());
  ASSERT_TRUE(backup_.ApplyReplicated(kLayout, log_[0]).ok());
  ASSERT_TRUE(backup_.ApplyReplicated(kLayout, log_[1]).ok());
  applied_ = 2;
  ExpectSameState();
  // Promotion never lowers the generation.
  EXPECT_EQ(backup_.Promote(kLayout, -1, StepRole::kDecide).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pscluster
