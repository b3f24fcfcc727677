#include "model/gradient_watermark.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace pscluster {

void GradientWatermark::Reset(int64_t size) {
  absl::MutexLock lock(&mu_);
  final_from_ = size;
  failed_.clear();
}

void GradientWatermark::MarkFinalFrom(int64_t from) {
  absl::MutexLock lock(&mu_);
  if (from < final_from_) final_from_ = from;
}

void GradientWatermark::Fail(const std::string& why) {
  absl::MutexLock lock(&mu_);
  failed_ = why.empty() ? "the step failed" : why;
}

bool GradientWatermark::FinalFrom(int64_t from) const {
  absl::MutexLock lock(&mu_);
  return final_from_ <= from;
}

absl::Status GradientWatermark::WaitFinalFrom(int64_t from, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return final_from_ <= from || !failed_.empty();
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (!failed_.empty()) return absl::AbortedError(failed_);
  if (final_from_ > from) {
    return absl::DeadlineExceededError(
        absl::StrCat("gradient from element ", from, " not final in time (final from ",
                     final_from_, ")"));
  }
  return absl::OkStatus();
}

}  // namespace pscluster
