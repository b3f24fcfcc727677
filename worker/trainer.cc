#include "worker/trainer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "wire/codec.h"
#include "model/dataset.h"
#include "model/gradient_watermark.h"
#include "model/idx_dataset.h"
#include "model/keras_model.h"
#include "model/model_spec.h"
#include "model/params_watermark.h"
#include "model/placement.h"
#include "common/retry.h"
#include "wire/ps_client.h"
#include "common/rpc.h"
#include "proto/coordination.grpc.pb.h"
#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"
#include "compute/backend_factory.h"
#include "wire/chief_client.h"
#include "model/chunk_reader.h"
#include "worker/exchange.h"
#include "worker/heartbeat.h"
#include "worker/mirrored_trainer.h"
#include "worker/step_report.h"
#include "compute/compute_backend.h"

namespace pscluster {
namespace {

// Async: how often a worker told BOUND asks again.
RetryPolicy BoundPollPolicy() {
  RetryPolicy p;
  p.initial_backoff = absl::Milliseconds(1);
  p.max_backoff = absl::Milliseconds(16);
  return p;
}

// "cuda:0" of "cuda:0 (NVIDIA H200, ...)": one token for the done line.
std::string DeviceLabel(const std::string& name) {
  return name.substr(0, name.find(' '));
}

}  // namespace

absl::Status Trainer::Run() {
  // The worker's rank among the cluster's workers (TF_CONFIG's sparse form
  // may skip indices); ps slots and data shards go by rank.
  const std::vector<int> indices = options_.config.cluster.task_indices(kWorkerJob);
  const int worker = static_cast<int>(
      std::find(indices.begin(), indices.end(), options_.config.task.index) - indices.begin());
  absl::StatusOr<std::unique_ptr<ChiefClient>> chief =
      ChiefClient::Create(options_.config.cluster);
  if (!chief.ok()) return chief.status();
  absl::StatusOr<TrainingPlan> plan =
      (*chief)->WaitForPlan(options_.config.task, options_.startup_timeout, &stop_);
  if (!plan.ok()) return plan.status();
  if (options_.on_plan) options_.on_plan();
  const uint64_t incarnation =
      std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  // Beats until Run returns, the loop's state gone first.
  Heartbeat heartbeat(
      options_.config.cluster, worker, incarnation,
      absl::Seconds(plan->heartbeat_interval_s() > 0 ? plan->heartbeat_interval_s() : 0.5f),
      &finished_);
  absl::StatusOr<ModelSpec> spec = PlanModelSpec(plan->model(), plan->model_json());
  if (!spec.ok()) return spec.status();
  if (plan->num_workers() != options_.config.cluster.num_tasks(kWorkerJob)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the chief plans for ", plan->num_workers(), " workers but this worker's ",
        options_.config.source, " lists ", options_.config.cluster.num_tasks(kWorkerJob)));
  }

  absl::StatusOr<Dataset> data = LoadDataset(options_.data_dir, Split::kTrain);
  if (!data.ok()) return absl::DataLossError(data.status().message());
  if (absl::Status s = CheckDatasetFitsModel(*data, options_.data_dir, *spec); !s.ok()) {
    return absl::DataLossError(s.message());  // the worker exits kExitBadData
  }
  if (plan->strategy() == MULTI_WORKER_MIRRORED) {
    MirroredRun run;
    run.options = &options_;
    run.plan = &*plan;
    run.spec = &*spec;
    run.data = &*data;
    run.worker = worker;
    run.incarnation = incarnation;
    run.chief = chief->get();
    run.stop = &stop_;
    run.finished = &finished_;
    return TrainMirrored(run);
  }
  const int pixels = data->height * data->width * data->channels;
  const int num_workers = plan->num_workers();
  const int batch = plan->batch_size();
  const int chunks_per_epoch = static_cast<int>((data->count + batch - 1) / batch);

  PlacementOptions popt;
  popt.min_shard_bytes = plan->min_shard_bytes();
  const Placement placement = PlaceVariables(*spec, plan->num_ps(), popt);
  PsClientOptions psopt;
  psopt.retry.total_timeout = options_.step_timeout;
  psopt.faults = options_.faults.push;
  psopt.stop = &stop_;
  psopt.sync = plan->mode() == SYNC;
  psopt.worker_index = worker;
  for (auto [wire, codec] : {std::pair{plan->push_codec(), &psopt.push_codec},
                             std::pair{plan->pull_codec(), &psopt.pull_codec}}) {
    codec->codec = CodecFromProto(wire);
    codec->topk_fraction = plan->topk_fraction();
    codec->min_elements = plan->codec_min_elements();
  }
  psopt.transport = plan->transport();
  absl::StatusOr<std::unique_ptr<PsClient>> ps =
      PsClient::Create(options_.config.cluster, &placement, psopt);
  if (!ps.ok()) return ps.status();
  BackendOptions bopt;
  bopt.device = options_.device;
  bopt.max_batch = batch;
  bopt.num_threads = options_.threads;
  bopt.seed = plan->seed();
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateBackend(*spec, bopt);
  if (!backend.ok()) return backend.status();

  // Gradients sent while backprop runs (tcp data plane only: over gRPC a
  // message goes whole).
  const bool overlap_push = plan->push_overlap() && plan->transport() == TRANSPORT_TCP;
  GradientWatermark ready;
  if (overlap_push) {
    (*backend)->SetGradientListener([&ready](int64_t from) { ready.MarkFinalFrom(from); });
    spdlog::info("gradients leave layer by layer, last first, while backprop runs");
  }
  // Priority pulls: the next step's forward pass starts on the first
  // layers' weights while the rest still arrive (a backend that reads the
  // weights whole waits for all of them).
  ParamsWatermark arrived(spec->num_parameters);
  const bool priority_pull =
      overlap_push && plan->priority_pull() &&
      (*backend)->SetParamsWait([&arrived](int64_t to) { (void)arrived.WaitArrived(to); });
  if (priority_pull) {
    spdlog::info("weights arrive first layers first; the next step starts on them");
  }
  std::vector<float> params(spec->num_parameters);
  std::vector<float> grads(spec->num_parameters);
  std::vector<float> images(static_cast<size_t>(batch) * pixels);
  std::vector<uint8_t> labels(batch);
  // The metrics of one call to the ps (PsClient::last_call()): its bytes
  // whatever the outcome, its time and staleness when it succeeded. A
  // PushPull carries the push and brings the next weights: its time counts
  // as both.
  // Bytes of the PushPull calls (every attempt), for the done line.
  int64_t step_bytes_sent = 0, step_bytes_received = 0;
  // The client's version and generation after the last call that is over
  // (with priority pulls one may still be bringing weights).
  int64_t version_seen = 0, generation_seen = 0;
  auto record_call = [&](bool push, bool ok, const PsClient::CallStats& call,
                         int64_t version, int64_t generation) {
    version_seen = version;
    generation_seen = generation;
    if (push) {
      step_bytes_sent += call.bytes_sent;
      step_bytes_received += call.bytes_received;
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
  };
  auto record_pull = [&](bool ok) {
    record_call(/*push=*/false, ok, (*ps)->last_call(), (*ps)->version(), (*ps)->generation());
  };
  const absl::Time pull_start = absl::Now();
  absl::Status first_pull = (*ps)->PullAll(0, params.data(), options_.startup_timeout);
  record_pull(first_pull.ok());
  if (!first_pull.ok()) return first_pull;
  const double pull_s = absl::ToDoubleSeconds(absl::Now() - pull_start);
  spdlog::info("training {} on {} examples: {} epochs x {} chunks of {} shared by {} workers "
               "(this is worker {}), {} ps, on {}",
               spec->name, data->count, plan->epochs(), chunks_per_epoch, batch, num_workers,
               worker, plan->num_ps(), (*backend)->name());

  StepReport::Options ro;
  ro.worker = worker;
  ro.num_workers = num_workers;
  ro.chunks_per_epoch = chunks_per_epoch;
  ro.epoch_examples = data->count;
  ro.report_interval_s = plan->report_interval_s();
  ro.final_timeout = options_.step_timeout;
  StepReport report(chief->get(), ro);

  ChunkReader chunks(*data, batch, plan->seed());
  auto fill = [&](int64_t k) { return chunks.Fill(k, images.data(), labels.data()); };

  report.StartClock();
  StepTimes split;  // summed over the steps
  int64_t restores_seen = 0;
  // Async: time spent told to wait (BOUND) because this worker was
  // max_staleness steps ahead of the slowest chunk, and how often.
  absl::Duration bound_wait;
  int64_t bound_waits = 0;
  std::optional<Backoff> bound_backoff;  // while told BOUND
  absl::Time bound_since;
  // Starts a step's push-pull of `n` examples' gradient on its own thread:
  // streamed while backprop runs when `streamed` (else the gradient is
  // whole), after the call `before` (if any) is over, and not at all when
  // that one failed or was torn.
  auto start_exchange = [&](std::unique_ptr<Exchange> before, int n, bool streamed) {
    Exchange::Wiring w;
    w.ps = ps->get();
    w.worker = worker;
    w.grads = grads.data();
    w.params = params.data();
    w.timeout = options_.step_timeout;
    w.ready = &ready;
    w.arrived = priority_pull ? &arrived : nullptr;
    return Exchange::Start(w, std::move(before), n, streamed);
  };
  // Waits for an exchange to be over and records its call.
  auto finish = [&](Exchange& e) {
    e.Join();
    if (!e.skipped()) {
      record_call(/*push=*/true, e.status().ok(), e.stats(), e.version(), e.generation());
    }
    return e.status();
  };
  // With priority pulls, the last step's exchange, still bringing this
  // step's weights.
  std::unique_ptr<Exchange> inflight;
  struct Settle {
    std::unique_ptr<Exchange>& x;
    ~Settle() {
      if (x != nullptr) x->Join();
    }
  } settle_on_return{inflight};

  WorkRequest request;
  request.set_worker_index(worker);
  request.set_incarnation(incarnation);
  request.set_chunks_per_epoch(chunks_per_epoch);
  while (true) {
    if (stop_) return absl::CancelledError("stop requested");
    request.set_completed_generation(generation_seen);
    absl::StatusOr<WorkResponse> work = (*chief)->GetWork(request, options_.step_timeout, &stop_);
    if (!work.ok()) return work.status();
    request.clear_completed();
    request.clear_abandoned();
    if (inflight != nullptr &&
        (work->kind() != WorkResponse::CHUNK || work->generation() != generation_seen)) {
      // Not a step on the weights arriving: let them all arrive first.
      const absl::Status before = finish(*inflight);
      inflight.reset();
      if (!before.ok() && !absl::IsAborted(before)) return before;
    }
    if (work->generation() != generation_seen) {
      // The ps were restored from a checkpoint: continue from its weights.
      ++restores_seen;
      spdlog::warn("the parameters were restored (generation {}); pulling them again",
                   work->generation());
      (*ps)->ResetErrorFeedback();  // it belonged to gradients now void
      absl::Status s =
          (*ps)->PullAll(0, params.data(), options_.step_timeout, work->generation());
      record_pull(s.ok());
      if (!s.ok()) {
        if (absl::IsAborted(s)) continue;
        return s;
      }
    }
    if (work->kind() == WorkResponse::PAUSE || work->kind() == WorkResponse::IDLE) {
      absl::SleepFor(absl::Milliseconds(20));
      continue;
    }
    if (work->kind() == WorkResponse::BOUND) {
      // Ask again soon: the slowest chunk may be done any moment. Backs off
      // to 16 ms (with jitter) so that many waiting workers do not crowd
      // the chief.
      if (!bound_backoff.has_value()) {
        bound_since = absl::Now();
        bound_backoff.emplace(BoundPollPolicy());
        ++bound_waits;
      }
      absl::SleepFor(bound_backoff->Next());
      continue;
    }
    if (bound_backoff.has_value()) {
      bound_backoff.reset();
      bound_wait += absl::Now() - bound_since;
      if (work->kind() == WorkResponse::CHUNK) {
        // The weights in hand aged while this worker waited: train on the
        // newest, or the bound would not bound the gradient's staleness.
        absl::Status s = (*ps)->PullAll(0, params.data(), options_.step_timeout);
        record_pull(s.ok());
        if (absl::IsAborted(s)) continue;  // restored meanwhile: the chief re-leases
        if (!s.ok()) return s;
      }
    }
    if (work->kind() == WorkResponse::DONE) break;
    if (work->kind() != WorkResponse::CHUNK) {
      return absl::InternalError(absl::StrCat("unknown work kind ", work->kind()));
    }
    absl::Time t0 = absl::Now();
    float loss = 0;
    int correct = 0;
    report.set_epoch(static_cast<int>(work->chunk() / chunks_per_epoch));
    const int n = fill(work->chunk());
    const Batch this_batch{images.data(), labels.data(), n,
                           static_cast<uint64_t>(work->chunk())};
    // A straggler sleeps before its push starts (with overlap, its gradient
    // leaves during TrainStep).
    if (options_.faults.straggle > absl::ZeroDuration()) absl::SleepFor(options_.faults.straggle);
    // With overlap the push-pull starts now and sends each layer's gradient
    // as backprop makes it final; the answer's weights wait for the step
    // to be done with `params`. With priority pulls this step may start
    // while the last one's weights still arrive: if that call then fails,
    // the step is void; if its weights were torn (an answer broken off and
    // sent again), the step is done again on the weights now whole.
    std::unique_ptr<Exchange> exchange;
    absl::Status c;
    bool void_step = false;
    absl::Time step_start;
    for (bool again = true; again;) {
      again = false;
      ready.Reset(spec->num_parameters);
      step_start = absl::Now();
      // (overlap_push whenever a call is in flight: priority pulls need it.)
      if (overlap_push) exchange = start_exchange(std::move(inflight), n, /*streamed=*/true);
      c = (*backend)->TrainStep(params.data(), this_batch, Batch(), grads.data(), &loss,
                                &correct);
      if (c.ok()) {
        ready.MarkAllFinal();
      } else {
        ready.Fail(std::string(c.message()));
      }
      Exchange* before = exchange != nullptr ? exchange->before() : nullptr;
      if (before != nullptr) {
        const absl::Status b = finish(*before);
        if (!b.ok() || before->torn()) {
          (void)finish(*exchange);  // skipped: sent nothing
          exchange.reset();
          if (!b.ok() && !absl::IsAborted(b)) return b;
          void_step = !b.ok();  // restored meanwhile: the chief re-leases
          again = b.ok() && c.ok();
          if (again) spdlog::warn("the weights of this step arrived torn; doing it again");
        }
      }
    }
    if (void_step) continue;
    const absl::Time t1 = absl::Now();
    // With priority pulls, the part of the step spent before the last of
    // its weights had arrived is the pull's, not compute.
    const absl::Duration pull_in_step =
        priority_pull ? std::clamp(arrived.complete_at() - step_start, absl::ZeroDuration(),
                                   t1 - step_start)
                      : absl::ZeroDuration();
    // The next call writes weights from here on.
    if (priority_pull) arrived.Reset();
    if (exchange != nullptr) exchange->ParamsFree();
    if (!c.ok()) {
      if (exchange != nullptr) (void)finish(*exchange);
      return c;
    }
    if (exchange == nullptr) exchange = start_exchange(nullptr, n, /*streamed=*/false);
    const StepTimes t = (*backend)->last_step_times();
    split.h2d_s += t.h2d_s;
    split.compute_s += t.compute_s;
    split.d2h_s += t.d2h_s;
    absl::Status s;
    bool applied = false;
    if (priority_pull && !exchange->WaitAnsweredOrDone()) {
      // Every ps has answered: the next step may start while the weights
      // arrive.
      applied = exchange->applied_early();
      exchange->ReleaseBefore();  // its thread is past it
      inflight = std::move(exchange);
    } else {
      s = finish(*exchange);
      applied = exchange->push_applied();
    }
    if (absl::IsAborted(s)) continue;  // restored meanwhile: this gradient is void
    if (!s.ok()) return s;
    absl::Time t2 = absl::Now();
    // A dropped gradient (stale, or a backup worker's left out of its
    // step) taught the ps nothing: the chunk is to do again. Sync: every
    // ps applied it or none did.
    if (applied) {
      request.add_completed(work->chunk());
    } else {
      request.add_abandoned(work->chunk());
    }
    if (Metrics* m = options_.metrics) {
      m->steps().Increment();
      m->examples().Increment(n);
    }
    report.AddStep(n, loss, correct, absl::ToDoubleSeconds(t1 - t0 - pull_in_step),
                   absl::ToDoubleSeconds(t2 - t1 + pull_in_step));
    if (absl::Status r = report.MaybeReport(t2, version_seen); !r.ok()) return r;
  }
  if (inflight != nullptr) {
    const absl::Status last = finish(*inflight);
    inflight.reset();
    if (!last.ok() && !absl::IsAborted(last)) return last;
  }
  // (The chief took this worker out of the sync set when it answered DONE.)
  finished_ = true;
  // compute_s is the whole of TrainStep but for the part of it spent
  // before the last of its weights had arrived (priority pulls), which
  // counts in comm_s; the split below divides it (the device's own copy
  // and kernel times) and the ps round trips. Pull and push travel in one
  // fused RPC per ps per step (push_pull_s); pull_s is the initial pull.
  const std::string own = fmt::format(
      "{} of this worker's pushes dropped as stale, {} answered differently by the ps, "
      "{} resent, {} restore(s) followed",
      (*ps)->pushes_dropped(), (*ps)->pushes_disputed(), (*ps)->resends(), restores_seen);
  const std::string tail = fmt::format(
      "bound_wait_s={:.3f} bound_waits={} device={} split: pull_s={:.3f} h2d_s={:.3f} "
      "device_compute_s={:.3f} d2h_s={:.3f} push_pull_s={:.3f} bytes_per_step: sent={:.0f} "
      "received={:.0f}",
      absl::ToDoubleSeconds(bound_wait), bound_waits, DeviceLabel((*backend)->name()), pull_s,
      split.h2d_s, split.compute_s, split.d2h_s, report.total_comm_s(),
      report.PerStep(step_bytes_sent), report.PerStep(step_bytes_received));
  return report.Finish(own, tail, version_seen);
}

}  // namespace pscluster
