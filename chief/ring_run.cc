#include "chief/ring_run.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "chief/ps_setup.h"
#include "chief/snapshot.h"
#include "chief/strategy.h"
#include "model/checkpoint.h"
#include "spdlog/spdlog.h"
#include "update/model_replica.h"
#include "wire/codec.h"

namespace pscluster {
namespace {

// How long a paused ring may take to park for a checkpoint.
constexpr absl::Duration kParkTimeout = absl::Seconds(60);
// One attempt to read a replica's whole state (values and slots).
constexpr absl::Duration kStateTimeout = absl::Minutes(2);

}  // namespace

RingRun::RingRun(const ChiefOptions& options, const ModelSpec* spec, TrainingPlan plan,
                 const std::atomic<bool>* stop)
    : options_(options), spec_(*spec), plan_(std::move(plan)), stop_(*stop) {
  plan_.set_mode(SYNC);
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
}

absl::Status RingRun::Prepare(absl::Time* start) {
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
        *start = std::min(*start, absl::FromUnixMillis(snap->run_started_unix_ms));
      }
      spdlog::warn("resuming from the checkpoint of step {} in {}", step, options_.checkpoint_dir);
    } else if (!absl::IsNotFound(c.status())) {
      return c.status();
    }
  }
  if (!state.has_value()) {
    const bool given = !options_.initial_parameters.empty();
    if (given) spdlog::info("initial weights from {}", options_.initial_weights);
    absl::StatusOr<ShardState> initial = ModelReplica::InitialState(
        plan_.replica(),
        given ? options_.initial_parameters : InitialParameters(spec_, plan_.seed()));
    if (!initial.ok()) return initial.status();
    state = *std::move(initial);
  }
  state->set_version(step);
  run_started_ = *start;
  last_checkpoint_step_ = step;
  last_checkpoint_time_ = absl::Now();
  ring_ = std::make_unique<RingDispatcher>(plan_.num_workers(), plan_.epochs(), absl::Now());
  return ring_->SetBase(step, chunks_per_epoch, done, *std::move(state));
}

absl::Status RingRun::Start(ClusterTasks* /*tasks*/, absl::Time* /*start*/) {
  replicas_ = std::make_unique<RingClient>(options_.config.cluster, &stop_);
  spdlog::info(
      "model {}: {} parameters; multi_worker_mirrored: a ring all-reduce over {} "
      "workers (wire {}), batch {} per worker, {} epochs",
      spec_.name, spec_.num_parameters, plan_.num_workers(),
      CodecName(CodecFromProto(plan_.ring_codec())), plan_.batch_size(), plan_.epochs());
  ring_->ResetContact(absl::Now());
  return absl::OkStatus();
}

void RingRun::LogEvents() {
  for (const std::string& e : ring_->TakeEvents()) spdlog::warn("{}", e);
}

void RingRun::AbortBrokenRing() {
  std::optional<RingDispatcher::Abort> abort = ring_->TakeAbort();
  if (!abort.has_value()) return;
  for (int w : abort->members) {
    // A lost member does not answer; the others stop waiting for it.
    absl::Status s = replicas_->Abort(w, abort->ring_id, absl::Milliseconds(500));
    if (!s.ok()) spdlog::info("{}", std::string(s.message()));
  }
}

absl::Status RingRun::Tick() {
  const absl::Time now = absl::Now();
  ring_->FindLost(now, options_.heartbeat_timeout);
  LogEvents();
  AbortBrokenRing();
  const int64_t step = ring_->highest_step();
  const bool due_steps = options_.checkpoint_every_steps > 0 &&
                         step >= last_checkpoint_step_ + options_.checkpoint_every_steps;
  const bool due_time = options_.checkpoint_every > absl::ZeroDuration() &&
                        now >= last_checkpoint_time_ + options_.checkpoint_every;
  if (due_steps || due_time) return TakeCheckpoint("periodic");
  return absl::OkStatus();
}

std::string RingRun::ProgressNote() const {
  return absl::StrCat(" ring ", ring_->ring_id());
}

std::string RingRun::DoneNote() const {
  return absl::StrCat(" in ", ring_->highest_step(), " steps; ring ",
                      ring_->ring_id());
}

absl::Status RingRun::TakeCheckpoint(const char* why) {
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
    if (ring_->AllFinished()) {
      // The last step was trained before the pause reached the workers:
      // they were told DONE and will not park. The final checkpoint
      // follows at once.
      return absl::OkStatus();
    }
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

absl::Status RingRun::Keep(const char* why, int64_t step, ShardState state,
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
    snap.run_started_unix_ms = absl::ToUnixMillis(run_started_);
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

absl::Status RingRun::TakeFinalCheckpoint() {
  final_step_ = ring_->highest_step();
  // The final state, from any replica (every one has finished the last
  // step; they hold the same bits): the weights, and without a checkpoint
  // directory to write it to nothing more.
  ReplicaRequest request;
  request.set_step(final_step_);
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
  final_weights_ = std::move(weights);
  if (options_.checkpoint_dir.empty()) return absl::OkStatus();
  return Keep("final", final_step_, *std::move(state), ring_->done_ranges());
}

absl::StatusOr<const std::vector<float>*> RingRun::FinalWeights(int64_t /*steps*/) {
  if (!final_weights_.has_value()) {
    return absl::FailedPreconditionError("the final state was not read (TakeFinalCheckpoint)");
  }
  return &*final_weights_;
}

}  // namespace pscluster
