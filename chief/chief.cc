#include "chief/chief.h"

#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "chief/coordinator_service.h"
#include "chief/dispatcher.h"
#include "chief/progress_tracker.h"
#include "common/checkpoint.h"
#include "common/model_spec.h"
#include "common/placement.h"
#include "common/retry.h"
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

std::vector<float> BytesToFloats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// Workers get no new step while one of these lives.
class PausedWorkers {
 public:
  explicit PausedWorkers(Dispatcher* dispatcher) : dispatcher_(dispatcher) {
    dispatcher_->Pause();
  }
  ~PausedWorkers() { dispatcher_->Resume(); }
  PausedWorkers(const PausedWorkers&) = delete;
  PausedWorkers& operator=(const PausedWorkers&) = delete;

 private:
  Dispatcher* const dispatcher_;
};

// What the chief keeps of a checkpoint: every ps's state, the data
// position and the generation.
struct Snapshot {
  int64_t step = 0;  // the smallest ps version
  std::vector<ShardState> ps;
  std::string done_chunks;
  int chunks_per_epoch = 0;
  int64_t generation = 0;
  int64_t run_started_unix_ms = 0;  // when the run's first chief started
};

// A Snapshot as checkpoint tensors "ps<i>/values", "ps<i>/slot/<name>" and
// metadata (versions, optimizer iterations, data position).
Checkpoint ToCheckpoint(const Snapshot& snap, const ModelSpec& spec, UpdateMode mode) {
  Checkpoint c;
  c.step = snap.step;
  c.metadata["model"] = spec.name;
  c.metadata["mode"] = mode == SYNC ? "sync" : "async";
  c.metadata["generation"] = absl::StrCat(snap.generation);
  c.metadata["done_chunks"] = snap.done_chunks;
  c.metadata["chunks_per_epoch"] = absl::StrCat(snap.chunks_per_epoch);
  c.metadata["num_ps"] = absl::StrCat(snap.ps.size());
  c.metadata["run_started_unix_ms"] = absl::StrCat(snap.run_started_unix_ms);
  for (size_t i = 0; i < snap.ps.size(); ++i) {
    const ShardState& s = snap.ps[i];
    const std::string prefix = absl::StrCat("ps", i);
    c.metadata[prefix + "/version"] = absl::StrCat(s.version());
    c.metadata[prefix + "/optimizer_iterations"] = absl::StrCat(s.optimizer_iterations());
    c.metadata[prefix + "/layout"] = absl::StrCat(s.layout_fingerprint());
    NamedTensor values;
    values.name = prefix + "/values";
    values.values = BytesToFloats(s.values());
    values.shape = {static_cast<int64_t>(values.values.size())};
    c.tensors.push_back(std::move(values));
    for (const SlotValues& slot : s.slots()) {
      NamedTensor t;
      t.name = absl::StrCat(prefix, "/slot/", slot.name());
      t.values = BytesToFloats(slot.values());
      t.shape = {static_cast<int64_t>(t.values.size())};
      c.tensors.push_back(std::move(t));
    }
  }
  return c;
}

// The inverse of ToCheckpoint; DataLoss naming what is missing or wrong.
absl::StatusOr<Snapshot> FromCheckpoint(const Checkpoint& c, const Placement& placement) {
  auto meta = [&](const std::string& key) -> absl::StatusOr<std::string> {
    auto it = c.metadata.find(key);
    if (it == c.metadata.end()) {
      return absl::DataLossError(absl::StrCat("checkpoint of step ", c.step, " lacks ", key));
    }
    return it->second;
  };
  auto number = [&](const std::string& key) -> absl::StatusOr<int64_t> {
    absl::StatusOr<std::string> v = meta(key);
    if (!v.ok()) return v.status();
    int64_t n = 0;
    if (!absl::SimpleAtoi(*v, &n)) {
      return absl::DataLossError(absl::StrCat("checkpoint ", key, " '", *v, "' is not a number"));
    }
    return n;
  };
  Snapshot snap;
  snap.step = c.step;
  absl::StatusOr<int64_t> num_ps = number("num_ps");
  absl::StatusOr<int64_t> generation = number("generation");
  absl::StatusOr<int64_t> chunks = number("chunks_per_epoch");
  absl::StatusOr<std::string> done = meta("done_chunks");
  for (const absl::Status& s : {num_ps.status(), generation.status(), chunks.status(), done.status()}) {
    if (!s.ok()) return s;
  }
  if (*num_ps != placement.num_ps) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint of step ", c.step, " holds ", *num_ps, " ps; the cluster has ",
        placement.num_ps));
  }
  snap.generation = *generation;
  snap.chunks_per_epoch = static_cast<int>(*chunks);
  snap.done_chunks = *done;
  if (absl::StatusOr<int64_t> started = number("run_started_unix_ms"); started.ok()) {
    snap.run_started_unix_ms = *started;
  }
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& t : c.tensors) by_name[t.name] = &t;
  for (int i = 0; i < placement.num_ps; ++i) {
    const std::string prefix = absl::StrCat("ps", i);
    ShardState s;
    s.set_layout_fingerprint(placement.fingerprint);
    absl::StatusOr<int64_t> version = number(prefix + "/version");
    absl::StatusOr<int64_t> iterations = number(prefix + "/optimizer_iterations");
    absl::StatusOr<int64_t> layout = number(prefix + "/layout");
    for (const absl::Status& st : {version.status(), iterations.status(), layout.status()}) {
      if (!st.ok()) return st;
    }
    if (static_cast<uint64_t>(*layout) != placement.fingerprint) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint of step ", c.step, " has another variable layout (model, ps count "
          "or --min_shard_bytes changed)"));
    }
    s.set_version(*version);
    s.set_generation(snap.generation);
    s.set_optimizer_iterations(*iterations);
    for (const auto& [name, t] : by_name) {
      if (name == prefix + "/values") {
        s.set_values(t->values.data(), t->values.size() * sizeof(float));
      } else if (name.rfind(prefix + "/slot/", 0) == 0) {
        SlotValues* slot = s.add_slots();
        slot->set_name(name.substr(prefix.size() + 6));
        slot->set_values(t->values.data(), t->values.size() * sizeof(float));
      }
    }
    if (static_cast<int64_t>(s.values().size()) != placement.floats_of_ps[i] * 4) {
      return absl::DataLossError(absl::StrCat("the checkpoint of step ", c.step, " holds ",
                                              s.values().size() / 4, " values for ps:", i,
                                              "; it holds ", placement.floats_of_ps[i]));
    }
    snap.ps.push_back(std::move(s));
  }
  return snap;
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

// One run's state and the steps of Run(), each a method.
class Chief::Impl {
 public:
  Impl(const ChiefOptions& options, Metrics* metrics, std::atomic<bool>* stop)
      : options_(options), metrics_(metrics), stop_(*stop) {}

  absl::StatusOr<RunResult> Run();

 private:
  absl::Status WaitForCluster();
  InitRequest MakeInit(int ps) const;
  absl::Status InitParameterServers();
  // Membership changes go to every ps (sync mode); `force`: also when the
  // ps should have it already (a restored or restarted ps does not).
  void ApplyMembership(bool force = false);
  // Sync: waits (workers paused) until every ps is at one version.
  bool WaitForOneVersion(absl::Duration timeout);
  void CheckWorkers();
  // Asks every ps whether it is the same live process; recovers when not.
  absl::Status CheckParameterServers();
  absl::Status RecoverParameterServer(int ps, const std::string& why);
  // Snapshots every ps at one consistent cut with workers paused.
  absl::StatusOr<Snapshot> TakeSnapshot(bool workers_idle);
  absl::Status TakeCheckpoint(const char* why, bool workers_idle = false);
  absl::Status RestoreAll(const Snapshot& snap, int64_t generation);
  absl::StatusOr<PsStatsResponse> Stats(int ps, absl::Duration timeout);
  absl::StatusOr<std::vector<float>> PullAll(int64_t min_version);
  void Record(const Progress& p);
  absl::Status FinalEvaluation(RunResult* result);
  void ShutdownAll(const std::string& reason);
  absl::Status Fail(absl::Status s) {
    ShutdownAll(absl::StrCat("the chief failed: ", s.message()));
    return s;
  }

  const ChiefOptions& options_;
  Metrics* const metrics_;
  std::atomic<bool>& stop_;
  absl::Time start_;
  TrainingPlan plan_;
  int replicas_ = 0;
  std::optional<ModelSpec> spec_;
  std::optional<Placement> placement_;
  std::vector<Task> tasks_;
  std::vector<std::unique_ptr<ParameterServer::Stub>> ps_;
  std::vector<uint64_t> incarnation_;
  std::vector<int> ps_failures_;  // consecutive failed checks
  std::unique_ptr<ProgressTracker> tracker_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<CoordinatorService> coordinator_;
  std::unique_ptr<TaskServer> server_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::optional<Snapshot> latest_;  // the newest checkpoint, in memory
  int64_t last_checkpoint_step_ = 0;
  absl::Time last_checkpoint_time_;
  int64_t highest_version_ = 0;  // seen on any ps
  int64_t membership_sent_ = -1;  // the sync set every ps holds
  std::vector<bool> sent_active_;
  int64_t stale_sum_before_ = 0, pushes_before_ = 0;
};

absl::StatusOr<RunResult> Chief::Run() {
  Impl impl(options_, metrics_, &stop_);
  return impl.Run();
}

absl::Status Chief::Impl::WaitForCluster() {
  spdlog::info("waiting for {} tasks: {} ps, {} workers, {} evaluator", tasks_.size(),
               plan_.num_ps(), plan_.num_workers(),
               options_.config.cluster.num_tasks(kEvaluatorJob));
  const absl::Time give_up = absl::Now() + options_.wait_for_cluster;
  std::vector<bool> up(tasks_.size(), false);
  while (true) {
    std::vector<std::string> missing;
    for (size_t i = 0; i < tasks_.size(); ++i) {
      if (!up[i]) up[i] = IsServing(*tasks_[i].channel, std::chrono::milliseconds(500));
      if (!up[i]) missing.push_back(Name(tasks_[i]));
    }
    if (missing.empty()) break;
    if (stop_) return absl::CancelledError("stopped while waiting for the cluster");
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          "these tasks did not answer within ", absl::FormatDuration(options_.wait_for_cluster),
          ": ", absl::StrJoin(missing, ", ")));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  spdlog::info("all tasks answer");
  return absl::OkStatus();
}

InitRequest Chief::Impl::MakeInit(int i) const {
  InitRequest req;
  req.set_layout_fingerprint(placement_->fingerprint);
  for (int s : placement_->shards_of_ps[i]) {
    const Shard& sh = placement_->shards[s];
    ShardSpec* spec_msg = req.add_shards();
    spec_msg->set_variable(sh.variable);
    spec_msg->set_part(sh.part);
    spec_msg->set_offset(sh.offset);
    spec_msg->set_size(sh.size);
  }
  *req.mutable_optimizer() = options_.optimizer;
  req.set_mode(plan_.mode());
  req.set_num_workers(plan_.num_workers());
  req.set_replicas_to_aggregate(replicas_);
  req.set_max_staleness(options_.max_staleness);
  req.set_nonfinite(options_.nonfinite);
  return req;
}

absl::StatusOr<PsStatsResponse> Chief::Impl::Stats(int i, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  PsStatsResponse st;
  grpc::Status s = ps_[i]->GetStats(&ctx, PsStatsRequest(), &st);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("stats of ps:", i));
  return st;
}

absl::Status Chief::Impl::InitParameterServers() {
  const std::vector<float> initial = InitialParameters(*spec_, plan_.seed());
  bool resumed = false;
  int64_t generation = 0;
  for (int i = 0; i < plan_.num_ps(); ++i) {
    InitRequest req = MakeInit(i);
    std::vector<float> wire(placement_->floats_of_ps[i]);
    GatherForPs(*placement_, i, initial.data(), wire.data());
    req.set_values(wire.data(), wire.size() * sizeof(float));
    InitResponse resp;
    RetryPolicy policy;
    policy.total_timeout = options_.wait_for_cluster;
    absl::Status s = RetryRpc(absl::StrCat("initialising ps:", i), policy, [&](absl::Time d) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(d));
      return ps_[i]->Init(&ctx, req, &resp);
    }, &stop_);
    if (!s.ok()) return s;
    resumed |= resp.already_initialized();
    generation = std::max(generation, resp.generation());
    highest_version_ = std::max(highest_version_, resp.version());
    spdlog::info("ps:{} holds {} shards, {} parameters{}", i, placement_->shards_of_ps[i].size(),
                 placement_->floats_of_ps[i],
                 resp.already_initialized()
                     ? absl::StrCat(" (already initialised, at version ", resp.version(),
                                    ": kept)")
                     : "");
    absl::StatusOr<PsStatsResponse> st = Stats(i, absl::Seconds(10));
    if (!st.ok()) return st.status();
    incarnation_[i] = st->incarnation();
  }
  dispatcher_->set_generation(generation);
  if (!resumed) return TakeCheckpoint("initial", /*workers_idle=*/true);

  // A restarted chief: the ps keep training where they are; the data
  // position comes from the newest checkpoint on disk (chunks finished
  // since are trained again).
  if (!options_.checkpoint_dir.empty()) {
    absl::StatusOr<pscluster::Checkpoint> c = ReadLatestCheckpoint(options_.checkpoint_dir);
    if (c.ok()) {
      absl::StatusOr<Snapshot> snap = FromCheckpoint(*c, *placement_);
      if (!snap.ok()) return snap.status();
      if (absl::Status s = dispatcher_->Rewind(snap->chunks_per_epoch, snap->done_chunks,
                                               generation);
          !s.ok()) {
        return s;
      }
      latest_ = *std::move(snap);
      last_checkpoint_step_ = latest_->step;
      if (latest_->run_started_unix_ms > 0) {
        // wall_s in the final line covers the whole run, not this life.
        start_ = std::min(start_, absl::FromUnixMillis(latest_->run_started_unix_ms));
      }
      spdlog::warn("resuming a run in progress: the ps are at version {} (generation {}); "
                   "data position from the checkpoint of step {} ({} chunks done)",
                   highest_version_, generation, latest_->step, dispatcher_->done_chunks());
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(c.status())) return c.status();
  }
  spdlog::warn("resuming a run in progress: the ps are at version {} (generation {}); no "
               "checkpoint on disk, so the data starts over from the first epoch",
               highest_version_, generation);
  return TakeCheckpoint("resumed", /*workers_idle=*/true);
}

void Chief::Impl::ApplyMembership(bool force) {
  int64_t number = 0;
  const std::vector<bool> active = dispatcher_->Membership(&number);
  if (number == membership_sent_ && !force) return;
  if (plan_.mode() != SYNC) {
    dispatcher_->MembershipApplied(number);
    return;
  }
  // Adding a worker to the set must happen at the same step on every ps,
  // or the ps would count steps out of phase for good: pause the workers
  // until every ps is at one version first. (Taking one out needs no
  // pause: every ps then completes the step without it.)
  bool adds = false;
  for (size_t w = 0; w < active.size() && !sent_active_.empty(); ++w) {
    adds |= active[w] && !sent_active_[w];
  }
  std::optional<PausedWorkers> paused;
  if (adds) {
    paused.emplace(dispatcher_.get());
    WaitForOneVersion(absl::Seconds(2));
  }
  SetWorkersRequest req;
  req.set_layout_fingerprint(placement_->fingerprint);
  for (bool a : active) req.add_active(a);
  for (int i = 0; i < plan_.num_ps(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(2)));
    SetWorkersResponse resp;
    grpc::Status s = ps_[i]->SetWorkers(&ctx, req, &resp);
    if (!s.ok()) return;  // a ps down: sent again on the next tick
  }
  membership_sent_ = number;
  sent_active_ = active;
  dispatcher_->MembershipApplied(number);
}

bool Chief::Impl::WaitForOneVersion(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  int settled = 0;
  while (absl::Now() < give_up && !stop_) {
    int64_t version = -1;
    bool equal = true;
    for (int i = 0; i < plan_.num_ps() && equal; ++i) {
      absl::StatusOr<PsStatsResponse> st = Stats(i, absl::Milliseconds(500));
      if (!st.ok()) return false;
      if (version >= 0 && st->version() != version) equal = false;
      version = st->version();
    }
    settled = equal ? settled + 1 : 0;
    if (settled == 2) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return false;
}

void Chief::Impl::CheckWorkers() {
  for (const Dispatcher::Lost& l : dispatcher_->FindLost(absl::Now(), options_.heartbeat_timeout)) {
    spdlog::warn("worker {} lost: no heartbeat for {:.1f} s; {} unfinished chunk(s) go to the "
                 "other workers{}",
                 l.worker, absl::ToDoubleSeconds(l.silent_for), l.chunks_released,
                 plan_.mode() == SYNC ? "; sync steps stop waiting for it" : "");
  }
  for (const std::string& e : dispatcher_->TakeEvents()) spdlog::warn("{}", e);
  ApplyMembership();
}

absl::Status Chief::Impl::CheckParameterServers() {
  for (int i = 0; i < plan_.num_ps(); ++i) {
    absl::StatusOr<PsStatsResponse> st = Stats(i, absl::Seconds(1));
    if (!st.ok()) {
      if (++ps_failures_[i] >= 2) {
        return RecoverParameterServer(i, std::string(st.status().message()));
      }
      continue;
    }
    ps_failures_[i] = 0;
    highest_version_ = std::max(highest_version_, st->version());
    if (!st->initialized() || st->incarnation() != incarnation_[i]) {
      return RecoverParameterServer(i, "it restarted and lost its parameters");
    }
  }
  return absl::OkStatus();
}

absl::Status Chief::Impl::RecoverParameterServer(int i, const std::string& why) {
  const absl::Time t0 = absl::Now();
  spdlog::warn("ps:{} lost ({}); pausing the workers until it is back", i, why);
  dispatcher_->Pause();
  const absl::Time give_up = t0 + options_.ps_recovery_timeout;
  absl::StatusOr<PsStatsResponse> st;
  while (true) {
    if (stop_) return absl::CancelledError("stopped while waiting for a ps");
    st = Stats(i, absl::Seconds(1));
    if (st.ok()) break;
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat(
          "ps:", i, " did not come back within ",
          absl::FormatDuration(options_.ps_recovery_timeout), ": ", st.status().message()));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  const absl::Time back = absl::Now();
  ps_failures_[i] = 0;
  if (st->initialized() && st->incarnation() == incarnation_[i]) {
    // Cut off, not restarted: its state is intact and the workers' retried
    // pushes reach it now.
    spdlog::warn("ps:{} answers again (the same process, {:.1f} s after it was found "
                 "unreachable); nothing lost, resuming",
                 i, absl::ToDoubleSeconds(back - t0));
  } else {
    int64_t generation = dispatcher_->generation();
    for (int j = 0; j < plan_.num_ps(); ++j) {
      absl::StatusOr<PsStatsResponse> s = Stats(j, absl::Seconds(2));
      if (s.ok()) generation = std::max(generation, s->generation());
    }
    ++generation;
    if (!latest_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ps:", i, " restarted but there is no checkpoint to restore it from"));
    }
    const int64_t lost = std::max<int64_t>(0, highest_version_ - latest_->step);
    if (absl::Status s = RestoreAll(*latest_, generation); !s.ok()) return s;
    spdlog::warn("ps:{} restarted: every ps restored from the checkpoint of step {} "
                 "(generation {}); {} step(s) since that checkpoint are lost and redone; "
                 "detected and back after {:.1f} s, restored in {:.2f} s",
                 i, latest_->step, generation, lost, absl::ToDoubleSeconds(back - t0),
                 absl::ToDoubleSeconds(absl::Now() - back));
    highest_version_ = latest_->step;
  }
  ApplyMembership(/*force=*/true);
  dispatcher_->Resume();
  return absl::OkStatus();
}

absl::Status Chief::Impl::RestoreAll(const Snapshot& snap, int64_t generation) {
  // The data position first, so that no worker gets a chunk of the old
  // generation once a ps holds the new one.
  if (absl::Status s = dispatcher_->Rewind(snap.chunks_per_epoch, snap.done_chunks, generation);
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < plan_.num_ps(); ++i) {
    RestoreRequest req;
    *req.mutable_init() = MakeInit(i);
    *req.mutable_state() = snap.ps[i];
    req.mutable_state()->set_generation(generation);
    RetryPolicy policy;
    policy.total_timeout = options_.ps_recovery_timeout;
    absl::Status s = RetryRpc(absl::StrCat("restoring ps:", i), policy, [&](absl::Time d) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(d));
      RestoreResponse resp;
      return ps_[i]->Restore(&ctx, req, &resp);
    }, &stop_);
    if (!s.ok()) return s;
    absl::StatusOr<PsStatsResponse> st = Stats(i, absl::Seconds(10));
    if (!st.ok()) return st.status();
    incarnation_[i] = st->incarnation();
  }
  return absl::OkStatus();
}

absl::StatusOr<Snapshot> Chief::Impl::TakeSnapshot(bool workers_idle) {
  PausedWorkers paused(dispatcher_.get());
  // Async: wait until no worker is in the middle of a step. Sync: a step
  // completes on every ps or on none, so equal versions suffice.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!workers_idle && plan_.mode() == ASYNC && !dispatcher_->AllParked()) {
    if (absl::Now() >= give_up || stop_) {
      return absl::DeadlineExceededError("workers did not pause within 10 s");
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  for (int attempt = 0;; ++attempt) {
    Snapshot snap;
    snap.run_started_unix_ms = absl::ToUnixMillis(start_);
    snap.generation = dispatcher_->generation();
    snap.done_chunks = dispatcher_->SaveDone();
    snap.chunks_per_epoch = dispatcher_->chunks_per_epoch();
    bool consistent = true;
    for (int i = 0; i < plan_.num_ps(); ++i) {
      // Short: an unreachable ps must not hold the chief (and the paused
      // workers) here; the checkpoint is skipped and the ps checks notice.
      // Values and slots (3x the shard for Adam) at 100 MB/s or better.
      const absl::Duration timeout =
          absl::Seconds(2) + absl::Seconds(3.0 * placement_->floats_of_ps[i] * 4 / 100e6);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
      SnapshotRequest req;
      req.set_layout_fingerprint(placement_->fingerprint);
      ShardState state;
      grpc::Status s = ps_[i]->Snapshot(&ctx, req, &state);
      if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("snapshot of ps:", i));
      if (state.generation() != snap.generation ||
          (i > 0 && plan_.mode() == SYNC && state.version() != snap.ps[0].version())) {
        consistent = false;
      }
      snap.ps.push_back(std::move(state));
    }
    if (consistent) {
      snap.step = snap.ps[0].version();
      for (const ShardState& s : snap.ps) snap.step = std::min(snap.step, s.version());
      return snap;
    }
    if (attempt == 100 || stop_) {
      return absl::DeadlineExceededError("the ps did not settle on one version");
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

absl::Status Chief::Impl::TakeCheckpoint(const char* why, bool workers_idle) {
  const absl::Time t0 = absl::Now();
  absl::StatusOr<Snapshot> snap = TakeSnapshot(workers_idle);
  if (!snap.ok()) {
    spdlog::warn("checkpoint ({}) skipped: {}", why, std::string(snap.status().message()));
    // Try again after another interval, not at once.
    last_checkpoint_step_ = highest_version_;
    last_checkpoint_time_ = absl::Now();
    return absl::OkStatus();
  }
  const absl::Duration paused = absl::Now() - t0;
  latest_ = *std::move(snap);
  last_checkpoint_step_ = latest_->step;
  last_checkpoint_time_ = absl::Now();
  if (options_.checkpoint_dir.empty()) {
    spdlog::info("checkpoint ({}) at step {} kept in memory (workers paused {:.1f} ms)", why,
                 latest_->step, absl::ToDoubleMilliseconds(paused));
    return absl::OkStatus();
  }
  absl::Status s = WriteCheckpoint(options_.checkpoint_dir,
                                   ToCheckpoint(*latest_, *spec_, plan_.mode()),
                                   options_.keep_checkpoints);
  if (!s.ok()) return s;
  spdlog::info("checkpoint ({}) at step {} written to {} in {:.1f} ms (workers paused {:.1f} ms)",
               why, latest_->step, options_.checkpoint_dir,
               absl::ToDoubleMilliseconds(absl::Now() - t0), absl::ToDoubleMilliseconds(paused));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Chief::Impl::PullAll(int64_t min_version) {
  std::vector<float> flat(spec_->num_parameters);
  for (int i = 0; i < static_cast<int>(ps_.size()); ++i) {
    PullRequest req;
    req.set_layout_fingerprint(placement_->fingerprint);
    req.set_min_version(min_version);
    req.set_worker_index(-1);
    req.set_generation(-1);
    PullResponse resp;
    RetryPolicy policy;
    absl::Status s = RetryRpc(absl::StrCat("pulling the weights from ps:", i), policy,
                              [&](absl::Time d) {
                                grpc::ClientContext ctx;
                                ctx.set_deadline(absl::ToChronoTime(d));
                                return ps_[i]->Pull(&ctx, req, &resp);
                              }, &stop_);
    if (!s.ok()) return s;
    if (static_cast<int64_t>(resp.values().size()) != placement_->floats_of_ps[i] * 4) {
      return absl::DataLossError(absl::StrCat("ps:", i, " sent ", resp.values().size(),
                                              " bytes; expected ",
                                              placement_->floats_of_ps[i] * 4));
    }
    const std::vector<float> wire = BytesToFloats(resp.values());
    ScatterFromPs(*placement_, i, wire.data(), flat.data());
  }
  return flat;
}

void Chief::Impl::Record(const Progress& p) {
  // Mean staleness since the last progress line, from ps:0's counters.
  double staleness = -1;
  if (absl::StatusOr<PsStatsResponse> st = Stats(0, absl::Seconds(2)); st.ok()) {
    const int64_t pushes = st->pushes_applied() + st->pushes_dropped_stale();
    staleness = pushes > pushes_before_
                    ? double(st->staleness_sum() - stale_sum_before_) / (pushes - pushes_before_)
                    : 0.0;
    stale_sum_before_ = st->staleness_sum();
    pushes_before_ = pushes;
  }
  metrics_->model_version().Set(static_cast<double>(p.global_step));
  metrics_->examples_per_second().Set(p.examples_per_s);
  metrics_->loss().Set(p.loss);
  metrics_->accuracy().Set(p.accuracy);
  metrics_->pending_workers().Set(p.num_workers - p.workers_done);
  if (tensorboard_ && p.examples > 0) {
    std::vector<std::pair<std::string, float>> scalars = {
        {"train/loss", static_cast<float>(p.loss)},
        {"train/accuracy", static_cast<float>(p.accuracy)},
        {"train/examples_per_second", static_cast<float>(p.examples_per_s)}};
    if (staleness >= 0) scalars.push_back({"train/staleness", static_cast<float>(staleness)});
    absl::Status s = tensorboard_->AddScalars(p.global_step, scalars);
    if (!s.ok()) spdlog::warn("TensorBoard: {}", std::string(s.message()));
  }
}

void Chief::Impl::ShutdownAll(const std::string& reason) {
  if (server_) server_->RequestShutdown(reason);  // not ready from here on
  for (const Task& t : tasks_) {
    auto stub = TaskControl::NewStub(t.channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
    ShutdownRequest req;
    req.set_reason(reason);
    ShutdownResponse resp;
    grpc::Status s = stub->Shutdown(&ctx, req, &resp);
    if (!s.ok()) spdlog::warn("could not tell {} to exit: {}", Name(t), s.error_message());
  }
  if (server_) server_->Stop();
}

absl::Status Chief::Impl::FinalEvaluation(RunResult* result) {
  const ClusterSpec& cluster = options_.config.cluster;
  for (const Task& t : tasks_) {
    if (t.id.type != kEvaluatorJob) continue;
    auto stub = TaskControl::NewStub(t.channel);
    EvaluateRequest req;
    req.set_min_version(result->steps);
    EvalReport r;
    RetryPolicy policy;
    policy.attempt_timeout = options_.final_eval_timeout;
    policy.total_timeout = options_.final_eval_timeout;
    absl::Status s = RetryRpc(absl::StrCat("final evaluation by ", Name(t)), policy,
                              [&](absl::Time d) {
                                grpc::ClientContext ctx;
                                ctx.set_deadline(absl::ToChronoTime(d));
                                return stub->Evaluate(&ctx, req, &r);
                              }, &stop_);
    if (!s.ok()) return s;
    result->has_eval = true;
    result->test_accuracy = r.accuracy();
    result->test_loss = r.loss();
    return absl::OkStatus();
  }
  if (cluster.num_tasks(kEvaluatorJob) == 0 && coordinator_->evaluator_seen()) {
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
        break;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (!result->has_eval) spdlog::warn("no evaluation of the final weights arrived");
  }
  return absl::OkStatus();
}

absl::StatusOr<RunResult> Chief::Impl::Run() {
  start_ = absl::Now();
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
  replicas_ = options_.replicas_to_aggregate > 0 ? options_.replicas_to_aggregate
                                                  : plan_.num_workers();
  if (plan_.mode() == SYNC && replicas_ > plan_.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas_to_aggregate=", replicas_, " exceeds the ", plan_.num_workers(),
        " workers in ", config.source));
  }
  absl::StatusOr<ModelSpec> spec = ModelByName(plan_.model());
  if (!spec.ok()) return spec.status();
  spec_ = *std::move(spec);

  // Serve the Coordinator first: workers start polling for the plan at once.
  tracker_ = std::make_unique<ProgressTracker>(plan_.num_workers(), plan_.epochs(), start_);
  dispatcher_ = std::make_unique<Dispatcher>(plan_.num_workers(), plan_.epochs(), start_);
  // No work is handed out until the ps are initialised (a restarted
  // chief's workers ask at once).
  dispatcher_->Pause();
  coordinator_ = std::make_unique<CoordinatorService>(tracker_.get(), dispatcher_.get());
  absl::StatusOr<std::unique_ptr<TaskServer>> server =
      TaskServer::Start(config.own_port(), {coordinator_.get()});
  if (!server.ok()) return server.status();
  server_ = *std::move(server);

  for (const char* job : {kPsJob, kWorkerJob, kEvaluatorJob}) {
    for (int index : cluster.task_indices(job)) {
      Task t;
      t.id = {job, index};
      t.address = *cluster.address(job, index);
      t.channel = MakeChannel(t.address);
      if (t.id.type == kPsJob) ps_.push_back(ParameterServer::NewStub(t.channel));
      tasks_.push_back(std::move(t));
    }
  }
  incarnation_.assign(plan_.num_ps(), 0);
  ps_failures_.assign(plan_.num_ps(), 0);

  // 1. Wait until every task answers.
  if (absl::Status s = WaitForCluster(); !s.ok()) return Fail(s);

  // 2. Place and initialise the variables (or find them initialised).
  PlacementOptions popt;
  popt.min_shard_bytes = plan_.min_shard_bytes();
  placement_ = PlaceVariables(*spec_, plan_.num_ps(), popt);
  last_checkpoint_time_ = absl::Now();
  if (absl::Status s = InitParameterServers(); !s.ok()) return Fail(s);
  spdlog::info("model {}: {} parameters; {} training, {} workers, batch {} per worker, {} epochs",
               spec_->name, spec_->num_parameters, plan_.mode() == SYNC ? "sync" : "async",
               plan_.num_workers(), plan_.batch_size(), plan_.epochs());
  dispatcher_->ResetContact(absl::Now());
  ApplyMembership(/*force=*/true);
  coordinator_->SetPlan(plan_);
  dispatcher_->Resume();
  server_->SetReady(true);  // the cluster is up (health: kReadyService)

  if (!options_.logdir.empty()) {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w =
        TensorBoardWriter::Create(options_.logdir, ".chief");
    if (!w.ok()) return Fail(w.status());
    tensorboard_ = *std::move(w);
    spdlog::info("TensorBoard events: {}", tensorboard_->path());
  }

  // 3. Hand out work and watch over the cluster until every worker is done.
  absl::Time next_log = absl::Now() + options_.log_every;
  absl::Time next_ps_check = absl::Now() + options_.ps_check_every;
  absl::Time next_version_check = absl::Now();
  while (!dispatcher_->AllFinished()) {
    if (stop_ || server_->shutdown_requested()) {
      return Fail(absl::CancelledError("training interrupted"));
    }
    absl::SleepFor(absl::Milliseconds(20));
    CheckWorkers();
    const absl::Time now = absl::Now();
    if (now >= next_ps_check) {
      next_ps_check = now + options_.ps_check_every;
      if (absl::Status s = CheckParameterServers(); !s.ok()) return Fail(s);
    }
    if (options_.checkpoint_every_steps > 0 && now >= next_version_check) {
      // Steps can be fast (hundreds a second in async): look at ps:0 often.
      next_version_check = now + absl::Milliseconds(50);
      if (absl::StatusOr<PsStatsResponse> st = Stats(0, absl::Milliseconds(200)); st.ok()) {
        highest_version_ = std::max(highest_version_, st->version());
      }
    }
    const bool steps_due = options_.checkpoint_every_steps > 0 &&
                           highest_version_ - last_checkpoint_step_ >= options_.checkpoint_every_steps;
    const bool time_due = options_.checkpoint_every > absl::ZeroDuration() &&
                          now - last_checkpoint_time_ >= options_.checkpoint_every;
    if (steps_due || time_due) {
      if (absl::Status s = TakeCheckpoint("periodic"); !s.ok()) return Fail(s);
    }
    if (now >= next_log) {
      next_log = now + options_.log_every;
      Progress p = tracker_->Snapshot(now);
      spdlog::info("{} chunks {}/{}", ProgressTracker::Format(p), dispatcher_->done_chunks(),
                   dispatcher_->total_chunks());
      Record(p);
    }
  }
  Progress last = tracker_->Snapshot(absl::Now());
  spdlog::info("{}", ProgressTracker::Format(last));
  spdlog::info("every worker is done: {} of {} chunks trained; handed_out_again={} (a ps "
               "dropped their gradient as stale)",
               dispatcher_->done_chunks(), dispatcher_->total_chunks(),
               dispatcher_->returned_chunks());
  Record(last);
  if (absl::Status s = TakeCheckpoint("final"); !s.ok()) return Fail(s);

  // 4. Final figures: the ps versions, then the evaluator's verdict.
  RunResult result;
  result.epochs = plan_.epochs();
  int64_t steps = -1;
  for (int i = 0; i < plan_.num_ps(); ++i) {
    absl::StatusOr<PsStatsResponse> st = Stats(i, absl::Seconds(10));
    if (!st.ok()) return Fail(st.status());
    spdlog::info("ps:{} version={} generation={} pushes applied={} dropped_stale={} rejected={} "
                 "duplicate={} skipped_nonfinite={} pulled={:.1f} MB pushed={:.1f} MB",
                 i, st->version(), st->generation(), st->pushes_applied(),
                 st->pushes_dropped_stale(), st->pushes_rejected(), st->pushes_duplicate(),
                 st->steps_skipped_nonfinite(), st->bytes_pulled() / 1e6,
                 st->bytes_pushed() / 1e6);
    steps = steps < 0 ? st->version() : std::min(steps, st->version());
  }
  result.steps = std::max<int64_t>(steps, 0);
  if (absl::Status s = FinalEvaluation(&result); !s.ok()) return Fail(s);
  if (tensorboard_ && result.has_eval) {
    (void)tensorboard_->AddScalars(result.steps, {{"final/test_accuracy", result.test_accuracy},
                                                  {"final/test_loss", result.test_loss}});
  }
  if (tensorboard_) (void)tensorboard_->Close();

  // 5. Export the trained weights.
  if (!options_.export_path.empty()) {
    absl::StatusOr<std::vector<float>> flat = PullAll(result.steps);
    if (!flat.ok()) return Fail(flat.status());
    std::map<std::string, std::string> meta = {
        {"model", spec_->name}, {"steps", absl::StrCat(result.steps)},
        {"epochs", absl::StrCat(result.epochs)}, {"layout", "keras"}};
    if (result.has_eval) meta["test_accuracy"] = absl::StrCat(result.test_accuracy);
    absl::Status s = WriteSafetensors(options_.export_path, ToTensors(*spec_, *flat), meta);
    if (!s.ok()) return Fail(s);
    spdlog::info("trained weights written to {}", options_.export_path);
  }
  result.wall_s = absl::ToDoubleSeconds(absl::Now() - start_);
  ShutdownAll("training finished");
  return result;
}

}  // namespace pscluster
