// Prometheus /metrics of every role in a running cluster
// (docs/observability.md): scraped mid-run, each role serves exactly its own
// metrics, and those that count work that happened are not zero: the
// worker's bytes are the serialized messages it really sent and received,
// and it records pull latency and the staleness of its pushes.
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "model/model_spec.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

// The body of a scrape; "" unless the answer was 200 OK.
std::string Body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.0 200 OK", 0) != 0 || at == std::string::npos) return "";
  return response.substr(at + 4);
}

// The value of the sample `name{task="<task>"}` in a scrape; nullopt when
// absent.
std::optional<double> Sample(const std::string& body, const std::string& name,
                             const std::string& task) {
  const std::string key = absl::StrCat(name, "{task=\"", task, "\"} ");
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::StartsWith(line, key)) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(key.size()), &v)) return v;
  }
  return std::nullopt;
}

// The metric families in a scrape, from its "# TYPE name kind" lines.
std::set<std::string> Families(const std::string& body) {
  std::set<std::string> out;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::StartsWith(line, "# TYPE ")) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ');
    if (parts.size() >= 3) out.insert(parts[2]);
  }
  return out;
}

const std::map<std::string, std::set<std::string>> kFamilies = {
    {"ps",
     {"pscluster_push_bytes_total", "pscluster_pull_bytes_total",
      "pscluster_stale_gradients_dropped_total", "pscluster_pushes_rejected_total",
      "pscluster_model_version", "pscluster_push_latency_seconds",
      "pscluster_pull_latency_seconds", "pscluster_gradient_staleness", "pscluster_backups",
      "pscluster_backups_live", "pscluster_replicated_version", "pscluster_replicated_bytes"}},
    {"worker",
     {"pscluster_steps_total", "pscluster_examples_total", "pscluster_push_bytes_total",
      "pscluster_pull_bytes_total", "pscluster_model_version", "pscluster_push_latency_seconds",
      "pscluster_pull_latency_seconds", "pscluster_gradient_staleness"}},
    {"chief",
     {"pscluster_examples_per_second", "pscluster_pending_workers", "pscluster_model_version",
      "pscluster_loss", "pscluster_accuracy", "pscluster_ps_store_info",
      "pscluster_ps_failovers_total", "pscluster_ps_recovery_pause_seconds",
      "pscluster_ps_reseed_bytes_total", "pscluster_ps_moved_back_total"}},
    {"evaluator", {"pscluster_model_version", "pscluster_loss", "pscluster_accuracy"}},
};

// The samples, by role, that must be above zero once work happened.
const std::map<std::string, std::vector<std::string>> kNonZero = {
    {"ps",
     {"pscluster_push_bytes_total", "pscluster_pull_bytes_total", "pscluster_model_version",
      "pscluster_push_latency_seconds_count", "pscluster_pull_latency_seconds_count",
      "pscluster_gradient_staleness_count"}},
    {"worker",
     {"pscluster_steps_total", "pscluster_examples_total", "pscluster_push_bytes_total",
      "pscluster_pull_bytes_total", "pscluster_model_version",
      "pscluster_push_latency_seconds_count", "pscluster_pull_latency_seconds_count",
      "pscluster_gradient_staleness_count"}},
    {"chief",
     {"pscluster_examples_per_second", "pscluster_model_version", "pscluster_loss",
      "pscluster_accuracy", "pscluster_pending_workers"}},
    {"evaluator", {"pscluster_model_version", "pscluster_loss", "pscluster_accuracy"}},
};

std::string Role(const std::string& task) { return task.substr(0, task.find(':')); }

// Every sample of kNonZero is in `body` and above zero.
bool WorkShows(const std::string& task, const std::string& body) {
  for (const std::string& name : kNonZero.at(Role(task))) {
    std::optional<double> v = Sample(body, name, task);
    if (!v.has_value() || !(*v > 0)) return false;
  }
  return true;
}

TEST(ClusterMetricsTest, EveryRoleServesItsOwnMetricsWithTheWorkDone) {
  const std::string data = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(data);
  ClusterOptions o;
  o.data_dir = data;
  o.num_ps = 2;
  o.num_workers = 2;
  o.metrics = true;
  // Workers slowed to ~100 steps/s (the MLP alone runs a 469-step epoch in
  // well under a second): two epochs leave several seconds to scrape
  // mid-run, and the evaluator (every 2 s) time to evaluate. Progress lines
  // as often as the workers report (every second), so the chief's rate has
  // news.
  o.worker_binary = kFaultyWorker;
  o.worker_args = {"--straggle_ms=10"};
  o.chief_args = {"--model=mlp", "--epochs=2", "--log_every_s=1"};
  o.evaluator_args = {"--eval_interval_s=2"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<std::string> tasks = {"chief:0", "ps:0", "ps:1", "worker:0", "worker:1",
                                          "evaluator:0"};

  // Mid-run: some chunks done, then scrape until every role shows its work
  // (the evaluator's first evaluation may take a few seconds more).
  ASSERT_TRUE((*c)->WaitForChunks(50, absl::Minutes(3))) << (*c)->AllLogs();
  std::map<std::string, std::string> scraped;
  const absl::Time give_up = absl::Now() + absl::Minutes(2);
  while (absl::Now() < give_up) {
    bool all = true;
    for (const std::string& t : tasks) {
      if (!scraped[t].empty() && WorkShows(t, scraped[t])) continue;
      const std::string body = Body(ScrapeMetrics((*c)->MetricsPort(t)));
      if (!body.empty()) scraped[t] = body;
      all = all && WorkShows(t, scraped[t]);
    }
    if (all) break;
    absl::SleepFor(absl::Milliseconds(100));
  }

  for (const std::string& t : tasks) {
    const std::string& body = scraped[t];
    ASSERT_FALSE(body.empty()) << t << ": no /metrics\n" << (*c)->AllLogs();
    // Its role's metrics and no other's.
    EXPECT_EQ(Families(body), kFamilies.at(Role(t))) << t << "\n" << body;
    for (const std::string& name : kNonZero.at(Role(t))) {
      std::optional<double> v = Sample(body, name, t);
      ASSERT_TRUE(v.has_value()) << t << ": no " << name << "\n" << body;
      EXPECT_GT(*v, 0) << t << ": " << name << "\n" << body;
    }
  }
  // Every worker's push-pull sent every gradient, as float32, to the ps
  // and brought back every weight (plus the pull at start): the serialized
  // messages are that payload and their few header bytes. A call is
  // counted when it is over; with priority pulls (the tcp data plane's
  // default) the step is counted once the ps answered, its weights maybe
  // still arriving: one call may be in flight.
  absl::StatusOr<ModelSpec> mlp = ModelByName("mlp");
  ASSERT_TRUE(mlp.ok());
  const double payload = static_cast<double>(mlp->num_parameters) * sizeof(float);
  for (const std::string& t : {"worker:0", "worker:1"}) {
    const std::string& body = scraped[t];
    const double steps = *Sample(body, "pscluster_steps_total", t);
    const double calls = *Sample(body, "pscluster_push_latency_seconds_count", t);
    const double sent = *Sample(body, "pscluster_push_bytes_total", t);
    const double received = *Sample(body, "pscluster_pull_bytes_total", t);
    EXPECT_GE(calls, steps - 1) << t << "\n" << body;
    EXPECT_LE(calls, steps) << t << "\n" << body;
    EXPECT_GT(sent, calls * payload) << t << "\n" << body;
    EXPECT_LT(sent, 2 * (calls + 1) * payload) << t << "\n" << body;
    EXPECT_GT(received, (calls + 1) * payload) << t << "\n" << body;
    EXPECT_LT(received, 2 * (calls + 2) * payload) << t << "\n" << body;
    // A pull latency for the pull at start and for every PushPull.
    EXPECT_GE(*Sample(body, "pscluster_pull_latency_seconds_count", t),
              *Sample(body, "pscluster_push_latency_seconds_count", t) + 1)
        << t << "\n" << body;
  }
  // No worker has finished yet when the chief's gauges were read.
  EXPECT_EQ(*Sample(scraped["chief:0"], "pscluster_pending_workers", "chief:0"), 2)
      << scraped["chief:0"];
  // Without --ps_replicas every store has its primary only, and no ps was
  // lost.
  const std::string& chief = scraped["chief:0"];
  for (const std::string ps : {"ps:0", "ps:1"}) {
    EXPECT_NE(chief.find(absl::StrCat("pscluster_ps_store_info{task=\"chief:0\",holder=\"", ps,
                                      "\",role=\"primary\",store=\"", ps, "\"} 1\n")),
              std::string::npos)
        << ps << "\n" << chief;
  }
  EXPECT_EQ(chief.find("\",role=\"backup\","), std::string::npos) << chief;
  for (const char* how : {"promoted", "backup", "checkpoint", "resumed"}) {
    EXPECT_NE(chief.find(absl::StrCat("pscluster_ps_failovers_total{task=\"chief:0\",how=\"", how,
                                      "\"} 0\n")),
              std::string::npos)
        << how << "\n" << chief;
  }

  std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(5));
  for (const auto& [task, code] : codes) EXPECT_EQ(code, 0) << task;
  if (HasFailure()) ADD_FAILURE() << "the tasks' logs:\n" << (*c)->AllLogs();
}

// Async (issue 16): each ps's staleness histogram counts the pushes it
// applied, one per version (nothing dropped), and with 4 workers most of
// them are stale by a few versions.
TEST(ClusterMetricsTest, AsyncPsStalenessHistogramCountsEveryAppliedPush) {
  const std::string data = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(data);
  ClusterOptions o;
  o.data_dir = data;
  o.num_ps = 2;
  o.num_workers = 4;
  o.evaluator = false;
  o.metrics = true;
  o.worker_binary = kFaultyWorker;
  o.worker_args = {"--straggle_ms=10"};  // several seconds to scrape mid-run
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=async"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->WaitForChunks(100, absl::Minutes(3))) << (*c)->AllLogs();
  for (const std::string t : {"ps:0", "ps:1"}) {
    const std::string body = Body(ScrapeMetrics((*c)->MetricsPort(t)));
    ASSERT_FALSE(body.empty()) << t;
    std::optional<double> count = Sample(body, "pscluster_gradient_staleness_count", t);
    std::optional<double> sum = Sample(body, "pscluster_gradient_staleness_sum", t);
    std::optional<double> version = Sample(body, "pscluster_model_version", t);
    std::optional<double> fresh = std::nullopt;
    const std::string zero = absl::StrCat("pscluster_gradient_staleness_bucket{task=\"", t,
                                          "\",le=\"0\"} ");
    for (absl::string_view line : absl::StrSplit(body, '\n')) {
      double v = 0;
      if (absl::StartsWith(line, zero) && absl::SimpleAtod(line.substr(zero.size()), &v)) {
        fresh = v;
      }
    }
    ASSERT_TRUE(count && sum && version && fresh) << t << "\n" << body;
    EXPECT_GE(*count, 100) << t;
    // Each applied push is a version (the gauge lags the count by the
    // pushes applied between the two reads of one scrape at most).
    EXPECT_NEAR(*count, *version, 4) << t << "\n" << body;
    EXPECT_GT(*sum, 0) << t;
    EXPECT_LT(*fresh, *count) << t;
  }
  std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(5));
  for (const auto& [task, code] : codes) EXPECT_EQ(code, 0) << task;
  const std::string chief = (*c)->Log("chief:0");
  for (const char* ps : {"ps:0 version=", "ps:1 version="}) {
    EXPECT_EQ(FindCounter(chief, ps, "applied"), 1875) << chief;  // 60000 / 32 per worker
    EXPECT_EQ(FindCounter(chief, ps, "dropped_stale"), 0) << chief;
  }
  if (HasFailure()) ADD_FAILURE() << "the tasks' logs:\n" << (*c)->AllLogs();
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
