#include "chief/ps_run.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "chief/snapshot.h"
#include "chief/work_queue.h"
#include "common/bad_input.h"
#include "common/status_macros.h"
#include "model/placement.h"
#include "common/cluster_spec.h"
#include "spdlog/spdlog.h"
#include "update/optimizer.h"
#include "update/sparse_optimizer.h"
#include "update/sparse_table.h"
#include "update/store_state.h"
#include "wire/codec.h"
#include "wire/ps_client.h"

namespace pscluster {

namespace {

// An async update's share of a sync step's rate (--async_lr_scaling).
double AsyncFactor(AsyncLrScaling scaling, int num_workers) {
  const double w = num_workers;
  return scaling == AsyncLrScaling::kSqrt     ? 1.0 / std::sqrt(w)
         : scaling == AsyncLrScaling::kLinear ? 1.0 / w
                                              : 1.0;
}

}  // namespace

OptimizerConfig EffectiveOptimizer(const OptimizerConfig& given, UpdateMode mode, int num_workers,
                                   AsyncLrScaling scaling, std::string* why) {
  OptimizerConfig o = given;
  if (mode != ASYNC || num_workers <= 1) return o;
  const double factor = AsyncFactor(scaling, num_workers);
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

SparseOptimizerConfig EffectiveSparseOptimizer(const SparseOptimizerConfig& given, UpdateMode mode,
                                               int num_workers, AsyncLrScaling scaling) {
  SparseOptimizerConfig o = given;
  if (mode != ASYNC || num_workers <= 1) return o;
  o.set_learning_rate(
      static_cast<float>(given.learning_rate() * AsyncFactor(scaling, num_workers)));
  o.set_decay_steps(given.decay_steps() * num_workers);
  return o;
}

absl::StatusOr<std::unique_ptr<ParameterServerRun>> ParameterServerRun::Create(
    const ChiefOptions& options, const ModelSpec* spec, TrainingPlan plan,
    const std::atomic<bool>* stop, Metrics* metrics) {
  if (plan.num_ps() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.config.source,
                     ": cluster.ps is empty; --strategy=parameter_server needs at least one "
                     "(or use --strategy=multi_worker_mirrored)"));
  }
  absl::StatusOr<std::unique_ptr<FailoverMetrics>> failover = FailoverMetrics::Create(metrics);
  if (!failover.ok()) return failover.status();
  std::unique_ptr<ParameterServerRun> run(
      new ParameterServerRun(options, spec, std::move(plan), stop, *std::move(failover)));
  return run;
}

namespace {

// `spec` with its sparse tables windows (none when the plan keeps them
// dense), and the tables into *tables.
ModelSpec LayoutSpec(const ModelSpec& spec, const TrainingPlan& plan,
                     std::vector<SparseTableInfo>* tables) {
  if (plan.dense_embeddings()) return spec;
  absl::StatusOr<std::vector<SparseTableInfo>> found = FindSparseTables(spec);
  if (!found.ok() || found->empty()) return spec;  // (the flags checked it)
  *tables = *std::move(found);
  if (plan.embedding_unbounded()) MakeUnbounded(tables);
  return WithSparseTables(spec, 1, tables);
}

}  // namespace

Placement PlaceForPlan(const ModelSpec& spec, const TrainingPlan& plan) {
  PlacementOptions popt;
  popt.min_shard_bytes = plan.min_shard_bytes();
  popt.max_ps = plan.placement_max_ps();
  return PlaceVariables(spec, plan.num_ps(), popt);
}

ParameterServerRun::ParameterServerRun(const ChiefOptions& options, const ModelSpec* spec,
                                       TrainingPlan plan, const std::atomic<bool>* stop,
                                       std::unique_ptr<FailoverMetrics> failover_metrics)
    : options_(options),
      model_spec_(*spec),
      plan_(std::move(plan)),
      spec_(LayoutSpec(model_spec_, plan_, &tables_)),
      stop_(*stop),
      placement_(PlaceForPlan(spec_, plan_)),
      failover_metrics_(std::move(failover_metrics)) {
  ps_setup_.placement = &placement_;
  std::string why;
  ps_setup_.optimizer = EffectiveOptimizer(options_.optimizer, plan_.mode(), plan_.num_workers(),
                                           options_.async_lr_scaling, &why);
  if (!why.empty()) spdlog::info("{}", why);
  ps_setup_.mode = plan_.mode();
  ps_setup_.num_workers = plan_.num_workers();
  ps_setup_.replicas_to_aggregate =
      options_.replicas_to_aggregate > 0 ? options_.replicas_to_aggregate : plan_.num_workers();
  ps_setup_.nonfinite = options_.nonfinite;
  ps_setup_.clipnorm = plan_.clipnorm();
  ps_setup_.global_clipnorm = plan_.global_clipnorm();
  for (const SparseTableInfo& t : tables_) {
    SparseTableOptions o;
    o.name = t.variable;
    o.table = t.table;
    o.width = t.width;
    o.input_dim = t.input_dim;
    o.initializer = t.initializer;
    o.fan_in = t.fan_in;
    o.fan_out = t.fan_out;
    o.seed = plan_.seed();
    o.admit_after = plan_.embedding_admit_after();
    o.evict_after = plan_.embedding_evict_after();
    SparseTableConfig& c = ps_setup_.sparse_tables.emplace_back();
    SparseTableToConfig(o, &c);
    *c.mutable_optimizer() =
        EffectiveSparseOptimizer(plan_.embedding_optimizer(), plan_.mode(), plan_.num_workers(),
                                 options_.async_lr_scaling);
  }
}

absl::Status ParameterServerRun::Prepare(absl::Time* start) {
  // Async, bounded delay: no chunk more than max_staleness rounds (one
  // chunk per worker) past the lowest unfinished one.
  const int64_t window =
      plan_.mode() == ASYNC ? int64_t{options_.max_staleness + 1} * plan_.num_workers() : 0;
  // Sparse tables: each worker knows its next chunk, whose rows then come
  // with its push-pull (docs/sparse_embeddings.md, "One round trip").
  // A paused worker's ask is held until the pause ends (at most
  // kHoldPaused): a checkpoint's pause costs the chief a few calls per
  // worker, not one every 20 ms (docs/benchmarks/chief-scale.md).
  dispatcher_ = std::make_unique<Dispatcher>(
      plan_.num_workers(), plan_.epochs(), *start, window,
      /*reserve_next=*/!tables_.empty() && options_.embedding_rows_ahead, kHoldPaused);
  dispatcher_->Pause();  // until the plan is out (PlanHandedOut)
  return absl::OkStatus();
}

absl::Status ParameterServerRun::Start(ClusterTasks* tasks, absl::Time* start) {
  std::vector<std::string> home;
  for (int index : options_.config.cluster.task_indices(kPsJob)) {
    absl::StatusOr<std::string> address = options_.config.cluster.address(kPsJob, index);
    if (!address.ok()) return address.status();
    StoreCopies c;
    c.primary_holder = static_cast<int>(copies_.size());
    c.home = *address;
    copies_.push_back(c);
    home.push_back(*address);
  }
  ps_ = std::make_unique<GrpcPsFleet>(&placement_, tasks->ps_channels(), home, &stop_);
  if (options_.min_ps > 0) {
    // The shards go over the first ps that answer, at least --min_ps of
    // them; the others are added when they answer (CheckPsSet), placed
    // so that a move shifts only the shards of the ps added or drained.
    plan_.set_num_ps(std::max(tasks->ps_serving(), options_.min_ps));
    plan_.set_placement_max_ps(static_cast<int>(home.size()));
    placement_ = PlaceForPlan(spec_, plan_);
    ps_->set_num_ps(plan_.num_ps());
    ps_setup_.drain_on_stop = true;
    leave_refused_.assign(home.size(), false);
  }
  home.resize(plan_.num_ps());
  dispatcher_->SetPlacement(home);
  MembershipOptions mopt;
  mopt.mode = plan_.mode();
  membership_ = std::make_unique<MembershipSync>(mopt, ps_.get(), dispatcher_.get(), &stop_);
  PSCLUSTER_RETURN_IF_ERROR(StartParameterServers(start));
  LogSetup();
  dispatcher_->ResetContact(absl::Now());
  // Workers not up yet (--min_workers) are out of the first set and join
  // when they first ask.
  for (int w : tasks->absent_workers()) dispatcher_->MarkAbsent(w);
  membership_->Apply(/*force=*/true);
  next_ps_check_ = absl::Now() + options_.ps_check_every;
  next_version_check_ = absl::Now();
  return absl::OkStatus();
}

void ParameterServerRun::PlanHandedOut() {
  dispatcher_->Resume();  // Prepare's pause
}

absl::Status ParameterServerRun::StartParameterServers(absl::Time* start) {
  CheckpointerOptions copt;
  copt.dir = options_.checkpoint_dir;
  copt.keep = options_.keep_checkpoints;
  copt.every_steps = options_.checkpoint_every_steps;
  copt.every = options_.checkpoint_every;
  copt.mode = plan_.mode();
  copt.min_shard_bytes = plan_.min_shard_bytes();
  checkpointer_ = std::make_unique<Checkpointer>(copt, &spec_, &placement_, ps_.get(),
                                                 dispatcher_.get(), &stop_, *start);
  // Fresh ps take these; ps already initialised, or a checkpoint on disk,
  // keep or restore theirs below.
  const bool given = !options_.initial_parameters.empty();
  if (given) spdlog::info("initial weights from {}", options_.initial_weights);
  absl::StatusOr<PsStart> ps = InitialiseAll(
      ps_.get(), ps_setup_,
      given ? options_.initial_parameters : InitialParameters(spec_, plan_.seed()),
      options_.wait_for_cluster);
  if (!ps.ok()) return ps.status();
  highest_version_ = ps->highest_version;
  dispatcher_->set_generation(ps->generation);
  recovery_ =
      std::make_unique<PsRecovery>(&ps_setup_, ps->incarnations, options_.ps_recovery_timeout,
                                   ps_.get(), dispatcher_.get(), membership_.get(), &stop_,
                                   &copies_, failover_metrics_.get());
  for (int i = 0; i < plan_.num_ps(); ++i) failover_metrics_->SetCopies(i, i, {});
  PSCLUSTER_RETURN_IF_ERROR(KeepBackups());
  if (plan_.num_ps() < ps_->num_listed()) PSCLUSTER_RETURN_IF_ERROR(PublishPsSet());
  if (ps->resumed) return ResumeRun(ps->generation, start);
  // Fresh ps over a checkpoint directory that holds a checkpoint (the run
  // started again, maybe under the other strategy or ps count): every ps
  // starts from it, and the data from its position.
  absl::StatusOr<const Snapshot*> snap = checkpointer_->ReadNewestFromDisk();
  if (snap.ok()) {
    const Snapshot& latest = **snap;
    PSCLUSTER_RETURN_IF_ERROR(CheckOptimizerState(latest));
    PSCLUSTER_RETURN_IF_ERROR(recovery_->RestoreAll(latest, ps->generation + 1));
    highest_version_ = latest.step;
    if (latest.run_started_unix_ms > 0) {
      *start = std::min(*start, absl::FromUnixMillis(latest.run_started_unix_ms));
      checkpointer_->set_run_started(*start);
    }
    spdlog::warn("resuming from the checkpoint of step {} in {} ({} chunks done)", latest.step,
                 options_.checkpoint_dir, dispatcher_->done_chunks());
    return absl::OkStatus();
  }
  if (!absl::IsNotFound(snap.status())) return snap.status();
  return checkpointer_->Take("initial", highest_version_, /*workers_idle=*/true);
}

absl::Status ParameterServerRun::CheckOptimizerState(const Snapshot& snap) const {
  auto misfit = [&](const std::string& flag, const std::string& value, const std::string& what) {
    return MarkBadInput(absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint of step ", snap.step, " in ", options_.checkpoint_dir, " holds ", what,
        ", which this run's ", flag, "=", value,
        " does not keep: it was written by a run with another optimizer. Resume with that "
        "run's ", flag, ", or give another --logdir (or --checkpoint_dir) to start afresh")));
  };
  absl::StatusOr<std::unique_ptr<Optimizer>> dense =
      Optimizer::Create(OptimizerFromConfig(ps_setup_.optimizer), 0);
  if (dense.ok()) {
    const std::vector<std::string>& names = (*dense)->slot_names();
    for (const ShardState& s : snap.ps) {
      for (const SlotValues& slot : s.slots()) {
        if (std::find(names.begin(), names.end(), slot.name()) == names.end()) {
          return misfit("--optimizer", ps_setup_.optimizer.name(),
                        absl::StrCat("the dense optimizer's slot \"", slot.name(), "\""));
        }
      }
    }
  }
  for (const ShardState& s : snap.ps) {
    for (const SparseTableState& t : s.sparse()) {
      for (const SparseTableConfig& c : ps_setup_.sparse_tables) {
        if (c.table() != t.table() || t.ids_size() == 0) continue;
        const SparseTableOptions o = SparseTableFromConfig(c);
        const int64_t want = SparseOptimizer::FloatsPerRow(o.optimizer.name, o.width);
        if (t.floats_per_row() != want) {
          return misfit("--embedding_optimizer", o.optimizer.name,
                        absl::StrCat("table ", c.variable(), "'s rows of ", t.floats_per_row(),
                                     " floats (", want, " with ", o.optimizer.name, ")"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerRun::ResumeRun(int64_t generation, absl::Time* start) {
  // The ps keep training where they are; the data position comes from the
  // newest checkpoint on disk and the chunks of the ps's updates since,
  // which each ps keeps a record of (ShardState.recent_chunks).
  absl::StatusOr<const Snapshot*> snap = checkpointer_->ReadNewestFromDisk();
  if (snap.ok()) {
    const Snapshot& latest = **snap;
    int64_t reaches_back_to = 0;
    std::vector<std::pair<int, int64_t>> held;
    const std::vector<int64_t> since = ChunksEveryPsHolds(
        "the chunks trained since the checkpoint are trained again", &reaches_back_to, &held);
    absl::StatusOr<std::string> done = WorkQueue::AddDone(latest.done_chunks, since);
    if (!done.ok()) return done.status();
    if (absl::Status s = dispatcher_->Rewind(latest.chunks_per_epoch, *done, generation);
        !s.ok()) {
      return s;
    }
    // A gradient taken into the step being gathered: its worker holds the
    // chunk and reports it done once the step is applied.
    const int in_step = dispatcher_->LeaseInFlight(held);
    if (latest.run_started_unix_ms > 0) {
      // wall_s in the final line covers the whole run, not this life.
      *start = std::min(*start, absl::FromUnixMillis(latest.run_started_unix_ms));
      checkpointer_->set_run_started(*start);
    }
    spdlog::warn(
        "resuming a run in progress: the ps are at version {} (generation {}); "
        "data position from the checkpoint of step {} and the ps's record of the chunks "
        "they took since ({} chunks done, {} in the step being gathered left to their "
        "workers){}",
        highest_version_, generation, latest.step, dispatcher_->done_chunks(), in_step,
        reaches_back_to <= latest.step
            ? ""
            : absl::StrCat("; that record reaches back to version ", reaches_back_to,
                           " only: the chunks of the steps before it since the checkpoint are "
                           "trained again"));
    return absl::OkStatus();
  }
  if (!absl::IsNotFound(snap.status())) return snap.status();
  spdlog::warn(
      "resuming a run in progress: the ps are at version {} (generation {}); no "
      "checkpoint on disk, so the data starts over from the first epoch",
      highest_version_, generation);
  return checkpointer_->Take("resumed", highest_version_, /*workers_idle=*/true);
}

std::vector<int64_t> ParameterServerRun::ChunksEveryPsHolds(
    absl::string_view if_unknown, int64_t* reaches_back_to,
    std::vector<std::pair<int, int64_t>>* held) {
  // A chunk counts when every ps took it: one on some ps only (a worker
  // lost between its pushes) is to be trained again.
  std::vector<int64_t> common;
  *reaches_back_to = 0;
  held->clear();
  for (int i = 0; i < plan_.num_ps(); ++i) {
    absl::StatusOr<ShardState> r = ps_->RecentChunks(i, absl::Seconds(10));
    if (!r.ok()) {
      spdlog::warn("ps:{} does not say which chunks it took lately ({}); {}", i,
                   std::string(r.status().message()), std::string(if_unknown));
      *reaches_back_to = std::numeric_limits<int64_t>::max();
      held->clear();
      return {};
    }
    for (int w = 0; w < r->pending_chunks_size(); ++w) {
      const std::pair<int, int64_t> h(w, r->pending_chunks(w));
      if (h.second >= 0 && std::find(held->begin(), held->end(), h) == held->end()) {
        held->push_back(h);
      }
    }
    std::vector<int64_t> mine(r->recent_chunks().begin(), r->recent_chunks().end());
    std::sort(mine.begin(), mine.end());
    if (i == 0) {
      common = std::move(mine);
    } else {
      std::vector<int64_t> both;
      std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(),
                            std::back_inserter(both));
      common = std::move(both);
    }
    *reaches_back_to = std::max(*reaches_back_to, r->recent_chunks_since());
  }
  return common;
}

void ParameterServerRun::LogSetup() const {
  spdlog::info("model {}: {} parameters; {} training, {} workers, batch {} per worker, {} epochs",
               spec_.name, spec_.num_parameters, plan_.mode() == SYNC ? "sync" : "async",
               plan_.num_workers(), plan_.batch_size(), plan_.epochs());
  const Codec push = CodecFromProto(plan_.push_codec());
  const Codec pull = CodecFromProto(plan_.pull_codec());
  spdlog::info(
      "wire: gradients {}{}, weights {} (tensors under {} values as fp32)", CodecName(push),
      push == Codec::kTopK ? absl::StrCat(" (", plan_.topk_fraction(), " of each, error feedback)")
      : push == Codec::kSign ? std::string(" (error feedback)")
                             : std::string(),
      CodecName(pull), plan_.codec_min_elements());
  if (!ps_setup_.sparse_tables.empty()) {
    const SparseOptimizerConfig& o = ps_setup_.sparse_tables.front().optimizer();
    std::vector<std::string> names;
    for (const SparseTableConfig& t : ps_setup_.sparse_tables) names.push_back(t.variable());
    spdlog::info(
        "sparse tables {}: rows spread over the ps by id, updated by per-row {} at rate {:g}{}{}",
        absl::StrJoin(names, ", "), o.name(), o.learning_rate(),
        o.decay_steps() > 0
            ? absl::StrCat(" x ", o.decay_rate(), " every ", o.decay_steps(), " updates")
            : std::string(" (constant)"),
        o.name() == "ftrl" ? absl::StrCat(", l1 ", o.l1_regularization_strength(), ", l2 ",
                                          o.l2_regularization_strength())
                           : std::string());
  }
  if (plan_.transport() == TRANSPORT_TCP) {
    spdlog::info("transport: push-pulls over each ps's tcp data plane{}{}",
                 plan_.push_overlap() ? ", gradients sent layer by layer during backprop" : "",
                 plan_.push_overlap() && plan_.priority_pull()
                     ? ", the next forward pass started on the first layers' weights"
                     : "");
  } else {
    spdlog::info("transport: push-pulls over gRPC (--transport=grpc)");
  }
}

absl::Status ParameterServerRun::Tick() {
  CheckWorkers();
  const absl::Time now = absl::Now();
  if (now >= next_ps_check_) {
    if (absl::Status s = recovery_->Check(checkpointer_->latest(), &highest_version_); !s.ok()) {
      return s;
    }
    // A ps that failed a check is looked at again soon: found lost on the
    // second failure, its backup takes over within a fraction of a second.
    next_ps_check_ = absl::Now() + (recovery_->suspects_loss()
                                        ? std::min(PsRecovery::kLookAgainAfter,
                                                   options_.ps_check_every)
                                        : options_.ps_check_every);
    PSCLUSTER_RETURN_IF_ERROR(KeepBackups());
    if (!recovery_->suspects_loss()) {
      PSCLUSTER_RETURN_IF_ERROR(recovery_->MoveBack());
      PSCLUSTER_RETURN_IF_ERROR(CheckPsSet());
    }
  }
  if (options_.checkpoint_every_steps > 0 && now >= next_version_check_) {
    // Steps can be fast (hundreds a second in async): look at ps:0 often.
    next_version_check_ = now + absl::Milliseconds(50);
    if (absl::StatusOr<PsStatsResponse> st = ps_->Stats(0, absl::Milliseconds(200)); st.ok()) {
      highest_version_ = std::max(highest_version_, st->version());
    }
  }
  if (checkpointer_->Due(now, highest_version_)) {
    return checkpointer_->Take("periodic", highest_version_);
  }
  return absl::OkStatus();
}

void ParameterServerRun::CheckWorkers() {
  const std::vector<Dispatcher::Lost> lost =
      dispatcher_->FindLost(absl::Now(), options_.heartbeat_timeout, /*hold_chunks=*/true);
  // A worker can die after every ps applied its gradient and before it
  // reported the chunk done: such a chunk is done, not to train again (it
  // would be applied twice). The ps's record of the chunks they took says
  // which.
  std::vector<int64_t> applied;
  if (std::any_of(lost.begin(), lost.end(),
                  [](const Dispatcher::Lost& l) { return !l.held.empty(); })) {
    int64_t reaches_back_to = 0;
    std::vector<std::pair<int, int64_t>> in_step;
    applied =
        ChunksEveryPsHolds("a lost worker's chunks are trained again", &reaches_back_to, &in_step);
  }
  for (const Dispatcher::Lost& l : lost) {
    const Dispatcher::Settled settled = dispatcher_->SettleLost(l.worker, l.held, applied);
    spdlog::warn(
        "worker {} lost: no heartbeat for {:.1f} s; {} unfinished chunk(s) go to the "
        "other workers{}{}",
        l.worker, absl::ToDoubleSeconds(l.silent_for), settled.returned,
        settled.done > 0 ? absl::StrCat("; ", settled.done,
                                        " chunk(s) it had not reported are done (every ps took "
                                        "its gradient)")
                         : std::string(),
        plan_.mode() == SYNC ? "; sync steps stop waiting for it" : "");
  }
  for (const std::string& e : dispatcher_->TakeEvents()) spdlog::warn("{}", e);
  membership_->Apply();
}

std::string ParameterServerRun::DoneNote() const {
  return absl::StrCat(
      "; handed_out_again=", dispatcher_->returned_chunks(),
      " (a ps dropped their gradient as stale); bound_answers=", dispatcher_->bound_answers(),
      " (async: a worker told to wait, max_staleness)");
}

absl::StatusOr<std::string> ParameterServerRun::BackupStoreOf(int ps, int slot) {
  absl::StatusOr<PsStatsResponse> st = ps_->StatsAt(copies_[ps].home, absl::Seconds(2));
  if (!st.ok()) return st.status();
  // An older ps_server gives only backup_port.
  const int kept = st->backup_ports_size() > 0 ? st->backup_ports_size()
                   : st->backup_port() > 0     ? 1
                                               : 0;
  if (slot >= kept) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--ps_replicas=", options_.ps_replicas, ": ps:", ps, " keeps ", kept,
        " backup store(s) for other ps; start every ps_server with --backup_stores=",
        options_.ps_replicas));
  }
  const int port = st->backup_ports_size() > 0 ? st->backup_ports(slot) : st->backup_port();
  absl::StatusOr<HostPort> hp = ParseHostPort(copies_[ps].home, options_.config.source);
  if (!hp.ok()) return hp.status();
  return absl::StrCat(hp->host.find(':') != std::string::npos ? "[" + hp->host + "]" : hp->host,
                      ":", port);
}

absl::Status ParameterServerRun::KeepBackups() {
  if (options_.ps_replicas == 0) return absl::OkStatus();
  const int n = plan_.num_ps();
  for (int i = 0; i < n; ++i) {
    StoreCopies& c = copies_[i];
    absl::StatusOr<PsStatsResponse> mine = ps_->Stats(i, absl::Seconds(2));
    // A ps that does not answer is the recovery's business.
    if (!mine.ok() || !mine->initialized()) continue;
    // The places for a copy, but the one that serves: ps i's own store,
    // and the backup store for it on ps i+k (its slot k-1), k = 1..R.
    std::vector<StoreCopy> places;
    for (int k = 0; k <= options_.ps_replicas; ++k) {
      const int holder = (i + k) % n;
      if (holder == c.primary_holder) continue;
      absl::StatusOr<std::string> address =
          k == 0 ? absl::StatusOr<std::string>(c.home) : BackupStoreOf(holder, k - 1);
      if (!address.ok()) {
        if (absl::IsFailedPrecondition(address.status())) return address.status();
        continue;  // that ps is down: tried again on the next check
      }
      StoreCopy place;
      place.address = *address;
      place.holder = holder;
      places.push_back(place);
    }
    // The backups to keep: each place that answers (a backup kept keeps
    // its seeded mark; one whose process restarted has a new address),
    // and those kept whose process does not answer now: a backup is
    // dropped only by CheckBackups or the recovery, after two failed looks.
    std::vector<StoreCopy> wanted;
    for (const StoreCopy& b : c.backups) {
      auto place = std::find_if(places.begin(), places.end(),
                                [&](const StoreCopy& p) { return p.holder == b.holder; });
      if (place == places.end() || place->address == b.address) wanted.push_back(b);
    }
    for (const StoreCopy& p : places) {
      if (std::none_of(wanted.begin(), wanted.end(),
                       [&](const StoreCopy& w) { return w.holder == p.holder; })) {
        wanted.push_back(p);
      }
    }
    // A new backup: empty (restarted), a backup already, or a primary
    // replaced while it was cut off (it took no pushes since: fenced by its
    // backups), demoted to a backup now. One that does not answer yet, or
    // cannot be demoted, is tried again on the next check.
    std::vector<StoreCopy> ready;
    for (StoreCopy& w : wanted) {
      if (std::any_of(c.backups.begin(), c.backups.end(),
                      [&](const StoreCopy& b) { return b.address == w.address; })) {
        ready.push_back(w);
        continue;
      }
      absl::StatusOr<PsStatsResponse> st = ps_->StatsAt(w.address, absl::Seconds(2));
      if (!st.ok()) continue;
      if (st->initialized() && !st->backup()) {
        if (absl::Status s = ps_->Demote(w.address, absl::Seconds(5)); !s.ok()) {
          spdlog::warn("ps:{}'s store on ps:{} is still a primary and cannot be demoted yet: {}",
                       i, w.holder, std::string(s.message()));
          continue;
        }
        spdlog::warn("ps:{}'s store on ps:{} answers again, as the primary it was before a "
                     "backup took over: demoted to a backup of the store that serves its "
                     "shards (ps:{})",
                     i, w.holder, c.primary_holder);
      }
      w.seeded = false;  // until its primary says every backup is
      ready.push_back(w);
    }
    if (ready.empty() || (mine->backups_set() == static_cast<int>(c.backups.size()) &&
                          AddressesOf(ready) == AddressesOf(c.backups))) {
      continue;  // none to be had, or kept already
    }
    if (absl::Status s = ps_->SetBackups(i, AddressesOf(ready), absl::Seconds(5)); !s.ok()) {
      return s;
    }
    c.backups = std::move(ready);
    failover_metrics_->SetCopies(i, c.primary_holder, HoldersOf(c.backups));
    std::string where;
    for (const StoreCopy& b : c.backups) {
      absl::StrAppend(&where, where.empty() ? "" : ", ", "ps:", b.holder, " (", b.address, ")");
    }
    spdlog::info("ps:{}'s store{} has {} on {}, kept up to date before each answer", i,
                 c.primary_holder == i ? ""
                                       : absl::StrCat(" (served by ps:", c.primary_holder, ")"),
                 c.backups.size() == 1 ? "a backup" : absl::StrCat(c.backups.size(), " backups"),
                 where);
  }
  return absl::OkStatus();
}

void ParameterServerRun::AwaitBackups(absl::Duration timeout) {
  if (options_.ps_replicas == 0) return;
  const absl::Time give_up = absl::Now() + timeout;
  std::string behind;
  while (true) {
    if (absl::Status s = KeepBackups(); !s.ok()) {
      behind = std::string(s.message());
    } else {
      behind.clear();
      for (int i = 0; i < plan_.num_ps() && behind.empty(); ++i) {
        if (copies_[i].backups.empty()) continue;  // none to be had
        absl::StatusOr<PsStatsResponse> st = ps_->Stats(i, absl::Seconds(2));
        if (!st.ok()) {
          behind = std::string(st.status().message());
        } else if (st->backups_live() < st->backups_set() ||
                   st->replicated_version() < st->version()) {
          behind = absl::StrCat("ps:", i, "'s backup holds version ", st->replicated_version(),
                                " of ", st->version());
        }
      }
    }
    if (behind.empty() || stop_ || absl::Now() >= give_up) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (!behind.empty()) {
    spdlog::warn("the run ends with a backup not caught up after {}: {}",
                 absl::FormatDuration(timeout), behind);
  }
}

absl::Status ParameterServerRun::TakeFinalCheckpoint() {
  // A ps lost since the last check (after the workers were done, or while
  // the checkpoint is taken) is recovered first and the checkpoint taken
  // again: the final figures and weights come from it, not from a ps that
  // may restart meanwhile. Two looks: an unreachable ps counts as lost on
  // its second failure.
  absl::Status taken;
  for (int attempt = 0; attempt < 3; ++attempt) {
    for (int look = 0; look < 2; ++look) {
      if (absl::Status s = recovery_->Check(checkpointer_->latest(), &highest_version_); !s.ok()) {
        return s;
      }
    }
    if (!dispatcher_->AllFinished()) {
      return absl::FailedPreconditionError(
          "a ps restarted after every worker was done and every ps went back to the "
          "checkpoint; the steps since cannot be trained again in this run (--ps_replicas=1 "
          "avoids this: the ps continues from its backup)");
    }
    AwaitBackups(kBackupsAtTheEnd);
    taken = checkpointer_->Take("final", highest_version_, /*workers_idle=*/false,
                                /*required=*/true);
    if (taken.ok()) return taken;
    spdlog::warn("the final checkpoint could not be taken ({}); looking at every ps again",
                 std::string(taken.message()));
  }
  return taken;
}

absl::Status ParameterServerRun::KeepUpWhileFinishing() {
  return recovery_->Check(checkpointer_->latest(), &highest_version_);
}

absl::StatusOr<int64_t> ParameterServerRun::FinalSteps() {
  // The steps are the final checkpoint's (every ps at one version); each
  // ps's figures are logged as it gives them now, and a ps that does not
  // answer (lost after the checkpoint) only loses its line.
  const Snapshot* final_cut = checkpointer_->latest();
  for (int i = 0; i < plan_.num_ps(); ++i) {
    absl::StatusOr<PsStatsResponse> st = ps_->Stats(i, absl::Seconds(10));
    if (!st.ok()) {
      spdlog::warn("ps:{} gives no figures: {}", i, std::string(st.status().message()));
      continue;
    }
    const double mean_staleness =
        st->pushes_applied() > 0
            ? static_cast<double>(st->staleness_sum()) / static_cast<double>(st->pushes_applied())
            : 0.0;
    spdlog::info(
        "ps:{} version={} generation={} pushes applied={} dropped_stale={} rejected={} "
        "duplicate={} skipped_nonfinite={} staleness_mean={:.2f} staleness_max={} "
        "digest={:016x} pulled={:.1f} MB pushed={:.1f} MB{}",
        i, st->version(), st->generation(), st->pushes_applied(), st->pushes_dropped_stale(),
        st->pushes_rejected(), st->pushes_duplicate(), st->steps_skipped_nonfinite(),
        mean_staleness, st->staleness_max(), st->applied_digest(), st->bytes_pulled() / 1e6,
        st->bytes_pushed() / 1e6,
        st->backups_set() > 0
            ? absl::StrFormat(" backups live=%d/%d replicated_version=%d replicated=%.1f MB",
                              st->backups_live(), st->backups_set(), st->replicated_version(),
                              st->bytes_replicated() / 1e6)
            : "");
  }
  if (final_cut == nullptr) return absl::InternalError("no final checkpoint");
  return std::max<int64_t>(final_cut->step, 0);
}

absl::StatusOr<const std::vector<float>*> ParameterServerRun::FinalWeights(int64_t steps) {
  if (final_weights_.has_value()) return &*final_weights_;
  // The final checkpoint's values, laid out as the model's: no ps is asked
  // again (one restarted since would not have them).
  const Snapshot* final_cut = checkpointer_->latest();
  if (final_cut != nullptr && final_cut->step == steps &&
      static_cast<int>(final_cut->ps.size()) == plan_.num_ps()) {
    std::vector<float> flat(spec_.num_parameters), wire;
    for (int i = 0; i < plan_.num_ps(); ++i) {
      if (absl::Status s = BytesToFloats(final_cut->ps[i].values(), "values", &wire); !s.ok()) {
        return s;
      }
      if (static_cast<int64_t>(wire.size()) != placement_.floats_of_ps[i]) {
        return absl::InternalError(absl::StrCat("the final checkpoint holds ", wire.size(),
                                                " values of ps:", i, ", its shards ",
                                                placement_.floats_of_ps[i]));
      }
      ScatterFromPs(placement_, i, wire.data(), flat.data());
    }
    ModelSpec layout;
    absl::StatusOr<std::vector<float>> whole = ModelLayout(flat, final_cut->ps, &layout);
    if (!whole.ok()) return whole.status();
    final_weights_ = *std::move(whole);
    final_layout_ = std::move(layout);
    return &*final_weights_;
  }
  PsClientOptions popt;
  popt.stop = &stop_;
  // Where each ps's shards are served now (a backup promoted).
  popt.locate = [this](int ps) { return ps_->address(ps); };
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Create(options_.config.cluster, &placement_, popt);
  if (!client.ok()) return client.status();
  std::vector<float> flat(spec_.num_parameters);
  if (absl::Status s = (*client)->PullAll(steps, flat.data(), absl::Minutes(2)); !s.ok()) {
    return s;
  }
  std::vector<ShardState> states;  // the tables' rows
  for (int i = 0; i < plan_.num_ps() && !tables_.empty(); ++i) {
    absl::StatusOr<ShardState> state = ps_->Snapshot(i, absl::Minutes(2));
    if (!state.ok()) return state.status();
    states.push_back(*std::move(state));
  }
  ModelSpec layout;
  absl::StatusOr<std::vector<float>> whole = ModelLayout(flat, states, &layout);
  if (!whole.ok()) return whole.status();
  final_weights_ = *std::move(whole);
  final_layout_ = std::move(layout);
  return &*final_weights_;
}

absl::StatusOr<std::vector<float>> ParameterServerRun::ModelLayout(
    const std::vector<float>& flat, const std::vector<ShardState>& ps, ModelSpec* layout) const {
  *layout = model_spec_;
  if (tables_.empty()) return flat;
  // Every table's rows that exist, by id (a ps's rows are its own ids).
  std::vector<std::map<int64_t, const float*>> rows(tables_.size());
  std::vector<std::vector<float>> values;  // what the pointers point into
  for (const ShardState& state : ps) {
    for (const SparseTableState& r : state.sparse()) {
      if (r.table() < 0 || r.table() >= static_cast<int>(tables_.size())) continue;
      const SparseTableInfo& t = tables_[r.table()];
      std::vector<float>& v = values.emplace_back();
      PSCLUSTER_RETURN_IF_ERROR(BytesToFloats(r.rows(), "sparse rows", &v));
      const int64_t per_row = r.floats_per_row();
      if (per_row < t.width || static_cast<int64_t>(v.size()) != r.ids_size() * per_row) {
        return absl::InternalError(absl::StrCat("a ps's rows of ", t.variable, " hold ",
                                                v.size(), " floats for ", r.ids_size(),
                                                " rows"));
      }
      for (int k = 0; k < r.ids_size(); ++k) rows[r.table()][r.ids(k)] = v.data() + k * per_row;
    }
  }
  // An unbounded table is its rows that exist; the variables after it move.
  int64_t offset = 0;
  for (VariableSpec& v : layout->variables) {
    v.offset = offset;
    for (const SparseTableInfo& t : tables_) {
      if (t.variable != v.name || t.input_dim > 0) continue;
      v.table_rows = kUnboundedTable;
      v.row_ids.clear();
      for (const auto& [id, row] : rows[t.table]) v.row_ids.push_back(id);
      v.shape = {static_cast<int64_t>(v.row_ids.size()), t.width};
      v.size = static_cast<int64_t>(v.row_ids.size()) * t.width;
    }
    offset += v.size;
  }
  layout->num_parameters = offset;
  std::vector<float> out(offset);
  for (const VariableSpec& v : layout->variables) {
    const VariableSpec* laid = nullptr;
    for (const VariableSpec& w : spec_.variables) {
      if (w.name == v.name) laid = &w;
    }
    if (laid == nullptr || laid->table_rows == 0) {
      std::copy_n(flat.begin() + (laid != nullptr ? laid->offset : 0), v.size,
                  out.begin() + v.offset);
    }
  }
  for (const SparseTableInfo& t : tables_) {
    const VariableSpec* v = nullptr;
    for (const VariableSpec& w : layout->variables) {
      if (w.name == t.variable) v = &w;
    }
    if (v == nullptr) return absl::InternalError(absl::StrCat("no variable ", t.variable));
    float* table = out.data() + v->offset;
    if (t.input_dim == 0) {
      int64_t k = 0;
      for (const auto& [id, row] : rows[t.table]) std::copy_n(row, t.width, table + k++ * t.width);
      continue;
    }
    // Rows never trained are what a ps would make of them.
    for (int64_t id = 0; id < t.input_dim; ++id) {
      InitialRow(t.initializer, t.fan_in, t.fan_out, plan_.seed(), t.table, id, t.width,
                 table + id * t.width);
    }
    for (const auto& [id, row] : rows[t.table]) {
      if (id >= 0 && id < t.input_dim) std::copy_n(row, t.width, table + id * t.width);
    }
  }
  return out;
}

}  // namespace pscluster
