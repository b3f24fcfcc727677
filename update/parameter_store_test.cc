#include "update/parameter_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/model_spec.h"

namespace pscluster {
namespace {

constexpr uint64_t kLayout = 42;

StoreConfig SgdConfig(UpdateRule rule, int workers, int replicas) {
  StoreConfig c;
  c.layout_fingerprint = kLayout;
  c.num_floats = 3;
  c.rule = rule;
  c.num_workers = workers;
  c.replicas_to_aggregate = replicas;
  c.optimizer.name = "sgd";
  c.optimizer.learning_rate = 1.0f;
  return c;
}

std::vector<float> Values(ParameterStore& store, int64_t* version = nullptr) {
  std::string bytes;
  int64_t v = 0;
  absl::Status s = store.Pull(kLayout, 0, absl::Now() + absl::Seconds(1), &bytes, &v);
  EXPECT_TRUE(s.ok()) << s;
  if (version) *version = v;
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

absl::StatusOr<PushResult> PushGrad(ParameterStore& store, int worker, int64_t version,
                                    std::vector<float> g, int examples = 1, uint64_t id = 0,
                                    int64_t generation = 0, int64_t chunk = -1) {
  PushArgs a;
  a.layout_fingerprint = kLayout;
  a.worker = worker;
  a.version = version;
  a.request_id = id;
  a.num_examples = examples;
  a.gradients = g.data();
  a.num_floats = static_cast<int64_t>(g.size());
  a.generation = generation;
  a.chunk = chunk;
  return store.Push(a);
}

class StoreTest : public ::testing::Test {
 protected:
  void InitStore(const StoreConfig& c) {
    bool already = true;
    std::vector<float> init = {1.0f, 2.0f, 3.0f};
    ASSERT_TRUE(store_.Init(c, init.data(), &already).ok());
    EXPECT_FALSE(already);
  }
  // Sync: worker `worker`'s push of 3 ones for `version`, of chunk `chunk`,
  // under a request id of its own.
  void PushChunk(int worker, int64_t version, int64_t chunk) {
    std::vector<float> g = {1, 1, 1};
    PushArgs a;
    a.layout_fingerprint = kLayout;
    a.worker = worker;
    a.version = version;
    a.request_id = static_cast<uint64_t>(version * 2 + worker + 1);
    a.num_examples = 1;
    a.gradients = g.data();
    a.num_floats = 3;
    a.chunk = chunk;
    absl::StatusOr<PushResult> r = store_.Push(a);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  ParameterStore store_;
};

TEST_F(StoreTest, SyncWaitsForAllReplicasThenAppliesWeightedMean) {
  InitStore(SgdConfig(UpdateRule::kSync, 2, 2));
  ASSERT_TRUE(PushGrad(store_, 1, 0, {4, 4, 4}, /*examples=*/3).ok());
  int64_t v = -1;
  EXPECT_EQ(Values(store_, &v), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(v, 0);
  absl::StatusOr<PushResult> r = PushGrad(store_, 0, 0, {0, 8, -4}, /*examples=*/1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->version, 1);
  // mean = (1*g0 + 3*g1) / 4 = {3, 5, 2}; sgd lr 1.
  EXPECT_EQ(Values(store_, &v), (std::vector<float>{-2, -3, 1}));
  EXPECT_EQ(v, 1);
}

// A caller's own buffer (PushArgs::owned) is kept by swapping: the step
// comes out the same as from copied gradients, and the caller gets back
// another buffer, which its next push may fill.
TEST_F(StoreTest, SyncKeepsAnOwnedGradientBySwappingIt) {
  InitStore(SgdConfig(UpdateRule::kSync, 2, 2));
  std::vector<float> mine = {4, 4, 4};
  PushArgs a;
  a.layout_fingerprint = kLayout;
  a.worker = 1;
  a.num_examples = 3;
  a.gradients = mine.data();
  a.num_floats = 3;
  a.owned = &mine;
  ASSERT_TRUE(store_.Push(a).ok());
  EXPECT_NE(mine, (std::vector<float>{4, 4, 4}));  // the store kept the gradient
  mine.assign({9, 9, 9});                          // and its buffer is the caller's again
  ASSERT_TRUE(PushGrad(store_, 0, 0, {0, 8, -4}, /*examples=*/1).ok());
  EXPECT_EQ(Values(store_), (std::vector<float>{-2, -3, 1}));  // as in the test above
  // A dropped push (stale: version 0 again) leaves the buffer alone.
  std::vector<float> late = {7, 7, 7};
  a.gradients = late.data();
  a.owned = &late;
  absl::StatusOr<PushResult> r = store_.Push(a);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->applied);
  EXPECT_EQ(late, (std::vector<float>{7, 7, 7}));
}

TEST_F(StoreTest, MovingStatisticsAreAveragedWithTheirMomentumNotTrained) {
  // Value 1 is a BatchNormalization moving statistic with momentum 0.75:
  // the step's (example-weighted) mean of the pushed values moves it a
  // quarter of the way; values 0 and 2 take the optimizer's (sgd, lr 1).
  StoreConfig c = SgdConfig(UpdateRule::kSync, 2, 2);
  c.moving_statistics = {{1, 1, 0.75f}};
  InitStore(c);
  ASSERT_TRUE(PushGrad(store_, 0, 0, {1, 10, 1}, /*examples=*/1).ok());
  ASSERT_TRUE(PushGrad(store_, 1, 0, {1, 30, 1}, /*examples=*/3).ok());
  // mean pushed statistic (10 + 3 * 30) / 4 = 25; 0.75 * 2 + 0.25 * 25.
  EXPECT_EQ(Values(store_), (std::vector<float>{0, 0.75f * 2 + 0.25f * 25, 2}));
}

TEST_F(StoreTest, AsyncMovesAMovingStatisticOnEveryPush) {
  StoreConfig c = SgdConfig(UpdateRule::kAsync, 2, 1);
  c.optimizer.name = "adam";  // slots for the statistic are never read
  c.optimizer.learning_rate = 0.5f;
  c.moving_statistics = {{0, 2, 0.5f}};
  InitStore(c);
  ASSERT_TRUE(PushGrad(store_, 0, 0, {5, 6, 0}).ok());
  ASSERT_TRUE(PushGrad(store_, 1, 0, {-1, 2, 0}).ok());
  // 1 -> 3 -> 1; 2 -> 4 -> 3; the trainable value 3 sees zero gradients.
  EXPECT_EQ(Values(store_), (std::vector<float>{1, 3, 3}));
}

TEST(StoreConfigTest, RefusesOverlappingOrOutOfRangeMovingStatistics) {
  for (std::vector<MovingStatistic> bad :
       {std::vector<MovingStatistic>{{2, 2, 0.9f}}, {{0, 2, 0.9f}, {1, 1, 0.9f}},
        {{0, 1, 1.5f}}, {{0, 1, std::numeric_limits<float>::quiet_NaN()}}}) {
    ParameterStore store;
    StoreConfig c = SgdConfig(UpdateRule::kSync, 1, 1);
    c.moving_statistics = bad;
    std::vector<float> init = {1, 2, 3};
    bool already = false;
    absl::Status s = store.Init(c, init.data(), &already);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("moving statistic"), std::string::npos) << s;
  }
}

TEST_F(StoreTest, SyncResultDoesNotDependOnArrivalOrder) {
  std::vector<float> a = {0.1f, 0.7f, 1e-3f}, b = {0.3f, -0.2f, 7.0f}, c = {1e4f, 3.3f, 0.01f};
  auto run = [&](std::vector<int> order) {
    ParameterStore store;
    bool already;
    std::vector<float> init = {1, 2, 3};
    EXPECT_TRUE(store.Init(SgdConfig(UpdateRule::kSync, 3, 3), init.data(), &already).ok());
    std::vector<std::vector<float>> g = {a, b, c};
    for (int w : order) EXPECT_TRUE(PushGrad(store, w, 0, g[w], w + 1).ok());
    return Values(store);
  };
  std::vector<float> first = run({0, 1, 2});
  EXPECT_EQ(first, run({2, 0, 1}));
  EXPECT_EQ(first, run({1, 2, 0}));
}

// Which worker computes which chunk is decided at run time, so two runs of
// the same chunk order give a step the same gradients under different
// worker indices. The step's weighted sum must be the same bits either way,
// also when the weights are inexact (64 and 32 examples: 2/3 and 1/3), as
// the last chunk of an epoch of MNIST in chunks of 64 makes them. A fused
// multiply-add in the sum broke this (fma(w1, g1, w0 * g0) rounds once
// where w0 * g0 + w1 * g1 rounds twice), and with it the bits of a sync run.
TEST(StoreSyncSumTest, SameBitsWhicheverWorkerPushedWhichGradient) {
  constexpr int64_t kN = 4096;
  std::vector<float> init(kN), big(kN), small(kN);
  for (int64_t i = 0; i < kN; ++i) {
    init[i] = std::sin(0.37 * i);
    big[i] = std::cos(1.3 * i) * 1e-2f;
    small[i] = std::sin(2.9 * i + 0.5) * 3e-2f;
  }
  auto run = [&](bool swapped) {
    ParameterStore store;
    bool already;
    StoreConfig c = SgdConfig(UpdateRule::kSync, 2, 2);
    c.num_floats = kN;
    EXPECT_TRUE(store.Init(c, init.data(), &already).ok());
    EXPECT_TRUE(PushGrad(store, swapped ? 1 : 0, 0, big, 64).ok());
    EXPECT_TRUE(PushGrad(store, swapped ? 0 : 1, 0, small, 32).ok());
    return Values(store);
  };
  const std::vector<float> one = run(false), other = run(true);
  ASSERT_EQ(one.size(), static_cast<size_t>(kN));
  int64_t differ = 0;
  for (int64_t i = 0; i < kN; ++i) differ += std::memcmp(&one[i], &other[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0) << "of " << kN << " values";
}

// With three members the order of the sum matters ((a + b) + c is not
// (a + c) + b): a step's gradients are summed in the order of their chunks
// (PushArgs::chunk), so the bits do not depend on which worker drew which
// chunk either. Without chunks (-1) the order is the workers'.
TEST(StoreSyncSumTest, ThreeMembersAreSummedInChunkOrder) {
  constexpr int64_t kN = 4096;
  std::vector<float> init(kN);
  std::vector<std::vector<float>> grads(3, std::vector<float>(kN));
  for (int64_t i = 0; i < kN; ++i) {
    init[i] = std::sin(0.37 * i);
    for (int c = 0; c < 3; ++c) grads[c][i] = std::cos((1.3 + c) * i + c) * (c + 1) * 1e-2f;
  }
  const int examples[3] = {64, 64, 32};
  // worker_of[c]: the worker that trained chunk c.
  auto run = [&](std::vector<int> worker_of, bool with_chunks) {
    ParameterStore store;
    bool already;
    StoreConfig c = SgdConfig(UpdateRule::kSync, 3, 3);
    c.num_floats = kN;
    EXPECT_TRUE(store.Init(c, init.data(), &already).ok());
    for (int chunk = 0; chunk < 3; ++chunk) {
      PushArgs a;
      a.layout_fingerprint = kLayout;
      a.worker = worker_of[chunk];
      a.num_examples = examples[chunk];
      a.gradients = grads[chunk].data();
      a.num_floats = kN;
      a.chunk = with_chunks ? 100 + chunk : -1;
      EXPECT_TRUE(store.Push(a).ok());
    }
    return Values(store);
  };
  auto differing = [&](const std::vector<float>& x, const std::vector<float>& y) {
    int64_t n = 0;
    for (int64_t i = 0; i < kN; ++i) n += std::memcmp(&x[i], &y[i], sizeof(float)) != 0;
    return n;
  };
  const std::vector<float> one = run({0, 1, 2}, true), two = run({2, 0, 1}, true),
                           three = run({1, 2, 0}, true);
  EXPECT_EQ(differing(one, two), 0);
  EXPECT_EQ(differing(one, three), 0);
  // What the chunks are for: summed in worker order, the same gradients
  // give other bits.
  const std::vector<float> by_worker = run({0, 1, 2}, false), other = run({2, 0, 1}, false);
  EXPECT_GT(differing(by_worker, other), 0);
}

TEST_F(StoreTest, SyncBackupWorkerGradientIsDroppedAndCounted) {
  InitStore(SgdConfig(UpdateRule::kSync, 3, 2));
  ASSERT_TRUE(PushGrad(store_, 0, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(PushGrad(store_, 2, 0, {1, 1, 1}).ok());
  absl::StatusOr<PushResult> late = PushGrad(store_, 1, 0, {100, 100, 100});
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(late->applied);
  EXPECT_EQ(late->staleness, 1);
  EXPECT_EQ(Values(store_), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(store_.stats().pushes_dropped_stale, 1);
  EXPECT_EQ(store_.stats().steps_applied, 1);
}

TEST_F(StoreTest, FutureVersionWrongSizeAndNonFiniteAreRejectedAndChangeNothing) {
  InitStore(SgdConfig(UpdateRule::kSync, 1, 1));
  absl::StatusOr<PushResult> r = PushGrad(store_, 0, 5, {1, 1, 1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("version 5"), std::string::npos);
  r = PushGrad(store_, 0, 0, {1, 1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = PushGrad(store_, 0, 0, {1, std::nanf(""), 1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = PushGrad(store_, 0, 0, {1, INFINITY, 1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = PushGrad(store_, 7, 0, {1, 1, 1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = PushGrad(store_, 0, 0, {1, 1, 1}, /*examples=*/0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("num_examples must be >= 1"), std::string::npos);
  EXPECT_EQ(Values(store_), (std::vector<float>{1, 2, 3}));
  const StoreStats st = store_.stats();
  EXPECT_EQ(st.pushes_applied + st.pushes_dropped_stale + st.steps_applied, 0);
}

TEST(StoreNonFiniteTest, LongGradientsAreScannedEverywhere) {
  // Long enough for the blocked scan and its tail.
  const int n = 1000;
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    for (int pos : {0, 15, 16, 500, 991, 999}) {
      ParameterStore store;
      StoreConfig c = SgdConfig(UpdateRule::kSync, 1, 1);
      c.num_floats = n;
      std::vector<float> init(n, 1.0f);
      bool already;
      ASSERT_TRUE(store.Init(c, init.data(), &already).ok());
      std::vector<float> g(n, 1e30f);
      g[pos] = -0.0f;
      PushArgs a;
      a.layout_fingerprint = kLayout;
      a.num_examples = 1;
      a.gradients = g.data();
      a.num_floats = n;
      EXPECT_TRUE(store.Push(a).ok()) << "finite values refused, pos " << pos;
      g[pos] = bad;
      a.version = 1;
      absl::StatusOr<PushResult> r = store.Push(a);
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
          << bad << " at " << pos;
    }
  }
}

// A shard large enough for its passes to run on several threads: a bad
// value in any thread's range is found, and sync steps with adam end bit
// for bit where one thread ends them.
TEST(StoreThreadsTest, LargeShardsSplitOverThreadsGiveTheSameBits) {
  const int n = (256 << 10) * 3 + 17;  // three ranges and a tail
  std::vector<std::vector<float>> results;
  for (int threads : {1, 3, 4}) {
    ParameterStore store(threads);
    StoreConfig c = SgdConfig(UpdateRule::kSync, 2, 2);
    c.num_floats = n;
    c.optimizer.name = "adam";
    c.optimizer.learning_rate = 0.01f;
    std::vector<float> init(n);
    for (int i = 0; i < n; ++i) init[i] = std::sin(0.001f * i);
    bool already;
    ASSERT_TRUE(store.Init(c, init.data(), &already).ok());
    for (int pos : {0, n / 3 + 5, n - 1}) {
      std::vector<float> bad(n, 0.5f);
      bad[pos] = std::nanf("");
      PushArgs a;
      a.layout_fingerprint = kLayout;
      a.num_examples = 1;
      a.gradients = bad.data();
      a.num_floats = n;
      EXPECT_EQ(store.Push(a).status().code(), absl::StatusCode::kInvalidArgument)
          << "NaN at " << pos << " with " << threads << " threads";
    }
    for (int64_t step = 0; step < 3; ++step) {
      for (int w = 0; w < 2; ++w) {
        std::vector<float> g(n);
        for (int i = 0; i < n; ++i) g[i] = std::cos(0.01f * i + w + step);
        ASSERT_TRUE(PushGrad(store, w, step, g, 1 + w).ok());
      }
    }
    int64_t version = 0;
    results.push_back(Values(store, &version));
    EXPECT_EQ(version, 3);
    // A pull into a buffer of the right size copies on every thread.
    std::string sized(n * sizeof(float), '\x7f');
    int64_t v = 0;
    ASSERT_TRUE(store.Pull(kLayout, 0, absl::Now() + absl::Seconds(1), &sized, &v).ok());
    EXPECT_EQ(std::memcmp(sized.data(), results.back().data(), sized.size()), 0)
        << threads << " threads";
  }
  for (size_t k = 1; k < results.size(); ++k) {
    EXPECT_EQ(std::memcmp(results[k].data(), results[0].data(), n * sizeof(float)), 0)
        << "threads changed the result";
  }
}

TEST_F(StoreTest, DuplicateRequestIdIsAppliedOnce) {
  InitStore(SgdConfig(UpdateRule::kAsync, 1, 1));
  absl::StatusOr<PushResult> a = PushGrad(store_, 0, 0, {1, 1, 1}, 1, 77);
  absl::StatusOr<PushResult> b = PushGrad(store_, 0, 0, {1, 1, 1}, 1, 77);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->version, b->version);
  EXPECT_EQ(Values(store_), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(store_.stats().pushes_duplicate, 1);
}

TEST_F(StoreTest, AsyncAppliesEveryPushHoweverStale) {
  InitStore(SgdConfig(UpdateRule::kAsync, 2, 1));
  ASSERT_TRUE(PushGrad(store_, 0, 0, {1, 0, 0}).ok());  // staleness 0
  ASSERT_TRUE(PushGrad(store_, 1, 0, {0, 1, 0}).ok());  // staleness 1
  for (int i = 0; i < 40; ++i) {
    absl::StatusOr<PushResult> r = PushGrad(store_, 0, 0, {0, 0, 1});  // 2 .. 41
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->applied);
    EXPECT_EQ(r->staleness, 2 + i);
  }
  EXPECT_EQ(Values(store_), (std::vector<float>{0, 1, 3 - 40}));  // sgd, lr 1, from {1, 2, 3}
  const StoreStats st = store_.stats();
  EXPECT_EQ(st.pushes_dropped_stale, 0);
  EXPECT_EQ(st.pushes_applied, 42);
  EXPECT_EQ(st.version, 42);
  EXPECT_EQ(st.staleness_max, 41);
  EXPECT_EQ(st.staleness_sum, 1 + (2 + 41) * 40 / 2);
}

// Two ps get the same async pushes in opposite orders (so at other
// versions): they apply the same set, and their digests agree; a set that
// differs by one push does not.
TEST(AsyncDigestTest, SamePushesAnyOrderSameDigest) {
  ParameterStore a, b, c;
  for (ParameterStore* s : {&a, &b, &c}) {
    bool already = false;
    std::vector<float> zeros(3, 0.0f);
    ASSERT_TRUE(s->Init(SgdConfig(UpdateRule::kAsync, 3, 1), zeros.data(), &already).ok());
  }
  struct P {
    int worker;
    uint64_t id;
  };
  const std::vector<P> pushes = {{0, 11}, {1, 21}, {2, 31}, {0, 12}, {1, 22}};
  for (const P& p : pushes) ASSERT_TRUE(PushGrad(a, p.worker, 0, {1, 1, 1}, 1, p.id).ok());
  for (auto it = pushes.rbegin(); it != pushes.rend(); ++it) {
    ASSERT_TRUE(PushGrad(b, it->worker, 0, {1, 1, 1}, 1, it->id).ok());
  }
  for (size_t i = 0; i + 1 < pushes.size(); ++i) {
    ASSERT_TRUE(PushGrad(c, pushes[i].worker, 0, {1, 1, 1}, 1, pushes[i].id).ok());
  }
  ASSERT_TRUE(PushGrad(c, 2, 0, {1, 1, 1}, 1, 22).ok());  // worker 2, not 1
  EXPECT_EQ(a.stats().applied_digest, b.stats().applied_digest);
  EXPECT_NE(a.stats().applied_digest, c.stats().applied_digest);
  EXPECT_EQ(a.stats().pushes_applied, 5);
  EXPECT_EQ(c.stats().pushes_applied, 5);
}

// Async: a chunk's gradient already applied here (its worker was lost
// between its pushes to two ps, and the chunk was trained again) is
// answered as applied and not applied twice; the two ps, one of which took
// the first gradient and one the second, agree on their digest (by chunk).
TEST(AsyncChunkTest, AChunkAppliedHereAlreadyIsNotAppliedAgain) {
  ParameterStore torn, other;
  for (ParameterStore* s : {&torn, &other}) {
    bool already = false;
    std::vector<float> zeros(3, 0.0f);
    ASSERT_TRUE(s->Init(SgdConfig(UpdateRule::kAsync, 2, 1), zeros.data(), &already).ok());
  }
  auto push = [](ParameterStore& s, int worker, uint64_t id, int64_t chunk) {
    return PushGrad(s, worker, 0, {1, 1, 1}, 1, id, 0, chunk);
  };
  ASSERT_TRUE(push(torn, 0, 11, 7).ok());  // worker 0's push of chunk 7, then it dies
  absl::StatusOr<PushResult> again = push(torn, 1, 21, 7);  // worker 1 trains chunk 7 again
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->applied);
  EXPECT_EQ(again->version, 1);
  EXPECT_EQ(Values(torn), (std::vector<float>{-1, -1, -1}));  // once: sgd, lr 1
  ASSERT_TRUE(push(other, 1, 21, 7).ok());                    // the ps worker 0 never reached
  EXPECT_EQ(torn.stats().pushes_applied, 1);
  EXPECT_EQ(torn.stats().pushes_duplicate, 1);
  EXPECT_EQ(torn.stats().applied_digest, other.stats().applied_digest);
  ASSERT_TRUE(push(torn, 1, 22, 8).ok());  // another chunk is applied
  EXPECT_EQ(torn.stats().pushes_applied, 2);
  EXPECT_NE(torn.stats().applied_digest, other.stats().applied_digest);
}

ParameterStore::SharedValues Shared(ParameterStore& store, int64_t min_version = 0) {
  ParameterStore::SharedValues out;
  int64_t v = 0;
  absl::Status s = store.PullShared(kLayout, min_version, absl::Now() + absl::Seconds(1), &out, &v);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// PullShared hands out the store's own values. An update made while a
// reader holds them goes to a copy and leaves the reader's values as they
// were; one made when nobody holds them runs in place; the buffer a reader
// let go of is used again rather than a new one.
TEST_F(StoreTest, SharedValuesAreNeverWrittenWhileHeldAndReusedOnceLetGo) {
  InitStore(SgdConfig(UpdateRule::kAsync, 1, 1));
  const float* first;
  {
    ParameterStore::SharedValues held = Shared(store_);
    first = held->data();
    ASSERT_TRUE(PushGrad(store_, 0, 0, {1, 1, 1}).ok());
    EXPECT_EQ(*held, (std::vector<float>{1, 2, 3})) << "written while held";
    ParameterStore::SharedValues now = Shared(store_);
    EXPECT_EQ(*now, (std::vector<float>{0, 1, 2}));
    EXPECT_NE(now->data(), first);
  }
  // Nobody holds the values: the next update runs in place.
  const float* second = Shared(store_)->data();
  ASSERT_TRUE(PushGrad(store_, 0, 1, {1, 1, 1}).ok());
  ParameterStore::SharedValues after = Shared(store_);
  EXPECT_EQ(*after, (std::vector<float>{-1, 0, 1}));
  EXPECT_EQ(after->data(), second) << "copied though nobody held the values";
  // Held again: the update copies into the first buffer, which its reader
  // let go of, not into a new one.
  ASSERT_TRUE(PushGrad(store_, 0, 2, {1, 1, 1}).ok());
  EXPECT_EQ(*after, (std::vector<float>{-1, 0, 1}));
  ParameterStore::SharedValues latest = Shared(store_);
  EXPECT_EQ(*latest, (std::vector<float>{-2, -1, 0}));
  EXPECT_EQ(latest->data(), first);
  // Pull (the copying one) and a snapshot see the same values.
  EXPECT_EQ(Values(store_), *latest);
  StoreState snap;
  ASSERT_TRUE(store_.Snapshot(kLayout, &snap).ok());
  EXPECT_EQ(snap.values, *latest);
}

// A restore while a reader holds the values leaves the reader's alone.
TEST_F(StoreTest, ARestoreDoesNotWriteHeldValues) {
  InitStore(SgdConfig(UpdateRule::kAsync, 1, 1));
  ParameterStore::SharedValues held = Shared(store_);
  StoreState state;
  ASSERT_TRUE(store_.Snapshot(kLayout, &state).ok());
  state.values = {7, 8, 9};
  ASSERT_TRUE(store_.Restore(SgdConfig(UpdateRule::kAsync, 1, 1), state).ok());
  EXPECT_EQ(*held, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(*Shared(store_), (std::vector<float>{7, 8, 9}));
}

// Readers that hold and re-read the values while other threads push: a
// held buffer never changes, and every read matches its version.
TEST(StoreSharedValuesTest, HeldValuesStayPutUnderConcurrentPushes) {
  ParameterStore store;
  StoreConfig c = SgdConfig(UpdateRule::kAsync, 2, 1);
  c.num_floats = 4096;
  c.optimizer.learning_rate = 1.0f / 64;
  bool already = false;
  const std::vector<float> init(c.num_floats, 1.0f);
  ASSERT_TRUE(store.Init(c, init.data(), &already).ok());
  // The pushers go on until the reader is done (at most kMaxPushes each,
  // which keeps every value exact in fp32).
  constexpr int kMaxPushes = 20000;
  std::atomic<bool> reading{true};
  std::atomic<int64_t> pushed{0};
  std::vector<std::thread> pushers;
  for (int w = 0; w < 2; ++w) {
    pushers.emplace_back([&, w] {
      const std::vector<float> g(c.num_floats, 1.0f);
      for (int k = 0; k < kMaxPushes && reading; ++k) {
        PushArgs a;
        a.layout_fingerprint = kLayout;
        a.worker = w;
        a.request_id = static_cast<uint64_t>(k + 1);
        a.num_examples = 1;
        a.gradients = g.data();
        a.num_floats = c.num_floats;
        EXPECT_TRUE(store.Push(a).ok());
        ++pushed;
      }
    });
  }
  std::string failure;
  for (int r = 0; r < 300 && failure.empty(); ++r) {
    ParameterStore::SharedValues v;
    int64_t version = 0;
    ASSERT_TRUE(store.PullShared(kLayout, 0, absl::Now() + absl::Seconds(5), &v, &version).ok());
    // 1 - version / 64 is exact in fp32 for these versions.
    const float expect = 1.0f - static_cast<float>(version) / 64;
    const int64_t until = pushed + 4;  // held while a few pushes are made
    for (int pass = 0; failure.empty() && (pass < 2 || (pushed < until && pass < 1000));
         ++pass) {
      for (float x : *v) {
        if (x != expect) {
          failure = absl::StrCat("version ", version, ": read ", x, ", not ", expect,
                                 " (pass ", pass, ")");
          break;
        }
      }
      std::this_thread::yield();
    }
  }
  reading = false;
  for (std::thread& t : pushers) t.join();
  EXPECT_EQ(failure, "");
  EXPECT_EQ(store.stats().version, pushed.load());
}

TEST_F(StoreTest, PullWaitsForVersion) {
  InitStore(SgdConfig(UpdateRule::kSync, 1, 1));
  std::thread pusher([&] {
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE(PushGrad(store_, 0, 0, {1, 1, 1}).ok());
  });
  std::string bytes;
  int64_t v = 0;
  absl::Status s = store_.Pull(kLayout, 1, absl::Now() + absl::Seconds(30), &bytes, &v);
  pusher.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(v, 1);
  s = store_.Pull(kLayout, 5, absl::Now() + absl::Milliseconds(10), &bytes, &v);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(StoreTest, PullBeforeInitIsUnavailableAndWrongLayoutRefused) {
  std::string bytes;
  int64_t v;
  EXPECT_EQ(store_.Pull(kLayout, 0, absl::Now(), &bytes, &v).code(),
            absl::StatusCode::kUnavailable);
  InitStore(SgdConfig(UpdateRule::kSync, 1, 1));
  EXPECT_EQ(store_.Pull(kLayout + 1, 0, absl::Now(), &bytes, &v).code(),
            absl::StatusCode::kFailedPrecondition);
  bool already = false;
  std::vector<float> init = {9, 9, 9};
  ASSERT_TRUE(store_.Init(SgdConfig(UpdateRule::kSync, 1, 1), init.data(), &already).ok());
  EXPECT_TRUE(already);
  EXPECT_EQ(Values(store_), (std::vector<float>{1, 2, 3}));
  StoreConfig other = SgdConfig(UpdateRule::kSync, 1, 1);
  other.layout_fingerprint = 7;
  EXPECT_EQ(store_.Init(other, init.data(), &already).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(StoreTest, BadReplicasRefused) {
  bool already;
  std::vector<float> init = {1, 2, 3};
  absl::Status s = store_.Init(SgdConfig(UpdateRule::kSync, 2, 3), init.data(), &already);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("got 3"), std::string::npos);
}

// --- Fault tolerance: membership, generations, checkpoints --------------

TEST_F(StoreTest, SyncStepCompletesWhenTheChiefTakesALostWorkerOut) {
  InitStore(SgdConfig(UpdateRule::kSync, 3, 3));
  ASSERT_TRUE(PushGrad(store_, 0, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(PushGrad(store_, 1, 0, {3, 3, 3}).ok());  // worker 1 then dies
  EXPECT_EQ(store_.stats().version, 0);                 // waits for worker 2
  ASSERT_TRUE(store_.SetActiveWorkers(kLayout, {true, false, true}).ok());
  ASSERT_TRUE(PushGrad(store_, 2, 0, {1, 1, 1}).ok());
  int64_t version = 0;
  // Worker 1's half-done gradient was discarded: the mean of 0 and 2 only.
  EXPECT_EQ(Values(store_, &version), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(version, 1);
  // While out, its pushes are dropped; once back, steps wait for it again.
  absl::StatusOr<PushResult> r = PushGrad(store_, 1, 1, {5, 5, 5});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->applied);
  ASSERT_TRUE(store_.SetActiveWorkers(kLayout, {true, true, true}).ok());
  ASSERT_TRUE(PushGrad(store_, 0, 1, {0, 0, 0}).ok());
  ASSERT_TRUE(PushGrad(store_, 2, 1, {0, 0, 0}).ok());
  EXPECT_EQ(store_.stats().version, 1);
  ASSERT_TRUE(PushGrad(store_, 1, 1, {3, 3, 3}).ok());
  EXPECT_EQ(store_.stats().version, 2);
  EXPECT_EQ(store_.SetActiveWorkers(kLayout, {true}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, RemovingTheLastMissingWorkerAppliesThePendingStep) {
  InitStore(SgdConfig(UpdateRule::kSync, 2, 2));
  ASSERT_TRUE(PushGrad(store_, 0, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(store_.SetActiveWorkers(kLayout, {true, false}).ok());
  EXPECT_EQ(Values(store_), (std::vector<float>{0, 1, 2}));
}

TEST_F(StoreTest, RestoreRollsBackValuesSlotsAndVersionAndAbortsOldGenerations) {
  StoreConfig c = SgdConfig(UpdateRule::kSync, 1, 1);
  c.optimizer.name = "adam";
  c.optimizer.learning_rate = 0.1f;
  c.optimizer.beta1 = 0.9f;
  c.optimizer.beta2 = 0.999f;
  c.optimizer.epsilon = 1e-7f;
  InitStore(c);
  ASSERT_TRUE(PushGrad(store_, 0, 0, {1, -1, 2}).ok());
  StoreState snap;
  ASSERT_TRUE(store_.Snapshot(kLayout, &snap).ok());
  EXPECT_EQ(snap.version, 1);
  ASSERT_EQ(snap.optimizer.slots.size(), 2u);
  ASSERT_TRUE(PushGrad(store_, 0, 1, {3, 3, 3}).ok());
  const std::vector<float> after_two = Values(store_);

  // Roll back to the snapshot under a new generation.
  snap.generation = 1;
  ASSERT_TRUE(store_.Restore(c, snap).ok());
  int64_t version = -1;
  EXPECT_EQ(Values(store_, &version), snap.values);
  EXPECT_EQ(version, 1);
  // A gradient of the old generation is refused, not applied.
  absl::StatusOr<PushResult> old = PushGrad(store_, 0, 1, {3, 3, 3});
  EXPECT_EQ(old.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store_.stats().version, 1);
  // The same gradient of the new generation gives the same weights as
  // before the rollback: the optimizer's slots came back too.
  std::vector<float> g = {3, 3, 3};
  PushArgs a;
  a.layout_fingerprint = kLayout;
  a.num_examples = 1;
  a.version = 1;
  a.generation = 1;
  a.gradients = g.data();
  a.num_floats = 3;
  ASSERT_TRUE(store_.Push(a).ok());
  EXPECT_EQ(Values(store_), after_two);
}

// A checkpoint counts done the chunks of the last steps the ps took, which
// their workers may not have reported yet: a snapshot names them, a backup
// fed the primary's updates names the same, a rollback forgets them (the
// restored state may not hold those steps), a continuation keeps them, and
// only the newest RecentChunksKept() are kept.
TEST_F(StoreTest, TheChunksOfTheStepBeingGatheredAreNamedPerWorker) {
  InitStore(SgdConfig(UpdateRule::kSync, 2, 2));
  // Worker 1's push waits in the step being gathered: a restarted chief
  // leaves its chunk to it.
  PushChunk(1, 0, 5);
  StoreState header;
  ASSERT_TRUE(store_.RecentChunksOf(kLayout, &header).ok());
  EXPECT_EQ(header.pending_chunks, (std::vector<int64_t>{-1, 5}));
  EXPECT_TRUE(header.recent_chunks.empty());
  PushChunk(0, 0, 4);
  ASSERT_TRUE(store_.RecentChunksOf(kLayout, &header).ok());
  EXPECT_EQ(header.pending_chunks, (std::vector<int64_t>{-1, -1}));
  EXPECT_EQ(header.recent_chunks, (std::vector<int64_t>{4, 5}));
}

TEST_F(StoreTest, SnapshotsNameTheChunksOfTheLastSyncSteps) {
  const StoreConfig c = SgdConfig(UpdateRule::kSync, 2, 2);
  InitStore(c);
  std::vector<AppliedUpdate> log;
  store_.SetUpdateListener([&log](AppliedUpdate u) { log.push_back(std::move(u)); });
  StoreState seed;
  ASSERT_TRUE(store_.Snapshot(kLayout, &seed).ok());
  EXPECT_TRUE(seed.recent_chunks.empty());
  std::vector<float> g = {1, 1, 1};  // the other stores' pushes below
  PushChunk(0, 0, 1);
  PushChunk(1, 0, 0);
  PushChunk(1, 1, 3);
  PushChunk(0, 1, 2);
  StoreState snap;
  ASSERT_TRUE(store_.Snapshot(kLayout, &snap).ok());
  EXPECT_EQ(snap.version, 2);
  EXPECT_EQ(snap.recent_chunks, (std::vector<int64_t>{1, 0, 2, 3}));
  EXPECT_EQ(snap.recent_chunks_since, 0);
  StoreConfig b = c;
  b.store_role = StoreRole::kBackup;
  ParameterStore backup;
  ASSERT_TRUE(backup.Restore(b, seed).ok());
  for (const AppliedUpdate& u : log) ASSERT_TRUE(backup.ApplyReplicated(kLayout, u).ok());
  StoreState of_backup;
  ASSERT_TRUE(backup.Snapshot(kLayout, &of_backup).ok());
  EXPECT_EQ(of_backup.recent_chunks, snap.recent_chunks);
  EXPECT_EQ(of_backup.recent_chunks_since, 0);

  ParameterStore continued;
  ASSERT_TRUE(continued.Restore(c, snap, RestoreKind::kContinue).ok());
  StoreState of_continued;
  ASSERT_TRUE(continued.Snapshot(kLayout, &of_continued).ok());
  EXPECT_EQ(of_continued.recent_chunks, snap.recent_chunks);
  EXPECT_EQ(of_continued.recent_chunks_since, 0);

  StoreState rollback = snap;
  rollback.generation = 1;
  ASSERT_TRUE(store_.Restore(c, rollback).ok());
  StoreState after;
  ASSERT_TRUE(store_.Snapshot(kLayout, &after).ok());
  EXPECT_TRUE(after.recent_chunks.empty());
  EXPECT_EQ(after.recent_chunks_since, 2);  // the steps from the restored version on

  // Bounded: the oldest go first.
  ASSERT_EQ(ParameterStore::RecentChunksKept(2), 4096u);
  EXPECT_EQ(ParameterStore::RecentChunksKept(1000), 16000u);
  ParameterStore many;
  std::vector<float> init = {0, 0, 0};
  bool already = false;
  ASSERT_TRUE(many.Init(c, init.data(), &already).ok());
  const int64_t steps = 2049;  // 4,098 chunks
  for (int64_t v = 0; v < steps; ++v) {
    for (int w = 0; w < 2; ++w) {
      PushArgs a;
      a.layout_fingerprint = kLayout;
      a.worker = w;
      a.version = v;
      a.num_examples = 1;
      a.gradients = g.data();
      a.num_floats = 3;
      a.chunk = 2 * v + w;
      ASSERT_TRUE(many.Push(a).ok());
    }
  }
  StoreState kept;
  ASSERT_TRUE(many.Snapshot(kLayout, &kept).ok());
  ASSERT_EQ(kept.recent_chunks.size(), 4096u);
  EXPECT_EQ(kept.recent_chunks.front(), 2);
  EXPECT_EQ(kept.recent_chunks.back(), 2 * steps - 1);
  EXPECT_EQ(kept.recent_chunks_since, 1);  // step 0 went whole
  StoreState light;
  ASSERT_TRUE(many.RecentChunksOf(kLayout, &light).ok());
  EXPECT_EQ(light.version, steps);
  EXPECT_EQ(light.recent_chunks, kept.recent_chunks);
  EXPECT_EQ(light.recent_chunks_since, 1);
  EXPECT_TRUE(light.values.empty());

  // Async: each push's chunk, a backup's too.
  ParameterStore async;
  std::vector<AppliedUpdate> async_log;
  async.SetUpdateListener([&](AppliedUpdate u) { async_log.push_back(std::move(u)); });
  ASSERT_TRUE(async.Init(SgdConfig(UpdateRule::kAsync, 2, 1), init.data(), &already).ok());
  for (int64_t chunk : {5, 4, 6}) {
    PushArgs a;
    a.layout_fingerprint = kLayout;
    a.worker = static_cast<int>(chunk % 2);
    a.num_examples = 1;
    a.gradients = g.data();
    a.num_floats = 3;
    a.chunk = chunk;
    ASSERT_TRUE(async.Push(a).ok());
  }
  ASSERT_TRUE(async.RecentChunksOf(kLayout, &light).ok());
  EXPECT_EQ(light.recent_chunks, (std::vector<int64_t>{5, 4, 6}));
  StoreConfig ab = SgdConfig(UpdateRule::kAsync, 2, 1);
  ab.store_role = StoreRole::kBackup;
  ParameterStore async_backup;
  StoreState empty_seed;
  empty_seed.values = init;
  ASSERT_TRUE(async_backup.Restore(ab, empty_seed).ok());
  for (const AppliedUpdate& u : async_log) {
    ASSERT_TRUE(async_backup.ApplyReplicated(kLayout, u).ok());
  }
  StoreState of_async_backup;
  ASSERT_TRUE(async_backup.RecentChunksOf(kLayout, &of_async_backup).ok());
  EXPECT_EQ(of_async_backup.recent_chunks, light.recent_chunks);
}

// since(): every update from it on has its chunks held. Updates go whole
// when more than `keep` chunks are held; a loaded record (another store's)
// goes as one block, since() then jumping to the version it was loaded at.
TEST(RecentChunksTest, SinceMovesByWholeUpdates) {
  RecentChunks r;
  r.Reset(10);
  r.Add({1, 2}, 4);
  r.Add({-1}, 4);  // pushed without a chunk: nothing held, still an update
  r.Add({3, 4}, 4);
  EXPECT_EQ(r.chunks(), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(r.since(), 10);
  r.Add({5}, 4);
  EXPECT_EQ(r.chunks(), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(r.since(), 11);  // update 11 had no chunk: it is whole
  r.Load({7, 8, 9}, 20, 23);
  r.Add({10, 11}, 4);
  EXPECT_EQ(r.chunks(), (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(r.since(), 23);
  // Updates are bounded too, not only chunks.
  for (int i = 0; i < 10; ++i) r.Add({}, 4);
  EXPECT_TRUE(r.chunks().empty());
  EXPECT_EQ(r.since(), 30);
}

TEST_F(StoreTest, RestoreInitialisesAnEmptyStoreAndRefusesAnotherLayout) {
  StoreState snap;
  snap.version = 7;
  snap.generation = 2;
  snap.values = {4, 5, 6};
  const StoreConfig c = SgdConfig(UpdateRule::kAsync, 1, 1);
  ASSERT_TRUE(store_.Restore(c, snap).ok());
  int64_t version = 0;
  EXPECT_EQ(Values(store_, &version), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(version, 7);
  EXPECT_EQ(store_.stats().generation, 2);
  StoreConfig other = c;
  other.layout_fingerprint = kLayout + 1;
  EXPECT_EQ(store_.Restore(other, snap).code(), absl::StatusCode::kFailedPrecondition);
  snap.values = {1, 2};
  EXPECT_EQ(store_.Restore(c, snap).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values(store_), (std::vector<float>{4, 5, 6}));
}

TEST_F(StoreTest, PullOfAnOldGenerationIsAbortedWhenARestoreHappens) {
  InitStore(SgdConfig(UpdateRule::kSync, 1, 1));
  StoreState snap;
  ASSERT_TRUE(store_.Snapshot(kLayout, &snap).ok());
  snap.generation = 1;
  std::thread restorer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(store_.Restore(SgdConfig(UpdateRule::kSync, 1, 1), snap).ok());
  });
  std::string bytes;
  int64_t version = 0;
  absl::Status s = store_.Pull(kLayout, 5, absl::Now() + absl::Seconds(10), &bytes, &version,
                               /*generation=*/0);
  restorer.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
}

TEST_F(StoreTest, SkipPolicySkipsTheWholeSyncStepWithANonFiniteGradient) {
  StoreConfig c = SgdConfig(UpdateRule::kSync, 2, 2);
  c.skip_nonfinite = true;
  InitStore(c);
  ASSERT_TRUE(PushGrad(store_, 0, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(PushGrad(store_, 1, 0, {NAN, 1, 1}).ok());
  int64_t version = 0;
  EXPECT_EQ(Values(store_, &version), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(version, 1);
  EXPECT_EQ(store_.stats().steps_skipped_nonfinite, 1);
  EXPECT_EQ(store_.stats().pushes_applied, 2);
  // The next step applies normally.
  ASSERT_TRUE(PushGrad(store_, 0, 1, {1, 1, 1}).ok());
  ASSERT_TRUE(PushGrad(store_, 1, 1, {1, 1, 1}).ok());
  EXPECT_EQ(Values(store_), (std::vector<float>{0, 1, 2}));
}

TEST_F(StoreTest, SkipPolicyInAsyncSkipsThatPushOnly) {
  StoreConfig c = SgdConfig(UpdateRule::kAsync, 1, 1);
  c.skip_nonfinite = true;
  InitStore(c);
  absl::StatusOr<PushResult> r = PushGrad(store_, 0, 0, {INFINITY, 0, 0});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->applied);
  EXPECT_EQ(Values(store_), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(store_.stats().steps_skipped_nonfinite, 1);
}

TEST_F(StoreTest, ADiscardedNonFiniteGradientDoesNotSkipTheStep) {
  StoreConfig c = SgdConfig(UpdateRule::kSync, 3, 3);
  c.skip_nonfinite = true;
  InitStore(c);
  ASSERT_TRUE(PushGrad(store_, 0, 0, {-INFINITY, 0, 0}).ok());
  ASSERT_TRUE(store_.SetActiveWorkers(kLayout, {false, true, true}).ok());
  ASSERT_TRUE(PushGrad(store_, 1, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(PushGrad(store_, 2, 0, {1, 1, 1}).ok());
  EXPECT_EQ(Values(store_), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(store_.stats().steps_skipped_nonfinite, 0);
}

TEST_F(StoreTest, RefusesValuesThatWouldOverflow) {
  StoreConfig c = SgdConfig(UpdateRule::kSync, 1, 1);
  c.num_workers = 1 << 30;
  c.replicas_to_aggregate = 1;
  bool already = false;
  std::vector<float> init = {1, 2, 3};
  EXPECT_EQ(store_.Init(c, init.data(), &already).code(), absl::StatusCode::kInvalidArgument);
  InitStore(SgdConfig(UpdateRule::kAsync, 1, 1));
  EXPECT_EQ(PushGrad(store_, 0, std::numeric_limits<int64_t>::min(), {1, 1, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  StoreState snap;
  snap.values = {1, 2, 3};
  snap.version = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(store_.Restore(SgdConfig(UpdateRule::kAsync, 1, 1), snap).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values(store_), (std::vector<float>{1, 2, 3}));
}

TEST_F(StoreTest, AWaitingPullOfAStoreShuttingDownIsUnavailableNotCancelled) {
  // A worker must retry a ps that goes away (it may come back, or the chief
  // ends the run), not take it as a request to stop training.
  InitStore(SgdConfig(UpdateRule::kSync, 2, 2));
  std::thread canceller([this] {
    absl::SleepFor(absl::Milliseconds(50));
    store_.Cancel();
  });
  std::string bytes;
  int64_t version = 0;
  absl::Status s = store_.Pull(kLayout, 1, absl::Now() + absl::Seconds(30), &bytes, &version);
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(s.message(), "parameter server is shutting down");
}

// --- Sync with several ps: one store decides, the others follow ---------

class DecideFollowTest : public ::testing::Test {
 protected:
  // Three workers, two replicas per step: one backup worker.
  void Init(int workers = 3, int replicas = 2, bool skip_nonfinite = false) {
    StoreConfig c = SgdConfig(UpdateRule::kSync, workers, replicas);
    c.skip_nonfinite = skip_nonfinite;
    std::vector<float> init = {1.0f, 2.0f, 3.0f};
    bool already = false;
    ASSERT_TRUE(leader_.Init(c, init.data(), &already).ok());
    c.step_role = StepRole::kFollow;
    ASSERT_TRUE(follower_.Init(c, init.data(), &already).ok());
  }
  // The leader's decision with a sequence above `after`.
  StepDecision Decision(int64_t after = 0) {
    StepDecision d;
    EXPECT_TRUE(leader_.NextDecision(after, absl::Now() + absl::Seconds(1), &d));
    return d;
  }
  ParameterStore leader_;
  ParameterStore follower_;
};

TEST_F(DecideFollowTest, FollowerAppliesExactlyTheMembersTheLeaderChose) {
  Init();
  // Worker 1's gradient reaches the follower first and the leader last:
  // each store on its own would have put a different pair in the step.
  ASSERT_TRUE(PushGrad(follower_, 1, 0, {9, 9, 9}).ok());
  ASSERT_TRUE(PushGrad(follower_, 2, 0, {2, 2, 2}).ok());
  ASSERT_TRUE(PushGrad(leader_, 0, 0, {4, 4, 4}).ok());
  ASSERT_TRUE(PushGrad(leader_, 2, 0, {2, 2, 2}).ok());
  EXPECT_EQ(follower_.stats().version, 0) << "a following store closed a step on its own";
  const StepDecision d = Decision();
  EXPECT_EQ(d.version, 0);
  EXPECT_EQ(d.members, (std::vector<bool>{true, false, true}));
  absl::StatusOr<PushResult> late = PushGrad(leader_, 1, 0, {9, 9, 9});
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(late->applied);
  // Worker 0's gradient has not reached the follower yet: it waits.
  ASSERT_TRUE(follower_.Commit(kLayout, d).ok());
  EXPECT_EQ(follower_.stats().version, 0);
  EXPECT_EQ(follower_.StepOutcome(1, 0), std::optional<bool>(false));
  ASSERT_TRUE(PushGrad(follower_, 0, 0, {4, 4, 4}).ok());
  int64_t version = 0;
  // mean of workers 0 and 2 = {3, 3, 3}; sgd lr 1: the same on both.
  EXPECT_EQ(Values(follower_, &version), (std::vector<float>{-2, -1, 0}));
  EXPECT_EQ(version, 1);
  EXPECT_EQ(Values(leader_), (std::vector<float>{-2, -1, 0}));
  for (ParameterStore* s : {&leader_, &follower_}) {
    EXPECT_EQ(s->StepOutcome(0, 0), std::optional<bool>(true));
    EXPECT_EQ(s->StepOutcome(1, 0), std::optional<bool>(false));
    EXPECT_EQ(s->StepOutcome(2, 0), std::optional<bool>(true));
  }
  const StoreStats a = leader_.stats(), b = follower_.stats();
  EXPECT_EQ(a.pushes_applied, 2);
  EXPECT_EQ(b.pushes_applied, 2);
  EXPECT_EQ(a.pushes_dropped_stale, 1);
  EXPECT_EQ(b.pushes_dropped_stale, 1);
  EXPECT_EQ(a.applied_digest, b.applied_digest);
  EXPECT_NE(a.applied_digest, 0u);
  EXPECT_EQ(b.steps_torn, 0);
}

// A following store that holds the step's gradients before the decision
// comes computes the update ahead (optimizer aside): a decision naming
// those members takes it, and the values, the optimizer's state and the
// digest are the leader's bit for bit, for every optimizer and a moving
// statistic; a decision naming others drops it and applies theirs.
TEST(DecideFollowAheadTest, AnUpdateComputedAheadIsTheLeadersBitForBitOrDropped) {
  for (const char* name : {"sgd", "momentum", "adam"}) {
    SCOPED_TRACE(name);
    for (const int replicas : {2, 1}) {
      SCOPED_TRACE(absl::StrCat("replicas_to_aggregate=", replicas));
      StoreConfig c;
      c.layout_fingerprint = kLayout;
      c.num_floats = 6;
      c.rule = UpdateRule::kSync;
      c.num_workers = 2;
      c.replicas_to_aggregate = replicas;
      c.optimizer.name = name;
      c.optimizer.learning_rate = 0.01f;
      c.moving_statistics = {{4, 2, 0.9f}};
      const std::vector<float> init = {0.5f, -0.0f, 0.0f, -1.5f, 2.0f, 3.0f};
      ParameterStore leader, follower;
      bool already = false;
      ASSERT_TRUE(leader.Init(c, init.data(), &already).ok());
      c.step_role = StepRole::kFollow;
      ASSERT_TRUE(follower.Init(c, init.data(), &already).ok());
      int64_t seen = 0;
      for (int64_t step = 0; step < 4; ++step) {
        const std::vector<float> g0 = {0.25f * step, -0.0f, 0.0f, -1.0f, 1.0f, 0.5f};
        const std::vector<float> g1 = {-0.5f, 0.125f, -0.0f, 2.0f, 0.0f, -0.25f};
        // Odd steps with one replica: the follower gets worker 1 first and
        // computes {1} ahead, the leader takes worker 0.
        const bool other = replicas == 1 && step % 2 == 1;
        ASSERT_TRUE(PushGrad(leader, 0, step, g0, 3).ok());
        ASSERT_TRUE(PushGrad(leader, 1, step, g1, 5).ok());
        ASSERT_TRUE(PushGrad(follower, other ? 1 : 0, step, other ? g1 : g0, other ? 5 : 3).ok());
        ASSERT_TRUE(PushGrad(follower, other ? 0 : 1, step, other ? g0 : g1, other ? 3 : 5).ok());
        StepDecision d;
        ASSERT_TRUE(leader.NextDecision(seen, absl::Now() + absl::Seconds(1), &d));
        seen = d.sequence;
        ASSERT_TRUE(follower.Commit(kLayout, d).ok());
        EXPECT_EQ(follower.stats().version, step + 1);
        const std::vector<float> a = Values(leader), b = Values(follower);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << step;
        StoreState sa, sb;
        ASSERT_TRUE(leader.Snapshot(kLayout, &sa).ok());
        ASSERT_TRUE(follower.Snapshot(kLayout, &sb).ok());
        EXPECT_EQ(sa.optimizer.iterations, sb.optimizer.iterations);
        ASSERT_EQ(sa.optimizer.slots.size(), sb.optimizer.slots.size());
        for (size_t k = 0; k < sa.optimizer.slots.size(); ++k) {
          EXPECT_EQ(std::memcmp(sa.optimizer.slots[k].values.data(),
                                sb.optimizer.slots[k].values.data(),
                                sa.optimizer.slots[k].values.size() * sizeof(float)),
                    0)
              << sa.optimizer.slots[k].name << " at step " << step;
        }
        EXPECT_EQ(leader.stats().applied_digest, follower.stats().applied_digest);
      }
      // Taken ahead but where the follower's first gradient was not the
      // leader's choice.
      EXPECT_EQ(follower.stats().steps_ahead, replicas == 2 ? 4 : 2);
      EXPECT_EQ(leader.stats().steps_ahead, 0);
    }
  }
}

TEST_F(DecideFollowTest, AGradientLeftOutArrivingAfterTheDecisionIsDroppedAtOnce) {
  Init();
  ASSERT_TRUE(PushGrad(leader_, 0, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(PushGrad(leader_, 1, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(follower_.Commit(kLayout, Decision()).ok());
  absl::StatusOr<PushResult> r = PushGrad(follower_, 2, 0, {5, 5, 5});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->applied);
  ASSERT_TRUE(PushGrad(follower_, 1, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(PushGrad(follower_, 0, 0, {1, 1, 1}).ok());
  EXPECT_EQ(Values(follower_), Values(leader_));
  EXPECT_EQ(follower_.stats().applied_digest, leader_.stats().applied_digest);
}

TEST_F(DecideFollowTest, AMemberLostBeforeItsGradientArrivedIsLeftOutAndCounted) {
  Init(2, 2);
  ASSERT_TRUE(PushGrad(leader_, 0, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(PushGrad(leader_, 1, 0, {3, 3, 3}).ok());  // worker 1 then dies
  ASSERT_TRUE(PushGrad(follower_, 0, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(follower_.Commit(kLayout, Decision()).ok());
  EXPECT_EQ(follower_.stats().version, 0);  // waits for worker 1
  ASSERT_TRUE(follower_.SetActiveWorkers(kLayout, {true, false}).ok());
  int64_t version = 0;
  EXPECT_EQ(Values(follower_, &version), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(version, 1);
  EXPECT_EQ(follower_.stats().steps_torn, 1);
}

TEST_F(DecideFollowTest, SetWorkersDoesNotDropAFollowersPendingGradient) {
  Init(3, 3);
  // Worker 2 is lost after its push reached both; the leader had already
  // closed the step with it (all three were in).
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(PushGrad(follower_, w, 0, {1, 1, 1}).ok());
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(PushGrad(leader_, w, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(follower_.SetActiveWorkers(kLayout, {true, true, false}).ok());
  ASSERT_TRUE(follower_.Commit(kLayout, Decision()).ok());
  EXPECT_EQ(follower_.stats().pushes_applied, 3);
  EXPECT_EQ(follower_.stats().steps_torn, 0);
  EXPECT_EQ(follower_.stats().applied_digest, leader_.stats().applied_digest);
}

TEST_F(DecideFollowTest, TheLeadersSkipIsFollowed) {
  Init(2, 2, /*skip_nonfinite=*/true);
  // Only the leader's shard of worker 1's gradient holds a NaN.
  ASSERT_TRUE(PushGrad(leader_, 0, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(PushGrad(leader_, 1, 0, {NAN, 1, 1}).ok());
  const StepDecision d = Decision();
  EXPECT_TRUE(d.skip);
  ASSERT_TRUE(PushGrad(follower_, 0, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(PushGrad(follower_, 1, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(follower_.Commit(kLayout, d).ok());
  int64_t version = 0;
  EXPECT_EQ(Values(follower_, &version), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(version, 1);
  EXPECT_EQ(follower_.stats().steps_skipped_nonfinite, 1);
}

TEST_F(DecideFollowTest, CommitChecksItsDecision) {
  Init(2, 2);
  StepDecision d;
  d.layout_fingerprint = kLayout;
  d.members = {true, true};
  d.version = 1;
  EXPECT_EQ(follower_.Commit(kLayout, d).code(), absl::StatusCode::kUnavailable);  // ahead
  d.version = 0;
  d.generation = 3;
  EXPECT_EQ(follower_.Commit(kLayout, d).code(), absl::StatusCode::kAborted);
  d.generation = 0;
  EXPECT_EQ(follower_.Commit(kLayout + 1, d).code(), absl::StatusCode::kFailedPrecondition);
  d.members = {true};
  EXPECT_EQ(follower_.Commit(kLayout, d).code(), absl::StatusCode::kInvalidArgument);
  d.members = {false, false};
  EXPECT_EQ(follower_.Commit(kLayout, d).code(), absl::StatusCode::kInvalidArgument);
  d.members = {true, true};
  EXPECT_EQ(leader_.Commit(kLayout, d).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(follower_.Commit(kLayout, d).ok());
  ASSERT_TRUE(follower_.Commit(kLayout, d).ok());  // resent while waiting
  ASSERT_TRUE(PushGrad(follower_, 0, 0, {1, 1, 1}).ok());
  ASSERT_TRUE(PushGrad(follower_, 1, 0, {1, 1, 1}).ok());
  EXPECT_EQ(follower_.stats().version, 1);
  ASSERT_TRUE(follower_.Commit(kLayout, d).ok());  // resent after it was applied
  EXPECT_EQ(follower_.stats().version, 1);
  EXPECT_EQ(follower_.stats().steps_applied, 1);
}

TEST_F(DecideFollowTest, DecisionsComeInOrderAndCancelEndsTheWait) {
  Init(1, 1);
  for (int v = 0; v < 3; ++v) ASSERT_TRUE(PushGrad(leader_, 0, v, {1, 1, 1}).ok());
  StepDecision d = Decision();
  EXPECT_EQ(d.version, 0);
  d = Decision(d.sequence);
  EXPECT_EQ(d.version, 1);
  d = Decision(d.sequence);
  EXPECT_EQ(d.version, 2);
  std::thread canceller([this] {
    absl::SleepFor(absl::Milliseconds(50));
    leader_.Cancel();
  });
  EXPECT_FALSE(leader_.NextDecision(d.sequence, absl::Now() + absl::Seconds(30), &d));
  canceller.join();
}

TEST_F(DecideFollowTest, ARestoreStartsAfreshButSequencesKeepRising) {
  Init(1, 1);
  ASSERT_TRUE(PushGrad(leader_, 0, 0, {1, 1, 1}).ok());
  const StepDecision first = Decision();
  StoreState snap;
  ASSERT_TRUE(leader_.Snapshot(kLayout, &snap).ok());
  snap.generation = 1;
  ASSERT_TRUE(leader_.Restore(SgdConfig(UpdateRule::kSync, 1, 1), snap).ok());
  StepDecision d;
  EXPECT_FALSE(leader_.NextDecision(first.sequence, absl::Now(), &d));
  ASSERT_TRUE(PushGrad(leader_, 0, 1, {1, 1, 1}, 1, 0, /*generation=*/1).ok());
  d = Decision(first.sequence);
  EXPECT_GT(d.sequence, first.sequence);
  EXPECT_EQ(d.generation, 1);
  EXPECT_EQ(d.version, 1);
}


// Sparse embedding tables (docs/sparse_embeddings.md): two tables beside
// the 3 dense values of SgdConfig. Table 0 is bounded (ids < 100, rows of
// 3), table 1 unbounded (rows of 2); rows are made on first touch from
// InitialRow and updated with the per-row optimizer.
constexpr int kSparseWidth[2] = {3, 2};

StoreConfig SparseConfig(UpdateRule rule, int workers, int replicas,
                         const std::string& row_optimizer = "sgd") {
  StoreConfig c = SgdConfig(rule, workers, replicas);
  for (int t = 0; t < 2; ++t) {
    SparseTableOptions o;
    o.name = t == 0 ? "a/embeddings" : "b/embeddings";
    o.table = t;
    o.width = kSparseWidth[t];
    o.input_dim = t == 0 ? 100 : 0;
    o.seed = 5;
    o.optimizer.name = row_optimizer;
    o.optimizer.learning_rate = 0.5f;
    c.sparse_tables.push_back(o);
  }
  return c;
}

std::vector<float> InitialRowOf(const StoreConfig& c, int table, int64_t id) {
  const SparseTableOptions& o = c.sparse_tables[table];
  std::vector<float> row(o.width);
  InitialRow(o.initializer, o.fan_in, o.fan_out, o.seed, o.table, id, o.width, row.data());
  return row;
}

// Pushes `dense` (3 floats) and `rows` (swapped away by the store).
absl::StatusOr<PushResult> PushRows(ParameterStore& store, int worker, int64_t version,
                                    std::vector<SparseRowsData> rows, int examples = 1,
                                    int64_t chunk = -1, std::vector<float> dense = {1, 1, 1}) {
  PushArgs a;
  a.layout_fingerprint = kLayout;
  a.worker = worker;
  a.version = version;
  a.num_examples = examples;
  a.gradients = dense.data();
  a.num_floats = static_cast<int64_t>(dense.size());
  a.chunk = chunk;
  a.sparse = &rows;
  return store.Push(a);
}

// The rows of `ids` of `table` as PullRows gives them (at version >= min_version).
std::vector<float> PullTable(ParameterStore& store, int table, const std::vector<int64_t>& ids,
                             int64_t min_version = 0) {
  std::vector<SparseRowsData> rows(1);
  rows[0].table = table;
  rows[0].ids = ids;
  int64_t version = -1;
  absl::Status s =
      store.PullRows(kLayout, min_version, absl::Now() + absl::Seconds(5), &rows, &version);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_GE(version, min_version);
  return rows[0].values;
}

int64_t HeldRows(const ParameterStore& store, int table) {
  const StoreStats s = store.stats();
  EXPECT_EQ(s.sparse_tables.size(), 2u);
  return s.sparse_tables.size() == 2 ? s.sparse_tables[table].rows : -1;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class StoreSparseTest : public ::testing::Test {
 protected:
  void InitStore(ParameterStore& store, const StoreConfig& c) {
    bool already = true;
    std::vector<float> init = {1.0f, 2.0f, 3.0f};
    absl::Status s = store.Init(c, init.data(), &already);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_FALSE(already);
  }

  // Random gradient rows of both tables: some of the ids below 12 (table
  // 0) and of 7 large ids (table 1), so that pushes share some.
  std::vector<SparseRowsData> RandomRows() {
    std::vector<SparseRowsData> out;
    std::normal_distribution<float> normal;
    for (int t = 0; t < 2; ++t) {
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < (t == 0 ? 12 : 7); ++i) {
        if (std::bernoulli_distribution(0.4)(rng_)) ids.push_back(t == 0 ? i : (i << 33) + 1);
      }
      std::shuffle(ids.begin(), ids.end(), rng_);
      if (ids.empty()) continue;
      SparseRowsData r;
      r.table = t;
      r.ids = ids;
      for (size_t k = 0; k < ids.size() * kSparseWidth[t]; ++k) r.values.push_back(normal(rng_));
      out.push_back(std::move(r));
    }
    return out;
  }

  std::mt19937 rng_{2026};
};

// Sync: the step's rows are the members' gradient rows summed per id,
// weighted by examples, in worker order (a row a member did not push adds
// nothing), then one sgd update; rows never pushed read as InitialRow and
// are not made.
TEST_F(StoreSparseTest, SyncSumsEachIdsRowsWeightedByExamples) {
  const StoreConfig c = SparseConfig(UpdateRule::kSync, 2, 2);
  ParameterStore store;
  InitStore(store, c);
  // Worker 0 (1 example) and worker 1 (2 examples): id 9 of table 0 and id
  // 3 of table 1 come from both.
  const std::vector<SparseRowsData> pushed[2] = {
      {{0, {5, 9, 2}, {0.3f, -1.7f, 2.2f, 0.9f, -0.1f, 1.3f, -4.0f, 0.6f, 0.7f}},
       {1, {3}, {0.11f, -0.37f}}},
      {{1, {int64_t{1} << 40, 3}, {1.9f, -2.9f, 0.41f, 0.23f}},
       {0, {9, 40}, {-0.77f, 0.35f, 1.05f, 2.5f, -3.5f, 0.125f}}},
  };
  const int examples[2] = {1, 2};
  ASSERT_TRUE(PushRows(store, 0, 0, pushed[0], examples[0]).ok());
  // Nothing applied before the step closes.
  EXPECT_TRUE(SameBits(PullTable(store, 0, {9}), InitialRowOf(c, 0, 9)));
  EXPECT_EQ(HeldRows(store, 0), 0);
  absl::StatusOr<PushResult> r = PushRows(store, 1, 0, pushed[1], examples[1]);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version, 1);

  // The expected rows, with the store's float operations in its order.
  const float total = static_cast<float>(examples[0] + examples[1]);
  std::map<std::pair<int, int64_t>, std::vector<float>> sums;
  for (int w = 0; w < 2; ++w) {
    const float weight = static_cast<float>(examples[w]) / total;
    for (const SparseRowsData& rows : pushed[w]) {
      const int width = kSparseWidth[rows.table];
      for (size_t i = 0; i < rows.ids.size(); ++i) {
        auto [it, added] = sums.try_emplace({rows.table, rows.ids[i]}, width);
        for (int j = 0; j < width; ++j) {
          const float g = rows.values[i * width + j];
          if (added) {
            it->second[j] = weight * g + 0.0f;
          } else {
            it->second[j] += weight * g;
          }
        }
      }
    }
  }
  ASSERT_EQ(sums.size(), 6u);
  for (const auto& [key, sum] : sums) {
    const auto [table, id] = key;
    std::vector<float> expect = InitialRowOf(c, table, id);
    for (size_t j = 0; j < expect.size(); ++j) expect[j] -= 0.5f * sum[j];
    const std::vector<float> got = PullTable(store, table, {id}, 1);
    EXPECT_TRUE(SameBits(got, expect)) << "table " << table << " id " << id << ": "
                                       << ::testing::PrintToString(got) << " vs "
                                       << ::testing::PrintToString(expect);
  }
  // The dense values took the same step (sgd, lr 1, gradients all 1).
  EXPECT_EQ(Values(store), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(HeldRows(store, 0), 4);  // 2, 5, 9, 40
  EXPECT_EQ(HeldRows(store, 1), 2);  // 3, 2^40
  // Rows never pushed read as made, and are not made by the read.
  const std::vector<float> untouched = PullTable(store, 0, {0, 99, 41}, 1);
  std::vector<float> expect;
  for (int64_t id : {0, 99, 41}) {
    const std::vector<float> row = InitialRowOf(c, 0, id);
    expect.insert(expect.end(), row.begin(), row.end());
  }
  EXPECT_TRUE(SameBits(untouched, expect));
  EXPECT_TRUE(SameBits(PullTable(store, 1, {int64_t{1} << 50}, 1),
                       InitialRowOf(c, 1, int64_t{1} << 50)));
  EXPECT_EQ(HeldRows(store, 0), 4);
  EXPECT_EQ(HeldRows(store, 1), 2);
}

// A step's rows are summed in chunk order: the same bits whichever worker
// trained which chunk (three members, so that the order of the sum shows).
TEST_F(StoreSparseTest, SyncRowsAreTheSameBitsWhicheverWorkerPushedWhichChunk) {
  const StoreConfig c = SparseConfig(UpdateRule::kSync, 3, 3);
  std::vector<std::vector<SparseRowsData>> chunk_rows;
  for (int k = 0; k < 3; ++k) chunk_rows.push_back(RandomRows());
  const int chunk_examples[3] = {7, 3, 5};
  const int worker_of_chunk[2][3] = {{0, 1, 2}, {2, 0, 1}};
  std::vector<float> rows[2];
  std::vector<float> dense[2];
  for (int run = 0; run < 2; ++run) {
    ParameterStore store;
    InitStore(store, c);
    for (int k : {2, 0, 1}) {
      ASSERT_TRUE(PushRows(store, worker_of_chunk[run][k], 0, chunk_rows[k], chunk_examples[k],
                           /*chunk=*/100 + k, {0.1f * k, 0.3f, -0.7f})
                      .ok());
    }
    EXPECT_EQ(store.stats().version, 1);
    for (int t = 0; t < 2; ++t) {
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < (t == 0 ? 12 : 7); ++i) ids.push_back(t == 0 ? i : (i << 33) + 1);
      const std::vector<float> got = PullTable(store, t, ids, 1);
      rows[run].insert(rows[run].end(), got.begin(), got.end());
    }
    dense[run] = Values(store);
  }
  EXPECT_TRUE(SameBits(rows[0], rows[1]));
  EXPECT_TRUE(SameBits(dense[0], dense[1]));
}

// Async: each push's rows are applied as they come, unweighted.
TEST_F(StoreSparseTest, AsyncAppliesEachPushsRowsAtArrival) {
  const StoreConfig c = SparseConfig(UpdateRule::kAsync, 2, 1);
  ParameterStore store;
  InitStore(store, c);
  const std::vector<float> g1 = {0.25f, -1.5f, 3.0f}, g0 = {-0.75f, 0.5f, 1.25f};
  absl::StatusOr<PushResult> r = PushRows(store, 1, 0, {{0, {17}, g1}}, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->applied);
  EXPECT_EQ(r->version, 1);
  std::vector<float> expect = InitialRowOf(c, 0, 17);
  for (int j = 0; j < 3; ++j) expect[j] -= 0.5f * g1[j];
  EXPECT_TRUE(SameBits(PullTable(store, 0, {17}, 1), expect));
  // Worker 0's push, one version stale, on top.
  r = PushRows(store, 0, 0, {{0, {17}, g0}, {1, {8}, {1.0f, 2.0f}}}, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version, 2);
  EXPECT_EQ(r->staleness, 1);
  for (int j = 0; j < 3; ++j) expect[j] -= 0.5f * g0[j];
  EXPECT_TRUE(SameBits(PullTable(store, 0, {17}, 2), expect));
  std::vector<float> row8 = InitialRowOf(c, 1, 8);
  row8[0] -= 0.5f * 1.0f;
  row8[1] -= 0.5f * 2.0f;
  EXPECT_TRUE(SameBits(PullTable(store, 1, {8}, 2), row8));
  EXPECT_EQ(HeldRows(store, 0), 1);
  EXPECT_EQ(HeldRows(store, 1), 1);
}

// A push whose rows do not fit the tables is refused whole: nothing of it
// applied, dense values included.
TEST_F(StoreSparseTest, BadSparseRowsAreRefusedAndNothingIsApplied) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> three = {1, 2, 3};
  struct Case {
    const char* what;
    std::vector<SparseRowsData> rows;
    const char* expect;  // in the message
  } cases[] = {
      {"id = input_dim", {{0, {100}, three}}, "100"},
      {"negative id", {{1, {-4}, {1, 2}}}, "-4"},
      {"repeated id", {{0, {3, 4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}}, "twice"},
      {"a table twice", {{0, {1}, three}, {0, {2}, three}}, "twice"},
      {"too few values", {{0, {1, 2}, three}}, "3 values for 2 rows"},
      {"too many values", {{1, {1}, three}}, "3 values for 1 rows"},
      {"unknown table", {{2, {1}, three}}, "sparse table 2 does not exist"},
      {"negative table", {{-1, {1}, three}}, "sparse table -1"},
      {"NaN", {{1, {5}, {0.5f, nan}}}, "NaN"},
      {"Inf", {{0, {5}, {0.5f, std::numeric_limits<float>::infinity(), 1}}}, "NaN or Inf"},
  };
  for (UpdateRule rule : {UpdateRule::kSync, UpdateRule::kAsync}) {
    for (const Case& k : cases) {
      const StoreConfig c = SparseConfig(rule, 1, 1);  // a push would close the step
      ParameterStore store;
      InitStore(store, c);
      // A good table beside the bad one.
      std::vector<SparseRowsData> rows = k.rows;
      if (k.rows[0].table != 1) rows.push_back({1, {7}, {1, 1}});
      absl::StatusOr<PushResult> r = PushRows(store, 0, 0, rows);
      ASSERT_FALSE(r.ok()) << k.what;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << k.what;
      EXPECT_NE(r.status().message().find(k.expect), std::string::npos)
          << k.what << ": " << r.status();
      EXPECT_EQ(store.stats().version, 0) << k.what;
      EXPECT_EQ(Values(store), (std::vector<float>{1, 2, 3})) << k.what;
      EXPECT_EQ(HeldRows(store, 0), 0) << k.what;
      EXPECT_EQ(HeldRows(store, 1), 0) << k.what;
      EXPECT_TRUE(SameBits(PullTable(store, 1, {7}), InitialRowOf(c, 1, 7))) << k.what;
      // The store takes a good push afterwards.
      r = PushRows(store, 0, 0, {{0, {5}, three}});
      ASSERT_TRUE(r.ok()) << k.what << ": " << r.status();
      EXPECT_EQ(r->version, 1) << k.what;
    }
  }
}

// PullRows checks what it is asked for.
TEST_F(StoreSparseTest, PullRowsRefusesAnUnknownTableAndAnIdOutOfRange) {
  const StoreConfig c = SparseConfig(UpdateRule::kSync, 1, 1);
  ParameterStore store;
  InitStore(store, c);
  for (const auto& [table, id] : {std::pair{2, int64_t{0}}, std::pair{0, int64_t{100}},
                                  std::pair{1, int64_t{-1}}}) {
    std::vector<SparseRowsData> rows(1);
    rows[0].table = table;
    rows[0].ids = {id};
    int64_t version = -1;
    absl::Status s = store.PullRows(kLayout, 0, absl::Now() + absl::Seconds(1), &rows, &version);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << table << " " << id << ": " << s;
  }
}

// Sync steps of both workers with random rows (adagrad: rows and slots).
void SyncSteps(ParameterStore& store, int steps, int64_t first_version,
               const std::function<std::vector<SparseRowsData>()>& rows) {
  for (int s = 0; s < steps; ++s) {
    const int64_t v = first_version + s;
    for (int w : {1, 0}) {
      absl::StatusOr<PushResult> r =
          PushRows(store, w, v, rows(), 1 + w + s % 3, -1, {0.01f * s, -0.02f, 0.03f * w});
      ASSERT_TRUE(r.ok()) << r.status();
    }
    ASSERT_EQ(store.stats().version, v + 1);
  }
}

void ExpectSameRows(const ParameterStore& a, const ParameterStore& b) {
  StoreState sa, sb;
  ASSERT_TRUE(a.Snapshot(kLayout, &sa).ok());
  ASSERT_TRUE(b.Snapshot(kLayout, &sb).ok());
  ASSERT_EQ(sa.sparse.size(), 2u);
  ASSERT_EQ(sb.sparse.size(), 2u);
  for (int t = 0; t < 2; ++t) {
    EXPECT_FALSE(sa.sparse[t].ids.empty()) << "table " << t;
    EXPECT_EQ(sa.sparse[t].ids, sb.sparse[t].ids) << "table " << t;
    EXPECT_TRUE(SameBits(sa.sparse[t].rows, sb.sparse[t].rows)) << "table " << t;
    EXPECT_EQ(sa.sparse[t].last_update, sb.sparse[t].last_update) << "table " << t;
  }
  EXPECT_TRUE(SameBits(sa.values, sb.values));
  EXPECT_EQ(sa.version, sb.version);
}

// A store restored from a snapshot reads the same rows, holds as many, and
// keeps the rows' optimizer slots: a further step gives the same bits.
TEST_F(StoreSparseTest, SnapshotAndRestoreKeepTheRows) {
  const StoreConfig c = SparseConfig(UpdateRule::kSync, 2, 2, "adagrad");
  ParameterStore store;
  InitStore(store, c);
  SyncSteps(store, 4, 0, [this] { return RandomRows(); });
  StoreState snap;
  ASSERT_TRUE(store.Snapshot(kLayout, &snap).ok());
  ASSERT_EQ(snap.sparse.size(), 2u);
  ParameterStore restored;
  absl::Status s = restored.Restore(c, snap);
  ASSERT_TRUE(s.ok()) << s;

  std::vector<int64_t> ids[2];
  for (int64_t i = 0; i < 14; ++i) ids[0].push_back(i);  // 12 and 13 never pushed
  for (int64_t i = 0; i < 8; ++i) ids[1].push_back((i << 33) + 1);
  auto same_reads = [&] {
    for (int t = 0; t < 2; ++t) {
      EXPECT_TRUE(SameBits(PullTable(store, t, ids[t]), PullTable(restored, t, ids[t])))
          << "table " << t;
      EXPECT_EQ(HeldRows(store, t), HeldRows(restored, t)) << "table " << t;
      EXPECT_GT(HeldRows(store, t), 0) << "table " << t;
    }
  };
  same_reads();
  ExpectSameRows(store, restored);
  EXPECT_EQ(restored.stats().version, 4);

  // One more step, the same on both.
  const std::vector<SparseRowsData> next[2] = {RandomRows(), RandomRows()};
  for (ParameterStore* p : {&store, &restored}) {
    for (int w : {0, 1}) ASSERT_TRUE(PushRows(*p, w, 4, next[w], 2 + w).ok());
  }
  same_reads();
  ExpectSameRows(store, restored);
}

// A backup seeded from its primary that applies every update the primary
// reported holds the primary's rows, slots and last updates bit for bit.
class SparseBackupTest : public StoreSparseTest {
 protected:
  void Start(const StoreConfig& c) {
    InitStore(primary_, c);
    primary_.SetUpdateListener([this](AppliedUpdate u) { log_.push_back(std::move(u)); });
    StoreState seed;
    ASSERT_TRUE(primary_.Snapshot(kLayout, &seed).ok());
    StoreConfig b = c;
    b.store_role = StoreRole::kBackup;
    absl::Status s = backup_.Restore(b, seed);
    ASSERT_TRUE(s.ok()) << s;
  }
  void Replicate() {
    for (; applied_ < log_.size(); ++applied_) {
      absl::Status s = backup_.ApplyReplicated(kLayout, log_[applied_]);
      ASSERT_TRUE(s.ok()) << "record " << applied_ << ": " << s;
    }
  }
  int RecordsWithRows() const {
    int n = 0;
    for (const AppliedUpdate& u : log_) n += u.sparse.empty() ? 0 : 1;
    return n;
  }

  ParameterStore primary_, backup_;
  std::vector<AppliedUpdate> log_;
  size_t applied_ = 0;
};

TEST_F(SparseBackupTest, ABackupHoldsThePrimarysRowsAfterSyncSteps) {
  Start(SparseConfig(UpdateRule::kSync, 2, 2, "adagrad"));
  SyncSteps(primary_, 3, 0, [this] { return RandomRows(); });
  Replicate();
  ExpectSameRows(primary_, backup_);
  SyncSteps(primary_, 4, 3, [this] { return RandomRows(); });
  Replicate();
  EXPECT_EQ(log_.size(), 7u);
  EXPECT_EQ(RecordsWithRows(), 7);
  ExpectSameRows(primary_, backup_);
  EXPECT_EQ(backup_.stats().version, 7);
}

TEST_F(SparseBackupTest, ABackupHoldsThePrimarysRowsAfterAsyncPushes) {
  Start(SparseConfig(UpdateRule::kAsync, 2, 1, "adagrad"));
  for (int p = 0; p < 8; ++p) {
    const int64_t version = std::max(0, p - 1 - p % 2);  // some stale
    absl::StatusOr<PushResult> r = PushRows(primary_, p % 2, version, RandomRows(), 1 + p);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->applied);
    if (p == 3) {
      Replicate();
      ExpectSameRows(primary_, backup_);
    }
  }
  Replicate();
  EXPECT_EQ(log_.size(), 8u);
  EXPECT_GE(RecordsWithRows(), 7);
  ExpectSameRows(primary_, backup_);
  EXPECT_EQ(backup_.stats().version, 8);
}

}  // namespace
}  // namespace pscluster

namespace pscluster {
namespace {

// A step's sum is made once for the same members (a clipped step reads it
// for its norms and its update) and made again once a gradient is taken
// or dropped.
TEST(PendingStepTest, TheSumIsKeptForTheSameMembersUntilTheGradientsChange) {
  PendingStep pending;
  pending.Reset(2, 2);
  std::vector<float> g0 = {1, 2}, g1 = {3, 4}, g1b = {5, 6};
  auto take = [&pending](int w, std::vector<float>& g) {
    PushArgs a;
    a.worker = w;
    a.num_examples = 1;
    a.gradients = g.data();
    a.num_floats = 2;
    pending.Take(a, true);
  };
  take(0, g0);
  take(1, g1);
  const std::vector<bool> both = {true, true};
  const float* sum = pending.Gradient(both, 1);
  EXPECT_EQ(std::vector<float>(sum, sum + 2), (std::vector<float>{2, 3}));
  EXPECT_EQ(pending.Gradient(both, 1), sum);
  const float* alone = pending.Gradient({true, false}, 1);
  EXPECT_EQ(std::vector<float>(alone, alone + 2), g0);
  pending.Drop(1);
  take(1, g1b);
  sum = pending.Gradient(both, 1);
  EXPECT_EQ(std::vector<float>(sum, sum + 2), (std::vector<float>{3, 4}));
}

}  // namespace
}  // namespace pscluster
