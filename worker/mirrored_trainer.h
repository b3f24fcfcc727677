// The training loop under --strategy=multi_worker_mirrored (README
// "Strategies"): this worker holds a replica of the whole model and its
// optimizer state (update/model_replica.h); each step it asks the chief for the
// ring and its chunk (chief/ring_dispatcher.h), computes the gradient,
// sums it with the ring's other members (worker/ring_allreduce.h) and
// applies the same update as every other replica.
//
// Faults: an all-reduce that fails (a neighbour lost or silent, or the
// chief aborting the ring) is reported with the next request; the chief
// forms a new ring, and a replica behind it takes the state from a peer
// (its Ring service's GetReplica) or from the chief.
//
// Called by Trainer::Run (worker/trainer.h) once the plan says so; the
// borrowed pointers outlive the call.
#ifndef PSCLUSTER_WORKER_MIRRORED_TRAINER_H_
#define PSCLUSTER_WORKER_MIRRORED_TRAINER_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "model/dataset.h"
#include "model/model_spec.h"
#include "proto/coordination.pb.h"
#include "wire/chief_client.h"
#include "worker/trainer_options.h"

namespace pscluster {

// What Trainer::Run has set up when the strategy is chosen.
struct MirroredRun {
  const TrainerOptions* options = nullptr;
  const TrainingPlan* plan = nullptr;
  const ModelSpec* spec = nullptr;
  const Dataset* data = nullptr;
  int worker = 0;  // rank among the cluster's workers
  uint64_t incarnation = 0;
  ChiefClient* chief = nullptr;
  const std::atomic<bool>* stop = nullptr;
  // Set once the chief answered DONE (the heartbeats say so).
  std::atomic<bool>* finished = nullptr;
};

// Trains until the chief says DONE (OK), a stop is requested (Cancelled),
// or something fails that a new ring cannot mend (the status says what).
absl::Status TrainMirrored(const MirroredRun& run);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_MIRRORED_TRAINER_H_
