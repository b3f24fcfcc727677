// Trainer: a worker's training. Run does what every strategy shares: it
// asks the chief for the training plan, beats a heartbeat (its own thread,
// worker/heartbeat.h), builds the model spec and loads and checks its data;
// then it runs the loop the plan's strategy names (worker/training_loop.h):
// the parameter servers' (worker/ps_loop.h) or the ring all-reduce's
// (worker/mirrored_loop.h), which trains until the chief says DONE and
// reports the run (worker/step_report.h).
//
// A restarted worker simply starts again: the chief hands it new work.
//
// Not thread-safe: Run() is called once, from one thread; RequestStop() and
// RequestLeave() may be called from any thread.
#ifndef PSCLUSTER_WORKER_TRAINER_H_
#define PSCLUSTER_WORKER_TRAINER_H_

#include <atomic>

#include "absl/status/status.h"
#include "worker/trainer_options.h"

namespace pscluster {

class Trainer {
 public:
  explicit Trainer(TrainerOptions options) : options_(std::move(options)) {}

  // Trains until the plan's epochs are done (OK) or a stop is requested
  // (Cancelled), or fails with a status naming what went wrong.
  absl::Status Run();
  void RequestStop() { stop_ = true; }
  // Leave the run after the step in flight, telling the chief (a
  // scale-down's SIGTERM; worker/ps_loop.cc's Leave): Run then returns
  // Cancelled. The ring's loop stops at its next step. False when no
  // training loop runs (before the plan, or after the run): then there is
  // nothing to leave, and the caller stops the worker itself.
  bool RequestLeave() {
    leave_ = true;
    return training_;
  }

 private:
  const TrainerOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> leave_{false};
  std::atomic<bool> training_{false};  // the strategy's loop runs
  // Set once the loop is done with the chief's work: heartbeats then say
  // so, and the chief stops counting on this worker.
  std::atomic<bool> finished_{false};
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_TRAINER_H_
