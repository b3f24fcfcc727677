#include "worker/mirrored_trainer.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "wire/codec.h"
#include "common/rpc.h"
#include "proto/ring.grpc.pb.h"
#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"
#include "compute/backend_factory.h"
#include "model/chunk_reader.h"
#include "compute/compute_backend.h"
#include "update/model_replica.h"
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

}  // namespace

absl::Status TrainMirrored(const MirroredRun& run) {
  const TrainerOptions& options = *run.options;
  const TrainingPlan& plan = *run.plan;
  const ModelSpec& spec = *run.spec;
  if (options.ring == nullptr || options.replica == nullptr) {
    return absl::FailedPreconditionError(
        "the plan is multi_worker_mirrored but this worker serves no Ring service");
  }
  ModelReplica& replica = *options.replica;
  const std::vector<int> indices = options.config.cluster.task_indices(kWorkerJob);
  std::vector<std::string> addresses;
  for (int index : indices) addresses.push_back(*options.config.cluster.address(kWorkerJob, index));

  RingOptions ropt;
  ropt.wire.codec = CodecFromProto(plan.ring_codec());
  if (plan.ring_chunk_bytes() > 0) ropt.chunk_bytes = plan.ring_chunk_bytes();
  ropt.timeout = options.ring_timeout;
  absl::StatusOr<std::unique_ptr<RingAllReducer>> reducer =
      RingAllReducer::Create(options.ring, ropt);
  if (!reducer.ok()) return reducer.status();
  // The chief's aborts reach this all-reduce while it trains.
  options.ring->SetReducer(reducer->get());
  struct Unset {
    RingService* ring;
    ~Unset() { ring->SetReducer(nullptr); }
  } unset{options.ring};

  const int batch = plan.batch_size();
  ChunkReader chunks(*run.data, batch, plan.seed());
  BackendOptions bopt;
  bopt.device = options.device;
  bopt.max_batch = batch;
  bopt.num_threads = options.threads;
  bopt.seed = plan.seed();
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateBackend(spec, bopt);
  if (!backend.ok()) return backend.status();
  spdlog::info("training {} on {} examples: {} epochs x {} chunks of {} over a ring of up to {} "
               "workers (this is worker {}), on {}; ring wire {}, chunks of {} bytes",
               spec.name, run.data->count, plan.epochs(), chunks.chunks_per_epoch(), batch,
               plan.num_workers(), run.worker, (*backend)->name(),
               CodecName(ropt.wire.codec), ropt.chunk_bytes);

  const int64_t n = spec.num_parameters;
  std::vector<float> params(n), grads(n);
  std::vector<float> images(static_cast<size_t>(batch) * chunks.pixels());
  std::vector<uint8_t> labels(batch);

  StepReport::Options ro;
  ro.worker = run.worker;
  ro.num_workers = plan.num_workers();
  ro.chunks_per_epoch = chunks.chunks_per_epoch();
  ro.epoch_examples = run.data->count;
  ro.report_interval_s = plan.report_interval_s();
  ro.final_timeout = options.step_timeout;
  StepReport report(run.chief, ro);
  int64_t bytes_sent = 0, bytes_received = 0, payload_sent = 0;
  int64_t rings_joined = 0, fetches = 0, failures = 0;

  RingWorkRequest request;
  request.set_worker_index(run.worker);
  request.set_incarnation(run.incarnation);
  request.set_chunks_per_epoch(chunks.chunks_per_epoch());
  int64_t generation = 0;
  while (true) {
    if (*run.stop) return absl::CancelledError("stop requested");
    request.set_completed_step(replica.step());
    absl::StatusOr<RingWorkResponse> work =
        run.chief->RingWork(request, options.step_timeout, run.stop);
    if (!work.ok()) return work.status();
    request.set_failed_generation(0);
    if (work->kind() == RingWorkResponse::DONE) break;
    if (work->kind() == RingWorkResponse::WAIT) {
      absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    if (work->kind() != RingWorkResponse::STEP) {
      return absl::InternalError(absl::StrCat("unknown ring work kind ", work->kind()));
    }
    // A step of ring `generation`: install the ring when it is new.
    const int64_t step = work->step();
    auto fail = [&](const absl::Status& why) {
      spdlog::warn("step {} of ring generation {} failed: {}; waiting for a new ring", step,
                   work->generation(), std::string(why.message()));
      request.set_failed_generation(work->generation());
      ++failures;
    };
    if (work->generation() != generation) {
      std::vector<std::string> ring;
      for (int m : work->members()) {
        if (m < 0 || m >= static_cast<int>(addresses.size())) {
          return absl::InternalError(absl::StrCat("the chief's ring names worker ", m));
        }
        ring.push_back(addresses[m]);
      }
      if (absl::Status s = (*reducer)->SetRing(work->generation(), ring, work->rank()); !s.ok()) {
        return s;
      }
      generation = work->generation();
      ++rings_joined;
      spdlog::info("ring generation {}: {} workers, this one rank {}, from step {}", generation,
                   ring.size(), work->rank(), step);
    }
    if (work->fetch_state()) {
      const int from = work->state_from();
      absl::StatusOr<ShardState> state =
          from < 0 ? run.chief->GetReplica([&] {
            ReplicaRequest r;
            r.set_step(step - 1);
            return r;
          }(), kFetchTimeout)
          : from < static_cast<int>(addresses.size())
              ? FetchFromPeer(addresses[from], step - 1)
              : absl::InternalError(absl::StrCat("the chief names worker ", from));
      if (!state.ok()) {
        fail(state.status());
        continue;
      }
      if (absl::Status s = replica.Restore(plan.replica(), *state); !s.ok()) return s;
      if (absl::Status s = replica.CopyWeights(params.data()); !s.ok()) return s;
      request.set_state_generation(generation);
      ++fetches;
      spdlog::info("took the state of step {} from {}", step - 1,
                   from < 0 ? std::string("the chief") : absl::StrCat("worker ", from));
    }
    if (replica.step() != step - 1) {
      return absl::InternalError(absl::StrCat("the chief hands out step ", step,
                                              " but this replica holds step ", replica.step()));
    }
    // From the first step on (as the parameter servers' trainer counts from
    // its first pull): not the wait for the first ring.
    report.StartClock();
    // Train on this member's chunk (none: it adds zeros), weighted by its
    // examples so that the ring's sum divided by the step's examples is
    // the mean gradient over all of them.
    const absl::Time t0 = absl::Now();
    const int64_t chunk = work->chunks(work->rank());
    int64_t step_examples = 0;
    for (int64_t k : work->chunks()) step_examples += k >= 0 ? chunks.Examples(k) : 0;
    int examples = 0;
    float loss = 0;
    int step_correct = 0;
    if (chunk >= 0) {
      examples = chunks.Fill(chunk, images.data(), labels.data());
      report.set_epoch(static_cast<int>(chunk / chunks.chunks_per_epoch()));
      const Batch b{images.data(), labels.data(), examples, static_cast<uint64_t>(chunk)};
      if (absl::Status s =
              (*backend)->TrainStep(params.data(), b, Batch(), grads.data(), &loss, &step_correct);
          !s.ok()) {
        return s;
      }
      const float w = static_cast<float>(examples);
      for (float& g : grads) g *= w;
    } else {
      std::fill(grads.begin(), grads.end(), 0.0f);
    }
    const absl::Time t1 = absl::Now();
    if (absl::Status s = (*reducer)->AllReduce(step, grads.data(), n); !s.ok()) {
      fail(s);
      continue;
    }
    const absl::Time t2 = absl::Now();
    const RingAllReducer::Stats st = (*reducer)->last_stats();
    bytes_sent += st.bytes_sent;
    bytes_received += st.bytes_received;
    payload_sent += st.payload_bytes_sent;
    if (absl::Status s = replica.Apply(grads.data(), step_examples, params.data()); !s.ok()) {
      return s;
    }
    request.set_state_generation(generation);
    if (options.log_replica_digests) {
      spdlog::info("replica step={} digest={:08x}", step, replica.Digest());
    }
    if (Metrics* m = options.metrics) {
      m->steps().Increment();
      m->examples().Increment(examples);
      m->push_bytes().Increment(static_cast<double>(st.bytes_sent));
      m->pull_bytes().Increment(static_cast<double>(st.bytes_received));
      m->model_version().Set(static_cast<double>(step));
    }
    report.AddStep(examples, loss, step_correct, absl::ToDoubleSeconds(t1 - t0),
                   absl::ToDoubleSeconds(t2 - t1));
    if (absl::Status s = report.MaybeReport(t2, replica.step()); !s.ok()) return s;
  }
  *run.finished = true;
  const std::string own = fmt::format(
      "replica at step {} digest={:08x}; rings joined {}, states fetched {}, all-reduces "
      "failed {}",
      replica.step(), replica.Digest(), rings_joined, fetches, failures);
  const std::string tail =
      fmt::format("bytes_per_step: sent={:.0f} received={:.0f} payload_sent={:.0f}",
                  report.PerStep(bytes_sent), report.PerStep(bytes_received),
                  report.PerStep(payload_sent));
  return report.Finish(own, tail, replica.step());
}

}  // namespace pscluster
