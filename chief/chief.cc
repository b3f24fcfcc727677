#include "chief/chief.h"

#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "chief/cluster_tasks.h"
#include "chief/coordinator_service.h"
#include "chief/progress_recorder.h"
#include "chief/progress_tracker.h"
#include "chief/ps_run.h"
#include "chief/ring_run.h"
#include "chief/strategy_run.h"
#include "chief/weights_export.h"
#include "common/status_macros.h"
#include "common/task_server.h"
#include "compute/scoring.h"
#include "model/keras_model.h"
#include "model/model_spec.h"
#include "spdlog/spdlog.h"

namespace pscluster {

std::string FinalLine(const RunResult& r) {
  std::string eval;
  if (r.has_eval) {
    eval = ScoreText(r.loss, r.test_accuracy, r.test_auc, r.test_loss, r.test_outputs, "test_");
  } else {
    eval = "not evaluated";
    if (!r.not_evaluated_why.empty()) absl::StrAppend(&eval, " (", r.not_evaluated_why, ")");
  }
  return absl::StrFormat("final: %s steps=%d epochs=%d wall_s=%.1f", eval, r.steps, r.epochs,
                         r.wall_s);
}

namespace {

// An evaluator's per-output metrics; their losses' kinds are set from the
// spec before the final line names them.
std::vector<OutputScore> OutputScoresOf(const std::vector<OutputEval>& outputs) {
  std::vector<OutputScore> scores;
  for (const OutputEval& e : outputs) {
    OutputScore o;
    o.name = e.name();
    o.accuracy = e.accuracy();
    o.loss = e.loss();
    o.auc = e.auc();
    scores.push_back(std::move(o));
  }
  return scores;
}

// The final weights (of step result->steps) scored by the cluster's
// evaluator into *result; the evaluator's error, if it fails or does not
// answer within `timeout`.
// The evaluator's score of the final weights; meanwhile `keep_up` runs every
// half second (StrategyRun::KeepUpWhileFinishing), its errors logged.
absl::Status ScoreByEvaluator(ClusterTasks& tasks, absl::Duration timeout,
                              const std::function<absl::Status()>& keep_up, RunResult* result) {
  absl::StatusOr<EvalReport> r;
  absl::Notification done;
  std::thread asked([&] {
    r = tasks.Evaluate(result->steps, timeout);
    done.Notify();
  });
  while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(500))) {
    if (absl::Status s = keep_up(); !s.ok()) {
      spdlog::warn("while the final weights are evaluated: {}", std::string(s.message()));
    }
  }
  asked.join();
  if (!r.ok()) return r.status();
  result->has_eval = true;
  result->test_accuracy = r->accuracy();
  result->test_loss = r->loss();
  result->test_auc = r->auc();
  result->test_outputs = OutputScoresOf({r->outputs().begin(), r->outputs().end()});
  return absl::OkStatus();
}

// The chief's own evaluation of the final weights (no evaluator in the
// cluster): scores `weights` on the test set in `data_dir` into *result
// (result->steps names them in the log), or says in not_evaluated_why why
// it could not; the run goes on either way.
void ScoreFinalWeights(const ModelSpec& spec, const std::vector<float>& weights,
                       const std::string& data_dir, uint64_t seed, RunResult* result) {
  spdlog::info("the chief evaluates the weights of step {} itself, on the test set in {}",
               result->steps, data_dir);
  absl::StatusOr<TestScore> score = ScoreTestSet(spec, weights.data(), data_dir, 1, seed);
  if (!score.ok()) {
    // The run itself went well and its weights are kept (checkpoint,
    // export): the final line says why they were not scored.
    result->not_evaluated_why =
        absl::StrCat("--data_dir=", data_dir, ": ", score.status().message());
    spdlog::error("evaluating the final weights failed: {}", result->not_evaluated_why);
    return;
  }
  result->has_eval = true;
  result->test_accuracy = score->accuracy;
  result->test_loss = score->loss;
  result->test_auc = score->auc;
  result->test_outputs = score->outputs;
  result->not_evaluated_why.clear();
  spdlog::info("eval: step={} {} (final, by the chief on {} examples)", result->steps,
               ScoreText(spec.loss, score->accuracy, score->auc, score->loss, score->outputs, ""),
               score->examples);
}

}  // namespace

void Chief::RequestStop(const std::string& why) {
  if (!stop_.exchange(true)) spdlog::warn("stopping the run: {}", why);
}

// One run: its state, and the steps of Run() as methods. What the
// strategies share is here; what differs is the StrategyRun's.
class Chief::Impl {
 public:
  Impl(const ChiefOptions& options, Metrics* metrics, std::atomic<bool>* stop)
      : options_(options), metrics_(metrics), stop_(*stop) {}

  absl::StatusOr<RunResult> Run();
  bool gave_up() const { return gave_up_; }

 private:
  // The steps of Run(), in order.
  absl::Status MakeStrategyRun();
  absl::Status ServeCoordinator();
  // Waits for every task, has the strategy set up the training state, and
  // hands out the plan.
  absl::Status StartTraining();
  absl::Status Train();
  absl::StatusOr<RunResult> Finish();

  absl::Status FinalEvaluation(RunResult* result);
  // An evaluator outside TF_CONFIG reports on its own: waits for its
  // verdict on the final weights; false (and why in the result) when none
  // came within final_eval_timeout.
  bool AwaitEvaluatorReport(RunResult* result);
  // No evaluator: the chief scores the final weights on the test set in
  // options_.data_dir (compute/scoring.h).
  absl::Status EvaluateHere(RunResult* result);
  absl::Status Export(const RunResult& result);
  void ShutdownAll(const std::string& reason, bool run_failed = false);
  // Ends a run that cannot go on: every task is told to stop, as failed
  // (exit kExitRunFailed) unless the chief was itself told to stop.
  absl::Status Fail(absl::Status s) {
    gave_up_ = !absl::IsCancelled(s);
    ShutdownAll(absl::StrCat("the chief failed: ", s.message()), gave_up_);
    return s;
  }

  const ChiefOptions& options_;
  Metrics* const metrics_;
  std::atomic<bool>& stop_;
  bool gave_up_ = false;  // Fail() stopped every task as failed
  absl::Time start_;
  std::optional<ModelSpec> spec_;
  std::unique_ptr<StrategyRun> strategy_;  // borrows spec_
  std::unique_ptr<ProgressTracker> tracker_;
  std::unique_ptr<CoordinatorService> coordinator_;  // serves strategy_->work()
  std::unique_ptr<TaskServer> server_;               // serves coordinator_
  std::unique_ptr<ClusterTasks> tasks_;
  std::unique_ptr<ProgressRecorder> recorder_;  // reads strategy_'s fleet
};

absl::StatusOr<RunResult> Chief::Run() {
  Impl impl(options_, metrics_, &stop_);
  absl::StatusOr<RunResult> result = impl.Run();
  gave_up_ = impl.gave_up();
  return result;
}

absl::StatusOr<RunResult> Chief::Impl::Run() {
  start_ = absl::Now();
  // Until the Coordinator serves, no task is touched: errors (a bad plan,
  // a checkpoint that cannot be read) are only returned.
  PSCLUSTER_RETURN_IF_ERROR(MakeStrategyRun());
  PSCLUSTER_RETURN_IF_ERROR(strategy_->Prepare(&start_));
  // Serve the Coordinator first: workers start polling for the plan at
  // once. No work is handed out until the strategy has set up the training
  // state (a restarted chief's workers ask at once).
  PSCLUSTER_RETURN_IF_ERROR(ServeCoordinator());
  tasks_ = std::make_unique<ClusterTasks>(options_.config.cluster, &stop_);

  // 1. Wait until every task answers; 2. set up the training state (or
  // find it set up) and hand out the plan.
  if (absl::Status s = StartTraining(); !s.ok()) return Fail(s);

  // 3. Hand out work and watch over the cluster until every worker is done.
  if (absl::Status s = Train(); !s.ok()) return Fail(s);

  // 4. The final checkpoint and figures, the evaluator's verdict, the
  // export of the trained weights.
  absl::StatusOr<RunResult> result = Finish();
  if (!result.ok()) return Fail(result.status());
  result->wall_s = absl::ToDoubleSeconds(absl::Now() - start_);
  ShutdownAll("training finished");
  return result;
}

absl::Status Chief::Impl::MakeStrategyRun() {
  const TfConfig& config = options_.config;
  const ClusterSpec& cluster = config.cluster;
  TrainingPlan plan = options_.plan;
  plan.set_num_workers(cluster.num_tasks(kWorkerJob));
  plan.set_num_ps(cluster.num_tasks(kPsJob));
  plan.set_heartbeat_interval_s(
      static_cast<float>(absl::ToDoubleSeconds(options_.heartbeat_interval)));
  if (plan.num_workers() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.source, ": cluster.worker is empty; nothing would train"));
  }
  const int replicas =
      options_.replicas_to_aggregate > 0 ? options_.replicas_to_aggregate : plan.num_workers();
  if (plan.mode() == SYNC && replicas > plan.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat("--replicas_to_aggregate=", replicas,
                                                   " exceeds the ", plan.num_workers(),
                                                   " workers in ", config.source));
  }
  absl::StatusOr<ModelSpec> spec = PlanModelSpec(plan.model(), plan.model_json(), plan.loss());
  if (!spec.ok()) return spec.status();
  spec_ = *std::move(spec);
  if (plan.strategy() == MULTI_WORKER_MIRRORED) {
    // No ps: the ring of workers sums the gradients.
    strategy_ = std::make_unique<RingRun>(options_, &*spec_, std::move(plan), &stop_);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<ParameterServerRun>> ps =
      ParameterServerRun::Create(options_, &*spec_, std::move(plan), &stop_, metrics_);
  if (!ps.ok()) return ps.status();
  strategy_ = *std::move(ps);
  return absl::OkStatus();
}

absl::Status Chief::Impl::ServeCoordinator() {
  const TrainingPlan& plan = strategy_->plan();
  tracker_ = std::make_unique<ProgressTracker>(plan.num_workers(), plan.epochs(), start_);
  coordinator_ = std::make_unique<CoordinatorService>(tracker_.get(), strategy_->work());
  absl::StatusOr<std::unique_ptr<TaskServer>> server =
      TaskServer::Start(options_.config.own_port(), {coordinator_.get()});
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  return absl::OkStatus();
}

absl::Status Chief::Impl::StartTraining() {
  PSCLUSTER_RETURN_IF_ERROR(
      tasks_->WaitUntilServing(options_.wait_for_cluster, options_.min_workers, options_.min_ps));
  PSCLUSTER_RETURN_IF_ERROR(strategy_->Start(tasks_.get(), &start_));
  coordinator_->SetPlan(strategy_->plan());
  strategy_->PlanHandedOut();
  server_->SetReady(true);  // the cluster is up (health: kReadyService)
  absl::StatusOr<std::unique_ptr<ProgressRecorder>> recorder =
      ProgressRecorder::Create(options_.logdir, metrics_, strategy_->staleness_source());
  if (!recorder.ok()) return recorder.status();
  recorder_ = *std::move(recorder);
  return absl::OkStatus();
}

absl::Status Chief::Impl::Train() {
  absl::Time next_log = absl::Now() + options_.log_every;
  while (!strategy_->AllFinished()) {
    if (stop_ || server_->shutdown_requested()) {
      return absl::CancelledError("training interrupted");
    }
    absl::SleepFor(absl::Milliseconds(20));
    PSCLUSTER_RETURN_IF_ERROR(strategy_->Tick());
    const absl::Time now = absl::Now();
    if (now >= next_log) {
      next_log = now + options_.log_every;
      Progress p = tracker_->Snapshot(now);
      spdlog::info("{} chunks {}/{}{}", ProgressTracker::Format(p), strategy_->done_chunks(),
                   strategy_->total_chunks(), strategy_->ProgressNote());
      recorder_->Record(p);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RunResult> Chief::Impl::Finish() {
  Progress last = tracker_->Snapshot(absl::Now());
  spdlog::info("{}", ProgressTracker::Format(last));
  spdlog::info("every worker is done: {} of {} chunks trained{}", strategy_->done_chunks(),
               strategy_->total_chunks(), strategy_->DoneNote());
  recorder_->Record(last);
  PSCLUSTER_RETURN_IF_ERROR(strategy_->TakeFinalCheckpoint());

  RunResult result;
  result.loss = spec_->loss;
  result.epochs = strategy_->plan().epochs();
  absl::StatusOr<int64_t> steps = strategy_->FinalSteps();
  if (!steps.ok()) return steps.status();
  result.steps = *steps;
  PSCLUSTER_RETURN_IF_ERROR(FinalEvaluation(&result));
  for (size_t k = 0; k < result.test_outputs.size() && k < spec_->outputs.size(); ++k) {
    result.test_outputs[k].kind = spec_->outputs[k].group.loss;  // names its metrics
  }
  if (result.has_eval) {
    recorder_->RecordFinal(result.steps, result.test_accuracy, result.test_loss);
  }
  recorder_->Close();
  PSCLUSTER_RETURN_IF_ERROR(Export(result));
  return result;
}

absl::Status Chief::Impl::FinalEvaluation(RunResult* result) {
  if (tasks_->has_evaluator()) {
    // The ring's evaluator reads the weights from a worker's replica.
    return ScoreByEvaluator(*tasks_, options_.final_eval_timeout,
                            [this] { return strategy_->KeepUpWhileFinishing(); }, result);
  }
  if (strategy_->WaitsForUnlistedEvaluator() && coordinator_->evaluator_seen()) {
    if (AwaitEvaluatorReport(result)) return absl::OkStatus();
  } else {
    result->not_evaluated_why = "no evaluator in TF_CONFIG; give the chief --data_dir to evaluate";
  }
  if (options_.data_dir.empty() || stop_) return absl::OkStatus();
  return EvaluateHere(result);
}

bool Chief::Impl::AwaitEvaluatorReport(RunResult* result) {
  // An evaluator outside the cluster (TensorFlow's and the Kubeflow
  // operator's layout) evaluates the final weights within its interval.
  spdlog::info("waiting for the evaluator's report on step {}", result->steps);
  const absl::Time give_up = absl::Now() + options_.final_eval_timeout;
  absl::Time next_keep_up = absl::Now();
  while (absl::Now() < give_up && !stop_) {
    if (absl::Now() >= next_keep_up) {
      next_keep_up = absl::Now() + absl::Milliseconds(500);
      if (absl::Status s = strategy_->KeepUpWhileFinishing(); !s.ok()) {
        spdlog::warn("while the final weights are evaluated: {}", std::string(s.message()));
      }
    }
    Progress p = tracker_->Snapshot(absl::Now());
    if (p.last_eval_step >= result->steps) {
      result->has_eval = true;
      result->test_accuracy = p.last_eval_accuracy;
      result->test_loss = p.last_eval_loss;
      result->test_auc = p.last_eval_auc;
      result->test_outputs = OutputScoresOf(p.last_eval_outputs);
      return true;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  spdlog::warn("no evaluation of the final weights arrived");
  result->not_evaluated_why =
      absl::StrFormat("the evaluator outside TF_CONFIG sent no report on step %d within %.0f s",
                      result->steps, absl::ToDoubleSeconds(options_.final_eval_timeout));
  return false;
}

absl::Status Chief::Impl::EvaluateHere(RunResult* result) {
  absl::StatusOr<const std::vector<float>*> weights = strategy_->FinalWeights(result->steps);
  if (!weights.ok()) return weights.status();
  const ModelSpec* layout = strategy_->FinalLayout();
  ScoreFinalWeights(layout != nullptr ? *layout : *spec_, **weights, options_.data_dir,
                    strategy_->plan().seed(), result);
  return absl::OkStatus();
}

absl::Status Chief::Impl::Export(const RunResult& result) {
  if (options_.export_path.empty()) return absl::OkStatus();
  absl::StatusOr<const std::vector<float>*> weights = strategy_->FinalWeights(result.steps);
  if (!weights.ok()) return weights.status();
  const ModelSpec* layout = strategy_->FinalLayout();
  absl::Status s =
      ExportWeights(options_.export_path, layout != nullptr ? *layout : *spec_, **weights,
                    result.steps, result.epochs,
                    result.has_eval ? std::optional<double>(result.test_accuracy) : std::nullopt);
  if (!s.ok()) return s;
  spdlog::info("trained weights written to {}", options_.export_path);
  return absl::OkStatus();
}

void Chief::Impl::ShutdownAll(const std::string& reason, bool run_failed) {
  if (server_) server_->RequestShutdown(reason, run_failed);  // not ready from here on
  if (tasks_) tasks_->ShutdownAll(reason, run_failed);
  if (server_) server_->Stop();
}

}  // namespace pscluster
