#include "common/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A plain HTTP/1.0 GET of http://127.0.0.1:<port><path>; returns the whole
// response (status line, headers, body), or "" if the connection fails.
std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  const std::string request = "GET " + path +
                              " HTTP/1.0\r\nHost: 127.0.0.1\r\n"
                              "Connection: close\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return "";
  }
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, n);
  ::close(fd);
  return response;
}

std::string Body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

TEST(Metrics, ServesTheStandardMetricsOverHttp) {
  auto metrics = Metrics::Start("127.0.0.1:0", "worker:1", MetricsRole::kWorker);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  Metrics& m = **metrics;
  ASSERT_GT(m.port(), 0);

  m.steps().Increment(3);
  m.examples().Increment(384);
  m.push_bytes().Increment(1 << 20);
  m.pull_bytes().Increment(2048);
  m.model_version().Set(17);
  m.push_latency_seconds().Observe(0.003);
  m.pull_latency_seconds().Observe(0.5);
  m.pull_latency_seconds().Observe(20);  // above every bucket
  m.gradient_staleness().Observe(2);

  const std::string response = HttpGet(m.port(), "/metrics");
  ASSERT_THAT(response, HasSubstr("200 OK"));
  const std::string body = Body(response);
  const std::vector<std::string> expected = {
      "# TYPE pscluster_steps_total counter",
      "pscluster_steps_total{task=\"worker:1\"} 3\n",
      "pscluster_examples_total{task=\"worker:1\"} 384\n",
      "pscluster_push_bytes_total{task=\"worker:1\"} 1048576\n",
      "pscluster_pull_bytes_total{task=\"worker:1\"} 2048\n",
      "# TYPE pscluster_model_version gauge",
      "pscluster_model_version{task=\"worker:1\"} 17\n",
      "# TYPE pscluster_push_latency_seconds histogram",
      "pscluster_push_latency_seconds_count{task=\"worker:1\"} 1\n",
      "pscluster_push_latency_seconds_bucket{task=\"worker:1\",le=\"0.0025\"} "
      "0\n",
      "pscluster_push_latency_seconds_bucket{task=\"worker:1\",le=\"0.005\"} "
      "1\n",
      "pscluster_pull_latency_seconds_count{task=\"worker:1\"} 2\n",
      "pscluster_pull_latency_seconds_sum{task=\"worker:1\"} 20.5\n",
      "pscluster_pull_latency_seconds_bucket{task=\"worker:1\",le=\"10\"} 1\n",
      "pscluster_pull_latency_seconds_bucket{task=\"worker:1\",le=\"+Inf\"} "
      "2\n",
      "pscluster_gradient_staleness_bucket{task=\"worker:1\",le=\"1\"} 0\n",
      "pscluster_gradient_staleness_bucket{task=\"worker:1\",le=\"2\"} 1\n",
  };
  for (const std::string& line : expected) {
    EXPECT_THAT(body, HasSubstr(line)) << body;
  }
  // The HTTP body is Serialize()'s text.
  EXPECT_THAT(body, HasSubstr(m.Serialize()));

  // Only /metrics is served.
  EXPECT_THAT(HttpGet(m.port(), "/other"),
              Not(HasSubstr("pscluster_steps_total")));
}

// The metric families in `text`, from its "# TYPE name kind" lines.
std::set<std::string> Families(const std::string& text) {
  std::set<std::string> out;
  size_t at = 0;
  while ((at = text.find("# TYPE ", at)) != std::string::npos) {
    at += 7;
    out.insert(text.substr(at, text.find(' ', at) - at));
  }
  return out;
}

TEST(Metrics, EachRoleServesOnlyTheMetricsItUpdates) {
  const std::map<MetricsRole, std::set<std::string>> expected = {
      {MetricsRole::kPs,
       {"pscluster_push_bytes_total", "pscluster_pull_bytes_total",
        "pscluster_stale_gradients_dropped_total", "pscluster_pushes_rejected_total",
        "pscluster_model_version", "pscluster_push_latency_seconds",
        "pscluster_pull_latency_seconds", "pscluster_gradient_staleness"}},
      {MetricsRole::kWorker,
       {"pscluster_steps_total", "pscluster_examples_total", "pscluster_push_bytes_total",
        "pscluster_pull_bytes_total", "pscluster_model_version",
        "pscluster_push_latency_seconds", "pscluster_pull_latency_seconds",
        "pscluster_gradient_staleness"}},
      {MetricsRole::kChief,
       {"pscluster_examples_per_second", "pscluster_pending_workers", "pscluster_model_version",
        "pscluster_loss", "pscluster_accuracy"}},
      {MetricsRole::kEvaluator,
       {"pscluster_model_version", "pscluster_loss", "pscluster_accuracy"}},
  };
  for (const auto& [role, families] : expected) {
    auto metrics = Metrics::Start("", "task:0", role);
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    Metrics& m = **metrics;
    EXPECT_EQ(Families(m.Serialize()), families) << m.Serialize();
    // Every help text is the role's own, never empty.
    for (const std::string& f : families) {
      EXPECT_THAT(m.Serialize(), Not(HasSubstr("# HELP " + f + " \n"))) << f;
    }
    // Another role's metric counts, but is not served.
    m.steps().Increment();
    m.pending_workers().Set(3);
    m.stale_gradients_dropped().Increment();
    EXPECT_EQ(Families(m.Serialize()), families) << m.Serialize();
  }
}

TEST(Metrics, WithoutAnAddressNothingIsServedButMetricsWork) {
  auto metrics = Metrics::Start("", "chief:0", MetricsRole::kChief);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ((*metrics)->port(), 0);
  (*metrics)->pending_workers().Set(5);
  EXPECT_THAT((*metrics)->Serialize(),
              HasSubstr("pscluster_pending_workers{task=\"chief:0\"} 5\n"));
}

TEST(Metrics, ExtraMetricsAreCachedByNameAndChecked) {
  auto metrics = Metrics::Start("", "evaluator:0", MetricsRole::kEvaluator);
  ASSERT_TRUE(metrics.ok());
  Metrics& m = **metrics;
  auto c1 = m.AddCounter("pscluster_evals_total", "Evaluations run.");
  auto c2 = m.AddCounter("pscluster_evals_total", "Other help.");
  ASSERT_TRUE(c1.ok() && c2.ok()) << c1.status() << c2.status();
  EXPECT_EQ(*c1, *c2);
  (*c1)->Increment(4);
  auto g = m.AddGauge("pscluster_eval_accuracy", "Eval accuracy.");
  ASSERT_TRUE(g.ok());
  (*g)->Set(0.5);
  auto h = m.AddHistogram("pscluster_eval_seconds", "Eval time.", {0.1, 1, 10});
  ASSERT_TRUE(h.ok());
  (*h)->Observe(0.2);
  // The role's standard metrics are reachable by name as well.
  auto loss = m.AddGauge("pscluster_loss", "x");
  ASSERT_TRUE(loss.ok());
  EXPECT_EQ(*loss, &m.loss());

  const std::string text = m.Serialize();
  EXPECT_THAT(text, HasSubstr("# HELP pscluster_evals_total Evaluations run."));
  EXPECT_THAT(text,
              HasSubstr("pscluster_evals_total{task=\"evaluator:0\"} 4\n"));
  EXPECT_THAT(text,
              HasSubstr("pscluster_eval_accuracy{task=\"evaluator:0\"} 0.5\n"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "pscluster_eval_seconds_bucket{task=\"evaluator:0\",le=\"1\"} 1\n"));

  auto bad_name = m.AddCounter("1bad-name", "x");
  EXPECT_EQ(bad_name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_name.status().message()),
              HasSubstr("'1bad-name'"));
  auto other_kind = m.AddGauge("pscluster_evals_total", "x");
  EXPECT_EQ(other_kind.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(other_kind.status().message()),
              HasSubstr("pscluster_evals_total"));
  auto unsorted = m.AddHistogram("pscluster_h", "x", {1, 0.5});
  EXPECT_EQ(unsorted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unsorted.status().message()),
              HasSubstr("bucket bound 1"));
}

TEST(Metrics, ExtraMetricsTakeFurtherLabels) {
  auto metrics = Metrics::Start("", "chief:0", MetricsRole::kChief);
  ASSERT_TRUE(metrics.ok());
  Metrics& m = **metrics;
  auto a = m.AddCounter("pscluster_things_total", "Things.", {{"how", "a"}});
  auto b = m.AddCounter("pscluster_things_total", "Things.", {{"how", "b"}});
  auto a_again = m.AddCounter("pscluster_things_total", "Things.", {{"how", "a"}});
  ASSERT_TRUE(a.ok() && b.ok() && a_again.ok()) << a.status() << b.status();
  EXPECT_NE(*a, *b);
  EXPECT_EQ(*a, *a_again);
  (*b)->Increment(2);
  auto g = m.AddGauge("pscluster_where", "Where.", {{"ps", "ps:1"}, {"role", "backup"}});
  ASSERT_TRUE(g.ok()) << g.status();
  (*g)->Set(1);
  auto h = m.AddHistogram("pscluster_pause_seconds", "Pauses.", {1, 10}, {{"how", "a"}});
  ASSERT_TRUE(h.ok()) << h.status();
  (*h)->Observe(2);
  const std::string text = m.Serialize();
  EXPECT_THAT(text, HasSubstr("pscluster_things_total{task=\"chief:0\",how=\"a\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("pscluster_things_total{task=\"chief:0\",how=\"b\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("pscluster_where{task=\"chief:0\",ps=\"ps:1\",role=\"backup\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pscluster_pause_seconds_bucket{task=\"chief:0\",how=\"a\","
                              "le=\"10\"} 1\n"));

  // The task label is every series' own; a label name must be valid.
  for (const prometheus::Labels& bad :
       std::vector<prometheus::Labels>{{{"task", "ps:1"}}, {{"1bad", "x"}}}) {
    auto c = m.AddCounter("pscluster_bad_total", "x", bad);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad.begin()->first;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("pscluster_bad_total"));
  }
}

TEST(Metrics, RejectsMalformedAddresses) {
  for (const std::string address :
       {"9100", "host:", ":9100", "127.0.0.1:70000", "127.0.0.1:9100s",
        "127.0.0.1:1,127.0.0.1:2", "127.0.0.1:-1", "127.0.0.1:1234567"}) {
    auto metrics = Metrics::Start(address, "ps:0", MetricsRole::kPs);
    EXPECT_EQ(metrics.status().code(), absl::StatusCode::kInvalidArgument)
        << address;
    EXPECT_THAT(std::string(metrics.status().message()), HasSubstr(address));
  }
}

TEST(Metrics, PortInUseIsUnavailable) {
  auto first = Metrics::Start("127.0.0.1:0", "ps:0", MetricsRole::kPs);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = Metrics::Start(address, "ps:1", MetricsRole::kPs);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(address));
}

TEST(Metrics, StopsServingWhenDestroyed) {
  auto metrics = Metrics::Start("127.0.0.1:0", "ps:0", MetricsRole::kPs);
  ASSERT_TRUE(metrics.ok());
  const int port = (*metrics)->port();
  ASSERT_THAT(HttpGet(port, "/metrics"), HasSubstr("200 OK"));
  metrics->reset();
  EXPECT_EQ(HttpGet(port, "/metrics"), "");
}

TEST(Metrics, ConcurrentUpdatesAndScrapes) {
  auto metrics = Metrics::Start("127.0.0.1:0", "worker:0", MetricsRole::kWorker);
  ASSERT_TRUE(metrics.ok());
  Metrics& m = **metrics;
  constexpr int kThreads = 4, kEach = 20000;
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) {
      EXPECT_THAT(HttpGet(m.port(), "/metrics"), HasSubstr("200 OK"));
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      prometheus::Counter& steps = m.steps();  // cached, as on a hot path
      for (int i = 0; i < kEach; ++i) {
        steps.Increment();
        m.push_latency_seconds().Observe(0.001);
      }
    });
  }
  for (auto& t : threads) t.join();
  done = true;
  scraper.join();
  const std::string body = Body(HttpGet(m.port(), "/metrics"));
  EXPECT_THAT(body,
              HasSubstr("pscluster_steps_total{task=\"worker:0\"} 80000\n"));
  EXPECT_THAT(
      body,
      HasSubstr(
          "pscluster_push_latency_seconds_count{task=\"worker:0\"} 80000\n"));
}

}  // namespace
}  // namespace pscluster
