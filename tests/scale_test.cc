// Many workers, sync and async (issue 16): 4 ps x 16 workers on one
// machine train the built-in CNN for one epoch in each mode. In both, every
// chunk's gradient is computed once and applied exactly once on every ps
// (the same set on each, by digest); async loses nothing to staleness (the
// chief's bounded delay makes workers wait instead of dropping their work)
// and ends within 0.005 of the sync run's accuracy.
#include <iostream>
#include <map>
#include <regex>
#include <string>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

constexpr int kPs = 4;
constexpr int kWorkers = 16;
// 60000 examples in worker batches of 128 / 16 = 8.
constexpr long kChunks = 7500;

struct ModeRun {
  double accuracy = -1;
  std::string chief;
  std::string workers;  // every worker's log
};

class ScaleTest : public ::testing::Test {
 protected:
  // One epoch of the CNN in `mode`; checks what both modes share.
  static void TrainOneEpoch(const std::string& mode, ModeRun* out) {
    const std::string data_dir = TestDataDir();
    PSCLUSTER_SKIP_WITHOUT_MNIST(data_dir);
    ClusterOptions o;
    o.data_dir = data_dir;
    o.num_ps = kPs;
    o.num_workers = kWorkers;
    // 21 processes on a 2-core machine, beside other tests: a worker starved
    // of the CPU for 3 s (the default heartbeat timeout) would be declared
    // lost and its late gradient dropped, which is not what this test is
    // about (fault_test covers lost workers).
    o.chief_args = {"--model=cnn", "--epochs=1", "--mode=" + mode, "--heartbeat_timeout_s=30"};
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const auto& [task, code] : (*c)->Wait(absl::Minutes(8))) {
      ASSERT_EQ(code, 0) << mode << ": " << task << " exited " << code << "\n"
                         << (*c)->AllLogs();
    }
    out->chief = (*c)->Log("chief:0");
    for (int w = 0; w < kWorkers; ++w) out->workers += (*c)->Log("worker:" + std::to_string(w));
    std::optional<FinalFigures> f = ParseFinalLine(out->chief);
    ASSERT_TRUE(f.has_value() && f->test_accuracy > 0) << out->chief;
    out->accuracy = f->test_accuracy;
    std::cout << mode << ", " << kPs << " ps x " << kWorkers
              << " workers, cnn, 1 epoch: test_accuracy=" << f->test_accuracy
              << " steps=" << f->steps << "\n";

    const std::string& chief = out->chief;
    const std::regex figures("(ps:\\d) version=.* (staleness_mean=[0-9.]+ staleness_max=\\d+)");
    for (std::sregex_iterator it(chief.begin(), chief.end(), figures), end; it != end; ++it) {
      std::cout << "  " << (*it)[1] << " " << (*it)[2] << "\n";
    }
    ASSERT_NE(chief.find("7500 of 7500 chunks trained"), std::string::npos) << chief;
    EXPECT_EQ(FindCounter(chief, "every worker is done", "handed_out_again"), 0) << chief;
    // Each ps applied one push per chunk, dropped none, and the same ones.
    const std::regex line("ps:(\\d) version=.* pushes applied=(\\d+) dropped_stale=(\\d+) .*"
                          "digest=([0-9a-f]+)");
    std::map<std::string, std::string> digests;
    for (std::sregex_iterator it(chief.begin(), chief.end(), line), end; it != end; ++it) {
      EXPECT_EQ((*it)[2], std::to_string(kChunks)) << mode << " ps:" << (*it)[1];
      EXPECT_EQ((*it)[3], "0") << mode << " ps:" << (*it)[1];
      digests[(*it)[1]] = (*it)[4];
    }
    ASSERT_EQ(digests.size(), static_cast<size_t>(kPs)) << chief;
    for (const auto& [ps, digest] : digests) EXPECT_EQ(digest, digests["0"]) << "ps:" << ps;
    // Every gradient computed was applied: the workers computed one per
    // chunk, no more, and logged how long they waited for the bound.
    const std::regex done("done: (\\d+) steps,.* bound_wait_s=([0-9.]+)");
    long computed = 0;
    int workers = 0;
    const std::string& logs = out->workers;
    for (std::sregex_iterator it(logs.begin(), logs.end(), done), end; it != end; ++it) {
      computed += std::stol((*it)[1]);
      ++workers;
    }
    EXPECT_EQ(workers, kWorkers) << logs;
    EXPECT_EQ(computed, kChunks);
  }
};

TEST_F(ScaleTest, SyncAndAsyncApplyEachChunkOnceOnEveryPsAndAgree) {
  ModeRun sync, async;
  TrainOneEpoch("sync", &sync);
  if (HasFatalFailure() || IsSkipped()) return;
  EXPECT_EQ(FindCounter(sync.chief, "ps:0 version=", "version"), (kChunks + kWorkers - 1) / kWorkers);
  TrainOneEpoch("async", &async);
  if (HasFatalFailure()) return;
  // Async: every push is a version on every ps; staleness is bounded by
  // the chief (max_staleness 8 steps of 16 workers), not by dropping.
  for (int ps = 0; ps < kPs; ++ps) {
    const std::string key = "ps:" + std::to_string(ps) + " version=";
    EXPECT_EQ(FindCounter(async.chief, key, "version"), kChunks) << key;
    std::optional<long> max = FindCounter(async.chief, key, "staleness_max");
    ASSERT_TRUE(max.has_value()) << async.chief;
    EXPECT_LE(*max, 9 * kWorkers + kWorkers) << key;
  }
  // Measured: sync 0.9815, async 0.9829.
  EXPECT_GE(async.accuracy, sync.accuracy - 0.005)
      << "sync " << sync.accuracy << " async " << async.accuracy;
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
