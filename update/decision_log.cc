#include "update/decision_log.h"

#include <utility>

namespace pscluster {

void DecisionLog::AddLocked(StepDecision d) {
  decisions_.push_back(std::move(d));
  if (decisions_.size() > kKept) decisions_.pop_front();
}

void DecisionLog::Record(std::vector<StepDecision> decisions, std::optional<int64_t> epoch) {
  absl::MutexLock lock(&mu_);
  for (StepDecision& d : decisions) {
    d.sequence = next_sequence_++;
    if (epoch.has_value()) d.decider_epoch = *epoch;
    AddLocked(std::move(d));
  }
  made_.SignalAll();
}

void DecisionLog::Keep(const StepDecision& decision) {
  absl::MutexLock lock(&mu_);
  AddLocked(decision);
}

void DecisionLog::Clear() {
  absl::MutexLock lock(&mu_);
  decisions_.clear();
}

bool DecisionLog::Next(int64_t after_sequence, absl::Time deadline, StepDecision* out) {
  absl::MutexLock lock(&mu_);
  while (!cancelled_) {
    for (const StepDecision& d : decisions_) {
      if (d.sequence > after_sequence) {
        *out = d;
        return true;
      }
    }
    if (made_.WaitWithDeadline(&mu_, deadline)) return false;
  }
  return false;
}

std::optional<StepDecision> DecisionLog::Find(int64_t version, int64_t generation) const {
  absl::MutexLock lock(&mu_);
  for (auto d = decisions_.rbegin(); d != decisions_.rend(); ++d) {
    if (d->version == version && d->generation == generation) return *d;
  }
  return std::nullopt;
}

std::vector<StepDecision> DecisionLog::Before(int64_t version, int64_t generation) const {
  absl::MutexLock lock(&mu_);
  std::vector<StepDecision> out;
  for (const StepDecision& d : decisions_) {
    if (d.generation == generation && d.version < version) out.push_back(d);
  }
  return out;
}

void DecisionLog::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  made_.SignalAll();
}

}  // namespace pscluster
