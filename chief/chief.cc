#include "chief/chief.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chief/checkpointer.h"
#include "chief/cluster_tasks.h"
#include "chief/coordinator_service.h"
#include "chief/dispatcher.h"
#include "chief/grpc_ps_fleet.h"
#include "chief/membership.h"
#include "chief/progress_recorder.h"
#include "chief/progress_tracker.h"
#include "chief/ring_chief.h"
#include "chief/ps_recovery.h"
#include "chief/ps_setup.h"
#include "compute/scoring.h"
#include "chief/weights_export.h"
#include "model/model_spec.h"
#include "model/keras_model.h"
#include "model/placement.h"
#include "wire/codec.h"
#include "wire/ps_client.h"
#include "chief/strategy.h"
#include "common/task_server.h"
#include "spdlog/spdlog.h"

namespace pscluster {

std::string FinalLine(const RunResult& r) {
  std::string eval;
  if (r.has_eval) {
    eval = absl::StrFormat("test_accuracy=%.4f test_loss=%.4f", r.test_accuracy, r.test_loss);
  } else {
    eval = "not evaluated";
    if (!r.not_evaluated_why.empty()) absl::StrAppend(&eval, " (", r.not_evaluated_why, ")");
  }
  return absl::StrFormat("final: %s steps=%d epochs=%d wall_s=%.1f", eval, r.steps, r.epochs,
                         r.wall_s);
}

OptimizerConfig EffectiveOptimizer(const OptimizerConfig& given, UpdateMode mode,
                                   int num_workers, AsyncLrScaling scaling, std::string* why) {
  OptimizerConfig o = given;
  if (mode != ASYNC || num_workers <= 1) return o;
  const double w = num_workers;
  const double factor = scaling == AsyncLrScaling::kSqrt     ? 1.0 / std::sqrt(w)
                        : scaling == AsyncLrScaling::kLinear ? 1.0 / w
                                                             : 1.0;
  o.set_learning_rate(static_cast<float>(given.learning_rate() * factor));
  o.set_decay_steps(given.decay_steps() * num_workers);
  if (why != nullptr) {
    *why = absl::StrFormat(
        "async with %d workers: each update's learning rate is %g (%g x %.4f, "
        "--async_lr_scaling); the decay counts %d updates per step of --lr_decay_steps",
        num_workers, o.learning_rate(), given.learning_rate(), factor, num_workers);
  }
  return o;
}

void Chief::RequestStop(const std::string& why) {
  if (!stop_.exchange(true)) spdlog::warn("stopping the run: {}", why);
}

// One run: its state, and the steps of Run() as methods. Each concern is a
// component of its own (see the headers included above); this class holds
// them together and tells the run's story.
class Chief::Impl {
 public:
  Impl(const ChiefOptions& options, Metrics* metrics, std::atomic<bool>* stop)
      : options_(options), metrics_(metrics), stop_(*stop) {}

  absl::StatusOr<RunResult> Run();
  bool gave_up() const { return gave_up_; }

 private:
  // The steps of Run(), in order.
  absl::Status MakePlan();
  absl::Status ServeCoordinator();
  absl::Status StartParameterServers();
  absl::Status Train();
  absl::StatusOr<RunResult> Finish();

  // A restarted chief (the ps were initialised): the data position.
  absl::Status ResumeRun(int64_t generation);
  // Lost workers logged, the sync set brought to the ps.
  void CheckWorkers();
  // Logs every ps's counters; the smallest version is the run's steps.
  absl::StatusOr<int64_t> FinalSteps();
  absl::Status FinalEvaluation(RunResult* result);
  // No evaluator: the chief scores the final weights on the test set in
  // options_.data_dir (compute/scoring.h).
  absl::Status EvaluateHere(RunResult* result);
  // The weights of `steps` (or newer), pulled once for the evaluation and
  // the export.
  absl::StatusOr<const std::vector<float>*> FinalWeights(int64_t steps);
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
  TrainingPlan plan_;
  std::optional<ModelSpec> spec_;
  std::optional<Placement> placement_;
  PsSetup ps_setup_;
  std::unique_ptr<ProgressTracker> tracker_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<CoordinatorService> coordinator_;
  std::unique_ptr<TaskServer> server_;
  std::unique_ptr<ClusterTasks> tasks_;
  std::unique_ptr<GrpcPsFleet> ps_;
  std::unique_ptr<MembershipSync> membership_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<PsRecovery> recovery_;
  std::unique_ptr<ProgressRecorder> recorder_;
  int64_t highest_version_ = 0;  // seen on any ps
  // The pull of FinalWeights(), kept for the export.
  std::optional<std::vector<float>> final_weights_;
};

absl::StatusOr<RunResult> Chief::Run() {
  Impl impl(options_, metrics_, &stop_);
  absl::StatusOr<RunResult> result = impl.Run();
  gave_up_ = impl.gave_up();
  return result;
}

absl::StatusOr<RunResult> Chief::Impl::Run() {
  start_ = absl::Now();
  if (absl::Status s = MakePlan(); !s.ok()) return s;
  if (plan_.strategy() == MULTI_WORKER_MIRRORED) {
    // No ps: the ring of workers sums the gradients (chief/ring_chief.h).
    RingChief ring(options_, plan_, *spec_, metrics_, &stop_, start_);
    absl::StatusOr<RunResult> result = ring.Run();
    gave_up_ = ring.gave_up();
    return result;
  }
  // Serve the Coordinator first: workers start polling for the plan at
  // once. No work is handed out until the ps are initialised (a restarted
  // chief's workers ask at once).
  if (absl::Status s = ServeCoordinator(); !s.ok()) return s;
  tasks_ = std::make_unique<ClusterTasks>(options_.config.cluster, &stop_);
  ps_ = std::make_unique<GrpcPsFleet>(&*placement_, tasks_->ps_channels(), &stop_);
  MembershipOptions mopt;
  mopt.mode = plan_.mode();
  membership_ = std::make_unique<MembershipSync>(mopt, ps_.get(), dispatcher_.get(), &stop_);

  // 1. Wait until every task answers.
  if (absl::Status s = tasks_->WaitUntilServing(options_.wait_for_cluster); !s.ok()) {
    return Fail(s);
  }

  // 2. Initialise the variables (or find them initialised) and hand out
  // the plan.
  if (absl::Status s = StartParameterServers(); !s.ok()) return Fail(s);
  spdlog::info("model {}: {} parameters; {} training, {} workers, batch {} per worker, {} epochs",
               spec_->name, spec_->num_parameters, plan_.mode() == SYNC ? "sync" : "async",
               plan_.num_workers(), plan_.batch_size(), plan_.epochs());
  const Codec push = CodecFromProto(plan_.push_codec());
  const Codec pull = CodecFromProto(plan_.pull_codec());
  spdlog::info("wire: gradients {}{}, weights {} (tensors under {} values as fp32)",
               CodecName(push),
               push == Codec::kTopK
                   ? absl::StrCat(" (", plan_.topk_fraction(), " of each, error feedback)")
               : push == Codec::kSign ? std::string(" (error feedback)")
                                      : std::string(),
               CodecName(pull), plan_.codec_min_elements());
  if (plan_.transport() == TRANSPORT_TCP) {
    spdlog::info("transport: push-pulls over each ps's tcp data plane{}{}",
                 plan_.push_overlap() ? ", gradients sent layer by layer during backprop" : "",
                 plan_.push_overlap() && plan_.priority_pull()
                     ? ", the next forward pass started on the first layers' weights" : "");
  }
  dispatcher_->ResetContact(absl::Now());
  membership_->Apply(/*force=*/true);
  coordinator_->SetPlan(plan_);
  dispatcher_->Resume();  // ServeCoordinator's pause
  server_->SetReady(true);  // the cluster is up (health: kReadyService)
  absl::StatusOr<std::unique_ptr<ProgressRecorder>> recorder =
      ProgressRecorder::Create(options_.logdir, metrics_, ps_.get());
  if (!recorder.ok()) return Fail(recorder.status());
  recorder_ = *std::move(recorder);

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

absl::Status Chief::Impl::MakePlan() {
  const TfConfig& config = options_.config;
  const ClusterSpec& cluster = config.cluster;
  plan_ = options_.plan;
  plan_.set_num_workers(cluster.num_tasks(kWorkerJob));
  plan_.set_num_ps(cluster.num_tasks(kPsJob));
  plan_.set_heartbeat_interval_s(
      static_cast<float>(absl::ToDoubleSeconds(options_.heartbeat_interval)));
  if (plan_.num_workers() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.source, ": cluster.worker is empty; nothing would train"));
  }
  const int replicas =
      options_.replicas_to_aggregate > 0 ? options_.replicas_to_aggregate : plan_.num_workers();
  if (plan_.mode() == SYNC && replicas > plan_.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat("--replicas_to_aggregate=", replicas,
                                                   " exceeds the ", plan_.num_workers(),
                                                   " workers in ", config.source));
  }
  absl::StatusOr<ModelSpec> spec = PlanModelSpec(plan_.model(), plan_.model_json());
  if (!spec.ok()) return spec.status();
  spec_ = *std::move(spec);
  if (plan_.strategy() == MULTI_WORKER_MIRRORED) {
    plan_.set_mode(SYNC);
    return absl::OkStatus();  // the RingChief sets up the replicas
  }
  if (plan_.num_ps() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.source, ": cluster.ps is empty; --strategy=parameter_server needs at least one "
                       "(or use --strategy=multi_worker_mirrored)"));
  }
  PlacementOptions popt;
  popt.min_shard_bytes = plan_.min_shard_bytes();
  placement_ = PlaceVariables(*spec_, plan_.num_ps(), popt);
  ps_setup_.placement = &*placement_;
  std::string why;
  ps_setup_.optimizer = EffectiveOptimizer(options_.optimizer, plan_.mode(),
                                           plan_.num_workers(), options_.async_lr_scaling, &why);
  if (!why.empty()) spdlog::info("{}", why);
  ps_setup_.mode = plan_.mode();
  ps_setup_.num_workers = plan_.num_workers();
  ps_setup_.replicas_to_aggregate = replicas;
  ps_setup_.nonfinite = options_.nonfinite;
  return absl::OkStatus();
}

absl::Status Chief::Impl::ServeCoordinator() {
  tracker_ = std::make_unique<ProgressTracker>(plan_.num_workers(), plan_.epochs(), start_);
  // Async, bounded delay: no chunk more than max_staleness rounds (one
  // chunk per worker) past the lowest unfinished one.
  const int64_t window = plan_.mode() == ASYNC ? int64_t{options_.max_staleness + 1} *
                                                     plan_.num_workers()
                                               : 0;
  dispatcher_ =
      std::make_unique<Dispatcher>(plan_.num_workers(), plan_.epochs(), start_, window);
  dispatcher_->Pause();  // until the plan is out (Run resumes)
  coordinator_ = std::make_unique<CoordinatorService>(tracker_.get(), dispatcher_.get());
  absl::StatusOr<std::unique_ptr<TaskServer>> server =
      TaskServer::Start(options_.config.own_port(), {coordinator_.get()});
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  return absl::OkStatus();
}

absl::Status Chief::Impl::StartParameterServers() {
  CheckpointerOptions copt;
  copt.dir = options_.checkpoint_dir;
  copt.keep = options_.keep_checkpoints;
  copt.every_steps = options_.checkpoint_every_steps;
  copt.every = options_.checkpoint_every;
  copt.mode = plan_.mode();
  copt.min_shard_bytes = plan_.min_shard_bytes();
  checkpointer_ = std::make_unique<Checkpointer>(copt, &*spec_, &*placement_, ps_.get(),
                                                 dispatcher_.get(), &stop_, start_);
  absl::StatusOr<PsStart> ps = InitialiseAll(
      ps_.get(), ps_setup_, InitialParameters(*spec_, plan_.seed()), options_.wait_for_cluster);
  if (!ps.ok()) return ps.status();
  highest_version_ = ps->highest_version;
  dispatcher_->set_generation(ps->generation);
  recovery_ =
      std::make_unique<PsRecovery>(&ps_setup_, ps->incarnations, options_.ps_recovery_timeout,
                                   ps_.get(), dispatcher_.get(), membership_.get(), &stop_);
  if (!ps->resumed) {
    // Fresh ps over a checkpoint directory that holds a checkpoint (the run
    // started again, maybe under the other strategy or ps count): every ps
    // starts from it, and the data from its position.
    absl::StatusOr<const Snapshot*> snap = checkpointer_->ReadNewestFromDisk();
    if (snap.ok()) {
      const Snapshot& latest = **snap;
      if (absl::Status s = recovery_->RestoreAll(latest, ps->generation + 1); !s.ok()) return s;
      highest_version_ = latest.step;
      if (latest.run_started_unix_ms > 0) {
        start_ = std::min(start_, absl::FromUnixMillis(latest.run_started_unix_ms));
        checkpointer_->set_run_started(start_);
      }
      spdlog::warn("resuming from the checkpoint of step {} in {} ({} chunks done)", latest.step,
                   options_.checkpoint_dir, dispatcher_->done_chunks());
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(snap.status())) return snap.status();
    return checkpointer_->Take("initial", highest_version_, /*workers_idle=*/true);
  }
  return ResumeRun(ps->generation);
}

absl::Status Chief::Impl::ResumeRun(int64_t generation) {
  // The ps keep training where they are; the data position comes from the
  // newest checkpoint on disk (chunks finished since are trained again).
  absl::StatusOr<const Snapshot*> snap = checkpointer_->ReadNewestFromDisk();
  if (snap.ok()) {
    const Snapshot& latest = **snap;
    if (absl::Status s =
            dispatcher_->Rewind(latest.chunks_per_epoch, latest.done_chunks, generation);
        !s.ok()) {
      return s;
    }
    if (latest.run_started_unix_ms > 0) {
      // wall_s in the final line covers the whole run, not this life.
      start_ = std::min(start_, absl::FromUnixMillis(latest.run_started_unix_ms));
      checkpointer_->set_run_started(start_);
    }
    spdlog::warn(
        "resuming a run in progress: the ps are at version {} (generation {}); "
        "data position from the checkpoint of step {} ({} chunks done)",
        highest_version_, generation, latest.step, dispatcher_->done_chunks());
    return absl::OkStatus();
  }
  if (!absl::IsNotFound(snap.status())) return snap.status();
  spdlog::warn(
      "resuming a run in progress: the ps are at version {} (generation {}); no "
      "checkpoint on disk, so the data starts over from the first epoch",
      highest_version_, generation);
  return checkpointer_->Take("resumed", highest_version_, /*workers_idle=*/true);
}

absl::Status Chief::Impl::Train() {
  absl::Time next_log = absl::Now() + options_.log_every;
  absl::Time next_ps_check = absl::Now() + options_.ps_check_every;
  absl::Time next_version_check = absl::Now();
  while (!dispatcher_->AllFinished()) {
    if (stop_ || server_->shutdown_requested()) {
      return absl::CancelledError("training interrupted");
    }
    absl::SleepFor(absl::Milliseconds(20));
    CheckWorkers();
    const absl::Time now = absl::Now();
    if (now >= next_ps_check) {
      next_ps_check = now + options_.ps_check_every;
      if (absl::Status s = recovery_->Check(checkpointer_->latest(), &highest_version_); !s.ok()) {
        return s;
      }
    }
    if (options_.checkpoint_every_steps > 0 && now >= next_version_check) {
      // Steps can be fast (hundreds a second in async): look at ps:0 often.
      next_version_check = now + absl::Milliseconds(50);
      if (absl::StatusOr<PsStatsResponse> st = ps_->Stats(0, absl::Milliseconds(200)); st.ok()) {
        highest_version_ = std::max(highest_version_, st->version());
      }
    }
    if (checkpointer_->Due(now, highest_version_)) {
      if (absl::Status s = checkpointer_->Take("periodic", highest_version_); !s.ok()) return s;
    }
    if (now >= next_log) {
      next_log = now + options_.log_every;
      Progress p = tracker_->Snapshot(now);
      spdlog::info("{} chunks {}/{}", ProgressTracker::Format(p), dispatcher_->done_chunks(),
                   dispatcher_->total_chunks());
      recorder_->Record(p);
    }
  }
  return absl::OkStatus();
}

void Chief::Impl::CheckWorkers() {
  for (const Dispatcher::Lost& l : dispatcher_->FindLost(absl::Now(), options_.heartbeat_timeout)) {
    spdlog::warn(
        "worker {} lost: no heartbeat for {:.1f} s; {} unfinished chunk(s) go to the "
        "other workers{}",
        l.worker, absl::ToDoubleSeconds(l.silent_for), l.chunks_released,
        plan_.mode() == SYNC ? "; sync steps stop waiting for it" : "");
  }
  for (const std::string& e : dispatcher_->TakeEvents()) spdlog::warn("{}", e);
  membership_->Apply();
}

absl::StatusOr<RunResult> Chief::Impl::Finish() {
  Progress last = tracker_->Snapshot(absl::Now());
  spdlog::info("{}", ProgressTracker::Format(last));
  spdlog::info(
      "every worker is done: {} of {} chunks trained; handed_out_again={} (a ps "
      "dropped their gradient as stale); bound_answers={} (async: a worker told to wait, "
      "max_staleness)",
      dispatcher_->done_chunks(), dispatcher_->total_chunks(), dispatcher_->returned_chunks(),
      dispatcher_->bound_answers());
  recorder_->Record(last);
  if (absl::Status s = checkpointer_->Take("final", highest_version_); !s.ok()) return s;

  RunResult result;
  result.epochs = plan_.epochs();
  absl::StatusOr<int64_t> steps = FinalSteps();
  if (!steps.ok()) return steps.status();
  result.steps = *steps;
  if (absl::Status s = FinalEvaluation(&result); !s.ok()) return s;
  if (result.has_eval) {
    recorder_->RecordFinal(result.steps, result.test_accuracy, result.test_loss);
  }
  recorder_->Close();
  if (absl::Status s = Export(result); !s.ok()) return s;
  return result;
}

absl::StatusOr<int64_t> Chief::Impl::FinalSteps() {
  int64_t steps = -1;
  for (int i = 0; i < plan_.num_ps(); ++i) {
    absl::StatusOr<PsStatsResponse> st = ps_->Stats(i, absl::Seconds(10));
    if (!st.ok()) return st.status();
    const double mean_staleness =
        st->pushes_applied() > 0
            ? static_cast<double>(st->staleness_sum()) / static_cast<double>(st->pushes_applied())
            : 0.0;
    spdlog::info(
        "ps:{} version={} generation={} pushes applied={} dropped_stale={} rejected={} "
        "duplicate={} skipped_nonfinite={} staleness_mean={:.2f} staleness_max={} "
        "digest={:016x} pulled={:.1f} MB pushed={:.1f} MB",
        i, st->version(), st->generation(), st->pushes_applied(), st->pushes_dropped_stale(),
        st->pushes_rejected(), st->pushes_duplicate(), st->steps_skipped_nonfinite(),
        mean_staleness, st->staleness_max(), st->applied_digest(), st->bytes_pulled() / 1e6,
        st->bytes_pushed() / 1e6);
    steps = steps < 0 ? st->version() : std::min(steps, st->version());
  }
  return std::max<int64_t>(steps, 0);
}

absl::Status Chief::Impl::FinalEvaluation(RunResult* result) {
  if (tasks_->has_evaluator()) {
    return ScoreByEvaluator(*tasks_, options_.final_eval_timeout, result);
  }
  if (coordinator_->evaluator_seen()) {
    // An evaluator outside the cluster (TensorFlow's and the Kubeflow
    // operator's layout) reports on its own: wait for its verdict on the
    // final weights, which it evaluates within its interval.
    spdlog::info("waiting for the evaluator's report on step {}", result->steps);
    const absl::Time give_up = absl::Now() + options_.final_eval_timeout;
    while (absl::Now() < give_up && !stop_) {
      Progress p = tracker_->Snapshot(absl::Now());
      if (p.last_eval_step >= result->steps) {
        result->has_eval = true;
        result->test_accuracy = p.last_eval_accuracy;
        result->test_loss = p.last_eval_loss;
        return absl::OkStatus();
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    spdlog::warn("no evaluation of the final weights arrived");
    result->not_evaluated_why =
        absl::StrFormat("the evaluator outside TF_CONFIG sent no report on step %d within %.0f s",
                        result->steps, absl::ToDoubleSeconds(options_.final_eval_timeout));
  } else {
    result->not_evaluated_why = "no evaluator in TF_CONFIG; give the chief --data_dir to evaluate";
  }
  if (options_.data_dir.empty() || stop_) return absl::OkStatus();
  return EvaluateHere(result);
}

absl::Status Chief::Impl::EvaluateHere(RunResult* result) {
  absl::StatusOr<const std::vector<float>*> weights = FinalWeights(result->steps);
  if (!weights.ok()) return weights.status();
  ScoreFinalWeights(*spec_, **weights, options_.data_dir, result);
  return absl::OkStatus();
}

absl::Status ScoreByEvaluator(ClusterTasks& tasks, absl::Duration timeout, RunResult* result) {
  absl::StatusOr<EvalReport> r = tasks.Evaluate(result->steps, timeout);
  if (!r.ok()) return r.status();
  result->has_eval = true;
  result->test_accuracy = r->accuracy();
  result->test_loss = r->loss();
  return absl::OkStatus();
}

void ScoreFinalWeights(const ModelSpec& spec, const std::vector<float>& weights,
                       const std::string& data_dir, RunResult* result) {
  spdlog::info("the chief evaluates the weights of step {} itself, on the test set in {}",
               result->steps, data_dir);
  absl::StatusOr<TestScore> score = ScoreTestSet(spec, weights.data(), data_dir);
  if (!score.ok()) {
    // The run itself went well and its weights are kept (checkpoint,
    // export): the final line says why they were not scored.
    result->not_evaluated_why = absl::StrCat("--data_dir=", data_dir, ": ", score.status().message());
    spdlog::error("evaluating the final weights failed: {}", result->not_evaluated_why);
    return;
  }
  result->has_eval = true;
  result->test_accuracy = score->accuracy;
  result->test_loss = score->loss;
  result->not_evaluated_why.clear();
  spdlog::info("eval: step={} accuracy={:.4f} loss={:.4f} (final, by the chief on {} examples)",
               result->steps, score->accuracy, score->loss, score->examples);
}

absl::StatusOr<const std::vector<float>*> Chief::Impl::FinalWeights(int64_t steps) {
  if (final_weights_.has_value()) return &*final_weights_;
  PsClientOptions popt;
  popt.stop = &stop_;
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Create(options_.config.cluster, &*placement_, popt);
  if (!client.ok()) return client.status();
  std::vector<float> flat(spec_->num_parameters);
  if (absl::Status s = (*client)->PullAll(steps, flat.data(), absl::Minutes(2)); !s.ok()) {
    return s;
  }
  final_weights_ = std::move(flat);
  return &*final_weights_;
}

absl::Status Chief::Impl::Export(const RunResult& result) {
  if (options_.export_path.empty()) return absl::OkStatus();
  absl::StatusOr<const std::vector<float>*> weights = FinalWeights(result.steps);
  if (!weights.ok()) return weights.status();
  absl::Status s =
      ExportWeights(options_.export_path, *spec_, **weights, result.steps, result.epochs,
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
