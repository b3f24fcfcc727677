#include "model/params_watermark.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pscluster {

ParamsWatermark::ParamsWatermark(int64_t size) : size_(size), prefix_(size) {}

void ParamsWatermark::Reset() {
  absl::MutexLock lock(&mu_);
  prefix_.store(0, std::memory_order_release);
  pieces_.clear();
  failed_.clear();
  complete_at_ = size_ == 0 ? absl::Now() : absl::InfiniteFuture();
}

absl::Time ParamsWatermark::complete_at() const {
  absl::MutexLock lock(&mu_);
  return complete_at_;
}

void ParamsWatermark::MarkArrived(int64_t begin, int64_t end) {
  begin = std::max<int64_t>(begin, 0);
  end = std::min(end, size_);
  absl::MutexLock lock(&mu_);
  int64_t prefix = prefix_.load(std::memory_order_relaxed);
  if (end <= prefix) return;
  begin = std::max(begin, prefix);
  // Merge with the pieces it touches.
  auto it = pieces_.upper_bound(begin);
  if (it != pieces_.begin() && std::prev(it)->second >= begin) --it;
  while (it != pieces_.end() && it->first <= end) {
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
    it = pieces_.erase(it);
  }
  if (begin > prefix) {
    pieces_.emplace(begin, end);
    return;
  }
  // Every piece that touched it was merged: the next one lies past a gap.
  prefix_.store(end, std::memory_order_release);
  if (end == size_) complete_at_ = absl::Now();
}

void ParamsWatermark::Fail(const std::string& why) {
  absl::MutexLock lock(&mu_);
  failed_ = why.empty() ? "the pull failed" : why;
}

absl::Status ParamsWatermark::WaitArrived(int64_t to, absl::Time deadline) const {
  to = std::min(to, size_);
  if (prefix_.load(std::memory_order_acquire) >= to) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return prefix_.load(std::memory_order_acquire) >= to || !failed_.empty();
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (prefix_.load(std::memory_order_acquire) >= to) return absl::OkStatus();
  if (!failed_.empty()) return absl::AbortedError(failed_);
  return absl::DeadlineExceededError(absl::StrCat(
      "weights up to element ", to, " not in time (in up to ", prefix_.load(), ")"));
}

}  // namespace pscluster
