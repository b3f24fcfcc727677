#include "chief/ring_chief.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chief/ps_setup.h"
#include "chief/weights_export.h"
#include "model/checkpoint.h"
#include "chief/strategy.h"
#include "wire/codec.h"
#include "spdlog/spdlog.h"
#include "update/model_replica.h"

namespace pscluster {
namespace {

// How long a paused ring may take to park for a checkpoint.
constexpr absl::Duration kParkTimeout = absl::Seconds(60);
// One attempt to read a replica's whole state (values and slots).
constexpr absl::Duration kStateTimeout = absl::Minutes(2);

}  // namespace

RingChief::RingChief(const ChiefOptions& options, const TrainingPlan& plan, const ModelSpec& spec,
                     Metrics* metrics, std::atomic<bool>* stop, absl::Time start)
    : options_(options), plan_(plan), spec_(spec), metrics_(metrics), stop_(*stop), start_(start) {}

absl::StatusOr<RunResult> RingChief::Run() {
  // An error before the cluster was touched (a bad checkpoint) is only
  // returned; from then on every task is told the run failed.
  if (absl::Status s = Start(); !s.ok()) return tasks_ != nullptr ? Fail(s) : s;
  if (absl::Status s = Train(); !s.ok()) return Fail(s);
  absl::StatusOr<RunResult> result = Finish();
  if (!result.ok()) return Fail(result.status());
  result->wall_s = absl::ToDoubleSeconds(absl::Now() - start_);
  ShutdownAll("training finished");
  return result;
}

absl::Status RingChief::Fail(absl::Status s) {
  gave_up_ = !absl::IsCancelled(s);
  ShutdownAll(absl::StrCat("the chief failed: ", s.message()), gave_up_);
  return s;
}

void RingChief::ShutdownAll(const std::string& reason, bool run_failed) {
  if (server_) server_->RequestShutdown(reason, run_failed);
  if (tasks_) tasks_->ShutdownAll(reason, run_failed);
  if (server_) server_->Stop();
}

absl::Status RingChief::Start() {
  // The replicas' update: the whole model as one ps's shards (in the flat
  // order), the sync optimizer as given, applied by one writer per step.
  PlacementOptions popt;
  popt.min_shard_bytes = plan_.min_shard_bytes();
  placement_ = PlaceVariables(spec_, 1, popt);
  PsSetup setup;
  setup.placement = &placement_;
  setup.optimizer = options_.optimizer;
  setup.mode = ASYNC;
  setup.num_workers = 1;
  setup.replicas_to_aggregate = 1;
  setup.nonfinite = options_.nonfinite;
  *plan_.mutable_replica() = MakeInitRequest(setup, 0);

  // Where the replicas start: the newest checkpoint, or the initial weights.
  int64_t step = 0;
  int chunks_per_epoch = 0;
  std::string done;
  std::optional<ShardState> state;
  if (!options_.checkpoint_dir.empty()) {
    absl::StatusOr<Checkpoint> c = ReadLatestCheckpoint(options_.checkpoint_dir);
    if (c.ok()) {
      absl::StatusOr<Snapshot> snap =
          FromCheckpointFor(*c, spec_, plan_.min_shard_bytes(), placement_);
      if (!snap.ok()) return snap.status();
      step = snap->step;
      chunks_per_epoch = snap->chunks_per_epoch;
      done = snap->done_chunks;
      state = snap->ps[0];
      if (snap->run_started_unix_ms > 0) {
        start_ = std::min(start_, absl::FromUnixMillis(snap->run_started_unix_ms));
      }
      spdlog::warn("resuming from the checkpoint of step {} in {}", step, options_.checkpoint_dir);
    } else if (!absl::IsNotFound(c.status())) {
      return c.status();
    }
  }
  if (!state.has_value()) {
    absl::StatusOr<ShardState> initial =
        ModelReplica::InitialState(plan_.replica(), InitialParameters(spec_, plan_.seed()));
    if (!initial.ok()) return initial.status();
    state = *std::move(initial);
  }
  state->set_version(step);
  last_checkpoint_step_ = step;
  last_checkpoint_time_ = absl::Now();

  tracker_ = std::make_unique<ProgressTracker>(plan_.num_workers(), plan_.epochs(), start_);
  ring_ = std::make_unique<RingDispatcher>(plan_.num_workers(), plan_.epochs(), absl::Now());
  if (absl::Status s = ring_->SetBase(step, chunks_per_epoch, done, *std::move(state)); !s.ok()) {
    return s;
  }
  coordinator_ = std::make_unique<CoordinatorService>(tracker_.get(), ring_.get());
  absl::StatusOr<std::unique_ptr<TaskServer>> server =
      TaskServer::Start(options_.config.own_port(), {coordinator_.get()});
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  tasks_ = std::make_unique<ClusterTasks>(options_.config.cluster, &stop_);
  replicas_ = std::make_unique<RingClient>(options_.config.cluster, &stop_);
  if (absl::Status s = tasks_->WaitUntilServing(options_.wait_for_cluster); !s.ok()) return s;

  spdlog::info("model {}: {} parameters; multi_worker_mirrored: a ring all-reduce over {} "
               "workers (wire {}), batch {} per worker, {} epochs",
               spec_.name, spec_.num_parameters, plan_.num_workers(),
               CodecName(CodecFromProto(plan_.ring_codec())), plan_.batch_size(),
               plan_.epochs());
  ring_->ResetContact(absl::Now());
  coordinator_->SetPlan(plan_);
  server_->SetReady(true);
  absl::StatusOr<std::unique_ptr<ProgressRecorder>> recorder =
      ProgressRecorder::Create(options_.logdir, metrics_, nullptr);
  if (!recorder.ok()) return recorder.status();
  recorder_ = *std::move(recorder);
  return absl::OkStatus();
}

void RingChief::LogEvents() {
  for (const std::string& e : ring_->TakeEvents()) spdlog::warn("{}", e);
}

void RingChief::AbortBrokenRing() {
  std::optional<RingDispatcher::Abort> abort = ring_->TakeAbort();
  if (!abort.has_value()) return;
  for (int w : abort->members) {
    // A lost member does not answer; the others stop waiting for it.
    absl::Status s = replicas_->Abort(w, abort->generation, absl::Milliseconds(500));
    if (!s.ok()) spdlog::info("{}", std::string(s.message()));
  }
}

absl::Status RingChief::Train() {
  absl::Time next_log = absl::Now() + options_.log_every;
  while (!ring_->AllFinished()) {
    if (stop_ || server_->shutdown_requested()) {
      return absl::CancelledError("training interrupted");
    }
    absl::SleepFor(absl::Milliseconds(20));
    const absl::Time now = absl::Now();
    ring_->FindLost(now, options_.heartbeat_timeout);
    LogEvents();
    AbortBrokenRing();
    const int64_t step = ring_->highest_step();
    const bool due_steps = options_.checkpoint_every_steps > 0 &&
                           step >= last_checkpoint_step_ + options_.checkpoint_every_steps;
    const bool due_time = options_.checkpoint_every > absl::ZeroDuration() &&
                          now >= last_checkpoint_time_ + options_.checkpoint_every;
    if (due_steps || due_time) {
      if (absl::Status s = TakeCheckpoint("periodic"); !s.ok()) return s;
    }
    if (now >= next_log) {
      next_log = now + options_.log_every;
      Progress p = tracker_->Snapshot(now);
      spdlog::info("{} chunks {}/{} ring generation {}", ProgressTracker::Format(p),
                   ring_->done_chunks(), ring_->total_chunks(), ring_->generation());
      recorder_->Record(p);
    }
  }
  return absl::OkStatus();
}

absl::Status RingChief::TakeCheckpoint(const char* why) {
  // A ring being formed, or members still taking its state: not a moment
  // to pause at (it could not park); the next tick tries again.
  if (!ring_->Settled()) return absl::OkStatus();
  last_checkpoint_time_ = absl::Now();
  ring_->Pause();
  struct ResumeRing {
    RingDispatcher* ring;
    ~ResumeRing() { ring->Resume(); }
  } resume{ring_.get()};
  int64_t step = 0;
  int source = 0;
  std::string done;
  const absl::Time give_up = absl::Now() + kParkTimeout;
  while (!ring_->AllParked(&step, &source, &done)) {
    if (stop_) return absl::CancelledError("stop requested");
    if (!ring_->Settled()) {
      // The ring broke (or grows) while it paused: after the new one.
      last_checkpoint_time_ = absl::InfinitePast();
      return absl::OkStatus();
    }
    if (absl::Now() >= give_up) {
      spdlog::warn("{} checkpoint skipped: the ring did not pause within {}", why,
                   absl::FormatDuration(kParkTimeout));
      last_checkpoint_step_ = ring_->highest_step();
      return absl::OkStatus();
    }
    ring_->FindLost(absl::Now(), options_.heartbeat_timeout);
    LogEvents();
    AbortBrokenRing();
    absl::SleepFor(absl::Milliseconds(5));
  }
  ReplicaRequest request;
  request.set_step(step);
  absl::StatusOr<ShardState> state = replicas_->Fetch(source, request, kStateTimeout);
  if (!state.ok()) {
    spdlog::warn("{} checkpoint skipped: {}", why, std::string(state.status().message()));
    last_checkpoint_step_ = step;
    return absl::OkStatus();
  }
  return Keep(why, step, *std::move(state), done);
}

absl::Status RingChief::Keep(const char* why, int64_t step, ShardState state,
                             const std::string& done) {
  last_checkpoint_step_ = step;
  std::optional<Checkpoint> checkpoint;
  if (!options_.checkpoint_dir.empty()) {
    Snapshot snap;
    snap.step = step;
    snap.ps = {state};
    snap.done_chunks = done;
    snap.chunks_per_epoch = ring_->chunks_per_epoch();
    snap.generation = 0;
    snap.run_started_unix_ms = absl::ToUnixMillis(start_);
    checkpoint = ToCheckpoint(snap, spec_, SYNC);
    checkpoint->metadata["strategy"] = StrategyName(MULTI_WORKER_MIRRORED);
  }
  if (absl::Status s = ring_->SetBase(step, ring_->chunks_per_epoch(), done, std::move(state));
      !s.ok()) {
    return s;
  }
  if (!checkpoint.has_value()) return absl::OkStatus();
  if (absl::Status s =
          WriteCheckpoint(options_.checkpoint_dir, *checkpoint, options_.keep_checkpoints);
      !s.ok()) {
    return s;
  }
  spdlog::info("{} checkpoint of step {} written to {} ({} chunks done)", why, step,
               options_.checkpoint_dir, ring_->done_chunks());
  return absl::OkStatus();
}

absl::StatusOr<RunResult> RingChief::Finish() {
  Progress last = tracker_->Snapshot(absl::Now());
  spdlog::info("{}", ProgressTracker::Format(last));
  const int64_t steps = ring_->highest_step();
  spdlog::info("every worker is done: {} of {} chunks trained in {} steps; ring generation {}",
               ring_->done_chunks(), ring_->total_chunks(), steps, ring_->generation());
  recorder_->Record(last);
  // The final state, from any replica (every one has finished the last
  // step; they hold the same bits): the weights, and without a checkpoint
  // directory to write it to nothing more.
  ReplicaRequest request;
  request.set_step(steps);
  request.set_values_only(options_.checkpoint_dir.empty());
  absl::StatusOr<ShardState> state = absl::UnavailableError("no worker");
  for (int w : ring_->members()) {
    state = replicas_->Fetch(w, request, kStateTimeout);
    if (state.ok()) break;
  }
  if (!state.ok()) return state.status();
  std::vector<float> weights(spec_.num_parameters);
  if (state->values().size() != weights.size() * sizeof(float)) {
    return absl::DataLossError(absl::StrCat("the final replica holds ",
                                            state->values().size() / sizeof(float),
                                            " values; the model has ", weights.size()));
  }
  std::memcpy(weights.data(), state->values().data(), state->values().size());
  if (!options_.checkpoint_dir.empty()) {
    if (absl::Status s = Keep("final", steps, *std::move(state), ring_->done_ranges());
        !s.ok()) {
      return s;
    }
  }
  RunResult result;
  result.epochs = plan_.epochs();
  result.steps = steps;
  if (absl::Status s = EvaluateFinal(&weights, &result); !s.ok()) return s;
  if (result.has_eval) recorder_->RecordFinal(result.steps, result.test_accuracy, result.test_loss);
  recorder_->Close();
  if (!options_.export_path.empty()) {
    if (absl::Status s = ExportWeights(
            options_.export_path, spec_, weights, result.steps, result.epochs,
            result.has_eval ? std::optional<double>(result.test_accuracy) : std::nullopt);
        !s.ok()) {
      return s;
    }
    spdlog::info("trained weights written to {}", options_.export_path);
  }
  return result;
}

absl::Status RingChief::EvaluateFinal(std::vector<float>* weights, RunResult* result) {
  if (tasks_->has_evaluator()) {
    // The evaluator reads the weights from a worker's replica.
    return ScoreByEvaluator(*tasks_, options_.final_eval_timeout, result);
  }
  if (options_.data_dir.empty()) {
    result->not_evaluated_why = "no evaluator in TF_CONFIG; give the chief --data_dir to evaluate";
    return absl::OkStatus();
  }
  ScoreFinalWeights(spec_, *weights, options_.data_dir, result);
  return absl::OkStatus();
}

}  // namespace pscluster
