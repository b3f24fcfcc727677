#include "chief/progress_tracker.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_format.h"

namespace pscluster {
namespace {

// Workers' counts are whatever a report says: sums and products of them
// saturate rather than overflow.
int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t product;
  if (!__builtin_mul_overflow(a, b, &product)) return product;
  return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min()
                            : std::numeric_limits<int64_t>::max();
}

}  // namespace

ProgressTracker::ProgressTracker(int num_workers, int epochs, absl::Time start)
    : epochs_(epochs), start_(start), workers_(num_workers), snapshot_time_(start) {}

bool ProgressTracker::Record(const ProgressReport& report) {
  absl::MutexLock lock(&mu_);
  const int w = report.worker_index();
  if (w < 0 || w >= static_cast<int>(workers_.size())) return false;
  workers_[w].reported = true;
  workers_[w].latest = report;
  return true;
}

void ProgressTracker::RecordEval(const EvalReport& report) {
  absl::MutexLock lock(&mu_);
  last_eval_ = report;
  has_eval_ = true;
}

Progress ProgressTracker::Snapshot(absl::Time now) {
  absl::MutexLock lock(&mu_);
  Progress p;
  p.epochs = epochs_;
  p.num_workers = static_cast<int>(workers_.size());
  int min_epoch = epochs_;
  int reporting = 0;
  int64_t planned = 0;
  for (const Worker& w : workers_) {
    if (!w.reported) {
      min_epoch = 0;
      continue;
    }
    const ProgressReport& r = w.latest;
    min_epoch = std::min(min_epoch, r.done() ? epochs_ - 1 : r.epoch());
    p.global_step = std::max(p.global_step, r.global_version());
    p.examples = SaturatingAdd(p.examples, r.examples());
    if (r.done()) ++p.workers_done;
    if (!r.done() || r.loss() > 0) {
      p.loss += r.loss();
      p.accuracy += r.accuracy();
      ++reporting;
    }
    planned = SaturatingMul(r.epoch_examples(), epochs_);
  }
  if (reporting > 0) {
    p.loss /= reporting;
    p.accuracy /= reporting;
  }
  p.epoch = std::min(min_epoch + 1, epochs_);
  const double dt = absl::ToDoubleSeconds(now - snapshot_time_);
  if (dt > 0) {
    p.examples_per_s =
        (static_cast<double>(p.examples) - static_cast<double>(examples_at_snapshot_)) / dt;
  }
  examples_at_snapshot_ = p.examples;
  snapshot_time_ = now;
  // ETA from the average rate since the start: steadier than the window.
  const double elapsed = absl::ToDoubleSeconds(now - start_);
  if (planned > 0 && p.examples > 0 && elapsed > 0) {
    p.eta_s = std::max<double>(0, static_cast<double>(planned) - static_cast<double>(p.examples)) /
              (static_cast<double>(p.examples) / elapsed);
  }
  if (has_eval_) {
    p.last_eval_step = last_eval_.version();
    p.last_eval_accuracy = last_eval_.accuracy();
    p.last_eval_loss = last_eval_.loss();
    p.last_eval_auc = last_eval_.auc();
    p.last_eval_outputs.assign(last_eval_.outputs().begin(), last_eval_.outputs().end());
  }
  return p;
}

std::string ProgressTracker::Format(const Progress& p) {
  std::string eta = p.eta_s < 0 ? "?" : absl::StrFormat("%.0fs", p.eta_s);
  std::string s = absl::StrFormat(
      "epoch %d/%d step %d examples %d examples/s %.0f loss %.4f acc %.4f eta %s",
      p.epoch, p.epochs, p.global_step, p.examples, p.examples_per_s, p.loss,
      p.accuracy, eta);
  if (p.workers_done > 0) {
    s += absl::StrFormat(" (%d/%d workers done)", p.workers_done, p.num_workers);
  }
  return s;
}

}  // namespace pscluster
