// RingChief: the chief's run under --strategy=multi_worker_mirrored (README
// "Strategies"). There are no ps: every worker holds a replica of the whole
// model and the ring of workers sums the gradients (worker/ring_allreduce.h).
// The chief still plans, hands out the data step by step and forms the ring
// (chief/ring_dispatcher.h), logs progress, checkpoints, has the final
// weights evaluated and exported, and ends the run.
//
//   start        the replicas' first state comes from the chief: the
//                initial weights, or the newest checkpoint in
//                checkpoint_dir (a restarted run resumes from it).
//   checkpoints  every checkpoint_every_steps / checkpoint_every and at the
//                end: the ring is paused between steps, one member's state
//                is read (all hold the same bits) and written in the same
//                format as the parameter servers' checkpoints (one ps's
//                shards), with the data position. The newest is kept in
//                memory: a ring that loses every replica restarts from it.
//   worker lost  the ring breaks; the chief aborts its members'
//                all-reduces, forms a new ring of the workers left (a
//                member behind takes the state of a surviving replica), and
//                adds the worker back when it returns.
//
// Run() is called once; the stop flag is borrowed.
#ifndef PSCLUSTER_CHIEF_RING_CHIEF_H_
#define PSCLUSTER_CHIEF_RING_CHIEF_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chief/chief.h"
#include "chief/cluster_tasks.h"
#include "chief/coordinator_service.h"
#include "chief/progress_recorder.h"
#include "chief/progress_tracker.h"
#include "chief/ring_dispatcher.h"
#include "chief/snapshot.h"
#include "common/metrics.h"
#include "model/model_spec.h"
#include "model/placement.h"
#include "common/task_server.h"
#include "proto/coordination.pb.h"
#include "wire/ring_client.h"

namespace pscluster {

class RingChief {
 public:
  // `plan` is complete but for the replica setup, which the RingChief adds;
  // everything borrowed outlives it.
  RingChief(const ChiefOptions& options, const TrainingPlan& plan, const ModelSpec& spec,
            Metrics* metrics, std::atomic<bool>* stop, absl::Time start);

  absl::StatusOr<RunResult> Run();
  // After Run() failed: whether it stopped every task as failed.
  bool gave_up() const { return gave_up_; }

 private:
  absl::Status Start();
  absl::Status Train();
  absl::StatusOr<RunResult> Finish();
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
  absl::Status EvaluateFinal(std::vector<float>* weights, RunResult* result);
  void ShutdownAll(const std::string& reason, bool run_failed = false);
  absl::Status Fail(absl::Status s);

  const ChiefOptions& options_;
  TrainingPlan plan_;
  const ModelSpec& spec_;
  Metrics* const metrics_;
  std::atomic<bool>& stop_;
  absl::Time start_;
  bool gave_up_ = false;
  Placement placement_;  // the whole model as one ps's shards
  std::unique_ptr<ProgressTracker> tracker_;
  std::unique_ptr<RingDispatcher> ring_;
  std::unique_ptr<CoordinatorService> coordinator_;
  std::unique_ptr<TaskServer> server_;
  std::unique_ptr<ClusterTasks> tasks_;
  std::unique_ptr<RingClient> replicas_;
  std::unique_ptr<ProgressRecorder> recorder_;
  int64_t last_checkpoint_step_ = 0;
  absl::Time last_checkpoint_time_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_RING_CHIEF_H_
