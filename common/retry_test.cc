#include "common/retry.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

RetryPolicy Fast() {
  RetryPolicy p;
  p.initial_backoff = absl::Milliseconds(1);
  p.max_backoff = absl::Milliseconds(8);
  p.attempt_timeout = absl::Milliseconds(100);
  p.total_timeout = absl::Milliseconds(300);
  return p;
}

TEST(BackoffTest, GrowsByTheMultiplierUpToTheCapWithinTheJitter) {
  RetryPolicy p;
  p.initial_backoff = absl::Milliseconds(100);
  p.max_backoff = absl::Milliseconds(400);
  p.multiplier = 2;
  p.jitter = 0.25;
  Backoff b(p);
  const double expected[] = {100, 200, 400, 400, 400};
  for (double e : expected) {
    const double ms = absl::ToDoubleMilliseconds(b.Next());
    EXPECT_GE(ms, 0.75 * e);
    EXPECT_LE(ms, 1.25 * e);
  }
}

TEST(BackoffTest, JitterSpreadsTheWaits) {
  RetryPolicy p;
  p.jitter = 0.5;
  std::vector<absl::Duration> first;
  for (int i = 0; i < 20; ++i) first.push_back(Backoff(p).Next());
  EXPECT_NE(*std::min_element(first.begin(), first.end()),
            *std::max_element(first.begin(), first.end()));
}

TEST(RetryRpcTest, RetriesUnavailableUntilItSucceeds) {
  int calls = 0;
  absl::Status s = RetryRpc("push to ps:0 (127.0.0.1:1)", Fast(), [&](absl::Time) {
    return ++calls < 3 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")
                       : grpc::Status::OK;
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, 3);
}

TEST(RetryRpcTest, DoesNotRetryOtherErrorsAndNamesTheCall) {
  int calls = 0;
  absl::Status s = RetryRpc("push to ps:0 (127.0.0.1:1)", Fast(), [&](absl::Time) {
    ++calls;
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad gradient");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ps:0 (127.0.0.1:1)"), std::string::npos) << s;
}

TEST(RetryRpcTest, GivesUpAfterTheTotalTimeNamingTheTarget) {
  int calls = 0;
  const absl::Time start = absl::Now();
  absl::Status s = RetryRpc("pull from ps:1 (127.0.0.1:9)", Fast(), [&](absl::Time deadline) {
    ++calls;
    EXPECT_LE(deadline, start + absl::Milliseconds(300) + absl::Milliseconds(50));
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_GT(calls, 3);
  EXPECT_NE(s.message().find("pull from ps:1 (127.0.0.1:9)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("connection refused"), std::string::npos) << s;
}

TEST(RetryRpcTest, StopsWhenAsked) {
  std::atomic<bool> stop{false};
  int calls = 0;
  absl::Status s = RetryRpc(
      "x", Fast(),
      [&](absl::Time) {
        if (++calls == 2) stop = true;
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
      },
      &stop);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace pscluster
