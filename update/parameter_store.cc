#include "update/parameter_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/parallel_for.h"

namespace pscluster {
namespace {

// Whether `b` has no holder but the store. References are made only under
// the store's lock, so once this is true it stays true until the store
// hands `b` out again. The fence orders the last reader's reads of the
// buffer (before its release of the reference) before the writes that
// follow.
bool HeldByStoreOnly(const std::shared_ptr<std::vector<float>>& b) {
  if (b.use_count() != 1) return false;
  std::atomic_thread_fence(std::memory_order_acquire);
  return true;
}

// Mixes (what names a gradient, worker) into 64 bits (splitmix64's
// finaliser), for the applied-gradients digest: sync names a gradient by
// its version, async by its request id.
uint64_t GradientHash(uint64_t name, int worker) {
  uint64_t z = name * 0x10001ull + static_cast<uint64_t>(worker) +
               0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

absl::Status GenerationMismatch(int64_t theirs, int64_t ours, int64_t version) {
  return absl::AbortedError(absl::StrCat(
      "the parameters were restored from a checkpoint (generation ", ours, ", version ",
      version, "); the caller's are of generation ", theirs, ": pull again"));
}

}  // namespace

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

absl::StatusOr<std::unique_ptr<Optimizer>> ParameterStore::CheckConfig(
    const StoreConfig& config) const {
  if (config.num_workers < 1 || config.num_workers > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_workers must be in [1, ", kMaxWorkers, "], got ", config.num_workers));
  }
  if (config.rule == UpdateRule::kSync &&
      (config.replicas_to_aggregate < 1 ||
       config.replicas_to_aggregate > config.num_workers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicas_to_aggregate must be in [1, ", config.num_workers, "], got ",
        config.replicas_to_aggregate));
  }
  if (config.generation < 0 || config.generation > kMaxVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generation must be in [0, ", kMaxVersion, "], got ", config.generation));
  }
  int64_t end = 0;  // of the previous range: ranges are sorted, disjoint
  for (const MovingStatistic& m : config.moving_statistics) {
    if (m.offset < end || m.size < 0 || m.size > config.num_floats - m.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "moving statistic [", m.offset, ", +", m.size, ") overlaps another or lies outside the ",
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
      return absl::InvalidArgumentError(absl::StrCat(
          "sparse table ", t, " is numbered ", config.sparse_tables[t].table));
    }
    absl::StatusOr<std::unique_ptr<SparseTable>> table =
        SparseTable::Create(config.sparse_tables[t]);
    if (!table.ok()) return table.status();
  }
  return Optimizer::Create(config.optimizer, config.num_floats);
}

std::shared_ptr<std::vector<float>> ParameterStore::TakeSpare() {
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if (HeldByStoreOnly(*it)) {
      std::shared_ptr<std::vector<float>> b = std::move(*it);
      spares_.erase(it);
      return b;
    }
  }
  return std::make_shared<std::vector<float>>();
}

std::vector<float>& ParameterStore::ReplaceableValues() {
  if (!HeldByStoreOnly(values_)) {
    std::shared_ptr<std::vector<float>> fresh = TakeSpare();
    // The buffer being read waits among the spares for its readers (or,
    // when there are enough spares, is freed by the last of them).
    if (spares_.size() < kKeptSpares) spares_.push_back(values_);
    values_ = std::move(fresh);
  }
  return *values_;
}

std::vector<float>& ParameterStore::WritableValues() {
  if (HeldByStoreOnly(values_)) return *values_;
  const std::shared_ptr<const std::vector<float>> held = values_;
  std::vector<float>& to = ReplaceableValues();
  to.resize(held->size());
  CopyValues(*held, to.data());
  return to;
}

void ParameterStore::CopyValues(const std::vector<float>& from, void* to) const {
  char* dst = static_cast<char*>(to);
  ParallelFor(static_cast<int64_t>(from.size()), kMinRange, threads_,
              [&](int64_t b, int64_t e) {
                std::memcpy(dst + b * sizeof(float), from.data() + b, (e - b) * sizeof(float));
              });
}

void ParameterStore::Update(const float* grad) {
  // The optimizer runs over everything (its rules are element-wise); the
  // moving statistics' values are then put back and averaged instead. What
  // the optimizer's slots hold for them is never read.
  std::vector<float>& values = WritableValues();
  int64_t saved = 0;
  for (const MovingStatistic& m : config_.moving_statistics) saved += m.size;
  moving_.resize(saved);
  float* keep = moving_.data();
  for (const MovingStatistic& m : config_.moving_statistics) {
    std::copy(values.data() + m.offset, values.data() + m.offset + m.size, keep);
    keep += m.size;
  }
  optimizer_->Apply(grad, values.data());
  keep = moving_.data();
  for (const MovingStatistic& m : config_.moving_statistics) {
    float* v = values.data() + m.offset;
    const float* g = grad + m.offset;
    for (int64_t i = 0; i < m.size; ++i) {
      v[i] = m.momentum * keep[i] + (1.0f - m.momentum) * g[i];
    }
    keep += m.size;
  }
}

void ParameterStore::UpdateAside(const float* grad, std::vector<float>* out) {
  const std::vector<float>& in = *values_;
  out->resize(in.size());
  optimizer_->ApplyAside(grad, in.data(), out->data());
  for (const MovingStatistic& m : config_.moving_statistics) {
    const float* keep = in.data() + m.offset;
    float* v = out->data() + m.offset;
    const float* g = grad + m.offset;
    for (int64_t i = 0; i < m.size; ++i) {
      v[i] = m.momentum * keep[i] + (1.0f - m.momentum) * g[i];
    }
  }
}

absl::Status ParameterStore::Configure(const StoreConfig& config,
                                       std::unique_ptr<Optimizer> optimizer) {
  ahead_ = Ahead();  // the optimizer it belongs to goes
  optimizer_ = std::move(optimizer);
  optimizer_->set_threads(threads_);
  config_ = config;
  seen_.assign(config.num_workers, {});
  pending_.assign(config.num_workers, {});
  pending_examples_.assign(config.num_workers, -1);
  pending_chunk_.assign(config.num_workers, -1);
  pending_request_.assign(config.num_workers, 0);
  pending_count_ = 0;
  pending_nonfinite_.assign(config.num_workers, false);
  active_.assign(config.num_workers, true);
  sum_.assign(config.num_floats, 0.0f);
  outcome_.assign(config.num_workers, {-1, false});
  tables_.clear();
  for (const SparseTableOptions& o : config.sparse_tables) {
    tables_.push_back(*SparseTable::Create(o));  // CheckConfig made each once
  }
  pending_sparse_.assign(config.num_workers, {});
  step_sparse_.clear();
  {
    absl::MutexLock lock(&decisions_mu_);
    decisions_.clear();
  }
  commit_.reset();
  generation_ = config.generation;
  return absl::OkStatus();
}

absl::Status ParameterStore::Init(const StoreConfig& config, const float* values,
                                  bool* already) {
  absl::MutexLock lock(&mu_);
  *already = false;
  if (initialized_) {
    if (config.layout_fingerprint != config_.layout_fingerprint ||
        config.num_floats != config_.num_floats) {
      return absl::FailedPreconditionError(absl::StrCat(
          "already initialised with layout ", config_.layout_fingerprint, " (",
          config_.num_floats, " floats); refusing layout ",
          config.layout_fingerprint, " (", config.num_floats, " floats)"));
    }
    *already = true;
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CheckConfig(config);
  if (!opt.ok()) return opt.status();
  if (absl::Status s = Configure(config, *std::move(opt)); !s.ok()) return s;
  ReplaceableValues().assign(values, values + config.num_floats);
  version_ = 0;
  recent_chunks_.Reset(0);
  initialized_ = true;
  version_advanced_.SignalAll();
  return absl::OkStatus();
}

absl::Status ParameterStore::Restore(const StoreConfig& config, const StoreSnapshot& state,
                                     RestoreKind kind) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CheckConfig(config);
  if (!opt.ok()) return opt.status();
  if (static_cast<int64_t>(state.values.size()) != config.num_floats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint holds ", state.values.size(), " values; the layout has ",
        config.num_floats));
  }
  if (state.version < 0 || state.version > kMaxVersion || state.generation < 0 ||
      state.generation > kMaxVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint version ", state.version, " / generation ", state.generation,
        " must be in [0, ", kMaxVersion, "]"));
  }
  if (state.pushes_applied < 0 || state.steps_applied < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state counts ", state.pushes_applied, " pushes and ", state.steps_applied,
        " steps applied"));
  }
  if (absl::Status s = (*opt)->RestoreState(state.optimizer); !s.ok()) return s;
  // The tables' rows, checked before anything changes.
  if (!state.sparse.empty() && state.sparse.size() != config.sparse_tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint holds ", state.sparse.size(), " sparse tables; the model has ",
        config.sparse_tables.size()));
  }
  std::vector<std::unique_ptr<SparseTable>> tables;
  for (size_t t = 0; t < config.sparse_tables.size(); ++t) {
    tables.push_back(*SparseTable::Create(config.sparse_tables[t]));
    if (t >= state.sparse.size()) continue;
    if (absl::Status s = tables.back()->Import(state.sparse[t]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("sparse table ", t, ": ", s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  if (initialized_ && config.replica == ReplicaRole::kBackup) {
    // Fencing: a primary is never overwritten by a seed (AlreadyExists:
    // the primary is here; a promoted backup tells its old primary so),
    // nor a backup by a replaced primary's (a lower term: another backup
    // was promoted and seeded it; AlreadyExists tells that primary's
    // replicator so, whatever its generation) or by an older generation's
    // (a primary that was cut off and came back).
    if (config_.replica != ReplicaRole::kBackup) {
      return absl::AlreadyExistsError(
          "this ps is the primary of its store; it takes no backup seed");
    }
    if (state.primary_term < primary_term_) {
      return absl::AlreadyExistsError(absl::StrCat(
          "this backup follows the primary of term ", primary_term_, "; a seed of term ",
          state.primary_term, " is of a replaced primary"));
    }
    if (generation_ > state.generation) {
      return absl::FailedPreconditionError(
          absl::StrCat("a backup seed of generation ", state.generation,
                       "; this backup is of generation ", generation_));
    }
  }
  if (initialized_ && (config.layout_fingerprint != config_.layout_fingerprint ||
                       config.num_floats != config_.num_floats)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "holds layout ", config_.layout_fingerprint, " (", config_.num_floats,
        " floats); refusing to restore layout ", config.layout_fingerprint, " (",
        config.num_floats, " floats)"));
  }
  StoreConfig c = config;
  c.generation = state.generation;
  if (absl::Status s = Configure(c, *std::move(opt)); !s.ok()) return s;
  ReplaceableValues() = state.values;
  tables_ = std::move(tables);
  version_ = state.version;
  recent_chunks_.Reset(version_);  // a rollback's: of steps the restored state may not hold
  decider_epoch_ = std::max(decider_epoch_, state.decider_epoch);
  primary_term_ = std::max(primary_term_, state.primary_term);
  // Decisions of steps the restored state may not hold.
  replicated_decisions_.clear();
  {
    absl::MutexLock decisions_lock(&decisions_mu_);
    decisions_.clear();
  }
  if (kind == RestoreKind::kContinue || c.replica == ReplicaRole::kBackup) {
    stats_.applied_digest = state.applied_digest;
    stats_.pushes_applied = state.pushes_applied;
    stats_.steps_applied = state.steps_applied;
    for (const StoreSnapshot::Answered& a : state.answered) {
      if (a.worker >= 0 && a.worker < c.num_workers) RememberPush(a.worker, a.request_id, a.result);
    }
    if (static_cast<int>(state.outcomes.size()) == c.num_workers) outcome_ = state.outcomes;
    if (state.recent_chunks_since <= version_) {
      recent_chunks_.Load(state.recent_chunks, state.recent_chunks_since, version_);
    }
  }
  if (listener_) {
    AppliedUpdate u;
    u.restored = true;
    u.primary_term = primary_term_;
    u.generation = generation_;
    u.version = version_;
    listener_(std::move(u));
  }
  initialized_ = true;
  version_advanced_.SignalAll();
  return absl::OkStatus();
}

absl::Status ParameterStore::Snapshot(uint64_t layout_fingerprint, StoreSnapshot* out) const {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReady(layout_fingerprint); !s.ok()) return s;
  out->version = version_;
  out->generation = generation_;
  out->values = *values_;
  out->optimizer = optimizer_->SaveState();
  out->applied_digest = stats_.applied_digest;
  out->pushes_applied = stats_.pushes_applied;
  out->steps_applied = stats_.steps_applied;
  out->answered.clear();
  for (int w = 0; w < static_cast<int>(seen_.size()); ++w) {
    for (const SeenPush& p : seen_[w]) {
      // Taken into the sync step being gathered, the push is not decided
      // yet and its gradient is not in the state: a store that continues
      // this one (a backup promoted before the step closed) takes it again
      // when it is resent, instead of answering it as taken.
      if (pending_examples_[w] >= 0 && p.request_id == pending_request_[w]) continue;
      out->answered.push_back({w, p.request_id, p.result});
    }
  }
  out->outcomes = outcome_;
  out->sparse.clear();
  for (const std::unique_ptr<SparseTable>& t : tables_) out->sparse.push_back(t->Export());
  out->recent_chunks = recent_chunks_.chunks();
  out->recent_chunks_since = recent_chunks_.since();
  out->decider_epoch = decider_epoch_;
  out->primary_term = primary_term_;
  return absl::OkStatus();
}

absl::Status ParameterStore::RecentChunksOf(uint64_t layout_fingerprint,
                                           StoreSnapshot* out) const {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReady(layout_fingerprint); !s.ok()) return s;
  out->version = version_;
  out->generation = generation_;
  out->recent_chunks = recent_chunks_.chunks();
  out->recent_chunks_since = recent_chunks_.since();
  out->pending_chunks.clear();
  if (config_.rule == UpdateRule::kSync) {
    for (int w = 0; w < config_.num_workers; ++w) {
      out->pending_chunks.push_back(pending_examples_[w] >= 0 ? pending_chunk_[w] : -1);
    }
  }
  return absl::OkStatus();
}

size_t ParameterStore::RecentChunksKept(int num_workers) {
  return std::max<size_t>(4096, 16 * static_cast<size_t>(std::max(num_workers, 0)));
}

absl::StatusOr<StepDecision> ParameterStore::DecisionFor(uint64_t layout_fingerprint,
                                                        int64_t version) const {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReady(layout_fingerprint); !s.ok()) return s;
  absl::MutexLock decisions_lock(&decisions_mu_);
  for (const StepDecision& d : decisions_) {
    if (d.version == version && d.generation == generation_) return d;
  }
  return absl::NotFoundError(
      absl::StrCat("no decision kept for the step from version ", version));
}

absl::Status ParameterStore::SetActiveWorkers(uint64_t layout_fingerprint,
                                              const std::vector<bool>& active) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReady(layout_fingerprint); !s.ok()) return s;
  if (static_cast<int>(active.size()) != config_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker set has ", active.size(), " entries; this ps serves ",
        config_.num_workers, " workers"));
  }
  for (int w = 0; w < config_.num_workers; ++w) {
    // A lost worker's half-done step: its data is handed to another
    // worker, so its gradient must not count. A following store keeps it
    // until the decision says whether the deciding store took it.
    if (!active[w] && pending_examples_[w] >= 0 &&
        config_.step_role == StepRole::kDecide) {
      DropPending(w);
    }
    active_[w] = active[w];
  }
  MaybeFinishStep();
  return absl::OkStatus();
}

bool ParameterStore::is_sync() const {
  absl::MutexLock lock(&mu_);
  return config_.rule == UpdateRule::kSync;
}

absl::Status ParameterStore::CheckReady(uint64_t fingerprint) const {
  if (!initialized_) {
    return absl::UnavailableError("parameter server is not initialised yet");
  }
  if (fingerprint != config_.layout_fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layout fingerprint ", fingerprint, " does not match this ps's ",
        config_.layout_fingerprint,
        " (model, number of ps or shard size differ between tasks)"));
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::Pull(uint64_t layout_fingerprint, int64_t min_version,
                                  absl::Time deadline, std::string* out,
                                  int64_t* version, int64_t generation,
                                  int64_t* out_generation) {
  SharedValues values;
  absl::Status s = PullShared(layout_fingerprint, min_version, deadline, &values, version,
                              generation, out_generation);
  if (!s.ok()) return s;
  // Copied outside the lock: the shared buffer is not written while held.
  const size_t bytes = values->size() * sizeof(float);
  if (out->size() == bytes) {
    // A buffer of the right size already (a caller that keeps its answer
    // buffers): copied on every core, as the update was made.
    CopyValues(*values, out->data());
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
    return initialized_ && config_.replica == ReplicaRole::kBackup;
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
  if (absl::Status s = CheckReady(layout_fingerprint); !s.ok()) return s;
  if (other_generation()) return GenerationMismatch(generation, generation_, version_);
  if (version_ < min_version) {
    return absl::DeadlineExceededError(absl::StrCat(
        "waited for version ", min_version, "; still at ", version_));
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::PullShared(uint64_t layout_fingerprint, int64_t min_version,
                                        absl::Time deadline, SharedValues* out,
                                        int64_t* version, int64_t generation,
                                        int64_t* out_generation) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = AwaitVersion(layout_fingerprint, min_version, deadline, generation);
      !s.ok()) {
    return s;
  }
  *out = values_;
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
  for (SparseRowsData& r : *rows) {
    if (r.table < 0 || r.table >= static_cast<int>(tables_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sparse table ", r.table, " does not exist; the model has ", tables_.size()));
    }
    const SparseTable& table = *tables_[r.table];
    if (absl::Status s = table.CheckIds(r.ids); !s.ok()) return s;
    r.values.resize(r.ids.size() * table.width());
    table.Read(r.ids, r.values.data());
  }
  *version = version_;
  if (out_generation != nullptr) *out_generation = generation_;
  return absl::OkStatus();
}

absl::Status ParameterStore::CheckSparse(const std::vector<SparseRowsData>& rows,
                                         bool* finite) const {
  *finite = true;
  std::vector<bool> seen(tables_.size(), false);
  for (const SparseRowsData& r : rows) {
    if (r.table < 0 || r.table >= static_cast<int>(tables_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sparse table ", r.table, " does not exist; the model has ", tables_.size()));
    }
    if (seen[r.table]) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse table ", r.table, " comes twice in one push"));
    }
    seen[r.table] = true;
    const SparseTable& table = *tables_[r.table];
    if (r.values.size() != r.ids.size() * table.width()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sparse table ", r.table, ": ", r.values.size(), " values for ", r.ids.size(),
          " rows of ", table.width()));
    }
    if (absl::Status s = table.CheckIds(r.ids); !s.ok()) return s;
    absl::flat_hash_set<int64_t> distinct(r.ids.begin(), r.ids.end());
    if (distinct.size() != r.ids.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse table ", r.table, ": an id comes twice in one push"));
    }
    *finite = *finite && AllFinite(r.values.data(), static_cast<int64_t>(r.values.size()));
  }
  return absl::OkStatus();
}

void ParameterStore::SumSparse(const std::vector<bool>& members) {
  step_sparse_.clear();
  if (tables_.empty()) return;
  int64_t total = 0;
  std::vector<int> order;
  for (int w = 0; w < config_.num_workers; ++w) {
    if (!members[w]) continue;
    total += pending_examples_[w];
    order.push_back(w);
  }
  // As StepGradient sums the dense gradient: in (chunk, worker) order, each
  // term rounded before it is added, a lone member's rows taken as they are.
  std::sort(order.begin(), order.end(), [this](int a, int b) {
    return std::make_pair(pending_chunk_[a], a) < std::make_pair(pending_chunk_[b], b);
  });
  step_sparse_.resize(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) step_sparse_[t].table = static_cast<int>(t);
  std::vector<absl::flat_hash_map<int64_t, int64_t>> index(tables_.size());
  for (int w : order) {
    const float weight = static_cast<float>(pending_examples_[w]) / total;
    for (const SparseRowsData& r : pending_sparse_[w]) {
      SparseRowsData& out = step_sparse_[r.table];
      const int width = tables_[r.table]->width();
      for (size_t i = 0; i < r.ids.size(); ++i) {
        const float* g = r.values.data() + i * width;
        auto [it, added] = index[r.table].try_emplace(r.ids[i], out.ids.size());
        if (added) {
          out.ids.push_back(r.ids[i]);
          out.values.resize(out.values.size() + width);
        }
        float* sum = out.values.data() + it->second * width;
        for (int j = 0; j < width; ++j) {
          if (order.size() == 1) {
            sum[j] = g[j];
          } else if (added) {
            sum[j] = weight * g[j] + 0.0f;
          } else {
            sum[j] += weight * g[j];
          }
        }
      }
    }
  }
  step_sparse_.erase(std::remove_if(step_sparse_.begin(), step_sparse_.end(),
                                    [](const SparseRowsData& r) { return r.ids.empty(); }),
                     step_sparse_.end());
}

void ParameterStore::ApplySparse() {
  for (const SparseRowsData& r : step_sparse_) {
    if (!r.ids.empty()) tables_[r.table]->Apply(r.ids, r.values.data(), version_);
  }
  if ((version_ + 1) % kEvictEvery == 0) {
    for (std::unique_ptr<SparseTable>& t : tables_) t->Evict(version_ + 1);
  }
}

absl::StatusOr<PushResult> ParameterStore::Push(const PushArgs& args) {
  absl::MutexLock lock(&mu_);
  // Refusals are counted by the caller (the ps service), in one place.
  if (absl::Status s = CheckReady(args.layout_fingerprint); !s.ok()) {
    return s;
  }
  if (config_.replica == ReplicaRole::kBackup) {
    // Unavailable: the caller asks again, where the primary is now (a
    // restarted ps serves as a backup at the address it had).
    return absl::UnavailableError(
        "this ps holds a backup of these shards: pushes go to their primary");
  }
  if (args.worker < 0 || args.worker >= config_.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker index ", args.worker, " is out of range: ",
                     config_.num_workers, " workers"));
  }
  // Before the generation: a push applied here, or by the primary this
  // store took over from, is answered as it was, whatever came since.
  std::deque<SeenPush>& seen = seen_[args.worker];
  if (args.request_id != 0) {
    for (const SeenPush& p : seen) {
      if (p.request_id == args.request_id) {
        ++stats_.pushes_duplicate;
        return p.result;
      }
    }
  }
  if (args.generation != generation_) return GenerationMismatch(args.generation, generation_, version_);
  if (args.num_floats != config_.num_floats) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient has ", args.num_floats, " floats; this ps holds ",
                     config_.num_floats));
  }
  if (args.num_examples < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_examples must be >= 1 (a gradient of no example teaches nothing), got ",
        args.num_examples));
  }
  if (args.version < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient version ", args.version, " is negative"));
  }
  if (args.version > version_) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient version ", args.version,
                     " is from the future: this ps is at version ", version_));
  }
  bool sparse_finite = true;
  if (args.sparse != nullptr) {
    if (absl::Status s = CheckSparse(*args.sparse, &sparse_finite); !s.ok()) return s;
  }
  // Checked on every core: a range's verdict each, joined after.
  bool finite;
  if (args.finite.has_value()) {
    finite = *args.finite;
  } else {
    std::vector<char> range_finite(threads_, 1);
    std::atomic<int> next_range{0};
    ParallelFor(args.num_floats, kMinRange, threads_, [&](int64_t b, int64_t e) {
      range_finite[next_range++] = AllFinite(args.gradients + b, e - b);
    });
    finite = std::all_of(range_finite.begin(), range_finite.end(),
                         [](char f) { return f != 0; });
  }
  finite = finite && sparse_finite;
  if (!finite && !config_.skip_nonfinite) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient from worker ", args.worker,
                     " holds NaN or Inf; not applied"));
  }
  absl::StatusOr<PushResult> result = config_.rule == UpdateRule::kSync
                                          ? PushSync(args, finite)
                                          : PushAsync(args, finite);
  if (result.ok() && result->applied) {
    stats_.staleness_sum += result->staleness;
    stats_.staleness_max = std::max(stats_.staleness_max, result->staleness);
  }
  if (result.ok()) RememberPush(args.worker, args.request_id, *result);
  return result;
}

void ParameterStore::RememberPush(int w, uint64_t request_id, const PushResult& result) {
  if (request_id == 0) return;
  std::deque<SeenPush>& seen = seen_[w];
  seen.push_back({request_id, result});
  if (seen.size() > kDedupWindow) seen.pop_front();
}

absl::StatusOr<PushResult> ParameterStore::PushSync(const PushArgs& args, bool finite) {
  const int w = args.worker;
  PushResult r;
  r.staleness = version_ - args.version;
  // A backup worker's late gradient, a second one for this step, one from
  // a worker the chief took out of the step (it rejoins through the
  // chief), or (following store) one the step's decision left out.
  const bool left_out = commit_.has_value() && !commit_->members[w];
  if (args.version < version_ || pending_examples_[w] >= 0 || !active_[w] || left_out) {
    ++stats_.pushes_dropped_stale;
    // A second push for this step leaves the first one's fate alone.
    if (pending_examples_[w] < 0) outcome_[w] = {args.version, false};
    r.version = version_;
    return r;
  }
  if (args.owned != nullptr) {
    pending_[w].swap(*args.owned);
  } else {
    pending_[w].assign(args.gradients, args.gradients + args.num_floats);
  }
  pending_sparse_[w].clear();
  if (args.sparse != nullptr) pending_sparse_[w].swap(*args.sparse);
  pending_examples_[w] = args.num_examples;
  pending_request_[w] = args.request_id;
  pending_chunk_[w] = args.chunk;
  pending_nonfinite_[w] = !finite;
  ++pending_count_;
  outcome_[w] = {args.version, false};
  r.applied = true;
  MaybeFinishStep();
  r.version = version_;
  return r;
}

void ParameterStore::DropPending(int w) {
  pending_examples_[w] = -1;
  pending_sparse_[w].clear();
  pending_nonfinite_[w] = false;
  --pending_count_;
  outcome_[w] = {version_, false};
  ++stats_.pushes_dropped_stale;
}

void ParameterStore::MaybeFinishStep() {
  // A decider with a decision adopted at its promotion closes that step
  // as a follower would.
  if (config_.step_role == StepRole::kDecide && !commit_.has_value()) {
    MaybeCloseStep();
  } else {
    MaybeApplyCommit();
  }
}

void ParameterStore::MaybeCloseStep() {
  if (pending_count_ == 0) return;
  const int active = static_cast<int>(std::count(active_.begin(), active_.end(), true));
  if (pending_count_ < std::min(config_.replicas_to_aggregate, active)) return;
  StepDecision d;
  d.layout_fingerprint = config_.layout_fingerprint;
  d.generation = generation_;
  d.version = version_;
  d.sequence = next_sequence_++;
  d.decider_epoch = decider_epoch_;
  d.members.resize(config_.num_workers);
  for (int w = 0; w < config_.num_workers; ++w) d.members[w] = pending_examples_[w] >= 0;
  d.skip = AnyNonfinite(d.members);
  const std::vector<bool> members = d.members;
  {
    // Out before the update: the other ps apply the step while this one
    // does.
    absl::MutexLock lock(&decisions_mu_);
    decisions_.push_back(std::move(d));
    if (decisions_.size() > kKeptDecisions) decisions_.pop_front();
    decision_made_.SignalAll();
  }
  ApplyStep(members, /*skip=*/false);
}

bool ParameterStore::AnyNonfinite(const std::vector<bool>& members) const {
  for (int w = 0; w < config_.num_workers; ++w) {
    if (members[w] && pending_nonfinite_[w]) return true;
  }
  return false;
}

void ParameterStore::MaybeApplyCommit() {
  if (!commit_.has_value()) {
    MaybeComputeAhead();
    return;
  }
  for (int w = 0; w < config_.num_workers; ++w) {
    // A member's gradient still on its way: wait, unless the chief took
    // the worker out (it died after reaching the deciding ps only).
    if (commit_->members[w] && pending_examples_[w] < 0 && active_[w]) return;
  }
  std::vector<bool> members = commit_->members;
  bool torn = false;
  for (int w = 0; w < config_.num_workers; ++w) {
    if (members[w] && pending_examples_[w] < 0) {
      members[w] = false;
      torn = true;
    }
  }
  if (torn) ++stats_.steps_torn;
  const bool skip = commit_->skip;
  commit_.reset();
  if (!skip && ahead_.values != nullptr && ahead_.version == version_ &&
      ahead_.generation == generation_ && ahead_.members == members &&
      !AnyNonfinite(members)) {
    // Computed already: the values ahead become the next version's (the
    // old buffer waits among the spares for its readers), and the
    // optimizer takes its state aside.
    if (spares_.size() < kKeptSpares) spares_.push_back(std::move(values_));
    values_ = std::move(ahead_.values);
    optimizer_->TakeAside();
    ahead_ = Ahead();
    ++stats_.steps_ahead;
    SumSparse(members);
    ApplySparse();
    if (listener_) Report(StepGradient(members), false, members, -1, 0, 0);
    CloseStep(members);
    return;
  }
  ApplyStep(members, skip);
}

void ParameterStore::MaybeComputeAhead() {
  if (config_.rule != UpdateRule::kSync || config_.step_role != StepRole::kFollow ||
      pending_count_ == 0) {
    return;
  }
  // ps 0 closes a step with this many gradients: most likely these.
  const int active = static_cast<int>(std::count(active_.begin(), active_.end(), true));
  if (pending_count_ != std::min(config_.replicas_to_aggregate, active)) return;
  std::vector<bool> members(config_.num_workers);
  int64_t total = 0;
  for (int w = 0; w < config_.num_workers; ++w) {
    members[w] = pending_examples_[w] >= 0;
    if (members[w]) total += pending_examples_[w];
  }
  // A step with a NaN or Inf is skipped: nothing to compute.
  if (total <= 0 || AnyNonfinite(members)) return;
  if (ahead_.values != nullptr && ahead_.version == version_ &&
      ahead_.generation == generation_ && ahead_.members == members) {
    return;
  }
  std::shared_ptr<std::vector<float>> out = std::move(ahead_.values);
  if (out == nullptr) out = TakeSpare();
  UpdateAside(StepGradient(members), out.get());
  ahead_ = Ahead{version_, generation_, std::move(members), std::move(out)};
}

bool ParameterStore::ApplyStep(const std::vector<bool>& members, bool skip) {
  int64_t total = 0;
  const bool nonfinite = skip || AnyNonfinite(members);
  for (int w = 0; w < config_.num_workers; ++w) {
    if (members[w]) total += pending_examples_[w];
  }
  const float* grad = nullptr;
  step_sparse_.clear();
  if (nonfinite) {
    ++stats_.steps_skipped_nonfinite;
  } else if (total > 0) {
    grad = StepGradient(members);
    Update(grad);
    SumSparse(members);
  }
  ApplySparse();
  Report(grad, nonfinite, members, -1, 0, 0);
  CloseStep(members);
  return nonfinite;
}

const float* ParameterStore::StepGradient(const std::vector<bool>& members) {
  const int64_t n = config_.num_floats;
  int64_t total = 0;
  int count = 0;
  for (int w = 0; w < config_.num_workers; ++w) {
    if (!members[w]) continue;
    total += pending_examples_[w];
    ++count;
  }
  // In (chunk, worker) order: the sum is the same bits whatever the
  // arrival order was, and whichever worker drew which chunk (the chunks
  // of a step are the run's; who trains them is decided at run time).
  // Each term is rounded before it is added (no fused multiply-add: see
  // BUILD). The first member's term is written, not added to zeros
  // (w * g + 0 is 0 + w * g, bit for bit: -0 becomes +0), and the step of
  // a lone member is its gradient itself: no pass at all (g differs from
  // 0 + 1 * g only where g is -0, which Adam's update takes as +0, and
  // SGD's and momentum's only in the sign of a zero weight).
  std::vector<int> order;
  order.reserve(count);
  for (int w = 0; w < config_.num_workers; ++w) {
    if (members[w]) order.push_back(w);
  }
  std::sort(order.begin(), order.end(), [this](int a, int b) {
    return std::make_pair(pending_chunk_[a], a) < std::make_pair(pending_chunk_[b], b);
  });
  const float* grad = nullptr;
  bool first = true;
  for (int w : order) {
    const float weight = static_cast<float>(pending_examples_[w]) / total;
    const float* g = pending_[w].data();
    if (count == 1) return g;
    float* s = sum_.data();
    if (first) {
      ParallelFor(n, kMinRange, threads_, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) s[i] = weight * g[i] + 0.0f;
      });
    } else {
      ParallelFor(n, kMinRange, threads_, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) s[i] += weight * g[i];
      });
    }
    first = false;
    grad = s;
  }
  return grad;
}

void ParameterStore::CloseStep(const std::vector<bool>& members) {
  for (int w = 0; w < config_.num_workers; ++w) {
    if (members[w]) {
      ++stats_.pushes_applied;
      stats_.applied_digest += GradientHash(static_cast<uint64_t>(version_), w);
      outcome_[w] = {version_, true};
    } else if (pending_examples_[w] >= 0) {
      outcome_[w] = {version_, false};
      ++stats_.pushes_dropped_stale;
    }
    pending_examples_[w] = -1;
    pending_sparse_[w].clear();
  }
  std::vector<int64_t> chunks;
  for (int w = 0; w < config_.num_workers; ++w) {
    if (members[w]) chunks.push_back(pending_chunk_[w]);
  }
  recent_chunks_.Add(chunks, RecentChunksKept(config_.num_workers));
  pending_count_ = 0;
  std::fill(pending_nonfinite_.begin(), pending_nonfinite_.end(), false);
  ++version_;
  ++stats_.steps_applied;
  version_advanced_.SignalAll();
}

std::optional<bool> ParameterStore::StepOutcome(int worker, int64_t version) const {
  absl::MutexLock lock(&mu_);
  if (worker < 0 || worker >= static_cast<int>(outcome_.size())) return std::nullopt;
  if (outcome_[worker].first != version) return std::nullopt;
  // Taken into the step being gathered: not decided yet.
  if (version == version_ && pending_examples_[worker] >= 0) return std::nullopt;
  return outcome_[worker].second;
}

bool ParameterStore::NextDecision(int64_t after_sequence, absl::Time deadline,
                                  StepDecision* out) {
  absl::MutexLock lock(&decisions_mu_);
  while (!decisions_cancelled_) {
    for (const StepDecision& d : decisions_) {
      if (d.sequence > after_sequence) {
        *out = d;
        return true;
      }
    }
    if (decision_made_.WaitWithDeadline(&decisions_mu_, deadline)) return false;
  }
  return false;
}

absl::Status ParameterStore::Commit(uint64_t layout_fingerprint, const StepDecision& d) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReady(layout_fingerprint); !s.ok()) return s;
  if (config_.replica == ReplicaRole::kBackup) {
    // Unavailable: the caller asks again, where the primary is now (a
    // restarted ps serves as a backup at the address it had).
    return absl::UnavailableError(
        "this ps holds a backup of these shards: step decisions go to their primary");
  }
  if (config_.rule != UpdateRule::kSync || config_.step_role != StepRole::kFollow) {
    return absl::FailedPreconditionError(
        "this ps decides its steps itself; it takes no step decisions");
  }
  if (static_cast<int>(d.members.size()) != config_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step decision names ", d.members.size(), " workers; this ps serves ",
        config_.num_workers));
  }
  if (d.generation != generation_) {
    return GenerationMismatch(d.generation, generation_, version_);
  }
  if (d.decider_epoch < decider_epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step decision for version ", d.version, " of decider epoch ", d.decider_epoch,
        "; this ps takes epoch ", decider_epoch_,
        " and above: the ps that made it was replaced as the decider"));
  }
  decider_epoch_ = d.decider_epoch;
  if (d.version < version_) return absl::OkStatus();  // applied already
  if (d.version > version_) {
    return absl::UnavailableError(absl::StrCat("step decision for version ", d.version,
                                               "; this ps is at version ", version_));
  }
  if (std::find(d.members.begin(), d.members.end(), true) == d.members.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step decision for version ", d.version, " names no member"));
  }
  if (commit_.has_value()) return absl::OkStatus();  // resent while waiting
  commit_ = d;
  {
    // Kept for a backup promoted in the decider's place (DecisionFor).
    absl::MutexLock decisions_lock(&decisions_mu_);
    decisions_.push_back(d);
    if (decisions_.size() > kKeptDecisions) decisions_.pop_front();
  }
  for (int w = 0; w < config_.num_workers; ++w) {
    if (!d.members[w] && pending_examples_[w] >= 0) DropPending(w);
  }
  MaybeApplyCommit();
  return absl::OkStatus();
}

absl::Status ParameterStore::FenceDecisions(uint64_t layout_fingerprint, int64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReady(layout_fingerprint); !s.ok()) return s;
  if (config_.replica == ReplicaRole::kPrimary && config_.step_role == StepRole::kDecide) {
    return absl::FailedPreconditionError(
        "this ps decides its steps itself; only a following ps is fenced against a decider");
  }
  decider_epoch_ = std::max(decider_epoch_, epoch);
  return absl::OkStatus();
}

absl::StatusOr<PushResult> ParameterStore::PushAsync(const PushArgs& args, bool finite) {
  // Never dropped for staleness: the chief bounds it before the gradient is
  // computed (WorkResponse.BOUND), so every ps applies every push.
  PushResult r;
  r.staleness = version_ - args.version;
  if (!finite) {
    ++stats_.steps_skipped_nonfinite;
    r.version = version_;
    return r;
  }
  Update(args.gradients);
  step_sparse_.clear();
  if (args.sparse != nullptr) step_sparse_.swap(*args.sparse);
  ApplySparse();
  Report(args.gradients, false, {}, args.worker, args.request_id, r.staleness, args.chunk);
  recent_chunks_.Add({args.chunk}, RecentChunksKept(config_.num_workers));
  stats_.applied_digest += GradientHash(args.request_id, args.worker);
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
  s.backup = config_.replica == ReplicaRole::kBackup;
  s.decides = config_.rule == UpdateRule::kSync && config_.step_role == StepRole::kDecide &&
              config_.replica == ReplicaRole::kPrimary;
  s.layout_fingerprint = config_.layout_fingerprint;
  s.active_workers = active_;
  for (const std::unique_ptr<SparseTable>& t : tables_) s.sparse_tables.push_back(t->stats());
  return s;
}

void ParameterStore::Report(const float* grad, bool skipped, const std::vector<bool>& members,
                            int worker, uint64_t request_id, int64_t staleness, int64_t chunk) {
  if (!listener_) return;
  AppliedUpdate u;
  u.generation = generation_;
  u.version = version_;
  u.primary_term = primary_term_;
  if (grad != nullptr) u.gradient.assign(grad, grad + config_.num_floats);
  u.skipped = skipped;
  u.members = members;
  if (!members.empty()) {
    u.member_request_ids.assign(config_.num_workers, 0);
    u.member_chunks.assign(config_.num_workers, -1);
    for (int w = 0; w < config_.num_workers; ++w) {
      if (!members[w]) continue;
      u.member_request_ids[w] = pending_request_[w];
      u.member_chunks[w] = pending_chunk_[w];
    }
  } else {
    u.member_chunks = {chunk};
  }
  u.worker = worker;
  u.request_id = request_id;
  u.staleness = staleness;
  u.sparse = std::move(step_sparse_);
  step_sparse_.clear();
  listener_(std::move(u));
}

void ParameterStore::SetUpdateListener(UpdateListener listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

absl::Status ParameterStore::ApplyReplicated(uint64_t layout_fingerprint,
                                             const AppliedUpdate& u) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReady(layout_fingerprint); !s.ok()) return s;
  if (config_.replica != ReplicaRole::kBackup) {
    return absl::FailedPreconditionError(
        "this ps is the primary of these shards; it takes no replicated updates");
  }
  // Checked with the apply, under one lock: a seed of the new primary may
  // come between two records of the old one.
  if (u.primary_term < primary_term_) {
    return absl::AlreadyExistsError(absl::StrCat(
        "this backup follows the primary of term ", primary_term_, "; records of term ",
        u.primary_term, " are of a replaced primary"));
  }
  if (u.primary_term > primary_term_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a record of primary term ", u.primary_term, "; this backup follows term ",
        primary_term_, ": seed it again from its new primary"));
  }
  if (u.generation != generation_) return GenerationMismatch(u.generation, generation_, version_);
  const bool sync = config_.rule == UpdateRule::kSync;
  if (!u.gradient.empty() && static_cast<int64_t>(u.gradient.size()) != config_.num_floats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicated update has ", u.gradient.size(), " floats; this ps holds ", config_.num_floats));
  }
  if (sync ? (static_cast<int>(u.members.size()) != config_.num_workers ||
              (!u.member_request_ids.empty() &&
               static_cast<int>(u.member_request_ids.size()) != config_.num_workers))
           : (!u.members.empty() || !u.member_request_ids.empty() || u.worker < 0 || u.worker >= config_.num_workers ||
              u.gradient.empty() || u.skipped || u.staleness < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicated update for version ", u.version, " does not fit a ", sync ? "sync" : "async",
        " store of ", config_.num_workers, " workers"));
  }
  if (u.version < version_) return absl::OkStatus();  // applied already
  bool sparse_finite = true;
  if (absl::Status s = CheckSparse(u.sparse, &sparse_finite); !s.ok()) return s;
  if (u.version > version_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replicated update for version ", u.version, "; this backup is at version ", version_,
        ": seed it again from the primary"));
  }
  if (u.skipped) ++stats_.steps_skipped_nonfinite;
  if (!u.gradient.empty()) Update(u.gradient.data());
  step_sparse_ = u.sparse;
  ApplySparse();
  step_sparse_.clear();
  if (sync) {
    for (int w = 0; w < config_.num_workers; ++w) {
      if (!u.members[w]) continue;
      ++stats_.pushes_applied;
      stats_.applied_digest += GradientHash(static_cast<uint64_t>(version_), w);
      outcome_[w] = {version_, true};
    }
  } else {
    ++stats_.pushes_applied;
    stats_.applied_digest += GradientHash(u.request_id, u.worker);
    stats_.staleness_sum += u.staleness;
    stats_.staleness_max = std::max(stats_.staleness_max, u.staleness);
  }
  std::vector<int64_t> chunks;
  for (size_t w = 0; w < u.member_chunks.size(); ++w) {
    if (!sync || (w < u.members.size() && u.members[w])) chunks.push_back(u.member_chunks[w]);
  }
  recent_chunks_.Add(chunks, RecentChunksKept(config_.num_workers));
  ++version_;
  ++stats_.steps_applied;
  if (sync && config_.step_role == StepRole::kDecide) {
    // Its primary decided this step: sent again if this backup is
    // promoted to decide (Promote).
    StepDecision d;
    d.layout_fingerprint = config_.layout_fingerprint;
    d.generation = u.generation;
    d.version = u.version;
    d.members = u.members;
    d.skip = u.skipped;
    replicated_decisions_.push_back(std::move(d));
    if (replicated_decisions_.size() > kKeptDecisions) replicated_decisions_.pop_front();
  }
  if (sync) {
    // Answered as applied, with the version after the step.
    for (size_t w = 0; w < u.member_request_ids.size(); ++w) {
      if (u.members[w]) RememberPush(static_cast<int>(w), u.member_request_ids[w],
                                     PushResult{true, version_, 0});
    }
  } else {
    RememberPush(u.worker, u.request_id, PushResult{true, version_, u.staleness});
  }
  version_advanced_.SignalAll();
  return absl::OkStatus();
}

absl::Status ParameterStore::Promote(uint64_t layout_fingerprint, int64_t generation,
                                     StepRole step_role,
                                     const std::optional<StepDecision>& in_flight,
                                     int64_t decider_epoch, int64_t primary_term) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReady(layout_fingerprint); !s.ok()) return s;
  if (config_.replica != ReplicaRole::kBackup) {
    return absl::FailedPreconditionError("this ps is the primary of these shards already");
  }
  if (generation < generation_ || generation > kMaxVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "promotion to generation ", generation, ": must be at least this store's ", generation_,
        " and at most ", kMaxVersion));
  }
  if (primary_term < 0 || (primary_term > 0 && primary_term <= primary_term_)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "promotion under primary term ", primary_term, ": this store follows term ",
        primary_term_, "; a new primary's must be above it"));
  }
  if (in_flight.has_value() &&
      (step_role != StepRole::kDecide || config_.rule != UpdateRule::kSync ||
       in_flight->version > version_ || in_flight->generation != generation ||
       static_cast<int>(in_flight->members.size()) != config_.num_workers ||
       std::find(in_flight->members.begin(), in_flight->members.end(), true) ==
           in_flight->members.end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the decision in flight is for version ", in_flight->version, " of generation ",
        in_flight->generation, " with ", in_flight->members.size(),
        " workers; this store is at version ", version_, " and is promoted under generation ",
        generation, " to ", step_role == StepRole::kDecide ? "decide" : "follow"));
  }
  primary_term_ = primary_term > 0 ? primary_term : primary_term_ + 1;
  config_.replica = ReplicaRole::kPrimary;
  config_.step_role = step_role;
  config_.generation = generation;
  generation_ = generation;
  stats_.generation = generation;
  decider_epoch_ = std::max(decider_epoch_, decider_epoch);
  if (step_role == StepRole::kDecide) {
    // The steps it applied, then the one in flight: each follower takes
    // those it lacks, in order, under this decider's epoch. Those it
    // applied are its own decisions (a decider demoted, and promoted again
    // before it was seeded: a follower may have refused the last under the
    // epoch of the promotion that failed) or its primary's, from the
    // records (a backup).
    std::deque<StepDecision> resend;
    {
      absl::MutexLock decisions_lock(&decisions_mu_);
      for (const StepDecision& d : decisions_) {
        if (d.generation == generation && d.version < version_) resend.push_back(d);
      }
    }
    for (StepDecision& d : replicated_decisions_) resend.push_back(std::move(d));
    replicated_decisions_.clear();
    if (in_flight.has_value() && in_flight->version == version_) {
      commit_ = *in_flight;
      for (int w = 0; w < config_.num_workers; ++w) {
        if (!commit_->members[w] && pending_examples_[w] >= 0) DropPending(w);
      }
      resend.push_back(*in_flight);
    }
    absl::MutexLock decisions_lock(&decisions_mu_);
    for (StepDecision& d : resend) {
      d.sequence = next_sequence_++;
      d.decider_epoch = decider_epoch_;
      decisions_.push_back(std::move(d));
      if (decisions_.size() > kKeptDecisions) decisions_.pop_front();
    }
    decision_made_.SignalAll();
  }
  replicated_decisions_.clear();
  // Waiting pulls of the old generation are answered Aborted.
  version_advanced_.SignalAll();
  return absl::OkStatus();
}

absl::Status ParameterStore::Demote(uint64_t layout_fingerprint) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReady(layout_fingerprint); !s.ok()) return s;
  config_.replica = ReplicaRole::kBackup;
  replicated_decisions_.clear();  // it is seeded before it takes records
  // Waiting pulls and pushes see the new role.
  version_advanced_.SignalAll();
  return absl::OkStatus();
}

void ParameterStore::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  version_advanced_.SignalAll();
  absl::MutexLock decisions(&decisions_mu_);
  decisions_cancelled_ = true;
  decision_made_.SignalAll();
}

bool ParameterStore::AwaitInitialized() const {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return initialized_ || cancelled_; };
  mu_.Await(absl::Condition(&done));
  return initialized_ && !cancelled_;
}

}  // namespace pscluster
