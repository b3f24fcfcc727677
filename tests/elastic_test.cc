// Workers join and leave a running job (issue 57): TF_CONFIG lists four
// workers, the chief starts with two (--min_workers=2), the other two start
// a quarter into the run and join, and leave at three quarters: by SIGTERM
// (a scale-down: they leave after their step, telling the chief, and exit
// 0) or by SIGKILL (a crash: found lost; the chunks whose gradients every
// ps took count as done, and a ps that took one already does not apply it
// again). Sync and async, each against a fixed run of two workers with the
// same per-worker batch: every chunk is applied once on every ps (the ps
// agree on their applied digests), and the final accuracy is the fixed
// run's within 0.003.
#include <csignal>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

// 4 epochs of 60,000 MNIST examples in per-worker batches of 32: 7500
// chunks (about 8 s here; one epoch is over before two workers have
// started).
constexpr int kChunks = 7500;

ClusterOptions Options(const std::string& mode, int workers) {
  ClusterOptions o;
  o.data_dir = TestDataDir();
  o.num_ps = 2;
  o.num_workers = workers;
  // A per-worker batch of 32 whatever the count: --batch_size is the
  // global batch of every listed worker.
  o.chief_args = {"--model=mlp", "--epochs=4", "--mode=" + mode,
                  absl::StrCat("--batch_size=", 32 * workers), "--log_every_s=0.2"};
  if (mode == "async") {
    // Each update at the same learning rate in both runs: by default async
    // scales it for the workers listed (4 against 2), and its decay counts
    // that many updates per step; here the decay halves the rate every
    // 2,000 updates in both. (Sync's defaults already match: each step at
    // the same rate, the per-worker batch the same.)
    o.chief_args.push_back("--async_lr_scaling=none");
    o.chief_args.push_back(absl::StrCat("--lr_decay_steps=", 2000 / workers));
  }
  return o;
}

struct Outcome {
  FinalFigures final;
  std::string ps0, ps1, chief;
};

// Runs `o` to its end; `during` (may be empty) runs while it trains.
std::optional<Outcome> RunCluster(const ClusterOptions& o,
                           const std::function<void(LocalCluster&)>& during,
                           const std::map<std::string, int>& expected_codes) {
  std::unique_ptr<LocalCluster> c = RunToEnd(o, during, expected_codes);
  if (c == nullptr) return std::nullopt;
  Outcome out;
  out.chief = c->Log("chief:0");
  out.ps0 = c->Log("ps:0");
  out.ps1 = c->Log("ps:1");
  std::optional<FinalFigures> f = ParseFinalLine(out.chief);
  EXPECT_TRUE(f.has_value()) << out.chief;
  if (!f) return std::nullopt;
  out.final = *f;
  return out;
}

// (mode, how the two leave: "sigterm" or "sigkill").
class ElasticTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(ElasticTest, TwoWorkersJoinAndLeaveAndEveryChunkIsAppliedOnce) {
  const std::string mode = std::get<0>(GetParam()), leave = std::get<1>(GetParam());
  ClusterOptions fixed = Options(mode, 2);
  PSCLUSTER_SKIP_WITHOUT_MNIST(fixed.data_dir);
  std::optional<Outcome> base = RunCluster(fixed, nullptr, {});
  ASSERT_TRUE(base.has_value());

  ClusterOptions elastic = Options(mode, 4);
  elastic.chief_args.push_back("--min_workers=2");
  elastic.start_later = {"worker:2", "worker:3"};
  std::optional<Outcome> grown = RunCluster(
      elastic,
      [&leave](LocalCluster& c) {
        ASSERT_TRUE(c.WaitForChunks(kChunks / 4, absl::Minutes(2))) << c.AllLogs();
        ASSERT_TRUE(c.StartTask("worker:2").ok());
        ASSERT_TRUE(c.StartTask("worker:3").ok());
        for (const char* w : {"worker 2", "worker 3"}) {
          EXPECT_TRUE(c.WaitForLog("chief:0", absl::StrCat(w, " joins the run"), absl::Minutes(1)))
              << c.Log("chief:0");
        }
        ASSERT_TRUE(c.WaitForChunks(kChunks * 3 / 4, absl::Minutes(2))) << c.AllLogs();
        for (const char* w : {"worker:2", "worker:3"}) {
          ASSERT_TRUE((leave == "sigkill" ? c.Kill(w) : c.Signal(w, SIGTERM)).ok());
        }
        for (const char* w : {"worker 2", "worker 3"}) {
          EXPECT_TRUE(c.WaitForLog(
              "chief:0", absl::StrCat(w, leave == "sigkill" ? " lost" : " leaves the run"),
              absl::Minutes(1)))
              << c.Log("chief:0");
        }
      },
      leave == "sigkill" ? std::map<std::string, int>{{"worker:2", 137}, {"worker:3", 137}}
                         : std::map<std::string, int>{});
  ASSERT_TRUE(grown.has_value());
  EXPECT_NE(grown->chief.find("starting with 2 of 4 workers (--min_workers=2)"),
            std::string::npos)
      << grown->chief;
  EXPECT_NE(grown->chief.find(absl::StrCat(kChunks, " of ", kChunks, " chunks trained")),
            std::string::npos)
      << grown->chief;
  // Every chunk applied once on each ps, the same gradients on both.
  for (const std::string* ps : {&grown->ps0, &grown->ps1}) {
    EXPECT_EQ(ShutdownField(*ps, "applied"), absl::StrCat(kChunks)) << *ps;
  }
  EXPECT_NE(ShutdownField(grown->ps0, "applied_digest"), "");
  EXPECT_EQ(ShutdownField(grown->ps0, "applied_digest"),
            ShutdownField(grown->ps1, "applied_digest"));
  EXPECT_NEAR(grown->final.test_accuracy, base->final.test_accuracy, 0.003)
      << "elastic " << grown->final.test_accuracy << ", fixed " << base->final.test_accuracy;
  std::cout << mode << ", " << leave << ": fixed 2 workers " << base->final.test_accuracy
            << ", 2 -> 4 -> 2 " << grown->final.test_accuracy << "\n";
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ElasticTest,
    ::testing::Combine(::testing::Values("sync", "async"), ::testing::Values("sigterm", "sigkill")),
    [](const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& i) {
      return std::get<0>(i.param) + "_" + std::get<1>(i.param);
    });

}  // namespace
}  // namespace testing
}  // namespace pscluster
