// StrategyRun: what one strategy does within the chief's run; the frame
// that both share (serving the Coordinator, waiting for the cluster,
// progress, the final evaluation, the export, ending the run) is the
// Chief's (chief/chief.h). Two implementations: ParameterServerRun
// (chief/ps_run.h) and RingRun (chief/ring_run.h).
//
// The Chief calls, in this order:
//   Prepare            before the Coordinator serves; no task is touched
//   work()             served by the Coordinator from then on
//   Start              once every task answers the health service
//   plan()             handed out; then PlanHandedOut
//   Tick               every 20 ms until AllFinished
//   TakeFinalCheckpoint, FinalSteps, FinalWeights (and DoneNote)
// An error from Prepare ends the run before the cluster is touched; any
// later one ends it as failed (every task told to stop).
//
// Thread-safety: work() is called from the Coordinator's gRPC threads and
// is thread-safe; every other call comes from the Chief's one thread. The
// run owns what work() returns; it lives as long as the run.
#ifndef PSCLUSTER_CHIEF_STRATEGY_RUN_H_
#define PSCLUSTER_CHIEF_STRATEGY_RUN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chief/cluster_tasks.h"
#include "chief/ps_fleet.h"
#include "chief/work_source.h"
#include "model/model_spec.h"
#include "proto/coordination.pb.h"

namespace pscluster {

class StrategyRun {
 public:
  virtual ~StrategyRun() = default;

  // The complete plan the Coordinator hands out (the strategy's own
  // settings included).
  virtual const TrainingPlan& plan() const = 0;

  // The state the run starts from where it needs no task (the ring's base:
  // the newest checkpoint, or the initial weights). May move *start
  // earlier: a run resumed from a checkpoint counts its wall time from the
  // start of its first life.
  virtual absl::Status Prepare(absl::Time* start) = 0;

  // What the Coordinator's work RPCs reach; valid after Prepare.
  virtual WorkSource* work() = 0;

  // Every task answers: sets up the cluster's training state (the ps
  // initialised, restored from a checkpoint, or found initialised by a
  // restarted chief), logs the run's set-up, and counts every worker as
  // heard from now. May move *start earlier, as Prepare. `tasks` is used
  // during the call only.
  virtual absl::Status Start(ClusterTasks* tasks, absl::Time* start) = 0;

  // The plan is out: work may be handed out.
  virtual void PlanHandedOut() = 0;

  // Where the progress recorder reads the staleness of the pushes; null
  // when there is none (no ps). Valid after Start.
  virtual PsFleet* staleness_source() = 0;

  // Every chunk is trained and every live worker knows it.
  virtual bool AllFinished() const = 0;

  // One round of the training loop's own checks: lost workers, ps
  // recovery or a broken ring, periodic checkpoints. An error ends the
  // run.
  virtual absl::Status Tick() = 0;

  // For the progress lines: "... chunks <done>/<total><ProgressNote()>"
  // and "every worker is done: <done> of <total> chunks trained<DoneNote()>".
  virtual int64_t done_chunks() const = 0;
  virtual int64_t total_chunks() const = 0;
  virtual std::string ProgressNote() const = 0;
  virtual std::string DoneNote() const = 0;

  // Training is over: the final checkpoint (the ring: the final state is
  // read from a replica here, and written when there is a checkpoint
  // directory).
  virtual absl::Status TakeFinalCheckpoint() = 0;
  // The run's global step count (the ps run logs each ps's counters).
  virtual absl::StatusOr<int64_t> FinalSteps() = 0;
  // The weights of `steps` (or newer), for the chief's own evaluation and
  // the export; read once, kept by the run.
  virtual absl::StatusOr<const std::vector<float>*> FinalWeights(int64_t steps) = 0;
  // The layout of FinalWeights' values once it has answered: the model's
  // own but for unbounded sparse tables, each the rows that exist
  // (VariableSpec::row_ids). nullptr: the model's own.
  virtual const ModelSpec* FinalLayout() const { return nullptr; }

  // Whether the final evaluation waits for the report of an evaluator
  // outside TF_CONFIG that asked for the plan (the ps run); the ring run
  // does not wait for one.
  virtual bool WaitsForUnlistedEvaluator() const = 0;

  // Called every half second while the final evaluation is waited for:
  // the ps run recovers a ps lost since the final checkpoint, which the
  // evaluator reads the weights from (from its backup, or from that
  // checkpoint: every step is in it). Errors are logged, not fatal: the
  // weights to export are the final checkpoint's either way.
  virtual absl::Status KeepUpWhileFinishing() { return absl::OkStatus(); }
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_STRATEGY_RUN_H_
