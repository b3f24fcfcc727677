// ParameterStore's core: configuration, pulls, and pushes up to the rule
// that takes them (async here; sync in parameter_store_sync.cc). Copies of
// the store (snapshots, restores, a primary's records, promotion) are in
// parameter_store_copies.cc.
#include "update/parameter_store.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/parallel_for.h"
#include "common/status_macros.h"

namespace pscluster {

bool AllFinite(const float* x, int64_t n) {
  // A float is NaN or Inf iff its exponent bits are all ones. The largest
  // exponent field is a max-reduction over integers, which -O3 (the BUILD
  // rule) vectorises; a float sum of x * 0 had compiled into one scalar
  // FMA chain, 4 cycles a value: a third of the ps's work at 16 MiB.
  uint32_t worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    worst = std::max(worst, bits & 0x7f800000u);
  }
  return worst != 0x7f800000u;
}

uint64_t ParameterStore::AsyncGradientHash(int64_t chunk, uint64_t request_id, int worker) {
  // By chunk where it has one: ps that each applied every chunk once agree,
  // whichever worker's gradient of it they took.
  return chunk >= 0 ? GradientHash(static_cast<uint64_t>(chunk) | (uint64_t{1} << 63), -1)
                    : GradientHash(request_id, worker);
}

uint64_t ParameterStore::GradientHash(uint64_t name, int worker) {
  // splitmix64's finaliser.
  uint64_t z = name * 0x10001ull + static_cast<uint64_t>(worker) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

absl::Status ParameterStore::GenerationMismatch(int64_t theirs, int64_t ours, int64_t version) {
  return absl::AbortedError(absl::StrCat(
      "the parameters were restored from a checkpoint (generation ", ours, ", version ", version,
      "); the caller's are of generation ", theirs, ": pull again"));
}

absl::StatusOr<std::unique_ptr<Optimizer>> ParameterStore::CheckConfig(
    const StoreConfig& config) const {
  if (config.num_workers < 1 || config.num_workers > kMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers must be in [1, ", kMaxWorkers, "], got ", config.num_workers));
  }
  if (config.rule == UpdateRule::kSync &&
      (config.replicas_to_aggregate < 1 || config.replicas_to_aggregate > config.num_workers)) {
    return absl::InvalidArgumentError(absl::StrCat("replicas_to_aggregate must be in [1, ",
                                                   config.num_workers, "], got ",
                                                   config.replicas_to_aggregate));
  }
  if (config.generation < 0 || config.generation > kMaxVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("generation must be in [0, ", kMaxVersion, "], got ", config.generation));
  }
  int64_t end = 0;  // of the previous range: ranges are sorted, disjoint
  for (const MovingStatistic& m : config.moving_statistics) {
    if (m.offset < end || m.size < 0 || m.size > config.num_floats - m.offset) {
      return absl::InvalidArgumentError(absl::StrCat("moving statistic [", m.offset, ", +", m.size,
                                                     ") overlaps another or lies outside the ",
                                                     config.num_floats, " values"));
    }
    if (!(m.momentum >= 0.0f && m.momentum <= 1.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "moving statistic at ", m.offset, ": momentum ", m.momentum, " is not in [0, 1]"));
    }
    end = m.offset + m.size;
  }
  for (size_t t = 0; t < config.sparse_tables.size(); ++t) {
    if (config.sparse_tables[t].table != static_cast<int>(t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse table ", t, " is numbered ", config.sparse_tables[t].table));
    }
    absl::StatusOr<std::unique_ptr<SparseTable>> table =
        SparseTable::Create(config.sparse_tables[t]);
    if (!table.ok()) return table.status();
  }
  PSCLUSTER_RETURN_IF_ERROR(StepClipping::Check(config.clipping, config.num_floats));
  if (config.clipping.enabled() &&
      (config.rule != UpdateRule::kSync || !config.sparse_tables.empty())) {
    return absl::InvalidArgumentError(
        "a store clips only sync steps of dense gradients (async workers clip their own)");
  }
  return Optimizer::Create(config.optimizer, config.num_floats);
}

absl::Status ParameterStore::Configure(const StoreConfig& config,
                                       std::unique_ptr<Optimizer> optimizer) {
  ahead_ = Ahead();  // the optimizer it belongs to goes
  values_.Configure(std::move(optimizer), config.moving_statistics);
  config_ = config;
  answered_.Reset(config.num_workers);
  pending_.Reset(config.num_workers, config.num_floats);
  active_.assign(config.num_workers, true);
  outcome_.assign(config.num_workers, {-1, false});
  std::vector<std::unique_ptr<SparseTable>> tables;
  for (const SparseTableOptions& o : config.sparse_tables) {
    tables.push_back(*SparseTable::Create(o));  // CheckConfig made each once
  }
  sparse_.Reset(std::move(tables));
  decisions_.Clear();
  commit_.reset();
  clipping_.Configure(config.clipping);
  generation_ = config.generation;
  return absl::OkStatus();
}

absl::Status ParameterStore::Init(const StoreConfig& config, const float* values, bool* already) {
  absl::MutexLock lock(&mu_);
  *already = false;
  if (initialized_) {
    if (config.layout_fingerprint != config_.layout_fingerprint ||
        config.num_floats != config_.num_floats) {
      return absl::FailedPreconditionError(
          absl::StrCat("already initialised with layout ", config_.layout_fingerprint, " (",
                       config_.num_floats, " floats); refusing layout ", config.layout_fingerprint,
                       " (", config.num_floats, " floats)"));
    }
    *already = true;
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CheckConfig(config);
  if (!opt.ok()) return opt.status();
  PSCLUSTER_RETURN_IF_ERROR(Configure(config, *std::move(opt)));
  values_.Replaceable().assign(values, values + config.num_floats);
  version_ = 0;
  recent_chunks_.Reset(0);
  initialized_ = true;
  version_advanced_.SignalAll();
  return absl::OkStatus();
}

bool ParameterStore::is_sync() const {
  absl::MutexLock lock(&mu_);
  return config_.rule == UpdateRule::kSync;
}

absl::Status ParameterStore::CheckReady(uint64_t fingerprint, int64_t generation) const {
  if (!initialized_) {
    return absl::UnavailableError("parameter server is not initialised yet");
  }
  if (fingerprint != config_.layout_fingerprint) {
    // A call of a generation before the shards were placed again (a ps
    // added or drained): void, as any call of an older generation is; the
    // caller follows the new placement and pulls again.
    if (generation >= 0 && generation < generation_) {
      return GenerationMismatch(generation, generation_, version_);
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "layout fingerprint ", fingerprint, " does not match this ps's ",
        config_.layout_fingerprint, " (model, number of ps or shard size differ between tasks)"));
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::Pull(uint64_t layout_fingerprint, int64_t min_version,
                                  absl::Time deadline, std::string* out, int64_t* version,
                                  int64_t generation, int64_t* out_generation) {
  SharedValues values;
  absl::Status s = PullShared(layout_fingerprint, min_version, deadline, &values, version,
                              generation, out_generation);
  if (!s.ok()) return s;
  // Copied outside the lock: the shared buffer is not written while held.
  const size_t bytes = values->size() * sizeof(float);
  if (out->size() == bytes) {
    // A buffer of the right size already (a caller that keeps its answer
    // buffers): copied on every core, as the update was made.
    ShardValues::CopyValues(*values, out->data(), threads_);
  } else {
    // assign, not resize + memcpy: one pass over the bytes, not two.
    out->assign(reinterpret_cast<const char*>(values->data()), bytes);
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::AwaitVersion(uint64_t layout_fingerprint, int64_t min_version,
                                          absl::Time deadline, int64_t generation) {
  auto other_generation = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return initialized_ && generation >= 0 && generation != generation_;
  };
  // A backup makes no version for a caller (a primary demoted while the
  // caller waited: its shards moved to another store, which seeds this
  // one): the call fails at once, and the caller asks where the shards
  // are, instead of waiting for its deadline (about a second of a move
  // back).
  auto backup = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return initialized_ && config_.store_role == StoreRole::kBackup;
  };
  while (!cancelled_ && !other_generation() && !backup() &&
         (!initialized_ || version_ < min_version)) {
    if (version_advanced_.WaitWithDeadline(&mu_, deadline)) break;
  }
  // Unavailable, not Cancelled: to a worker, a ps that goes away is a ps
  // that is down (retried until it or a restarted one answers, or the chief
  // ends the run), not a request to stop training.
  if (cancelled_) return absl::UnavailableError("parameter server is shutting down");
  if (backup() && version_ < min_version) {
    return absl::UnavailableError(
        "this store is a backup (demoted, or restored as one): its shards are served by their "
        "primary elsewhere");
  }
  PSCLUSTER_RETURN_IF_ERROR(CheckReady(layout_fingerprint, generation));
  if (other_generation()) return GenerationMismatch(generation, generation_, version_);
  if (version_ < min_version) {
    return absl::DeadlineExceededError(
        absl::StrCat("waited for version ", min_version, "; still at ", version_));
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::PullShared(uint64_t layout_fingerprint, int64_t min_version,
                                        absl::Time deadline, SharedValues* out, int64_t* version,
                                        int64_t generation, int64_t* out_generation) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = AwaitVersion(layout_fingerprint, min_version, deadline, generation);
      !s.ok()) {
    return s;
  }
  *out = values_.shared();
  *version = version_;
  if (out_generation != nullptr) *out_generation = generation_;
  return absl::OkStatus();
}

absl::Status ParameterStore::PullRows(uint64_t layout_fingerprint, int64_t min_version,
                                      absl::Time deadline, std::vector<SparseRowsData>* rows,
                                      int64_t* version, int64_t generation,
                                      int64_t* out_generation) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = AwaitVersion(layout_fingerprint, min_version, deadline, generation);
      !s.ok()) {
    return s;
  }
  PSCLUSTER_RETURN_IF_ERROR(sparse_.Read(rows));
  *version = version_;
  if (out_generation != nullptr) *out_generation = generation_;
  return absl::OkStatus();
}

absl::StatusOr<PushResult> ParameterStore::Push(const PushArgs& args) {
  absl::MutexLock lock(&mu_);
  // Refusals are counted by the caller (the ps service), in one place.
  if (absl::Status s = CheckReady(args.layout_fingerprint, args.generation); !s.ok()) {
    return s;
  }
  if (config_.store_role == StoreRole::kBackup) {
    // Unavailable: the caller asks again, where the primary is now (a
    // restarted ps serves as a backup at the address it had).
    return absl::UnavailableError(
        "this ps holds a backup of these shards: pushes go to their primary");
  }
  if (args.worker < 0 || args.worker >= config_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker index ", args.worker, " is out of range: ", config_.num_workers, " workers"));
  }
  // Before the generation: a push applied here, or by the primary this
  // store took over from, is answered as it was, whatever came since.
  if (args.request_id != 0) {
    if (const PushResult* first = answered_.Find(args.worker, args.request_id)) {
      ++stats_.pushes_duplicate;
      return *first;
    }
  }
  if (args.generation != generation_)
    return GenerationMismatch(args.generation, generation_, version_);
  if (args.num_floats != config_.num_floats) {
    return absl::InvalidArgumentError(absl::StrCat("gradient has ", args.num_floats,
                                                   " floats; this ps holds ", config_.num_floats));
  }
  if (args.num_examples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_examples must be >= 1 (a gradient of no example teaches nothing), got ",
                     args.num_examples));
  }
  if (args.version < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient version ", args.version, " is negative"));
  }
  if (args.version > version_) {
    return absl::InvalidArgumentError(absl::StrCat("gradient version ", args.version,
                                                   " is from the future: this ps is at version ",
                                                   version_));
  }
  bool sparse_finite = true;
  if (args.sparse != nullptr) {
    PSCLUSTER_RETURN_IF_ERROR(sparse_.Check(*args.sparse, &sparse_finite));
  }
  // Checked on every core: a range's verdict each, joined after.
  bool finite;
  if (args.finite.has_value()) {
    finite = *args.finite;
  } else {
    std::vector<char> range_finite(threads_, 1);
    std::atomic<int> next_range{0};
    ParallelFor(args.num_floats, ShardValues::kMinRange, threads_, [&](int64_t b, int64_t e) {
      range_finite[next_range++] = AllFinite(args.gradients + b, e - b);
    });
    finite = std::all_of(range_finite.begin(), range_finite.end(), [](char f) { return f != 0; });
  }
  finite = finite && sparse_finite;
  if (!finite && !config_.skip_nonfinite) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient from worker ", args.worker, " holds NaN or Inf; not applied"));
  }
  absl::StatusOr<PushResult> result =
      config_.rule == UpdateRule::kSync ? PushSync(args, finite) : PushAsync(args, finite);
  if (result.ok() && result->applied) {
    stats_.staleness_sum += result->staleness;
    stats_.staleness_max = std::max(stats_.staleness_max, result->staleness);
  }
  if (result.ok()) answered_.Remember(args.worker, args.request_id, *result);
  return result;
}

absl::StatusOr<PushResult> ParameterStore::PushAsync(const PushArgs& args, bool finite) {
  // Never dropped for staleness: the chief bounds it before the gradient is
  // computed (WorkResponse.BOUND), so every ps applies every push.
  PushResult r;
  r.staleness = version_ - args.version;
  if (args.chunk >= 0 && recent_chunks_.Contains(args.chunk)) {
    // This chunk's gradient is applied here already: its worker was lost
    // between its pushes to two ps (applied on this one only), and the
    // chunk, trained again, comes back. Answered as applied, applied once.
    ++stats_.pushes_duplicate;
    r.applied = true;
    r.version = version_;
    return r;
  }
  if (!finite) {
    ++stats_.steps_skipped_nonfinite;
    r.version = version_;
    return r;
  }
  values_.Update(args.gradients);
  sparse_.ClearStep();
  if (args.sparse != nullptr) {
    sparse_.SetStep(std::move(*args.sparse));
    args.sparse->clear();
  }
  sparse_.Apply(version_);
  Report(args.gradients, false, {}, args.worker, args.request_id, r.staleness, args.chunk);
  recent_chunks_.Add({args.chunk}, RecentChunksKept(config_.num_workers));
  stats_.applied_digest += AsyncGradientHash(args.chunk, args.request_id, args.worker);
  ++version_;
  ++stats_.pushes_applied;
  ++stats_.steps_applied;
  version_advanced_.SignalAll();
  r.applied = true;
  r.version = version_;
  return r;
}

StoreStats ParameterStore::stats() const {
  absl::MutexLock lock(&mu_);
  StoreStats s = stats_;
  s.version = version_;
  s.generation = generation_;
  s.decider_epoch = decider_epoch_;
  s.primary_term = primary_term_;
  s.initialized = initialized_;
  s.backup = config_.store_role == StoreRole::kBackup;
  s.decides = config_.rule == UpdateRule::kSync && config_.step_role == StepRole::kDecide &&
              config_.store_role == StoreRole::kPrimary;
  s.layout_fingerprint = config_.layout_fingerprint;
  s.active_workers = active_;
  s.sparse_tables = sparse_.stats();
  return s;
}

void ParameterStore::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  version_advanced_.SignalAll();
  decisions_.Cancel();
}

bool ParameterStore::AwaitInitialized() const {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return initialized_ || cancelled_; };
  mu_.Await(absl::Condition(&done));
  return initialized_ && !cancelled_;
}

}  // namespace pscluster
