#include "worker/ps_loop.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/retry.h"
#include "common/status_macros.h"
#include "compute/backend_factory.h"
#include "compute/compute_backend.h"
#include "model/chunk_reader.h"
#include "model/gradient_clipping.h"
#include "model/gradient_watermark.h"
#include "model/params_watermark.h"
#include "model/placement.h"
#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"
#include "wire/codec.h"
#include "wire/ps_client.h"
#include "wire/sparse_batch.h"
#include "worker/batch_source.h"
#include "worker/exchange.h"
#include "worker/step_report.h"

namespace pscluster {
namespace {

// Async: how often a worker told BOUND asks again.
RetryPolicy BoundPollPolicy() {
  RetryPolicy p;
  p.initial_backoff = absl::Milliseconds(1);
  p.max_backoff = absl::Milliseconds(16);
  return p;
}

// Async: the waits of a worker told BOUND (it is max_staleness steps ahead
// of the slowest chunk): how long in all, and how often.
class BoundWait {
 public:
  // Told BOUND: how long to sleep before asking again. Soon: the slowest
  // chunk may be done any moment; backing off to 16 ms (with jitter) so
  // that many waiting workers do not crowd the chief.
  absl::Duration Next() {
    if (!backoff_.has_value()) {
      since_ = absl::Now();
      backoff_.emplace(BoundPollPolicy());
      ++waits_;
    }
    return backoff_->Next();
  }
  // Told anything else: ends the wait, if one was under way (true).
  bool End() {
    if (!backoff_.has_value()) return false;
    backoff_.reset();
    total_ += absl::Now() - since_;
    return true;
  }
  absl::Duration total() const { return total_; }
  int64_t waits() const { return waits_; }

 private:
  std::optional<Backoff> backoff_;  // while told BOUND
  absl::Time since_;
  absl::Duration total_;
  int64_t waits_ = 0;
};

// "cuda:0" of "cuda:0 (NVIDIA H200, ...)": one token for the done line.
std::string DeviceLabel(const std::string& name) {
  return name.substr(0, name.find(' '));
}

PlacementOptions PlacementFor(const TrainingPlan& plan) {
  PlacementOptions popt;
  popt.min_shard_bytes = plan.min_shard_bytes();
  popt.max_ps = plan.placement_max_ps();
  return popt;
}

PsClientOptions PsOptions(const TrainingContext& ctx) {
  const TrainingPlan& plan = *ctx.plan;
  PsClientOptions psopt;
  psopt.retry.total_timeout = ctx.options->step_timeout;
  psopt.faults = ctx.options->faults.push;
  psopt.stop = ctx.stop;
  psopt.sync = plan.mode() == SYNC;
  psopt.worker_index = ctx.worker;
  for (auto [wire, codec] : {std::pair{plan.push_codec(), &psopt.push_codec},
                             std::pair{plan.pull_codec(), &psopt.pull_codec}}) {
    codec->codec = CodecFromProto(wire);
    codec->topk_fraction = plan.topk_fraction();
    codec->min_elements = plan.codec_min_elements();
  }
  psopt.transport = plan.transport();
  if (ctx.chief != nullptr) psopt.locate = LocateThroughChief(ctx.chief);
  return psopt;
}

// One run of the loop: the ps client, the backend, the buffers and the
// state between steps. Lives on the stack of ParameterServerLoop::Run.
class PsTraining {
 public:
  explicit PsTraining(const TrainingContext& ctx);
  absl::Status Run();

 private:
  // What a work answer leaves to do.
  enum class Next { kAskAgain, kStep, kDone };
  // A step's training on the weights in hand (TrainOnWeights).
  struct StepRun {
    std::unique_ptr<Exchange> exchange;  // its push-pull, if started
    absl::Status train;  // TrainStep's
    bool void_step = false;  // the last step's call failed: nothing to do
    absl::Time start;  // of the last try
    float loss = 0;
    int correct = 0;
  };

  absl::Status Connect();
  absl::Status SetUpBackend();
  absl::Status PullFirst();
  absl::Status Train();
  absl::StatusOr<Next> Follow(const WorkResponse& work);
  absl::Status FollowRestore(int64_t generation);
  // The ps in use now (the chief's placement; it adds and drains ps with
  // --min_ps): the shards placed over them and the ps client made again
  // when their count changed. Between steps only.
  absl::Status FollowPlacement();
  absl::Status Step(const WorkResponse& work);
  absl::Status TrainOnWeights(const Batch& batch, int n, StepRun* run);
  absl::Status AwaitPush(std::unique_ptr<Exchange> exchange, bool* applied);
  // Sparse tables: the batch's rows into the windows of params_, from the
  // last push-pull's answer when they came with it, else pulled now.
  // DataLoss for a bad id in the data (exit 4); Aborted: restored
  // meanwhile.
  absl::Status PrepareRows(int64_t chunk, Batch* batch);
  // Names the rows of chunk `next` (the chief's WorkResponse.next_chunk)
  // to the push about to leave (PsClient::set_sparse_next); true when
  // asked.
  bool AskNextRows(int64_t next);
  absl::Status Finish();
  // Asked to leave (SIGTERM: a scale-down, a drain), between steps: lets
  // the exchange in flight end, then tells the chief the chunks done and
  // that this worker leaves (WorkRequest.leaving), so that none of them is
  // trained again and sync steps stop waiting for it at once. Cancelled,
  // as a stop is.
  absl::Status Leave();

  std::unique_ptr<Exchange> StartExchange(std::unique_ptr<Exchange> before, int n, bool streamed);
  // Waits for an exchange to be over and records its call.
  absl::Status Settle(Exchange& e);
  void RecordPull(bool ok);
  void RecordCall(bool push, bool ok, const PsClient::CallStats& call, int64_t version,
                  int64_t generation);

  const TrainingContext& ctx_;
  const TrainerOptions& options_;
  const TrainingPlan& plan_;
  const ModelSpec& spec_;
  const int batch_;
  Placement placement_;  // the ps client's; outlives it
  ChunkReader chunks_;

  std::unique_ptr<PsClient> ps_;
  std::unique_ptr<ComputeBackend> backend_;
  // Gradients sent while backprop runs (tcp data plane only: over gRPC a
  // message goes whole).
  bool overlap_push_ = false;
  GradientWatermark ready_;
  // Priority pulls: the next step's forward pass starts on the first
  // layers' weights while the rest still arrive (a backend that reads the
  // weights whole waits for all of them).
  bool priority_pull_ = false;
  int64_t chunk_ = -1;  // the chunk of the step in hand (PushRequest.chunk)
  ParamsWatermark arrived_;
  std::vector<float> params_, grads_;
  // Keras's clipnorm or global_clipnorm on this worker's own gradient
  // (async; in sync the ps clip the step's): the gradient then leaves
  // whole.
  GradientClipping clipping_;
  std::vector<GradientRange> clip_ranges_;
  std::unique_ptr<BatchSource> batches_;  // made with the backend
  // Sparse tables: the batch's rows pulled before its step, their
  // gradients pushed with the dense gradient (null: none).
  std::unique_ptr<SparseBatch> sparse_;
  int64_t sparse_rows_ = 0;  // pulled, over the steps
  // The next batch's rows, asked for with a push (AskNextRows) and taken
  // from its answer: the chunk they are for and the version and
  // generation of the weights they came with (next_chunk_ -1: none).
  // Swapped with sparse_ when that chunk is the one leased next.
  std::unique_ptr<SparseBatch> next_sparse_;
  int64_t next_chunk_ = -1, next_version_ = -1, next_generation_ = -1;
  int64_t rows_came_ = 0, rows_needed_ = 0;  // steps whose rows came with a push, of all

  // The metrics of one call to the ps (PsClient::last_call()): its bytes
  // whatever the outcome, its time and staleness when it succeeded. A
  // PushPull carries the push and brings the next weights: its time counts
  // as both. Bytes of the PushPull calls (every attempt), for the done line.
  int64_t step_bytes_sent_ = 0, step_bytes_received_ = 0;
  // The client's version and generation after the last call that is over
  // (with priority pulls one may still be bringing weights).
  int64_t version_seen_ = 0, generation_seen_ = 0;
  double pull_s_ = 0;  // the first pull's
  StepTimes split_;  // summed over the steps
  int64_t restores_seen_ = 0;
  BoundWait bound_;
  std::optional<StepReport> report_;
  WorkRequest request_;
  // With priority pulls, the last step's exchange, still bringing this
  // step's weights. Last: destroyed (joined) before what its thread uses.
  std::unique_ptr<Exchange> inflight_;
};

PsTraining::PsTraining(const TrainingContext& ctx)
    : ctx_(ctx),
      options_(*ctx.options),
      plan_(*ctx.plan),
      spec_(*ctx.spec),
      batch_(ctx.plan->batch_size()),
      placement_(PlaceVariables(spec_, plan_.num_ps(), PlacementFor(plan_))),
      chunks_(ctx.data, batch_, plan_.seed()),
      arrived_(spec_.num_parameters),
      params_(spec_.num_parameters),
      grads_(spec_.num_parameters),
      clipping_{plan_.mode() == ASYNC ? plan_.clipnorm() : 0.0,
                plan_.mode() == ASYNC ? plan_.global_clipnorm() : 0.0},
      clip_ranges_(TrainableRanges(spec_)) {
  if (ctx.sparse_tables != nullptr && !ctx.sparse_tables->empty()) {
    sparse_ = std::make_unique<SparseBatch>(*ctx.sparse_tables, ctx.sparse_window,
                                            plan_.num_ps());
    next_sparse_ =
        std::make_unique<SparseBatch>(*ctx.sparse_tables, ctx.sparse_window, plan_.num_ps());
  }
}

absl::Status PsTraining::Run() {
  PSCLUSTER_RETURN_IF_ERROR(Connect());
  PSCLUSTER_RETURN_IF_ERROR(PullFirst());
  report_.emplace(ctx_.chief, LoopReportOptions(ctx_, chunks_.chunks_per_epoch()));
  report_->StartClock();
  request_.set_worker_index(ctx_.worker);
  request_.set_incarnation(ctx_.incarnation);
  request_.set_chunks_per_epoch(chunks_.chunks_per_epoch());
  PSCLUSTER_RETURN_IF_ERROR(Train());
  return Finish();
}

absl::Status PsTraining::Connect() {
  absl::StatusOr<std::unique_ptr<PsClient>> ps =
      PsClient::Create(options_.config.cluster, &placement_, PsOptions(ctx_));
  if (!ps.ok()) return ps.status();
  ps_ = *std::move(ps);
  PSCLUSTER_RETURN_IF_ERROR(FollowPlacement());  // a worker joining after a ps was added
  return SetUpBackend();
}

absl::Status PsTraining::FollowPlacement() {
  if (ctx_.chief == nullptr) return absl::OkStatus();
  absl::StatusOr<PlacementResponse> where = ctx_.chief->GetPlacement(absl::Seconds(10));
  if (!where.ok()) return absl::OkStatus();  // the pulls find out, and retry
  const int num_ps = where->ps_addresses_size();
  if (num_ps == 0 || num_ps == placement_.num_ps) return absl::OkStatus();
  spdlog::warn("the shards are placed over {} ps now (were {})", num_ps, placement_.num_ps);
  ps_.reset();  // it borrows placement_
  if (sparse_ != nullptr) {
    // The rows are spread over the new count (RowOwner); rows asked for
    // with the last push were the old placement's.
    sparse_->SetNumPs(num_ps);
    next_sparse_->SetNumPs(num_ps);
    next_chunk_ = -1;
  }
  PlacementOptions popt = PlacementFor(plan_);
  placement_ = PlaceVariables(spec_, num_ps, popt);
  absl::StatusOr<std::unique_ptr<PsClient>> ps =
      PsClient::Create(options_.config.cluster, &placement_, PsOptions(ctx_));
  if (!ps.ok()) return ps.status();
  ps_ = *std::move(ps);
  return absl::OkStatus();
}

absl::Status PsTraining::SetUpBackend() {
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateLoopBackend(ctx_);
  if (!backend.ok()) return backend.status();
  backend_ = *std::move(backend);
  // While a device computes, the next chunk is gathered (when it is big
  // enough to be worth a thread).
  const int64_t chunk_bytes = int64_t{batch_} * chunks_.pixels() * int64_t{sizeof(float)};
  batches_ = std::make_unique<BatchSource>(
      &chunks_, batch_, plan_.num_workers(),
      backend_->computes_on_device() && chunk_bytes >= (int64_t{1} << 20));
  // A GPU copies the batch, weights and gradients straight from these.
  batches_->PinIn(backend_.get());
  backend_->PinHostMemory(params_.data(), params_.size() * sizeof(float));
  backend_->PinHostMemory(grads_.data(), grads_.size() * sizeof(float));
  // A sparse push's rows are known only once backprop is over: its
  // gradient leaves whole.
  overlap_push_ = plan_.push_overlap() && plan_.transport() == TRANSPORT_TCP && sparse_ == nullptr &&
                  !clipping_.enabled();
  if (overlap_push_) {
    backend_->SetGradientListener([this](int64_t from) { ready_.MarkFinalFrom(from); });
    spdlog::info("gradients leave layer by layer, last first, while backprop runs");
  }
  priority_pull_ =
      overlap_push_ && plan_.priority_pull() &&
      backend_->SetParamsWait([this](int64_t to) { (void)arrived_.WaitArrived(to); });
  if (priority_pull_) {
    spdlog::info("weights arrive first layers first; the next step starts on them");
  }
  return absl::OkStatus();
}

absl::Status PsTraining::PullFirst() {
  const absl::Time pull_start = absl::Now();
  absl::Status first_pull = ps_->PullAll(0, params_.data(), options_.startup_timeout);
  RecordPull(first_pull.ok());
  if (!first_pull.ok()) return first_pull;
  pull_s_ = absl::ToDoubleSeconds(absl::Now() - pull_start);
  spdlog::info(
      "training {} on {} examples: {} epochs x {} chunks of {} shared by {} workers "
      "(this is worker {}), {} ps, on {}",
      spec_.name, ctx_.data->count(), plan_.epochs(), chunks_.chunks_per_epoch(), batch_,
      plan_.num_workers(), ctx_.worker, placement_.num_ps, backend_->name());
  return absl::OkStatus();
}

// Asks the chief for work until it says DONE.
absl::Status PsTraining::Train() {
  while (true) {
    if (*ctx_.stop) return absl::CancelledError("stop requested");
    if (ctx_.leave != nullptr && *ctx_.leave) return Leave();
    request_.set_completed_generation(generation_seen_);
    absl::StatusOr<WorkResponse> work =
        ctx_.chief->GetWork(request_, options_.step_timeout, ctx_.stop);
    if (!work.ok()) return work.status();
    request_.clear_completed();
    request_.clear_abandoned();
    absl::StatusOr<Next> next = Follow(*work);
    if (!next.ok()) return next.status();
    if (*next == Next::kDone) return absl::OkStatus();
    if (*next == Next::kStep) {
      PSCLUSTER_RETURN_IF_ERROR(Step(*work));
    }
  }
}

absl::Status PsTraining::Leave() {
  if (inflight_ != nullptr) {
    (void)Settle(*inflight_);
    inflight_.reset();
  }
  request_.set_completed_generation(generation_seen_);
  request_.set_leaving(true);
  absl::StatusOr<WorkResponse> answer = ctx_.chief->GetWork(request_, absl::Seconds(5), ctx_.stop);
  if (answer.ok()) {
    spdlog::info("stopping: the chief knows this worker leaves ({} chunk(s) reported done)",
                 request_.completed_size());
  } else {
    spdlog::warn("stopping: the chief was not told ({}); it finds this worker lost",
                 std::string(answer.status().message()));
  }
  return absl::CancelledError("stop requested");
}

// Everything a work answer asks for but the step itself: the weights in
// flight settled, a restore followed, a pause or a BOUND waited out.
absl::StatusOr<PsTraining::Next> PsTraining::Follow(const WorkResponse& work) {
  if (inflight_ != nullptr &&
      (work.kind() != WorkResponse::CHUNK || work.generation() != generation_seen_)) {
    // Not a step on the weights arriving: let them all arrive first.
    const absl::Status before = Settle(*inflight_);
    inflight_.reset();
    if (!before.ok() && !absl::IsAborted(before)) return before;
  }
  if (work.generation() != generation_seen_) {
    absl::Status s = FollowRestore(work.generation());
    if (absl::IsAborted(s)) return Next::kAskAgain;
    if (!s.ok()) return s;
  }
  if (work.kind() == WorkResponse::PAUSE || work.kind() == WorkResponse::IDLE) {
    absl::SleepFor(absl::Milliseconds(20));
    return Next::kAskAgain;
  }
  if (work.kind() == WorkResponse::BOUND) {
    absl::SleepFor(bound_.Next());
    return Next::kAskAgain;
  }
  if (bound_.End() && work.kind() == WorkResponse::CHUNK) {
    // The weights in hand aged while this worker waited: train on the
    // newest, or the bound would not bound the gradient's staleness.
    absl::Status s = ps_->PullAll(0, params_.data(), options_.step_timeout);
    RecordPull(s.ok());
    if (absl::IsAborted(s)) return Next::kAskAgain;  // restored meanwhile: the chief re-leases
    if (!s.ok()) return s;
  }
  if (work.kind() == WorkResponse::DONE) return Next::kDone;
  if (work.kind() != WorkResponse::CHUNK) {
    return absl::InternalError(absl::StrCat("unknown work kind ", work.kind()));
  }
  return Next::kStep;
}

// The ps were restored from a checkpoint: continue from its weights.
absl::Status PsTraining::FollowRestore(int64_t generation) {
  ++restores_seen_;
  spdlog::warn("the parameters were restored (generation {}); pulling them again", generation);
  PSCLUSTER_RETURN_IF_ERROR(FollowPlacement());
  ps_->ResetErrorFeedback();  // it belonged to gradients now void
  absl::Status s = ps_->PullAll(0, params_.data(), options_.step_timeout, generation);
  RecordPull(s.ok());
  return s;
}

// One chunk's step: trains on the weights in hand, pushes the gradient and
// takes the next weights. A step made void by a restore is dropped (OK):
// the chief hands its chunk out again.
absl::Status PsTraining::Step(const WorkResponse& work) {
  const absl::Time t0 = absl::Now();
  report_->set_epoch(static_cast<int>(work.chunk() / chunks_.chunks_per_epoch()));
  chunk_ = work.chunk();
  absl::StatusOr<Batch> got = batches_->Get(work.chunk());
  if (!got.ok()) return got.status();  // a bad record: DataLoss, exit 4
  Batch batch = *got;
  const int n = batch.size;
  if (sparse_ != nullptr) {
    const absl::Status s = PrepareRows(work.chunk(), &batch);
    if (absl::IsAborted(s)) return absl::OkStatus();  // restored meanwhile: the chief re-leases
    if (!s.ok()) return s;
  }
  // A straggler sleeps before its push starts (with overlap, its gradient
  // leaves during TrainStep).
  if (options_.faults.straggle > absl::ZeroDuration()) absl::SleepFor(options_.faults.straggle);
  StepRun run;
  PSCLUSTER_RETURN_IF_ERROR(TrainOnWeights(batch, n, &run));
  if (run.void_step) return absl::OkStatus();
  const absl::Time t1 = absl::Now();
  // With priority pulls, the part of the step spent before the last of
  // its weights had arrived is the pull's, not compute.
  const absl::Duration pull_in_step =
      priority_pull_ ? std::clamp(arrived_.complete_at() - run.start, absl::ZeroDuration(),
                                  t1 - run.start)
                     : absl::ZeroDuration();
  // The next call writes weights from here on.
  if (priority_pull_) arrived_.Reset();
  if (run.exchange != nullptr) run.exchange->ParamsFree();
  if (!run.train.ok()) {
    if (run.exchange != nullptr) (void)Settle(*run.exchange);
    return run.train;
  }
  const int64_t asked_chunk = work.has_next_chunk() ? work.next_chunk() : -1;
  const bool asked = sparse_ != nullptr && asked_chunk >= 0 && AskNextRows(asked_chunk);
  if (sparse_ != nullptr) {
    sparse_->GatherGradients(grads_.data());
    ps_->set_sparse_push(&sparse_->push());
  }
  if (clipping_.enabled()) ClipGradient(clipping_, clip_ranges_, grads_.data());
  if (run.exchange == nullptr) run.exchange = StartExchange(nullptr, n, /*streamed=*/false);
  const StepTimes t = backend_->last_step_times();
  split_.h2d_s += t.h2d_s;
  split_.compute_s += t.compute_s;
  split_.d2h_s += t.d2h_s;
  bool applied = false;
  const absl::Status s = AwaitPush(std::move(run.exchange), &applied);
  if (asked) {
    if (s.ok() && next_sparse_->TakeRowsFrom(ps_.get())) {
      next_chunk_ = asked_chunk;
      next_version_ = version_seen_;
      next_generation_ = generation_seen_;
    }
    ps_->set_sparse_next(nullptr);
  }
  if (absl::IsAborted(s)) return absl::OkStatus();  // restored meanwhile: this gradient is void
  if (!s.ok()) return s;
  const absl::Time t2 = absl::Now();
  // A dropped gradient (stale, or a backup worker's left out of its
  // step) taught the ps nothing: the chunk is to do again. Sync: every
  // ps applied it or none did.
  if (applied) {
    request_.add_completed(work.chunk());
  } else {
    request_.add_abandoned(work.chunk());
  }
  if (Metrics* m = options_.metrics) {
    m->steps().Increment();
    m->examples().Increment(n);
  }
  report_->AddStep(n, run.loss, run.correct, absl::ToDoubleSeconds(t1 - t0 - pull_in_step),
                   absl::ToDoubleSeconds(t2 - t1 + pull_in_step));
  return report_->MaybeReport(t2, version_seen_);
}

absl::Status PsTraining::PrepareRows(int64_t chunk, Batch* batch) {
  ++rows_needed_;
  const bool came = chunk == next_chunk_ && next_version_ == version_seen_ &&
                    next_generation_ == generation_seen_;
  next_chunk_ = -1;
  if (came) {
    // Asked for with the last push, answered at the weights in hand.
    std::swap(sparse_, next_sparse_);
    PSCLUSTER_RETURN_IF_ERROR(sparse_->Scatter(params_.data()));
    ++rows_came_;
  } else {
    // Pulled now, at the version of the weights in hand.
    const ExampleIds ids{batch->ids, chunks_.ids_first(), chunks_.ids_per_example()};
    absl::Status s = sparse_->Map(batch->images, ids, batch->size, chunks_.pixels());
    if (!s.ok()) return absl::DataLossError(s.message());  // the data's ids: exit 4
    s = sparse_->Pull(ps_.get(), version_seen_, generation_seen_, options_.step_timeout,
                      params_.data());
    if (!s.ok()) return s;
    step_bytes_received_ += ps_->last_call().bytes_received;
    step_bytes_sent_ += ps_->last_call().bytes_sent;
  }
  batch->images = sparse_->mapped().data();
  sparse_rows_ += sparse_->last_rows();
  return absl::OkStatus();
}

bool PsTraining::AskNextRows(int64_t chunk) {
  ps_->set_sparse_next(nullptr);
  absl::StatusOr<Batch> next = batches_->Peek(chunk);
  if (!next.ok()) return false;  // its step will say why
  const ExampleIds ids{next->ids, chunks_.ids_first(), chunks_.ids_per_example()};
  if (!next_sparse_->Map(next->images, ids, next->size, chunks_.pixels()).ok()) return false;
  ps_->set_sparse_next(&next_sparse_->pull_ids());
  return true;
}

// Trains on the weights in hand. With overlap the push-pull starts now and
// sends each layer's gradient as backprop makes it final; the answer's
// weights wait for the step to be done with `params`. With priority pulls
// this step may start while the last one's weights still arrive: if that
// call then fails, the step is void; if its weights were torn (an answer
// broken off and sent again), the step is done again on the weights now
// whole. Fails only when the last step's call did.
absl::Status PsTraining::TrainOnWeights(const Batch& batch, int n, StepRun* run) {
  for (bool again = true; again;) {
    again = false;
    ready_.Reset(spec_.num_parameters);
    run->start = absl::Now();
    // (overlap_push whenever a call is in flight: priority pulls need it.)
    if (overlap_push_) run->exchange = StartExchange(std::move(inflight_), n, /*streamed=*/true);
    run->train = backend_->TrainStep(params_.data(), batch, Batch(), grads_.data(), &run->loss,
                                     &run->correct);
    if (run->train.ok()) {
      ready_.MarkAllFinal();
    } else {
      ready_.Fail(std::string(run->train.message()));
    }
    Exchange* before = run->exchange != nullptr ? run->exchange->before() : nullptr;
    if (before != nullptr) {
      const absl::Status b = Settle(*before);
      if (!b.ok() || before->torn()) {
        (void)Settle(*run->exchange);  // skipped: sent nothing
        run->exchange.reset();
        if (!b.ok() && !absl::IsAborted(b)) return b;
        run->void_step = !b.ok();  // restored meanwhile: the chief re-leases
        again = b.ok() && run->train.ok();
        if (again) spdlog::warn("the weights of this step arrived torn; doing it again");
      }
    }
  }
  return absl::OkStatus();
}

// Waits until the step's push is answered; *applied says whether the ps
// applied it. With priority pulls, once every ps has answered the next step
// may start while the weights arrive: the exchange stays in flight.
absl::Status PsTraining::AwaitPush(std::unique_ptr<Exchange> exchange, bool* applied) {
  if (priority_pull_ && !exchange->WaitAnsweredOrDone()) {
    *applied = exchange->applied_early();
    exchange->ReleaseBefore();  // its thread is past it
    inflight_ = std::move(exchange);
    return absl::OkStatus();
  }
  const absl::Status s = Settle(*exchange);
  *applied = exchange->push_applied();
  return s;
}

absl::Status PsTraining::Finish() {
  if (inflight_ != nullptr) {
    const absl::Status last = Settle(*inflight_);
    inflight_.reset();
    if (!last.ok() && !absl::IsAborted(last)) return last;
  }
  // (The chief took this worker out of the sync set when it answered DONE.)
  *ctx_.finished = true;
  // compute_s is the whole of TrainStep but for the part of it spent
  // before the last of its weights had arrived (priority pulls), which
  // counts in comm_s; the split below divides it (the device's own copy
  // and kernel times) and the ps round trips. Pull and push travel in one
  // fused RPC per ps per step (push_pull_s); pull_s is the initial pull.
  const std::string own = fmt::format(
      "{} of this worker's pushes dropped as stale, {} answered differently by the ps, "
      "{} resent, {} restore(s) followed, {} of {} batches gathered ahead{}",
      ps_->pushes_dropped(), ps_->pushes_disputed(), ps_->resends(), restores_seen_,
      batches_->hits(), batches_->gets(),
      sparse_ == nullptr ? ""
                         : fmt::format(", {} of {} steps' sparse rows came with the last push",
                                       rows_came_, rows_needed_));
  // Sparse tables: the distinct rows a step pulled and pushed, on average.
  const std::string rows =
      sparse_ == nullptr ? ""
                         : fmt::format(" sparse_rows_per_step={:.0f}", report_->PerStep(sparse_rows_));
  const std::string tail = fmt::format(
      "bound_wait_s={:.3f} bound_waits={} device={} split: pull_s={:.3f} h2d_s={:.3f} "
      "device_compute_s={:.3f} d2h_s={:.3f} push_pull_s={:.3f} bytes_per_step: sent={:.0f} "
      "received={:.0f}",
      absl::ToDoubleSeconds(bound_.total()), bound_.waits(), DeviceLabel(backend_->name()),
      pull_s_, split_.h2d_s, split_.compute_s, split_.d2h_s, report_->total_comm_s(),
      report_->PerStep(step_bytes_sent_), report_->PerStep(step_bytes_received_));
  return report_->Finish(own, tail + rows, version_seen_);
}

std::unique_ptr<Exchange> PsTraining::StartExchange(std::unique_ptr<Exchange> before, int n,
                                                    bool streamed) {
  Exchange::Wiring w;
  w.ps = ps_.get();
  w.worker = ctx_.worker;
  w.grads = grads_.data();
  w.params = params_.data();
  w.timeout = options_.step_timeout;
  w.ready = &ready_;
  w.arrived = priority_pull_ ? &arrived_ : nullptr;
  w.chunk = chunk_;
  return Exchange::Start(w, std::move(before), n, streamed);
}

absl::Status PsTraining::Settle(Exchange& e) {
  e.Join();
  if (!e.skipped()) {
    RecordCall(/*push=*/true, e.status().ok(), e.stats(), e.version(), e.generation());
  }
  return e.status();
}

void PsTraining::RecordPull(bool ok) {
  RecordCall(/*push=*/false, ok, ps_->last_call(), ps_->version(), ps_->generation());
}

void PsTraining::RecordCall(bool push, bool ok, const PsClient::CallStats& call, int64_t version,
                            int64_t generation) {
  version_seen_ = version;
  generation_seen_ = generation;
  if (push) {
    step_bytes_sent_ += call.bytes_sent;
    step_bytes_received_ += call.bytes_received;
  }
  Metrics* m = options_.metrics;
  if (m == nullptr) return;
  m->push_bytes().Increment(static_cast<double>(call.bytes_sent));
  m->pull_bytes().Increment(static_cast<double>(call.bytes_received));
  if (!ok) return;
  m->pull_latency_seconds().Observe(absl::ToDoubleSeconds(call.duration));
  if (push) {
    m->push_latency_seconds().Observe(absl::ToDoubleSeconds(call.duration));
    m->gradient_staleness().Observe(static_cast<double>(call.staleness));
  }
  m->model_version().Set(static_cast<double>(version));
}

}  // namespace

absl::Status ParameterServerLoop::Run(const TrainingContext& context) {
  PsTraining training(context);
  return training.Run();
}

}  // namespace pscluster
