// Deadlines and retries for every RPC a daemon makes: exponential back-off
// with jitter between attempts and a bounded total wait, ending in an error
// that names the call and its target (never a silent hang).
//
//   RetryPolicy policy;                      // defaults suit the daemons
//   absl::Status s = RetryRpc("push to ps:1 (10.0.0.2:2222)", policy,
//       [&](absl::Time deadline) { ...one attempt... return grpc_status; });
//
// Only UNAVAILABLE (target down or restarting) and DEADLINE_EXCEEDED (one
// attempt ran out) are retried; any other status ends the call at once.
// Retrying is safe for our RPCs: pushes carry request ids that the ps
// deduplicates, the rest are reads or idempotent.
//
// Thread-safe: Backoff is per call; the functions hold no state.
#ifndef PSCLUSTER_COMMON_RETRY_H_
#define PSCLUSTER_COMMON_RETRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pscluster {

struct RetryPolicy {
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  double multiplier = 2.0;
  // Each wait is drawn uniformly from [(1 - jitter) * b, (1 + jitter) * b],
  // so that clients that failed together do not retry together.
  double jitter = 0.3;
  // Longest a single attempt may take.
  absl::Duration attempt_timeout = absl::Seconds(30);
  // Longest the whole call may take, attempts and waits together.
  absl::Duration total_timeout = absl::Minutes(2);
};

// The waits between attempts of one call.
class Backoff {
 public:
  explicit Backoff(const RetryPolicy& policy);
  // The next wait: initial_backoff, then times multiplier up to
  // max_backoff, each with jitter applied.
  absl::Duration Next();

 private:
  const RetryPolicy policy_;
  absl::Duration current_;
  // Seeded at the first wait: most calls never wait, and seeding from
  // std::random_device on every call cost 1-2% of a worker's CPU.
  std::optional<std::mt19937_64> rng_;
};

// Whether a failed attempt may be retried.
bool IsRetryable(const grpc::Status& status);

// Runs `attempt` with each attempt's deadline until it succeeds, fails for
// good, the policy's total time is spent, or *stop turns true (Cancelled).
// The error names `what` and says how long and how many attempts it tried,
// with the last error. `attempt` must be safe to run more than once.
absl::Status RetryRpc(const std::string& what, const RetryPolicy& policy,
                      const std::function<grpc::Status(absl::Time deadline)>& attempt,
                      const std::atomic<bool>* stop = nullptr);

// The error RetryRpc gives up with, for callers that run their own loop
// (e.g. several calls in parallel).
absl::Status RetryExhausted(const std::string& what, absl::Duration waited, int attempts,
                            const grpc::Status& last);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_RETRY_H_
