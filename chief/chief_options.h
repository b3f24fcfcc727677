// ChiefOptions: everything a chief's run is configured with (the parsed
// TF_CONFIG, the plan as the flags give it, the optimizer, timeouts,
// checkpoint and output paths). chief/chief_flags.h makes it from the
// command line; the Chief and the strategy runs read it. Plain data.
#ifndef PSCLUSTER_CHIEF_CHIEF_OPTIONS_H_
#define PSCLUSTER_CHIEF_CHIEF_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "proto/coordination.pb.h"
#include "proto/ps.pb.h"

namespace pscluster {

// Async: how an update's learning rate follows from --learning_rate, each
// update carrying 1/num_workers of the global batch (see
// chief/ps_run.h's EffectiveOptimizer).
enum class AsyncLrScaling { kSqrt, kLinear, kNone };

struct ChiefOptions {
  TfConfig config;
  TrainingPlan plan;  // model, batch, epochs, mode, seed, ...
  OptimizerConfig optimizer;
  // Where the optimizer comes from, for the log: "--optimizer" or "the
  // model file's compiled RMSprop".
  std::string optimizer_origin = "--optimizer";
  int replicas_to_aggregate = 0;  // 0: every worker
  // Training starts once this many workers answer (with every ps and the
  // evaluator); the others join when they do. 0: every worker.
  int min_workers = 0;
  // Training starts once the first this many ps answer; the others are
  // added when they answer, and a ps stopped is drained first (its shards
  // moved to the others). 0: every ps, a fixed set.
  int min_ps = 0;
  // A move sends a ps only the floats that come to it from another ps
  // (RestoreRequest.kept); false sends it all of them (the bench's
  // comparison: PSCLUSTER_TEST_MOVE_SENDS_ALL).
  bool move_keeps_in_place = true;
  int max_staleness = 8;          // async: see chief/main.cc's --max_staleness
  absl::Duration wait_for_cluster = absl::Minutes(2);
  absl::Duration log_every = absl::Seconds(2);
  // Workers beat every heartbeat_interval; one silent for heartbeat_timeout
  // is lost.
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  absl::Duration heartbeat_timeout = absl::Seconds(3);
  // How often every ps is asked whether it is the same live process.
  absl::Duration ps_check_every = absl::Milliseconds(500);
  // How long a lost ps may take to come back before the run fails.
  absl::Duration ps_recovery_timeout = absl::Minutes(5);
  // Backups of each ps's store, on the next ps_replicas ps
  // (docs/replication.md).
  int ps_replicas = 0;
  NonFinitePolicy nonfinite = NONFINITE_REJECT;
  AsyncLrScaling async_lr_scaling = AsyncLrScaling::kSqrt;
  // Sparse tables: each worker's next chunk reserved and named, so that
  // its rows come with the push-pull (--embedding_rows_ahead).
  bool embedding_rows_ahead = true;
  // Checkpoints go here (none on disk when empty; the newest is always
  // kept in memory). 0 steps / zero duration: not by that measure.
  std::string checkpoint_dir;
  int64_t checkpoint_every_steps = 200;
  absl::Duration checkpoint_every = absl::ZeroDuration();
  int keep_checkpoints = 3;
  absl::Duration final_eval_timeout = absl::Minutes(10);
  // TensorBoard event files (scalars: loss, accuracy, examples/s,
  // staleness) go here; empty: none.
  std::string logdir;
  // The trained weights are written here in safetensors format; empty:
  // not exported.
  std::string export_path;
  // MNIST folder: with no evaluator in the cluster (none listed, none
  // reporting on its own), the chief scores the final weights on its test
  // set itself. Empty: the final line says that no evaluation was made.
  std::string data_dir;
  // --initial_weights: where the first weights come from (for the log) and
  // them, as the flat parameter vector; empty: the model's initializers
  // drawn from plan.seed(). A resumed run keeps its checkpoint's instead.
  std::string initial_weights;
  std::vector<float> initial_parameters;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_CHIEF_OPTIONS_H_
