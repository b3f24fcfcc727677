// Workers join and leave a running job (issue 57): TF_CONFIG lists four
// workers, the chief starts with two (--min_workers=2), the other two start
// a quarter into the run and join, and get SIGTERM at three quarters (a
// scale-down: they leave after their step, telling the chief, and exit 0). Sync and async, each against a fixed run of two
// workers with the same per-worker batch: every chunk is applied once on
// every ps (the ps agree on their applied digests), and the final accuracy
// is the fixed run's within 0.003.
#include <csignal>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>

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
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return std::nullopt;
  if (during) during(**c);
  for (const auto& [task, code] : (*c)->Wait(absl::Minutes(5))) {
    auto it = expected_codes.find(task);
    EXPECT_EQ(code, it == expected_codes.end() ? 0 : it->second)
        << task << " exited " << code << "\n"
        << (*c)->AllLogs();
  }
  Outcome out;
  out.chief = (*c)->Log("chief:0");
  out.ps0 = (*c)->Log("ps:0");
  out.ps1 = (*c)->Log("ps:1");
  std::optional<FinalFigures> f = ParseFinalLine(out.chief);
  EXPECT_TRUE(f.has_value()) << out.chief;
  if (!f) return std::nullopt;
  out.final = *f;
  return out;
}

// Polls `task`'s log until it holds `text`.
bool WaitForLog(const LocalCluster& c, const std::string& task, const std::string& text,
                absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (c.Log(task).find(text) == std::string::npos) {
    if (absl::Now() >= give_up) return false;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return true;
}

class ElasticTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ElasticTest, TwoWorkersJoinAndLeaveAndEveryChunkIsAppliedOnce) {
  const std::string mode = GetParam();
  ClusterOptions fixed = Options(mode, 2);
  PSCLUSTER_SKIP_WITHOUT_MNIST(fixed.data_dir);
  std::optional<Outcome> base = RunCluster(fixed, nullptr, {});
  ASSERT_TRUE(base.has_value());

  ClusterOptions elastic = Options(mode, 4);
  elastic.chief_args.push_back("--min_workers=2");
  elastic.start_later = {"worker:2", "worker:3"};
  std::optional<Outcome> grown = RunCluster(
      elastic,
      [](LocalCluster& c) {
        ASSERT_TRUE(c.WaitForChunks(kChunks / 4, absl::Minutes(2))) << c.AllLogs();
        ASSERT_TRUE(c.StartTask("worker:2").ok());
        ASSERT_TRUE(c.StartTask("worker:3").ok());
        for (const char* w : {"worker 2", "worker 3"}) {
          EXPECT_TRUE(WaitForLog(c, "chief:0", absl::StrCat(w, " joins the run"),
                                 absl::Minutes(1)))
              << c.Log("chief:0");
        }
        ASSERT_TRUE(c.WaitForChunks(kChunks * 3 / 4, absl::Minutes(2))) << c.AllLogs();
        ASSERT_TRUE(c.Signal("worker:2", SIGTERM).ok());
        ASSERT_TRUE(c.Signal("worker:3", SIGTERM).ok());
        for (const char* w : {"worker 2", "worker 3"}) {
          EXPECT_TRUE(WaitForLog(c, "chief:0", absl::StrCat(w, " leaves the run"),
                                 absl::Minutes(1)))
              << c.Log("chief:0");
        }
      },
      {});
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
  std::cout << mode << ": fixed 2 workers " << base->final.test_accuracy << ", 2 -> 4 -> 2 "
            << grown->final.test_accuracy << "\n";
}

INSTANTIATE_TEST_SUITE_P(Modes, ElasticTest, ::testing::Values("sync", "async"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace testing
}  // namespace pscluster
