#include "worker/mirrored_loop.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "compute/backend_factory.h"
#include "compute/compute_backend.h"
#include "model/chunk_reader.h"
#include "proto/ring.grpc.pb.h"
#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"
#include "update/model_replica.h"
#include "wire/codec.h"
#include "worker/ring_allreduce.h"
#include "worker/step_report.h"

namespace pscluster {
namespace {

// How long a replica's state may take to arrive (a large model's values
// and optimizer slots, over a slow link).
constexpr absl::Duration kFetchTimeout = absl::Minutes(2);

// The state of `step` from worker `rank`'s Ring service.
absl::StatusOr<ShardState> FetchFromPeer(const std::string& address, int64_t step) {
  std::unique_ptr<Ring::Stub> stub = Ring::NewStub(MakeChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kFetchTimeout));
  ReplicaRequest req;
  req.set_step(step);
  ShardState state;
  grpc::Status s = stub->GetReplica(&ctx, req, &state);
  if (!s.ok()) {
    return FromGrpcStatus(s, absl::StrCat("fetching the state of step ", step, " from ", address));
  }
  return state;
}

// Every worker's address, by rank.
std::vector<std::string> WorkerAddresses(const ClusterSpec& cluster) {
  std::vector<std::string> addresses;
  for (int index : cluster.task_indices(kWorkerJob)) {
    addresses.push_back(*cluster.address(kWorkerJob, index));
  }
  return addresses;
}

RingOptions RingOptionsFor(const TrainingPlan& plan, const TrainerOptions& options) {
  RingOptions ropt;
  ropt.wire.codec = CodecFromProto(plan.ring_codec());
  if (plan.ring_chunk_bytes() > 0) ropt.chunk_bytes = plan.ring_chunk_bytes();
  ropt.timeout = options.ring_timeout;
  return ropt;
}

// While it lives, the Ring service hands the chief's aborts to `reducer`.
class ReducerInstalled {
 public:
  ReducerInstalled(RingService* ring, RingAllReducer* reducer) : ring_(ring) {
    ring_->SetReducer(reducer);
  }
  ~ReducerInstalled() { ring_->SetReducer(nullptr); }

 private:
  RingService* const ring_;
};

// One run of the loop: the all-reducer, the backend, the buffers and the
// ring's state between steps. Lives on the stack of MirroredLoop::Run.
class RingTraining {
 public:
  explicit RingTraining(const TrainingContext& ctx);
  absl::Status Run();

 private:
  // What this member's chunk gave (TrainChunk).
  struct Trained {
    int examples = 0;
    float loss = 0;
    int correct = 0;
  };

  absl::Status SetUpBackend();
  absl::Status Train();
  absl::Status Step(const RingWorkResponse& work);
  absl::Status JoinRing(const RingWorkResponse& work);
  absl::StatusOr<ShardState> FetchState(const RingWorkResponse& work);
  absl::Status TakeState(const RingWorkResponse& work, const ShardState& state);
  absl::Status TrainChunk(const RingWorkResponse& work, Trained* trained);
  absl::Status Apply(const RingWorkResponse& work, const Trained& trained, absl::Time t0,
                     absl::Time t1, absl::Time t2);
  // The step failed in a way a new ring mends: says so with the next request.
  void Fail(const RingWorkResponse& work, const absl::Status& why);
  absl::Status Finish();

  const TrainingContext& ctx_;
  const TrainerOptions& options_;
  const TrainingPlan& plan_;
  const ModelSpec& spec_;
  ModelReplica& replica_;
  const std::vector<std::string> addresses_;
  const RingOptions ropt_;
  const int batch_;
  ChunkReader chunks_;

  std::unique_ptr<RingAllReducer> reducer_;
  std::unique_ptr<ComputeBackend> backend_;
  std::vector<float> params_, grads_, images_;
  std::vector<float> targets_;
  // Keras's clipnorm or global_clipnorm of each step's mean gradient.
  const GradientClipping clipping_;
  const std::vector<GradientRange> clip_ranges_;
  std::optional<StepReport> report_;
  RingWorkRequest request_;
  int64_t ring_id_ = 0;  // of the ring this worker is in
  int64_t bytes_sent_ = 0, bytes_received_ = 0, payload_sent_ = 0;
  int64_t rings_joined_ = 0, fetches_ = 0, failures_ = 0;
};

RingTraining::RingTraining(const TrainingContext& ctx)
    : ctx_(ctx),
      options_(*ctx.options),
      plan_(*ctx.plan),
      spec_(*ctx.spec),
      replica_(*ctx.options->replica),
      addresses_(WorkerAddresses(ctx.options->config.cluster)),
      ropt_(RingOptionsFor(plan_, options_)),
      batch_(plan_.batch_size()),
      chunks_(ctx.data, batch_, plan_.seed()),
      params_(spec_.num_parameters),
      grads_(spec_.num_parameters),
      images_(static_cast<size_t>(batch_) * chunks_.pixels()),
      targets_(static_cast<size_t>(batch_) * chunks_.targets_per_example()),
      clipping_{plan_.clipnorm(), plan_.global_clipnorm()},
      clip_ranges_(TrainableRanges(spec_)) {}

absl::Status RingTraining::Run() {
  absl::StatusOr<std::unique_ptr<RingAllReducer>> reducer =
      RingAllReducer::Create(options_.ring, ropt_);
  if (!reducer.ok()) return reducer.status();
  reducer_ = *std::move(reducer);
  // The chief's aborts reach this all-reduce while it trains.
  ReducerInstalled installed(options_.ring, reducer_.get());
  PSCLUSTER_RETURN_IF_ERROR(SetUpBackend());
  report_.emplace(ctx_.chief, LoopReportOptions(ctx_, chunks_.chunks_per_epoch()));
  request_.set_worker_index(ctx_.worker);
  request_.set_incarnation(ctx_.incarnation);
  request_.set_chunks_per_epoch(chunks_.chunks_per_epoch());
  PSCLUSTER_RETURN_IF_ERROR(Train());
  return Finish();
}

absl::Status RingTraining::SetUpBackend() {
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateLoopBackend(ctx_);
  if (!backend.ok()) return backend.status();
  backend_ = *std::move(backend);
  spdlog::info("training {} on {} examples: {} epochs x {} chunks of {} over a ring of up to {} "
               "workers (this is worker {}), on {}; ring wire {}, chunks of {} bytes",
               spec_.name, ctx_.data->count(), plan_.epochs(), chunks_.chunks_per_epoch(), batch_,
               plan_.num_workers(), ctx_.worker, backend_->name(), CodecName(ropt_.wire.codec),
               ropt_.chunk_bytes);
  return absl::OkStatus();
}

// Asks the chief for the ring's next step until it says DONE.
absl::Status RingTraining::Train() {
  while (true) {
    if (*ctx_.stop || (ctx_.leave != nullptr && *ctx_.leave)) {
      return absl::CancelledError("stop requested");
    }
    request_.set_completed_step(replica_.step());
    absl::StatusOr<RingWorkResponse> work =
        ctx_.chief->RingWork(request_, options_.step_timeout, ctx_.stop);
    if (!work.ok()) return work.status();
    request_.set_failed_ring_id(0);
    if (work->kind() == RingWorkResponse::DONE) return absl::OkStatus();
    if (work->kind() == RingWorkResponse::WAIT) {
      absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    if (work->kind() != RingWorkResponse::STEP) {
      return absl::InternalError(absl::StrCat("unknown ring work kind ", work->kind()));
    }
    PSCLUSTER_RETURN_IF_ERROR(Step(*work));
  }
}

// A step of ring `work.ring_id()`: joins the ring when it is new, takes
// the state when told to, trains, sums and applies. A failure a new ring
// mends is reported with the next request (OK here).
absl::Status RingTraining::Step(const RingWorkResponse& work) {
  const int64_t step = work.step();
  if (work.ring_id() != ring_id_) {
    PSCLUSTER_RETURN_IF_ERROR(JoinRing(work));
  }
  if (work.fetch_state()) {
    absl::StatusOr<ShardState> state = FetchState(work);
    if (!state.ok()) {
      Fail(work, state.status());
      return absl::OkStatus();
    }
    PSCLUSTER_RETURN_IF_ERROR(TakeState(work, *state));
  }
  if (replica_.step() != step - 1) {
    return absl::InternalError(absl::StrCat("the chief hands out step ", step,
                                            " but this replica holds step ", replica_.step()));
  }
  // From the first step on (as the parameter servers' loop counts from
  // its first pull): not the wait for the first ring.
  report_->StartClock();
  const absl::Time t0 = absl::Now();
  Trained trained;
  PSCLUSTER_RETURN_IF_ERROR(TrainChunk(work, &trained));
  const absl::Time t1 = absl::Now();
  if (absl::Status s = reducer_->AllReduce(step, grads_.data(), spec_.num_parameters); !s.ok()) {
    Fail(work, s);
    return absl::OkStatus();
  }
  const absl::Time t2 = absl::Now();
  return Apply(work, trained, t0, t1, t2);
}

absl::Status RingTraining::JoinRing(const RingWorkResponse& work) {
  std::vector<std::string> ring;
  for (int m : work.members()) {
    if (m < 0 || m >= static_cast<int>(addresses_.size())) {
      return absl::InternalError(absl::StrCat("the chief's ring names worker ", m));
    }
    ring.push_back(addresses_[m]);
  }
  if (absl::Status s = reducer_->SetRing(work.ring_id(), ring, work.rank()); !s.ok()) {
    return s;
  }
  ring_id_ = work.ring_id();
  ++rings_joined_;
  spdlog::info("ring {}: {} workers, this one rank {}, from step {}", ring_id_,
               ring.size(), work.rank(), work.step());
  return absl::OkStatus();
}

// The state of the step before this one, from the chief or a peer.
absl::StatusOr<ShardState> RingTraining::FetchState(const RingWorkResponse& work) {
  const int from = work.state_from();
  if (from < 0) {
    ReplicaRequest r;
    r.set_step(work.step() - 1);
    return ctx_.chief->GetReplica(r, kFetchTimeout);
  }
  if (from < static_cast<int>(addresses_.size())) {
    return FetchFromPeer(addresses_[from], work.step() - 1);
  }
  return absl::InternalError(absl::StrCat("the chief names worker ", from));
}

absl::Status RingTraining::TakeState(const RingWorkResponse& work, const ShardState& state) {
  PSCLUSTER_RETURN_IF_ERROR(replica_.Restore(plan_.replica(), state));
  PSCLUSTER_RETURN_IF_ERROR(replica_.CopyWeights(params_.data()));
  request_.set_state_ring_id(ring_id_);
  ++fetches_;
  const int from = work.state_from();
  spdlog::info("took the state of step {} from {}", work.step() - 1,
               from < 0 ? std::string("the chief") : absl::StrCat("worker ", from));
  return absl::OkStatus();
}

// Trains on this member's chunk (none: it adds zeros), weighted by its
// examples so that the ring's sum divided by the step's examples is the
// mean gradient over all of them.
absl::Status RingTraining::TrainChunk(const RingWorkResponse& work, Trained* trained) {
  const int64_t chunk = work.chunks(work.rank());
  if (chunk < 0) {
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    return absl::OkStatus();
  }
  absl::StatusOr<int> filled = chunks_.Fill(chunk, images_.data(), targets_.data());
  if (!filled.ok()) return filled.status();  // a bad record: DataLoss, exit 4
  trained->examples = *filled;
  report_->set_epoch(static_cast<int>(chunk / chunks_.chunks_per_epoch()));
  const Batch b{images_.data(), targets_.data(), trained->examples, static_cast<uint64_t>(chunk)};
  if (absl::Status s = backend_->TrainStep(params_.data(), b, Batch(), grads_.data(),
                                           &trained->loss, &trained->correct);
      !s.ok()) {
    return s;
  }
  const float w = static_cast<float>(trained->examples);
  for (float& g : grads_) g *= w;
  return absl::OkStatus();
}

// Applies the ring's sum to the replica and counts the step.
absl::Status RingTraining::Apply(const RingWorkResponse& work, const Trained& trained,
                                 absl::Time t0, absl::Time t1, absl::Time t2) {
  const int64_t step = work.step();
  int64_t step_examples = 0;
  for (int64_t k : work.chunks()) step_examples += k >= 0 ? chunks_.Examples(k) : 0;
  const RingAllReducer::Stats st = reducer_->last_stats();
  bytes_sent_ += st.bytes_sent;
  bytes_received_ += st.bytes_received;
  payload_sent_ += st.payload_bytes_sent;
  if (absl::Status s = replica_.Apply(grads_.data(), step_examples, params_.data(), clipping_,
                                      clip_ranges_);
      !s.ok()) {
    return s;
  }
  request_.set_state_ring_id(ring_id_);
  if (options_.log_replica_digests) {
    spdlog::info("replica step={} digest={:08x}", step, replica_.Digest());
  }
  if (Metrics* m = options_.metrics) {
    m->steps().Increment();
    m->examples().Increment(trained.examples);
    m->push_bytes().Increment(static_cast<double>(st.bytes_sent));
    m->pull_bytes().Increment(static_cast<double>(st.bytes_received));
    m->model_version().Set(static_cast<double>(step));
  }
  report_->AddStep(trained.examples, trained.loss, trained.correct,
                   absl::ToDoubleSeconds(t1 - t0), absl::ToDoubleSeconds(t2 - t1));
  return report_->MaybeReport(t2, replica_.step());
}

void RingTraining::Fail(const RingWorkResponse& work, const absl::Status& why) {
  spdlog::warn("step {} of ring {} failed: {}; waiting for a new ring", work.step(),
               work.ring_id(), std::string(why.message()));
  request_.set_failed_ring_id(work.ring_id());
  ++failures_;
}

absl::Status RingTraining::Finish() {
  *ctx_.finished = true;
  const std::string own = fmt::format(
      "replica at step {} digest={:08x}; rings joined {}, states fetched {}, all-reduces "
      "failed {}",
      replica_.step(), replica_.Digest(), rings_joined_, fetches_, failures_);
  const std::string tail =
      fmt::format("bytes_per_step: sent={:.0f} received={:.0f} payload_sent={:.0f}",
                  report_->PerStep(bytes_sent_), report_->PerStep(bytes_received_),
                  report_->PerStep(payload_sent_));
  return report_->Finish(own, tail, replica_.step());
}

}  // namespace

absl::Status MirroredLoop::Run(const TrainingContext& context) {
  const TrainerOptions& options = *context.options;
  if (options.ring == nullptr || options.replica == nullptr) {
    return absl::FailedPreconditionError(
        "the plan is multi_worker_mirrored but this worker serves no Ring service");
  }
  RingTraining training(context);
  return training.Run();
}

}  // namespace pscluster
