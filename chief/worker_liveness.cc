#include "chief/worker_liveness.h"

namespace pscluster {

WorkerLiveness::WorkerLiveness(int num_workers, absl::Time now) : workers_(num_workers) {
  for (Worker& w : workers_) w.last_contact = now;
}

void WorkerLiveness::ResetContact(absl::Time now) {
  for (Worker& w : workers_) w.last_contact = now;
}

bool WorkerLiveness::Touch(int w, uint64_t incarnation, absl::Time now) {
  Worker& worker = workers_[w];
  const bool restarted =
      worker.incarnation != 0 && incarnation != worker.incarnation && worker.alive;
  if (restarted) worker.alive = false;
  worker.incarnation = incarnation;
  worker.last_contact = now;
  return restarted;
}

std::vector<WorkerLiveness::Silent> WorkerLiveness::FindSilent(absl::Time now,
                                                               absl::Duration timeout) {
  std::vector<Silent> silent;
  for (int w = 0; w < static_cast<int>(workers_.size()); ++w) {
    Worker& worker = workers_[w];
    if (!worker.alive || worker.finished || now - worker.last_contact <= timeout) continue;
    worker.alive = false;
    silent.push_back({w, now - worker.last_contact});
  }
  return silent;
}

bool WorkerLiveness::AnyRunning() const {
  for (const Worker& w : workers_) {
    if (w.alive && !w.finished) return true;
  }
  return false;
}

void WorkerLiveness::MarkBack(int w) {
  workers_[w].alive = true;
  workers_[w].finished = false;
}

bool WorkerLiveness::MarkFinished(int w) {
  if (workers_[w].finished) return false;
  workers_[w].finished = true;
  return true;
}

}  // namespace pscluster
