#include "chief/failover_metrics.h"

#include <memory>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(FailoverMetrics, PlacementAndCountsAsTheChiefServesThem) {
  absl::StatusOr<std::unique_ptr<Metrics>> metrics =
      Metrics::Start("", "chief:0", MetricsRole::kChief);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  absl::StatusOr<std::unique_ptr<FailoverMetrics>> m = FailoverMetrics::Create(metrics->get());
  ASSERT_TRUE(m.ok()) << m.status();

  // Before anything happened: every way at 0, no placement yet.
  std::string text = (*metrics)->Serialize();
  for (const char* how : {"promoted", "backup", "checkpoint", "resumed"}) {
    EXPECT_THAT(
        text, HasSubstr(std::string("pscluster_ps_failovers_total{task=\"chief:0\",how=\"") + how +
                        "\"} 0\n"));
  }
  EXPECT_THAT(text, HasSubstr("pscluster_ps_recovery_pause_seconds_count{task=\"chief:0\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("pscluster_ps_reseed_bytes_total{task=\"chief:0\"} 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("pscluster_ps_store_info{")));

  // Two ps, each store's backup on the other.
  for (int i = 0; i < 2; ++i) {
    (*m)->SetCopies(i, i, {(i + 1) % 2});
    (*m)->SetCopies(i, i, {(i + 1) % 2});  // set again: one series each
  }
  (*m)->CountFailover(FailoverMetrics::How::kBackup, absl::Milliseconds(1500));
  (*m)->CountFailover(FailoverMetrics::How::kResumed, absl::Milliseconds(300));
  (*m)->AddReseedBytes(123456);
  text = (*metrics)->Serialize();
  EXPECT_THAT(text,
              HasSubstr("pscluster_ps_store_info{task=\"chief:0\",holder=\"ps:0\",role=\"primary\","
                        "store=\"ps:0\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("pscluster_ps_store_info{task=\"chief:0\",holder=\"ps:1\",role=\"backup\","
                        "store=\"ps:0\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("pscluster_ps_store_info{task=\"chief:0\",holder=\"ps:0\",role=\"backup\","
                        "store=\"ps:1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pscluster_ps_failovers_total{task=\"chief:0\",how=\"backup\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("pscluster_ps_failovers_total{task=\"chief:0\",how=\"resumed\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("pscluster_ps_failovers_total{task=\"chief:0\",how=\"checkpoint\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("pscluster_ps_recovery_pause_seconds_count{task=\"chief:0\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("pscluster_ps_recovery_pause_seconds_sum{task=\"chief:0\"} 1.8\n"));
  EXPECT_THAT(text, HasSubstr("pscluster_ps_recovery_pause_seconds_bucket{task=\"chief:0\","
                              "le=\"0.5\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pscluster_ps_reseed_bytes_total{task=\"chief:0\"} 123456\n"));
  // Four placement series, not more.
  auto series = [&text] {
    size_t n = 0;
    for (size_t at = 0; (at = text.find("\npscluster_ps_store_info{", at)) != std::string::npos;
         ++at) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(series(), 4u);

  // ps:1 lost: its backup on ps:0 serves its store, which has no backup
  // until ps:1 is back; then ps:1's own store is its backup.
  (*m)->SetCopies(1, 0, {});
  (*m)->CountFailover(FailoverMetrics::How::kPromoted, absl::Milliseconds(200));
  text = (*metrics)->Serialize();
  EXPECT_THAT(text,
              HasSubstr("pscluster_ps_store_info{task=\"chief:0\",holder=\"ps:0\",role=\"primary\","
                        "store=\"ps:1\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("pscluster_ps_store_info{task=\"chief:0\",holder=\"ps:1\",role=\"primary\","
                        "store=\"ps:1\"} 0\n"));
  EXPECT_THAT(text,
              HasSubstr("pscluster_ps_store_info{task=\"chief:0\",holder=\"ps:0\",role=\"backup\","
                        "store=\"ps:1\"} 0\n"));
  EXPECT_THAT(text,
              HasSubstr("pscluster_ps_failovers_total{task=\"chief:0\",how=\"promoted\"} 1\n"));
  (*m)->SetCopies(1, 0, {1});
  text = (*metrics)->Serialize();
  EXPECT_THAT(text,
              HasSubstr("pscluster_ps_store_info{task=\"chief:0\",holder=\"ps:1\",role=\"backup\","
                        "store=\"ps:1\"} 1\n"));
  EXPECT_EQ(series(), 6u);
}

}  // namespace
}  // namespace pscluster
