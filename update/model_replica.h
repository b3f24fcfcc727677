// ModelReplica: a worker's copy of the whole model and its optimizer state under
// multi_worker_mirrored (docs/strategies.md), and the update every replica
// applies once the ring has summed a step's gradients.
//
// The update is the parameter servers' own: a ParameterStore configured by
// the plan's `replica` setup (the whole model as one ps's shards, async
// rule, one writer), so the optimizer, BatchNormalization's moving
// statistics and the non-finite policy are exactly those a ps applies.
// Replicas that start from the same state and apply the same sums stay bit
// for bit the same (ParameterStore's passes do not depend on threads).
//
// Steps: the replica's step is its store's version, the number of updates
// applied since the run began; the state of step t is what every replica
// holds after t updates.
//
// Thread-safe: the trainer applies steps while the Ring service hands the
// state to a peer, the chief or the evaluator (State).
#ifndef PSCLUSTER_UPDATE_MODEL_REPLICA_H_
#define PSCLUSTER_UPDATE_MODEL_REPLICA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "model/gradient_clipping.h"
#include "proto/coordination.pb.h"
#include "proto/ps.pb.h"
#include "update/parameter_store.h"

namespace pscluster {

class ModelReplica {
 public:
  explicit ModelReplica(int update_threads = 1) : store_(update_threads) {}

  // The state a run starts from: `values` (the flat model) as step 0 with
  // fresh optimizer slots, laid out as `setup` says. InvalidArgument as
  // Restore.
  static absl::StatusOr<ShardState> InitialState(const InitRequest& setup,
                                                 const std::vector<float>& values);

  // Replaces the state with `state` (values, optimizer slots, step) under
  // `setup` (TrainingPlan.replica). InvalidArgument naming what does not
  // fit (another layout, a wrong number of values).
  absl::Status Restore(const InitRequest& setup, const ShardState& state);
  bool has_state() const;
  // The last step applied; -1 before the first Restore.
  int64_t step() const;

  // Applies one step: `sum` holds the ring's sum over the step's members
  // of each one's gradient times its example count, `total_examples` their
  // total; `sum` is divided in place into the mean gradient, which
  // `clipping` clips over `ranges` (Keras's clipnorm or global_clipnorm of
  // the step's gradient; none by default). Then writes the new weights to
  // params[0, n). The store's errors as they are (InvalidArgument for a
  // non-finite gradient under the reject policy).
  absl::Status Apply(float* sum, int64_t total_examples, float* params,
                     const GradientClipping& clipping = {},
                     const std::vector<GradientRange>& ranges = {});

  // The weights now, into params[0, n).
  absl::Status CopyWeights(float* params);

  // The state as a ShardState (layout and shards from the setup) when the
  // replica is at the step `request` asks for (exactly, or at least with
  // request.at_least). FailedPrecondition naming both steps otherwise;
  // Unavailable before the first Restore.
  absl::StatusOr<ShardState> State(const ReplicaRequest& request) const;

  // CRC-32C of the weights' bytes: replicas at one step agree on it.
  uint32_t Digest() const;

 private:
  ParameterStore store_;
  mutable absl::Mutex mu_;
  InitRequest setup_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_floats_ ABSL_GUARDED_BY(mu_) = 0;
  bool has_state_ ABSL_GUARDED_BY(mu_) = false;
  std::string pulled_;  // Apply's buffer (one trainer thread)
};

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_MODEL_REPLICA_H_
