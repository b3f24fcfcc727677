// TrainerOptions: what a worker's training is given by its main
// (worker/trainer.h), for the parameter-server loop (worker/ps_loop.h) and
// the multi_worker_mirrored one (worker/mirrored_loop.h) alike.
#ifndef PSCLUSTER_WORKER_TRAINER_OPTIONS_H_
#define PSCLUSTER_WORKER_TRAINER_OPTIONS_H_

#include <functional>
#include <string>

#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/metrics.h"
#include "compute/device_choice.h"
#include "wire/ps_client.h"

namespace pscluster {

// Faults a test injects into a worker (tests/faults/faulty_worker_main.cc);
// the shipped worker has none.
struct WorkerFaults {
  PushFaults* push = nullptr;  // borrowed: lost replies, duplicated pushes
  // Slept before every push: makes this worker a straggler, to exercise
  // backup workers and staleness.
  absl::Duration straggle = absl::ZeroDuration();
};

class ModelReplica;
class RingService;

struct TrainerOptions {
  TfConfig config;          // this worker's place in the cluster
  std::string data_dir;     // holds the MNIST-format IDX files
  int threads = 1;          // compute threads (CPU backend)
  // Where to compute; main resolves kAuto first (compute/backend_factory.h)
  // so that it can log the choice, but kAuto works here too.
  DeviceChoice device;
  absl::Duration startup_timeout = absl::Minutes(2);
  // Longest one step's push-pull (retries included) or a request for work
  // may take, e.g. while a ps or the chief restarts.
  absl::Duration step_timeout = absl::Minutes(5);
  // The test seam: only the tests' fault-injecting worker sets it.
  WorkerFaults faults;
  Metrics* metrics = nullptr;  // borrowed; outlives the Trainer
  // multi_worker_mirrored (worker/mirrored_loop.h): the Ring service
  // this worker serves and the replica it hands out through it, both
  // borrowed (they outlive the Trainer: peers, the chief and the evaluator
  // read the replica after training too). Null: the plan may not ask for it.
  RingService* ring = nullptr;
  ModelReplica* replica = nullptr;
  // A neighbour in the ring silent this long fails the all-reduce.
  absl::Duration ring_timeout = absl::Seconds(30);
  // Logs the replica's digest after every step (tests compare them).
  bool log_replica_digests = false;
  // Called once, from Run(), when the chief's plan has arrived: the worker
  // is then ready for its role (main marks its health). May be empty.
  std::function<void()> on_plan;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_TRAINER_OPTIONS_H_
