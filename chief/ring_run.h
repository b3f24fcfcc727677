// RingRun: the chief's run under --strategy=multi_worker_mirrored
// (docs/strategies.md), as a StrategyRun. There are no ps: every worker holds
// a replica of the whole model and the ring of workers sums the gradients
// (worker/ring_allreduce.h). The run hands out the data step by step and
// forms the ring (chief/ring_dispatcher.h, its WorkSource), aborts a broken
// ring's all-reduces, and checkpoints.
//
//   start        the replicas' first state comes from the chief (the
//                base): the initial weights, or the newest checkpoint in
//                checkpoint_dir (a restarted run resumes from it).
//   checkpoints  every checkpoint_every_steps / checkpoint_every and at the
//                end: the ring is paused between steps, one member's state
//                is read (all hold the same bits) and written in the same
//                format as the parameter servers' checkpoints (one ps's
//                shards), with the data position. The newest is the base:
//                a ring that loses every replica restarts from it.
//   worker lost  the ring breaks; the chief aborts its members'
//                all-reduces, forms a new ring of the workers left (a
//                member behind takes the state of a surviving replica), and
//                adds the worker back when it returns.
//
// Thread-safety as StrategyRun: work() (the RingDispatcher) is
// thread-safe, the rest is the Chief's thread's. Everything borrowed
// outlives the run.
#ifndef PSCLUSTER_CHIEF_RING_RUN_H_
#define PSCLUSTER_CHIEF_RING_RUN_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chief/chief_options.h"
#include "chief/ring_dispatcher.h"
#include "chief/strategy_run.h"
#include "model/model_spec.h"
#include "model/placement.h"
#include "proto/coordination.pb.h"
#include "proto/ps.pb.h"
#include "wire/ring_client.h"

namespace pscluster {

class RingRun final : public StrategyRun {
 public:
  // Completes `plan` with the replicas' update (the whole model as one
  // ps's shards, the optimizer as given, synchronous). `options`, `spec`
  // and `stop` are borrowed and outlive the run.
  RingRun(const ChiefOptions& options, const ModelSpec* spec, TrainingPlan plan,
          const std::atomic<bool>* stop);

  const TrainingPlan& plan() const override { return plan_; }
  // The base from the newest checkpoint (an unreadable one is an error),
  // or the initial weights.
  absl::Status Prepare(absl::Time* start) override;
  WorkSource* work() override { return ring_.get(); }
  absl::Status Start(ClusterTasks* tasks, absl::Time* start) override;
  void PlanHandedOut() override {}
  PsFleet* staleness_source() override { return nullptr; }
  bool AllFinished() const override { return ring_->AllFinished(); }
  absl::Status Tick() override;
  int64_t done_chunks() const override { return ring_->done_chunks(); }
  int64_t total_chunks() const override { return ring_->total_chunks(); }
  std::string ProgressNote() const override;
  std::string DoneNote() const override;
  // Reads the final state from any member (all hold the same bits): the
  // final weights, and with a checkpoint_dir the final checkpoint.
  absl::Status TakeFinalCheckpoint() override;
  absl::StatusOr<int64_t> FinalSteps() override { return final_step_; }
  // The weights TakeFinalCheckpoint read; FailedPrecondition before it.
  absl::StatusOr<const std::vector<float>*> FinalWeights(int64_t steps) override;
  bool WaitsForUnlistedEvaluator() const override { return false; }

 private:
  // Pauses the ring between steps, reads one member's state and writes it
  // as a checkpoint (also kept as the base). A ring that does not pause in
  // time (one being formed again) is skipped with a warning, OK.
  absl::Status TakeCheckpoint(const char* why);
  // Saves `state` of `step` with the data position `done` as the base and
  // (with a checkpoint_dir) on disk.
  absl::Status Keep(const char* why, int64_t step, ShardState state, const std::string& done);
  // Tells the broken ring's members to stop their all-reduces.
  void AbortBrokenRing();
  void LogEvents();

  const ChiefOptions& options_;
  const ModelSpec& spec_;
  TrainingPlan plan_;  // complete after construction
  const std::atomic<bool>& stop_;
  Placement placement_;     // the whole model as one ps's shards
  absl::Time run_started_;  // for the checkpoints' metadata
  std::unique_ptr<RingDispatcher> ring_;
  std::unique_ptr<RingClient> replicas_;
  int64_t last_checkpoint_step_ = 0;
  absl::Time last_checkpoint_time_;
  int64_t final_step_ = 0;
  std::optional<std::vector<float>> final_weights_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_RING_RUN_H_
