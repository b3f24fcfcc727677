// The training loop under --strategy=multi_worker_mirrored
// (docs/strategies.md): this worker holds a replica of the whole model and
// its optimizer state (update/model_replica.h); each step it asks the chief
// for the ring and its chunk (chief/ring_dispatcher.h), computes the
// gradient, sums it with the ring's other members (worker/ring_allreduce.h)
// and applies the same update as every other replica.
//
// Faults: an all-reduce that fails (a neighbour lost or silent, or the
// chief aborting the ring) is reported with the next request; the chief
// forms a new ring, and a replica behind it takes the state from a peer
// (its Ring service's GetReplica) or from the chief.
//
// Needs TrainerOptions::ring and ::replica (borrowed; they outlive Run):
// without them Run fails with FailedPrecondition. While it runs, the ring
// service hands the chief's aborts to this loop's all-reduce. Run is called
// once, from one thread (worker/training_loop.h).
#ifndef PSCLUSTER_WORKER_MIRRORED_LOOP_H_
#define PSCLUSTER_WORKER_MIRRORED_LOOP_H_

#include "absl/status/status.h"
#include "worker/training_loop.h"

namespace pscluster {

class MirroredLoop final : public TrainingLoop {
 public:
  absl::Status Run(const TrainingContext& context) override;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_MIRRORED_LOOP_H_
