// Chief: coordinates one training run, whichever the strategy. It makes
// the plan, serves the Coordinator (workers start polling for the plan at
// once), waits until every task of the cluster answers the health service,
// has the strategy set up the training state and hands out the plan, then
// logs and records progress while the strategy's loop checks run, and when
// every worker is done takes the final checkpoint, asks the evaluator for
// the final evaluation (or, with no evaluator and a data_dir, makes it
// itself), prints the `final:` line, exports the weights (safetensors) and
// tells every task to exit. A run that cannot go on is given up: every
// task is told to stop, as failed.
//
// What differs between the strategies is a StrategyRun
// (chief/strategy_run.h): ParameterServerRun (chief/ps_run.h: ps set-up
// and recovery, chunk dispatch, sync membership, checkpoints of the ps)
// and RingRun (chief/ring_run.h: the ring's base state, step dispatch and
// forming, broken-ring aborts, checkpoints of a replica). The frame's own
// parts: ClusterTasks (health wait, final evaluation, shutdown),
// CoordinatorService (plan, progress reports, the strategy's WorkSource),
// ProgressTracker and ProgressRecorder (log, metrics, TensorBoard),
// ScoreTestSet (compute/scoring.h) and ExportWeights (chief/weights_export.h).
//
// Run() is called once; RequestStop() may be called from any thread.
#ifndef PSCLUSTER_CHIEF_CHIEF_H_
#define PSCLUSTER_CHIEF_CHIEF_H_

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "chief/chief_options.h"
#include "common/metrics.h"
#include "compute/scoring.h"
#include "model/loss.h"

namespace pscluster {

// The figures of the final line.
struct RunResult {
  bool has_eval = false;
  std::string not_evaluated_why;  // when !has_eval, for the final line
  LossKind loss = LossKind::kSparseCategoricalCrossentropy;  // names the metrics
  double test_accuracy = 0;  // binary accuracy for binary cross-entropy
  double test_loss = 0;      // the MSE or MAE for regression
  double test_auc = -1;      // binary cross-entropy only
  std::vector<OutputScore> test_outputs;  // several outputs: each one's
  int64_t steps = 0;
  int epochs = 0;
  double wall_s = 0;
};

class Chief {
 public:
  // `metrics` is borrowed and must outlive the Chief.
  Chief(ChiefOptions options, Metrics* metrics) : options_(std::move(options)), metrics_(metrics) {}

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

// "final: test_accuracy=0.9912 test_loss=0.0290 steps=N epochs=N wall_s=N",
// or without an evaluation
// "final: not evaluated (<why>) steps=N epochs=N wall_s=N".
std::string FinalLine(const RunResult& r);

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_CHIEF_H_
