// Chief: coordinates one training run. It waits until every task of the
// cluster answers the health service, places the model's variables over
// the ps tasks and initialises them, hands the plan to workers and the
// evaluator (Coordinator service) and the data to workers one chunk at a
// time (Dispatcher), logs progress, and when every worker is done asks the
// evaluator for the final evaluation (or, with no evaluator and a data_dir,
// makes it itself), prints the `final:` line, exports the weights
// (safetensors) and tells every task to exit.
//
// Faults it rides out:
//   worker lost  no heartbeat within heartbeat_timeout: its unfinished
//                chunks go to the others and sync steps stop waiting for
//                it until it is back (it rejoins by asking for work).
//   ps lost      it stops answering, or answers as a new process: workers
//                are paused; once it is back every ps is restored from the
//                newest checkpoint (a new generation) and the data position
//                rewinds to the checkpoint's; steps since it are lost.
//   chief lost   a restarted chief finds the ps initialised and keeps their
//                parameters; the data position comes from the newest
//                checkpoint in checkpoint_dir.
// Checkpoints: every checkpoint_every_steps / checkpoint_every and at the
// end, with workers paused between steps so that every shard's values and
// optimizer slots belong to one consistent cut. The newest is also kept in
// memory, so ps recovery never depends on a disk.
//
// Its parts, one concern each (chief.cc holds them together): ClusterTasks
// (health wait, final evaluation, shutdown), GrpcPsFleet (the chief's own
// calls to the ps, behind the PsFleet interface), PsSetup (initialisation),
// PsRecovery (a lost ps), MembershipSync (the sync worker set),
// Checkpointer and Snapshot (checkpoints and their encoding),
// ProgressRecorder (metrics and TensorBoard), ExportWeights (pulled with
// wire/ps_client.h, the workers' client); the workers' side is
// Dispatcher (work, pauses, liveness), ProgressTracker and
// CoordinatorService.
//
// Run() is called once; RequestStop() may be called from any thread.
#ifndef PSCLUSTER_CHIEF_CHIEF_H_
#define PSCLUSTER_CHIEF_CHIEF_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/metrics.h"
#include "model/model_spec.h"
#include "proto/coordination.pb.h"
#include "proto/ps.pb.h"

namespace pscluster {

// Async: how an update's learning rate follows from --learning_rate, each
// update carrying 1/num_workers of the global batch (see chief/main.cc).
enum class AsyncLrScaling { kSqrt, kLinear, kNone };

// The optimizer the ps run: `given` in sync mode; in async mode its
// learning rate scaled by `scaling` for `num_workers` and its decay counted
// in rounds of num_workers updates. `why` (may be null) gets a line saying
// what changed.
OptimizerConfig EffectiveOptimizer(const OptimizerConfig& given, UpdateMode mode,
                                   int num_workers, AsyncLrScaling scaling, std::string* why);

struct ChiefOptions {
  TfConfig config;
  TrainingPlan plan;            // model, batch, epochs, mode, seed, ...
  OptimizerConfig optimizer;
  int replicas_to_aggregate = 0;  // 0: every worker
  int max_staleness = 8;  // async: see chief/main.cc's --max_staleness
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
  NonFinitePolicy nonfinite = NONFINITE_REJECT;
  AsyncLrScaling async_lr_scaling = AsyncLrScaling::kSqrt;
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
};

// The figures of the final line.
struct RunResult {
  bool has_eval = false;
  std::string not_evaluated_why;  // when !has_eval, for the final line
  double test_accuracy = 0;
  double test_loss = 0;
  int64_t steps = 0;
  int epochs = 0;
  double wall_s = 0;
};

class Chief {
 public:
  // `metrics` is borrowed and must outlive the Chief.
  Chief(ChiefOptions options, Metrics* metrics)
      : options_(std::move(options)), metrics_(metrics) {}

  absl::StatusOr<RunResult> Run();
  void RequestStop(const std::string& why);
  // After Run() failed: whether it gave the run up and stopped every task
  // as failed (the chief then exits kExitRunFailed: starting it again would
  // find no one), rather than failing before the cluster was touched.
  bool gave_up() const { return gave_up_; }

 private:
  class Impl;
  const ChiefOptions options_;
  Metrics* const metrics_;
  std::atomic<bool> stop_{false};
  bool gave_up_ = false;
};

class ClusterTasks;

// The final weights (of step result->steps) scored by the cluster's
// evaluator into *result; the evaluator's error, if it fails or does not
// answer within `timeout`.
absl::Status ScoreByEvaluator(ClusterTasks& tasks, absl::Duration timeout, RunResult* result);

// The chief's own evaluation of the final weights (no evaluator in the
// cluster): scores `weights` on the test set in `data_dir` into *result
// (result->steps names them in the log), or says in not_evaluated_why why
// it could not; the run goes on either way.
void ScoreFinalWeights(const ModelSpec& spec, const std::vector<float>& weights,
                       const std::string& data_dir, RunResult* result);

// "final: test_accuracy=0.9912 test_loss=0.0290 steps=N epochs=N wall_s=N",
// or without an evaluation
// "final: not evaluated (<why>) steps=N epochs=N wall_s=N".
std::string FinalLine(const RunResult& r);

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_CHIEF_H_
