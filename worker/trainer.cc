#include "worker/trainer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/idx_dataset.h"
#include "common/model_spec.h"
#include "common/placement.h"
#include "common/rpc.h"
#include "proto/coordination.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker/backend_factory.h"
#include "worker/chief_client.h"
#include "worker/compute_backend.h"
#include "worker/ps_client.h"

namespace pscluster {
namespace {

// Running sums between two progress reports.
struct Window {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t examples = 0;
  double compute_s = 0;
  double comm_s = 0;
};

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
  absl::StatusOr<ModelSpec> spec = ModelByName(plan->model());
  if (!spec.ok()) return spec.status();
  if (plan->num_workers() != options_.config.cluster.num_tasks(kWorkerJob)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the chief plans for ", plan->num_workers(), " workers but this worker's ",
        options_.config.source, " lists ", options_.config.cluster.num_tasks(kWorkerJob)));
  }

  absl::StatusOr<Dataset> data = LoadMnist(options_.data_dir, Split::kTrain);
  if (!data.ok()) return data.status();
  const int pixels = data->height * data->width;
  if (data->height != spec->input_height || data->width != spec->input_width) {
    return absl::InvalidArgumentError(absl::StrCat(
        "images in ", options_.data_dir, " are ", data->height, "x", data->width,
        "; model ", spec->name, " wants ", spec->input_height, "x", spec->input_width));
  }
  const int num_workers = plan->num_workers();
  const int batch = plan->batch_size();
  const int64_t shard_max = (data->count + num_workers - 1) / num_workers;
  const int steps_per_epoch = static_cast<int>((shard_max + batch - 1) / batch);

  PlacementOptions popt;
  popt.min_shard_bytes = plan->min_shard_bytes();
  const Placement placement = PlaceVariables(*spec, plan->num_ps(), popt);
  absl::StatusOr<std::unique_ptr<PsClient>> ps =
      PsClient::Create(options_.config.cluster, &placement);
  if (!ps.ok()) return ps.status();
  BackendOptions bopt;
  bopt.device = options_.device;
  bopt.max_batch = batch;
  bopt.num_threads = options_.threads;
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateBackend(*spec, bopt);
  if (!backend.ok()) return backend.status();

  std::vector<float> params(spec->num_parameters);
  std::vector<float> grads(spec->num_parameters);
  // Two batch buffers: while step i computes on one, the other already
  // holds step i + 1's batch, which a GPU backend copies to the device
  // meanwhile (ComputeBackend::TrainStep's `next`).
  std::vector<float> images[2];
  std::vector<uint8_t> labels[2];
  for (int b = 0; b < 2; ++b) {
    images[b].resize(static_cast<size_t>(batch) * pixels);
    labels[b].resize(batch);
  }
  const absl::Time pull_start = absl::Now();
  if (absl::Status s = (*ps)->PullAll(0, params.data(), options_.startup_timeout); !s.ok()) {
    return s;
  }
  const double pull_s = absl::ToDoubleSeconds(absl::Now() - pull_start);
  spdlog::info("training {} on {} examples: {} epochs x {} steps of {} (worker {}/{}, {} ps) on {}",
               spec->name, data->count, plan->epochs(), steps_per_epoch, batch, worker,
               num_workers, plan->num_ps(), (*backend)->name());

  const absl::Duration report_every =
      absl::Seconds(std::max(0.1f, plan->report_interval_s()));
  absl::Time next_report = absl::Now() + report_every;
  Window window;
  int64_t steps_done = 0;
  int64_t examples_done = 0;
  auto report = [&](int epoch, bool done) {
    ProgressReport r;
    r.set_worker_index(worker);
    r.set_epoch(epoch);
    r.set_step(steps_done);
    r.set_examples(examples_done);
    r.set_loss(window.examples ? window.loss_sum / window.examples : 0);
    r.set_accuracy(window.examples ? double(window.correct) / window.examples : 0);
    r.set_global_version((*ps)->version());
    r.set_done(done);
    r.set_compute_s(window.compute_s);
    r.set_comm_s(window.comm_s);
    r.set_steps_per_epoch(steps_per_epoch);
    r.set_epoch_examples(data->count);
    window = Window();
    return (*chief)->Report(r);
  };

  const int total_steps = plan->epochs() * steps_per_epoch;
  // This worker's shard of an epoch; the current and the next one are kept.
  std::map<int, std::vector<int32_t>> shards;
  auto shard_of = [&](int epoch) -> const std::vector<int32_t>& {
    auto it = shards.find(epoch);
    if (it == shards.end()) {
      while (!shards.empty() && shards.begin()->first < epoch - 1) shards.erase(shards.begin());
      it = shards.emplace(epoch, ShardOf(EpochPermutation(data->count, plan->seed(), epoch),
                                         worker, num_workers)).first;
    }
    return it->second;
  };
  // Copies the batch of global step `g` into buffer `b`; returns its size.
  // A short (possibly empty) last batch of an epoch still takes part in the
  // step: the ps weights every gradient by its example count.
  auto fill = [&](int g, int b) {
    const std::vector<int32_t>& shard = shard_of(g / steps_per_epoch);
    const int step = g % steps_per_epoch;
    const int begin = std::min<int>(step * batch, shard.size());
    const int n = std::min<int>(batch, shard.size() - begin);
    for (int i = 0; i < n; ++i) {
      const int32_t e = shard[begin + i];
      std::memcpy(&images[b][size_t(i) * pixels], &data->images[size_t(e) * pixels],
                  pixels * sizeof(float));
      labels[b][i] = data->labels[e];
    }
    return n;
  };

  const absl::Time train_start = absl::Now();
  double total_compute_s = 0;
  double total_comm_s = 0;
  StepTimes split;  // summed over the steps
  int cur = 0;      // the buffer holding this step's batch
  int n = total_steps > 0 ? fill(0, cur) : 0;
  for (int epoch = 0; epoch < plan->epochs(); ++epoch) {
    for (int step = 0; step < steps_per_epoch; ++step) {
      if (stop_) return absl::CancelledError("stop requested");
      const int g = epoch * steps_per_epoch + step;
      const int n_next = g + 1 < total_steps ? fill(g + 1, 1 - cur) : 0;
      absl::Time t0 = absl::Now();
      float loss = 0;
      int correct = 0;
      if (n > 0) {
        const Batch this_batch{images[cur].data(), labels[cur].data(), n};
        const Batch next_batch{images[1 - cur].data(), labels[1 - cur].data(), n_next};
        absl::Status s = (*backend)->TrainStep(params.data(), this_batch,
                                               n_next > 0 ? next_batch : Batch(),
                                               grads.data(), &loss, &correct);
        if (!s.ok()) return s;
        const StepTimes t = (*backend)->last_step_times();
        split.h2d_s += t.h2d_s;
        split.compute_s += t.compute_s;
        split.d2h_s += t.d2h_s;
      } else {
        std::fill(grads.begin(), grads.end(), 0.0f);
      }
      if (options_.straggle > absl::ZeroDuration()) absl::SleepFor(options_.straggle);
      absl::Time t1 = absl::Now();
      const bool last = steps_done + 1 == total_steps;
      absl::Status s = (*ps)->PushPullAll(worker, n, last, grads.data(), params.data(),
                                          options_.step_timeout);
      if (!s.ok()) return s;
      absl::Time t2 = absl::Now();
      if (Metrics* m = options_.metrics) {
        const double bytes = static_cast<double>(spec->num_parameters) * sizeof(float);
        m->steps().Increment();
        m->examples().Increment(n);
        m->push_bytes().Increment(bytes);
        if (!last) m->pull_bytes().Increment(bytes);
        // One fused RPC per ps: push and pull share the latency.
        m->push_latency_seconds().Observe(absl::ToDoubleSeconds(t2 - t1));
        m->model_version().Set(static_cast<double>((*ps)->version()));
      }
      ++steps_done;
      examples_done += n;
      window.loss_sum += double(loss) * n;
      window.correct += correct;
      window.examples += n;
      window.compute_s += absl::ToDoubleSeconds(t1 - t0);
      window.comm_s += absl::ToDoubleSeconds(t2 - t1);
      total_compute_s += absl::ToDoubleSeconds(t1 - t0);
      total_comm_s += absl::ToDoubleSeconds(t2 - t1);
      cur = 1 - cur;
      n = n_next;
      if (t2 >= next_report) {
        next_report = t2 + report_every;
        absl::StatusOr<bool> stop = report(epoch, false);
        if (stop.ok() && *stop) return absl::CancelledError("the chief asked to stop");
      }
    }
  }
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - train_start);
  // compute_s is the whole of TrainStep; the split below divides it (the
  // device's own copy and kernel times) and the ps round trips. Pull and
  // push travel in one fused RPC per ps per step (push_pull_s); pull_s is
  // the initial pull.
  spdlog::info("done: {} steps, {} examples, {} of this worker's pushes dropped as stale; "
               "images_per_s={:.0f} compute_s={:.2f} comm_s={:.2f} wall_s={:.2f} "
               "device={} split: pull_s={:.3f} h2d_s={:.3f} device_compute_s={:.3f} "
               "d2h_s={:.3f} push_pull_s={:.3f}",
               steps_done, examples_done, (*ps)->pushes_dropped(),
               wall_s > 0 ? examples_done / wall_s : 0.0, total_compute_s, total_comm_s, wall_s,
               DeviceLabel((*backend)->name()), pull_s, split.h2d_s, split.compute_s, split.d2h_s,
               total_comm_s);
  absl::StatusOr<bool> ack = report(plan->epochs() - 1, true);
  if (!ack.ok()) return ack.status();
  return absl::OkStatus();
}

}  // namespace pscluster
