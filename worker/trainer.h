// Trainer: a worker's training loop. It asks the chief for the training
// plan, loads its data, then asks the chief for one chunk (batch) at a
// time, computes gradients on it and pushes them to every ps, fetching the
// next weights in the same round trip; it reports progress and beats a
// heartbeat (its own thread) as it goes. Under multi_worker_mirrored (the
// plan's strategy) it hands over to TrainMirrored
// (worker/mirrored_trainer.h) once the plan and the data are in.
//
// Faults: every RPC retries with back-off (wire/ps_client.h); a push
// aborted because the ps were restored from a checkpoint is dropped, the
// weights pulled again and the chief's (rewound) work continued. A
// restarted worker simply starts again: the chief hands it new chunks.
//
// Not thread-safe: Run() is called once, from one thread; RequestStop() may
// be called from any thread.
#ifndef PSCLUSTER_WORKER_TRAINER_H_
#define PSCLUSTER_WORKER_TRAINER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/trainer_options.h"

namespace pscluster {

class Trainer {
 public:
  explicit Trainer(TrainerOptions options) : options_(std::move(options)) {}

  // Trains until the plan's epochs are done (OK) or a stop is requested
  // (Cancelled), or fails with a status naming what went wrong.
  absl::Status Run();
  void RequestStop() { stop_ = true; }

 private:
  const TrainerOptions options_;
  std::atomic<bool> stop_{false};
  // Set once the last push is sent: heartbeats then say so, and the chief
  // stops counting on this worker.
  std::atomic<bool> finished_{false};
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_TRAINER_H_
