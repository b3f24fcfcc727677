// Sync training with backup workers over several ps: a gradient is applied
// on every ps or on none, and each chunk of the epoch is applied exactly
// once (issue: with 2 ps, 3 workers and --replicas_to_aggregate=2, a push
// late on one ps but in time on the other was applied there and its chunk
// trained again, so that ps applied that data twice).
#include <optional>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

class BackupWorkersTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

// Two ps and `workers` workers training on MNIST (data_dir empty when it
// is missing).
ClusterOptions OnTwoPs(int workers) {
  ClusterOptions o;
  o.data_dir = TestDataDir();
  o.num_ps = 2;
  o.num_workers = workers;
  return o;
}

TEST_P(BackupWorkersTest, EveryPsAppliesEachChunkOnceAndTheSameGradients) {
  ClusterOptions o = OnTwoPs(3);
  PSCLUSTER_SKIP_WITHOUT_MNIST(o.data_dir);
  o.evaluator = false;
  const auto [straggle_ms, transport] = GetParam();
  // --transport=tcp: gradients streamed during backprop (--push_overlap),
  // the straggler's too.
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync", "--replicas_to_aggregate=2",
                  "--transport=" + transport};
  if (straggle_ms > 0) {
    o.worker_binary = kFaultyWorker;
    o.one_worker_args[2] = {absl::StrCat("--straggle_ms=", straggle_ms)};
  }
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  for (const auto& [task, code] : (*c)->Wait(absl::Minutes(5))) {
    EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << (*c)->AllLogs();
  }
  const std::string chief = (*c)->Log("chief:0");
  // 60000 examples in worker batches of 128 / 3 = 42: 1429 chunks.
  ASSERT_NE(chief.find("1429 of 1429 chunks trained"), std::string::npos) << chief;
  const std::string ps0 = (*c)->Log("ps:0"), ps1 = (*c)->Log("ps:1");
  // Each chunk's gradient applied once on each ps: dropped ones were
  // trained again, and applied there once.
  EXPECT_EQ(ShutdownField(ps0, "applied"), "1429") << ps0;
  EXPECT_EQ(ShutdownField(ps1, "applied"), "1429") << ps1;
  // The same (version, worker) gradients on both, and the same drops.
  EXPECT_NE(ShutdownField(ps0, "applied_digest"), "");
  EXPECT_EQ(ShutdownField(ps0, "applied_digest"), ShutdownField(ps1, "applied_digest"));
  EXPECT_EQ(ShutdownField(ps0, "dropped_stale"), ShutdownField(ps1, "dropped_stale"));
  EXPECT_EQ(ShutdownField(ps0, "version"), ShutdownField(ps1, "version"));
  EXPECT_EQ(ShutdownField(ps1, "torn_steps"), "0");
  for (int w = 0; w < 3; ++w) {
    const std::string log = (*c)->Log(absl::StrCat("worker:", w));
    EXPECT_NE(log.find(" 0 answered differently by the ps"), std::string::npos) << log;
  }
  if (straggle_ms > 0) {
    // The straggler's late gradients were dropped (and their chunks redone).
    EXPECT_NE(ShutdownField(ps0, "dropped_stale"), "0") << ps0;
  }
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<int, std::string>>& info) {
  const int ms = std::get<0>(info.param);
  const std::string& transport = std::get<1>(info.param);
  return absl::StrCat(ms == 0 ? std::string("NoStraggler") : absl::StrCat("Straggler", ms, "ms"),
                      transport == "grpc" ? "" : "OverTcp");
}

INSTANTIATE_TEST_SUITE_P(Straggler, BackupWorkersTest,
                         ::testing::Values(std::make_tuple(0, std::string("grpc")),
                                           std::make_tuple(40, std::string("grpc")),
                                           std::make_tuple(40, std::string("tcp"))),
                         CaseName);

// Priority pulls under lost and duplicated answers (the worker's fault
// injection): a step that started on weights written from an answer then
// thrown away is done again, and each step's gradients are still applied
// exactly once, the same on both ps.
TEST(PriorityPullTest, StepsOnTornWeightsAreDoneAgainAndAppliedOnce) {
  ClusterOptions o = OnTwoPs(2);
  PSCLUSTER_SKIP_WITHOUT_MNIST(o.data_dir);
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync", "--transport=tcp"};
  o.worker_binary = kFaultyWorker;
  o.one_worker_args[0] = {"--lose_reply_every=5", "--duplicate_every=7"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  for (const auto& [task, code] : (*c)->Wait(absl::Minutes(5))) {
    EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << (*c)->AllLogs();
  }
  std::optional<FinalFigures> f = ParseFinalLine((*c)->Log("chief:0"));
  ASSERT_TRUE(f.has_value()) << (*c)->AllLogs();
  EXPECT_EQ(f->steps, 469) << (*c)->Log("chief:0");
  // The same training as cluster_test's sync run: 0.9256 in every run.
  EXPECT_GT(f->test_accuracy, 0.92) << (*c)->Log("chief:0");
  const std::string ps0 = (*c)->Log("ps:0"), ps1 = (*c)->Log("ps:1");
  EXPECT_EQ(ShutdownField(ps0, "applied"), "938") << ps0;
  EXPECT_EQ(ShutdownField(ps1, "applied"), "938") << ps1;
  EXPECT_EQ(ShutdownField(ps0, "applied_digest"), ShutdownField(ps1, "applied_digest"));
  const std::string w0 = (*c)->Log("worker:0");
  EXPECT_NE(w0.find("weights arrive first layers first"), std::string::npos) << w0;
  EXPECT_NE(w0.find("arrived torn; doing it again"), std::string::npos) << w0;
  EXPECT_EQ(w0.find(" 0 resent"), std::string::npos) << w0;
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
