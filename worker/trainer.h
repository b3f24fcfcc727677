// Trainer: a worker's training loop. It asks the chief for the training
// plan, loads its data, then asks the chief for one chunk (batch) at a
// time, computes gradients on it and pushes them to every ps, fetching the
// next weights in the same round trip; it reports progress and beats a
// heartbeat (its own thread) as it goes.
//
// Faults: every RPC retries with back-off (common/ps_client.h); a push
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
#include "common/cluster_spec.h"
#include "common/metrics.h"
#include "worker/device_choice.h"

namespace pscluster {

struct TrainerOptions {
  TfConfig config;          // this worker's place in the cluster
  std::string data_dir;     // holds the MNIST-format IDX files
  int threads = 1;          // compute threads (CPU backend)
  // Where to compute; main resolves kAuto first (worker/backend_factory.h)
  // so that it can log the choice, but kAuto works here too.
  DeviceChoice device;
  absl::Duration startup_timeout = absl::Minutes(2);
  // Longest one step's push-pull (retries included) or a request for work
  // may take, e.g. while a ps or the chief restarts.
  absl::Duration step_timeout = absl::Minutes(5);
  // Fault injection for tests (PsClientOptions).
  int lose_reply_every = 0;
  int duplicate_every = 0;
  // Sleeps this long before every push: makes this worker a straggler, to
  // exercise backup workers and staleness.
  absl::Duration straggle = absl::ZeroDuration();
  Metrics* metrics = nullptr;  // borrowed; outlives the Trainer
  // Called once, from Run(), when the chief's plan has arrived: the worker
  // is then ready for its role (main marks its health). May be empty.
  std::function<void()> on_plan;
};

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
