#include "common/retry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"

namespace pscluster {

Backoff::Backoff(const RetryPolicy& policy)
    : policy_(policy), current_(policy.initial_backoff) {}

absl::Duration Backoff::Next() {
  const absl::Duration base = current_;
  current_ = std::min(current_ * policy_.multiplier, policy_.max_backoff);
  const double j = std::clamp(policy_.jitter, 0.0, 1.0);
  std::uniform_real_distribution<double> factor(1.0 - j, 1.0 + j);
  if (!rng_.has_value()) rng_.emplace(std::random_device{}());
  return base * factor(*rng_);
}

bool IsRetryable(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

absl::Status RetryExhausted(const std::string& what, absl::Duration waited, int attempts,
                            const grpc::Status& last) {
  return absl::UnavailableError(absl::StrCat(
      what, ": no answer after ", absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(100))),
      " and ", attempts, attempts == 1 ? " attempt" : " attempts", " (last error: ",
      absl::StatusCodeToString(static_cast<absl::StatusCode>(last.error_code())), ": ", last.error_message(), ")"));
}

absl::Status RetryRpc(const std::string& what, const RetryPolicy& policy,
                      const std::function<grpc::Status(absl::Time deadline)>& attempt,
                      const std::atomic<bool>* stop) {
  const absl::Time start = absl::Now();
  const absl::Time give_up = start + policy.total_timeout;
  Backoff backoff(policy);
  int attempts = 0;
  while (true) {
    if (stop != nullptr && *stop) return absl::CancelledError(absl::StrCat(what, ": stopped"));
    const absl::Time deadline = std::min(absl::Now() + policy.attempt_timeout, give_up);
    grpc::Status s = attempt(deadline);
    ++attempts;
    if (s.ok()) return absl::OkStatus();
    if (!IsRetryable(s)) return FromGrpcStatus(s, what);
    const absl::Duration wait = backoff.Next();
    if (absl::Now() + wait >= give_up) {
      return RetryExhausted(what, absl::Now() - start, attempts, s);
    }
    absl::SleepFor(wait);
  }
}

}  // namespace pscluster
