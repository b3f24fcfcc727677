#include "chief/chief.h"

#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "chief/coordinator_service.h"
#include "chief/progress_tracker.h"
#include "common/model_spec.h"
#include "common/placement.h"
#include "common/rpc.h"
#include "common/safetensors.h"
#include "common/tensorboard_writer.h"
#include "common/task_server.h"
#include "proto/coordination.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace pscluster {
namespace {

struct Task {
  TaskId id;
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
};

std::string Name(const Task& t) {
  return absl::StrCat(t.id.type, ":", t.id.index, " (", t.address, ")");
}

// Pulls every ps's shards of version >= min_version into one flat vector.
absl::StatusOr<std::vector<float>> PullAll(
    std::vector<std::unique_ptr<ParameterServer::Stub>>& ps, const Placement& placement,
    int64_t num_parameters, int64_t min_version) {
  std::vector<float> flat(num_parameters);
  for (int i = 0; i < static_cast<int>(ps.size()); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(60)));
    PullRequest req;
    req.set_layout_fingerprint(placement.fingerprint);
    req.set_min_version(min_version);
    req.set_worker_index(-1);
    PullResponse resp;
    grpc::Status s = ps[i]->Pull(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("pulling the weights from ps:", i));
    if (static_cast<int64_t>(resp.values().size()) != placement.floats_of_ps[i] * 4) {
      return absl::DataLossError(absl::StrCat("ps:", i, " sent ", resp.values().size(),
                                              " bytes; expected ",
                                              placement.floats_of_ps[i] * 4));
    }
    std::vector<float> wire(placement.floats_of_ps[i]);
    std::memcpy(wire.data(), resp.values().data(), resp.values().size());
    ScatterFromPs(placement, i, wire.data(), flat.data());
  }
  return flat;
}

// The flat weights as one tensor per variable, Keras names and layouts.
std::vector<NamedTensor> ToTensors(const ModelSpec& spec, const std::vector<float>& flat) {
  std::vector<NamedTensor> out;
  for (const VariableSpec& v : spec.variables) {
    NamedTensor t;
    t.name = v.name;
    t.shape = v.shape;
    t.values.assign(flat.begin() + v.offset, flat.begin() + v.offset + v.size);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

std::string FinalLine(const RunResult& r) {
  std::string eval = r.has_eval ? absl::StrFormat("test_accuracy=%.4f test_loss=%.4f",
                                                  r.test_accuracy, r.test_loss)
                                : "test_accuracy=nan test_loss=nan";
  return absl::StrFormat("final: %s steps=%d epochs=%d wall_s=%.1f", eval, r.steps,
                         r.epochs, r.wall_s);
}

void Chief::RequestStop(const std::string& why) {
  if (!stop_.exchange(true)) spdlog::warn("stopping the run: {}", why);
}

absl::StatusOr<RunResult> Chief::Run() {
  const absl::Time start = absl::Now();
  const TfConfig& config = options_.config;
  const ClusterSpec& cluster = config.cluster;
  TrainingPlan plan = options_.plan;
  plan.set_num_workers(cluster.num_tasks(kWorkerJob));
  plan.set_num_ps(cluster.num_tasks(kPsJob));
  if (plan.num_workers() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.source, ": cluster.worker is empty; nothing would train"));
  }
  const int replicas = options_.replicas_to_aggregate > 0 ? options_.replicas_to_aggregate
                                                           : plan.num_workers();
  if (plan.mode() == SYNC && replicas > plan.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas_to_aggregate=", replicas, " exceeds the ", plan.num_workers(),
        " workers in ", config.source));
  }
  absl::StatusOr<ModelSpec> spec = ModelByName(plan.model());
  if (!spec.ok()) return spec.status();

  // Serve the Coordinator first: workers start polling for the plan at once.
  ProgressTracker tracker(plan.num_workers(), plan.epochs(), start);
  CoordinatorService coordinator(&tracker);
  absl::StatusOr<std::unique_ptr<TaskServer>> server =
      TaskServer::Start(config.own_port(), {&coordinator});
  if (!server.ok()) return server.status();

  std::vector<Task> tasks;
  for (const char* job : {kPsJob, kWorkerJob, kEvaluatorJob}) {
    for (int index : cluster.task_indices(job)) {
      Task t;
      t.id = {job, index};
      t.address = *cluster.address(job, index);
      t.channel = MakeChannel(t.address);
      tasks.push_back(std::move(t));
    }
  }
  auto shutdown_all = [&](const std::string& reason) {
    for (const Task& t : tasks) {
      auto stub = TaskControl::NewStub(t.channel);
      grpc::ClientContext ctx;
      ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
      ShutdownRequest req;
      req.set_reason(reason);
      ShutdownResponse resp;
      grpc::Status s = stub->Shutdown(&ctx, req, &resp);
      if (!s.ok()) spdlog::warn("could not tell {} to exit: {}", Name(t), s.error_message());
    }
    (*server)->Stop();
  };
  auto fail = [&](absl::Status s) {
    shutdown_all(absl::StrCat("the chief failed: ", s.message()));
    return s;
  };

  // 1. Wait until every task answers.
  spdlog::info("waiting for {} tasks: {} ps, {} workers, {} evaluator", tasks.size(),
               plan.num_ps(), plan.num_workers(), cluster.num_tasks(kEvaluatorJob));
  {
    const absl::Time give_up = absl::Now() + options_.wait_for_cluster;
    std::vector<bool> up(tasks.size(), false);
    while (true) {
      std::vector<std::string> missing;
      for (size_t i = 0; i < tasks.size(); ++i) {
        if (!up[i]) up[i] = IsServing(*tasks[i].channel, std::chrono::milliseconds(500));
        if (!up[i]) missing.push_back(Name(tasks[i]));
      }
      if (missing.empty()) break;
      if (stop_) return fail(absl::CancelledError("stopped while waiting for the cluster"));
      if (absl::Now() >= give_up) {
        return fail(absl::DeadlineExceededError(absl::StrCat(
            "these tasks did not answer within ",
            absl::FormatDuration(options_.wait_for_cluster), ": ",
            absl::StrJoin(missing, ", "))));
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
  }
  spdlog::info("all tasks answer");

  // 2. Place and initialise the variables.
  PlacementOptions popt;
  popt.min_shard_bytes = plan.min_shard_bytes();
  const Placement placement = PlaceVariables(*spec, plan.num_ps(), popt);
  const std::vector<float> initial = InitialParameters(*spec, plan.seed());
  std::vector<std::unique_ptr<ParameterServer::Stub>> ps;
  for (const Task& t : tasks) {
    if (t.id.type == kPsJob) ps.push_back(ParameterServer::NewStub(t.channel));
  }
  for (int i = 0; i < plan.num_ps(); ++i) {
    InitRequest req;
    req.set_layout_fingerprint(placement.fingerprint);
    std::vector<float> wire(placement.floats_of_ps[i]);
    GatherForPs(placement, i, initial.data(), wire.data());
    for (int s : placement.shards_of_ps[i]) {
      const Shard& sh = placement.shards[s];
      ShardSpec* spec_msg = req.add_shards();
      spec_msg->set_variable(sh.variable);
      spec_msg->set_part(sh.part);
      spec_msg->set_offset(sh.offset);
      spec_msg->set_size(sh.size);
    }
    req.set_values(wire.data(), wire.size() * sizeof(float));
    *req.mutable_optimizer() = options_.optimizer;
    req.set_mode(plan.mode());
    req.set_num_workers(plan.num_workers());
    req.set_replicas_to_aggregate(replicas);
    req.set_max_staleness(options_.max_staleness);
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(30)));
    InitResponse resp;
    grpc::Status s = ps[i]->Init(&ctx, req, &resp);
    if (!s.ok()) {
      return fail(FromGrpcStatus(s, absl::StrCat("initialising ps:", i)));
    }
    spdlog::info("ps:{} holds {} shards, {} parameters{}", i, placement.shards_of_ps[i].size(),
                 placement.floats_of_ps[i],
                 resp.already_initialized() ? " (already initialised: kept)" : "");
  }
  spdlog::info("model {}: {} parameters; {} training, {} workers, batch {} per worker, {} epochs",
               spec->name, spec->num_parameters, plan.mode() == SYNC ? "sync" : "async",
               plan.num_workers(), plan.batch_size(), plan.epochs());
  coordinator.SetPlan(plan);

  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (!options_.logdir.empty()) {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w =
        TensorBoardWriter::Create(options_.logdir, ".chief");
    if (!w.ok()) return fail(w.status());
    tensorboard = *std::move(w);
    spdlog::info("TensorBoard events: {}", tensorboard->path());
  }
  // Mean staleness since the last progress line, from ps:0's counters.
  int64_t stale_sum_before = 0, pushes_before = 0;
  auto mean_staleness = [&]() -> double {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(2)));
    PsStatsResponse st;
    if (!ps[0]->GetStats(&ctx, PsStatsRequest(), &st).ok()) return -1;
    const int64_t pushes = st.pushes_applied() + st.pushes_dropped_stale();
    const double mean = pushes > pushes_before
                            ? double(st.staleness_sum() - stale_sum_before) / (pushes - pushes_before)
                            : 0.0;
    stale_sum_before = st.staleness_sum();
    pushes_before = pushes;
    return mean;
  };
  auto record = [&](const Progress& p) {
    const double staleness = mean_staleness();
    metrics_->model_version().Set(static_cast<double>(p.global_step));
    metrics_->examples_per_second().Set(p.examples_per_s);
    metrics_->loss().Set(p.loss);
    metrics_->accuracy().Set(p.accuracy);
    metrics_->pending_workers().Set(p.num_workers - p.workers_done);
    if (tensorboard && p.examples > 0) {
      std::vector<std::pair<std::string, float>> scalars = {
          {"train/loss", static_cast<float>(p.loss)},
          {"train/accuracy", static_cast<float>(p.accuracy)},
          {"train/examples_per_second", static_cast<float>(p.examples_per_s)}};
      if (staleness >= 0) scalars.push_back({"train/staleness", static_cast<float>(staleness)});
      absl::Status s = tensorboard->AddScalars(p.global_step, scalars);
      if (!s.ok()) spdlog::warn("TensorBoard: {}", std::string(s.message()));
    }
  };

  // 3. Watch progress until every worker is done.
  absl::Time next_log = absl::Now() + options_.log_every;
  const absl::Time training_start = absl::Now();
  while (!tracker.AllDone()) {
    if (stop_ || (*server)->shutdown_requested()) {
      return fail(absl::CancelledError("training interrupted"));
    }
    absl::SleepFor(absl::Milliseconds(50));
    const absl::Time now = absl::Now();
    if (now >= next_log) {
      next_log = now + options_.log_every;
      Progress p = tracker.Snapshot(now);
      spdlog::info("{}", ProgressTracker::Format(p));
      record(p);
      // A worker that went silent and no longer answers is lost.
      const absl::Time quiet_since = std::max(training_start, now - options_.worker_silence);
      if (now - training_start > options_.worker_silence) {
        for (int w : tracker.SilentSince(quiet_since)) {
          const Task* t = nullptr;
          for (const Task& cand : tasks) {
            if (cand.id.type == kWorkerJob && cand.id.index == cluster.task_indices(kWorkerJob)[w]) {
              t = &cand;
            }
          }
          if (t != nullptr && !IsServing(*t->channel, std::chrono::seconds(2))) {
            return fail(absl::UnavailableError(absl::StrCat(
                "worker ", Name(*t), " stopped reporting and does not answer")));
          }
        }
      }
    }
  }
  Progress last = tracker.Snapshot(absl::Now());
  spdlog::info("{}", ProgressTracker::Format(last));
  record(last);

  // 4. Final figures: the ps versions, then the evaluator's verdict.
  RunResult result;
  result.epochs = plan.epochs();
  int64_t steps = -1;
  for (int i = 0; i < plan.num_ps(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    PsStatsResponse st;
    grpc::Status s = ps[i]->GetStats(&ctx, PsStatsRequest(), &st);
    if (!s.ok()) return fail(FromGrpcStatus(s, absl::StrCat("stats of ps:", i)));
    spdlog::info("ps:{} version={} pushes applied={} dropped_stale={} rejected={} duplicate={} "
                 "pulled={:.1f} MB pushed={:.1f} MB",
                 i, st.version(), st.pushes_applied(), st.pushes_dropped_stale(),
                 st.pushes_rejected(), st.pushes_duplicate(), st.bytes_pulled() / 1e6,
                 st.bytes_pushed() / 1e6);
    steps = steps < 0 ? st.version() : std::min(steps, st.version());
  }
  result.steps = std::max<int64_t>(steps, 0);
  for (const Task& t : tasks) {
    if (t.id.type != kEvaluatorJob) continue;
    auto stub = TaskControl::NewStub(t.channel);
    const absl::Time give_up = absl::Now() + options_.final_eval_timeout;
    while (true) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(give_up));
      EvaluateRequest req;
      req.set_min_version(result.steps);
      EvalReport r;
      grpc::Status s = stub->Evaluate(&ctx, req, &r);
      if (s.ok()) {
        result.has_eval = true;
        result.test_accuracy = r.accuracy();
        result.test_loss = r.loss();
        break;
      }
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE || absl::Now() >= give_up || stop_) {
        return fail(FromGrpcStatus(s, absl::StrCat("final evaluation by ", Name(t))));
      }
      absl::SleepFor(absl::Milliseconds(500));
    }
    break;
  }
  if (cluster.num_tasks(kEvaluatorJob) == 0 && coordinator.evaluator_seen()) {
    // An evaluator outside the cluster (TensorFlow's and the Kubeflow
    // operator's layout) reports on its own: wait for its verdict on the
    // final weights, which it evaluates within its interval.
    spdlog::info("waiting for the evaluator's report on step {}", result.steps);
    const absl::Time give_up = absl::Now() + options_.final_eval_timeout;
    while (absl::Now() < give_up && !stop_) {
      Progress p = tracker.Snapshot(absl::Now());
      if (p.last_eval_step >= result.steps) {
        result.has_eval = true;
        result.test_accuracy = p.last_eval_accuracy;
        result.test_loss = p.last_eval_loss;
        break;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (!result.has_eval) spdlog::warn("no evaluation of the final weights arrived");
  }
  if (tensorboard && result.has_eval) {
    (void)tensorboard->AddScalars(result.steps, {{"final/test_accuracy", result.test_accuracy},
                                                 {"final/test_loss", result.test_loss}});
  }
  if (tensorboard) (void)tensorboard->Close();

  // 5. Export the trained weights.
  if (!options_.export_path.empty()) {
    absl::StatusOr<std::vector<float>> flat = PullAll(ps, placement, spec->num_parameters, result.steps);
    if (!flat.ok()) return fail(flat.status());
    std::map<std::string, std::string> meta = {
        {"model", spec->name}, {"steps", absl::StrCat(result.steps)},
        {"epochs", absl::StrCat(result.epochs)}, {"layout", "keras"}};
    if (result.has_eval) meta["test_accuracy"] = absl::StrCat(result.test_accuracy);
    absl::Status s = WriteSafetensors(options_.export_path, ToTensors(*spec, *flat), meta);
    if (!s.ok()) return fail(s);
    spdlog::info("trained weights written to {}", options_.export_path);
  }
  result.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  shutdown_all("training finished");
  return result;
}

}  // namespace pscluster
