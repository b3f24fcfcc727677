#include "ps_server/ps_service.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/rpc.h"
#include "common/security.h"
#include "spdlog/spdlog.h"
#include "update/store_state.h"

namespace pscluster {
namespace {

// A pull without a client deadline still ends, so a lost worker cannot pin
// a server thread forever.
constexpr absl::Duration kMaxPullWait = absl::Minutes(10);

// The call's deadline; none without a context (the fuzzer calls the
// handlers directly).
absl::Time CallDeadline(const grpc::ServerContext* ctx) {
  return ctx != nullptr ? absl::FromChrono(ctx->deadline()) : absl::InfiniteFuture();
}

grpc::Status BadBytes(const char* what, size_t n) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      absl::StrCat(what, " has ", n,
                                   " bytes, not a whole number of float32s"));
}

grpc::Status InvalidArgument(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

// A state's header, without its values: the layout, version, generation
// and recent chunks (the answer to CAPTURE and to RECENT_CHUNKS).
void StateHeader(uint64_t fingerprint, const StoreSnapshot& store, ShardState* out) {
  out->set_layout_fingerprint(fingerprint);
  out->set_version(store.version);
  out->set_generation(store.generation);
  out->mutable_recent_chunks()->Assign(store.recent_chunks.begin(), store.recent_chunks.end());
  out->set_recent_chunks_since(store.recent_chunks_since);
  out->mutable_pending_chunks()->Assign(store.pending_chunks.begin(), store.pending_chunks.end());
}

}  // namespace

PsService::PsService(ParameterStore* store, Metrics* metrics, const PsServiceOptions& options)
    : store_(store),
      metrics_(metrics),
      options_(options),
      incarnation_(std::random_device{}() | (uint64_t{std::random_device{}()} << 32)) {
  auto gauge = [&](const char* name, const char* help) -> prometheus::Gauge* {
    absl::StatusOr<prometheus::Gauge*> g = metrics_->AddGauge(name, help);
    return g.ok() ? *g : nullptr;
  };
  backups_set_gauge_ = gauge("pscluster_backups",
                             "Backups of this ps's store it keeps up to date (--ps_replicas).");
  backups_live_gauge_ = gauge("pscluster_backups_live",
                              "Of those, the ones that keep up: answers wait for them.");
  replicated_version_gauge_ =
      gauge("pscluster_replicated_version",
            "The version every backup that keeps up holds (-1: none yet).");
  replicated_bytes_gauge_ =
      gauge("pscluster_replicated_bytes", "Bytes sent to the backups: seeds and updates.");
}

ReplicaStats PsService::UpdateReplicaMetrics(const Replicator& replicator) {
  const ReplicaStats r = replicator.stats();
  if (backups_set_gauge_) backups_set_gauge_->Set(r.backups_set);
  if (backups_live_gauge_) backups_live_gauge_->Set(r.backups_live);
  if (replicated_version_gauge_) replicated_version_gauge_->Set(static_cast<double>(r.replicated_version));
  if (replicated_bytes_gauge_) replicated_bytes_gauge_->Set(static_cast<double>(r.bytes_sent));
  return r;
}

std::shared_ptr<Replicator> PsService::CurrentReplicator() {
  absl::MutexLock lock(&replicator_mu_);
  return replicator_;
}

absl::Status PsService::Capture(uint64_t fingerprint, CapturedState* out) {
  if (absl::Status s = store_->Snapshot(fingerprint, &out->store); !s.ok()) return s;
  out->fingerprint = fingerprint;
  absl::MutexLock lock(&shards_mu_);
  out->shards = shards_;
  return absl::OkStatus();
}

void PsService::CapturedToState(const CapturedState& captured, ShardState* out) {
  out->set_layout_fingerprint(captured.fingerprint);
  for (const ShardSpec& sh : captured.shards) *out->add_shards() = sh;
  StoreSnapshotToState(captured.store, out);
}

absl::Status PsService::StateOf(uint64_t fingerprint, ShardState* out) {
  CapturedState captured;
  if (absl::Status s = Capture(fingerprint, &captured); !s.ok()) return s;
  CapturedToState(captured, out);
  return absl::OkStatus();
}

grpc::Status PsService::Init(grpc::ServerContext* ctx, const InitRequest* req,
                             InitResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  std::vector<float> values;
  if (absl::Status s = BytesToFloats(req->values(), "values", &values); !s.ok()) {
    return ToGrpcStatus(s);
  }
  absl::StatusOr<StoreConfig> c =
      StoreConfigFromInit(*req, static_cast<int64_t>(values.size()), options_.step_role);
  if (!c.ok()) return ToGrpcStatus(c.status());
  bool already = false;
  absl::Status s = store_->Init(*c, values.data(), &already);
  if (!s.ok()) return ToGrpcStatus(s);
  if (!already) {
    absl::MutexLock lock(&shards_mu_);
    shards_.assign(req->shards().begin(), req->shards().end());
    config_ = *req;
    config_.clear_values();
  }
  const StoreStats st = store_->stats();
  resp->set_already_initialized(already);
  resp->set_version(st.version);
  resp->set_generation(st.generation);
  return grpc::Status::OK;
}

grpc::Status PsService::CheckShards(
    const google::protobuf::RepeatedPtrField<ShardSpec>& shards) {
  absl::MutexLock lock(&shards_mu_);
  if (shards_.empty()) return grpc::Status::OK;  // nothing held yet
  for (const ShardSpec& s : shards) {
    bool known = false;
    for (const ShardSpec& mine : shards_) {
      if (mine.variable() == s.variable() && mine.part() == s.part()) {
        if (mine.offset() != s.offset() || mine.size() != s.size()) {
          return InvalidArgument(absl::StrCat(
              "variable ", s.variable(), " part ", s.part(), " is [", s.offset(), ", +",
              s.size(), ") in the request but [", mine.offset(), ", +", mine.size(),
              ") on this ps"));
        }
        known = true;
      }
    }
    if (!known) {
      return InvalidArgument(absl::StrCat("unknown variable ", s.variable(), " part ",
                                          s.part(), ": this ps does not hold it"));
    }
  }
  if (shards.size() != static_cast<int>(shards_.size())) {
    return InvalidArgument(absl::StrCat("the request names ", shards.size(),
                                        " shards; this ps holds ", shards_.size()));
  }
  return grpc::Status::OK;
}

namespace {

// The codec a request's dtype names: empty and "float32" (older workers)
// mean fp32.
absl::StatusOr<Codec> CodecOfDtype(const std::string& dtype) {
  if (dtype.empty() || dtype == "float32") return Codec::kFloat32;
  return ParseCodec(dtype);
}

}  // namespace

std::vector<WirePiece> PsService::Pieces() {
  absl::MutexLock lock(&shards_mu_);
  std::vector<WirePiece> pieces;
  for (const ShardSpec& s : shards_) pieces.push_back({s.size(), s.moving_statistic()});
  return pieces;
}

std::vector<float> PsService::TakeBuffer() {
  absl::MutexLock lock(&buffers_mu_);
  if (buffers_.empty()) return {};
  std::vector<float> b = std::move(buffers_.back());
  buffers_.pop_back();
  return b;
}

void PsService::GiveBuffer(std::vector<float> buffer) {
  if (buffer.capacity() == 0) return;
  absl::MutexLock lock(&buffers_mu_);
  if (buffers_.size() < kKeptBuffers) buffers_.push_back(std::move(buffer));
}

PsService::ChangeState* PsService::Changes(int worker) {
  absl::MutexLock lock(&changes_mu_);
  std::unique_ptr<ChangeState>& st = changes_[worker];
  if (st == nullptr) st = std::make_unique<ChangeState>();
  return st.get();
}

bool PsService::EncodeChange(const PullEncoding& enc, const CodecOptions& codec,
                             const float* w, int64_t n, PullResponse* resp) {
  const std::vector<WirePiece> pieces = Pieces();
  ChangeState* st = Changes(enc.worker);
  absl::MutexLock lock(&st->mu);
  if (enc.base > 0 && enc.base == st->seq - 1 && !st->last.empty()) {
    // The worker did not get the last answer (a resend): the same again.
    *resp->mutable_values() = st->last;
    resp->set_version(st->last_version);
    resp->set_generation(st->last_generation);
    resp->set_delta(true);
    resp->set_delta_seq(st->seq);
    return true;
  }
  ++st->seq;
  resp->set_delta_seq(st->seq);
  if (enc.reset || enc.base <= 0 || enc.base != st->seq - 1 ||
      static_cast<int64_t>(st->shadow.size()) != n) {
    // No common base (a new worker, a restarted ps, a restore): the weights
    // themselves, in fp32, become the base.
    st->shadow.assign(w, w + n);
    st->last.clear();
    resp->set_delta(false);
    return false;
  }
  // d = w - shadow, encoded; shadow += decode(d), exactly as the worker
  // will add it, so that what is not sent now is sent later. Pieces sent
  // as fp32 carry the values themselves.
  std::string out;
  const CodecOptions exact;
  int64_t bytes = 0;
  for (const WirePiece& p : pieces) bytes += EncodedBytes(p.exact ? exact : codec, p.size);
  out.reserve(bytes);
  float* shadow = st->shadow.data();
  for (const WirePiece& p : pieces) {
    if (p.exact || EffectiveCodec(codec, p.size) == Codec::kFloat32) {
      Encode(exact, w, p.size, &out);
      std::copy(w, w + p.size, shadow);
    } else {
      ::pscluster::EncodeChange(codec, w, shadow, p.size, &out, &st->scratch);
    }
    w += p.size;
    shadow += p.size;
  }
  resp->mutable_values()->swap(out);
  st->last = resp->values();
  st->last_version = resp->version();
  st->last_generation = resp->generation();
  resp->set_delta(true);
  return true;
}

grpc::Status PsService::DoPull(absl::Time deadline, uint64_t fingerprint,
                               int64_t min_version, int64_t generation,
                               const PullEncoding& enc, PullResponse* resp,
                               ParameterStore::SharedValues* weights) {
  absl::StatusOr<Codec> codec = CodecOfDtype(enc.dtype);
  if (!codec.ok()) return InvalidArgument(absl::StrCat("pull: ", codec.status().message()));
  deadline = std::min(deadline, absl::Now() + kMaxPullWait);
  int64_t version = 0;
  int64_t current_generation = 0;
  const absl::Time start = absl::Now();
  // The store's own buffer, read (encoded or copied) without its lock.
  ParameterStore::SharedValues values;
  absl::Status s = store_->PullShared(fingerprint, min_version, deadline, &values, &version,
                                      generation, &current_generation);
  if (!s.ok()) return ToGrpcStatus(s);
  if (grpc::Status r = AwaitReplicated(version, deadline); !r.ok()) return r;
  resp->set_version(version);
  resp->set_generation(current_generation);
  CodecOptions o;
  o.codec = *codec;
  o.min_elements = enc.min_elements;
  const float* w = values->data();
  const int64_t n = static_cast<int64_t>(values->size());
  bool encoded = false;
  if (enc.worker >= 0 && (enc.reset || PullsChanges(*codec))) {
    encoded = EncodeChange(enc, o, w, n, resp);
  } else if (*codec != Codec::kFloat32) {
    std::string bytes;
    EncodePieces(o, Pieces(), w, &bytes);
    resp->mutable_values()->swap(bytes);
    encoded = true;
  }
  int64_t sent = static_cast<int64_t>(resp->values().size());
  if (!encoded) {
    sent = n * static_cast<int64_t>(sizeof(float));
    if (weights != nullptr) {
      resp->clear_values();
      *weights = std::move(values);
    } else {
      resp->mutable_values()->assign(reinterpret_cast<const char*>(w),
                                     static_cast<size_t>(sent));
    }
  }
  bytes_pulled_ += sent;
  // Includes the wait for min_version: how long pulls are held.
  metrics_->pull_latency_seconds().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->pull_bytes().Increment(static_cast<double>(sent));
  return grpc::Status::OK;
}

grpc::Status PsService::Pull(grpc::ServerContext* ctx, const PullRequest* req,
                             PullResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  // Proto3 cannot tell an unset generation from 0; readers that do not
  // care (the evaluator, the chief) send -1.
  PullEncoding enc;
  enc.dtype = req->dtype();
  enc.min_elements = req->codec_min_elements();
  enc.worker = req->worker_index();
  enc.reset = req->delta_reset();
  return DoPull(CallDeadline(ctx), req->layout_fingerprint(), req->min_version(),
                req->generation(), enc, resp);
}

void PsService::SetTableGauges() {
  const StoreStats st = store_->stats();
  for (size_t t = 0; t < st.sparse_tables.size(); ++t) {
    const prometheus::Labels labels = {{"table", std::to_string(t)}};
    absl::StatusOr<prometheus::Gauge*> rows = metrics_->AddGauge(
        "pscluster_sparse_table_rows", "Rows of a sparse embedding table this ps holds.",
        labels);
    absl::StatusOr<prometheus::Gauge*> bytes = metrics_->AddGauge(
        "pscluster_sparse_table_bytes",
        "Memory of the rows (values, optimizer slots, index) of a sparse embedding table "
        "this ps holds.",
        labels);
    if (rows.ok()) (*rows)->Set(static_cast<double>(st.sparse_tables[t].rows));
    if (bytes.ok()) (*bytes)->Set(static_cast<double>(st.sparse_tables[t].bytes));
  }
}

grpc::Status PsService::PullRows(grpc::ServerContext* ctx, const PullRowsRequest* req,
                                 PullRowsResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  const absl::Time start = absl::Now();
  std::vector<SparseRowsData> rows(req->rows_size());
  for (int t = 0; t < req->rows_size(); ++t) {
    rows[t].table = req->rows(t).table();
    rows[t].ids.assign(req->rows(t).ids().begin(), req->rows(t).ids().end());
  }
  int64_t version = 0, generation = 0;
  absl::Status s = store_->PullRows(req->layout_fingerprint(), req->min_version(),
                                    CallDeadline(ctx), &rows, &version, req->generation(),
                                    &generation);
  if (!s.ok()) return ToGrpcStatus(s);
  int64_t sent = 0;
  for (const SparseRowsData& r : rows) {
    SparseRowsToProto(r, resp->add_rows());
    sent += static_cast<int64_t>(r.values.size() * sizeof(float));
  }
  resp->set_version(version);
  resp->set_generation(generation);
  bytes_pulled_ += sent;
  metrics_->pull_latency_seconds().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->pull_bytes().Increment(static_cast<double>(sent));
  return grpc::Status::OK;
}

grpc::Status PsService::Refused(grpc::Status s) {
  ++pushes_rejected_;
  metrics_->pushes_rejected().Increment();
  return s;
}

bool PsService::GradientsAsSent(const PushRequest& req) {
  absl::StatusOr<Codec> codec = CodecOfDtype(req.dtype());
  return codec.ok() && *codec == Codec::kFloat32 && !req.shards_reversed();
}

std::vector<std::pair<int64_t, int64_t>> PsService::ReversedRuns(const PushRequest& req,
                                                                 uint64_t payload_bytes) {
  absl::StatusOr<Codec> codec = CodecOfDtype(req.dtype());
  if (!codec.ok() || *codec != Codec::kFloat32 || !req.shards_reversed()) return {};
  const std::vector<WirePiece> pieces = Pieces();
  std::vector<std::pair<int64_t, int64_t>> runs;
  int64_t offset = 0;
  for (const WirePiece& p : pieces) {
    runs.emplace_back(offset, p.size);
    offset += p.size;
  }
  if (static_cast<uint64_t>(offset) * sizeof(float) != payload_bytes) return {};
  std::reverse(runs.begin(), runs.end());
  return runs;
}

grpc::Status PsService::DoPush(const PushRequest& req, PushResponse* resp,
                               std::optional<bool> finite, std::vector<float>* owned) {
  const absl::string_view g =
      owned != nullptr ? absl::string_view(reinterpret_cast<const char*>(owned->data()),
                                           owned->size() * sizeof(float))
                       : absl::string_view(req.gradients());
  absl::StatusOr<Codec> codec = CodecOfDtype(req.dtype());
  if (!codec.ok()) {
    return Refused(InvalidArgument(absl::StrCat("gradients: ", codec.status().message())));
  }
  // The decoded gradient, when it is not used where it lies; what the
  // store leaves in its place goes back to the pool, however this ends.
  std::vector<float> decoded;
  struct GiveBack {
    PsService* service;
    std::vector<float>& buffer;
    ~GiveBack() { service->GiveBuffer(std::move(buffer)); }
  } give_back{this, decoded};
  const float* grads = reinterpret_cast<const float*>(g.data());
  int64_t num_floats = static_cast<int64_t>(g.size() / sizeof(float));
  // fp32 in the ps's shard order is used where it lies.
  const bool as_is = GradientsAsSent(req);
  const std::vector<WirePiece> pieces = as_is ? std::vector<WirePiece>() : Pieces();
  if (!pieces.empty()) {
    // Decoded shard by shard into fp32 (before Init there are no shards:
    // the store then says it is not initialised).
    decoded = TakeBuffer();
    num_floats = 0;
    for (const WirePiece& p : pieces) num_floats += p.size;
    decoded.resize(num_floats);
    CodecOptions o;
    o.codec = *codec;
    o.min_elements = req.codec_min_elements();
    if (absl::Status s = DecodePieces(o, pieces, g, decoded.data(), req.shards_reversed());
        !s.ok()) {
      return Refused(InvalidArgument(
          absl::StrCat("gradients encoded as ", req.dtype(), ": ", s.message())));
    }
    grads = decoded.data();
  } else {
    if (g.size() % sizeof(float) != 0) return Refused(BadBytes("gradients", g.size()));
    // Protobuf strings come from the allocator, 16-byte aligned in
    // practice; copy only if not.
    if (reinterpret_cast<uintptr_t>(g.data()) % alignof(float) != 0) {
      decoded.resize(g.size() / sizeof(float));
      std::memcpy(decoded.data(), g.data(), g.size());
      grads = decoded.data();
    }
  }
  PushArgs a;
  a.layout_fingerprint = req.layout_fingerprint();
  a.worker = req.worker_index();
  a.version = req.version();
  a.request_id = req.request_id();
  a.num_examples = req.num_examples();
  if (req.has_chunk()) a.chunk = req.chunk();
  a.gradients = grads;
  a.num_floats = num_floats;
  a.generation = req.generation();
  if (grads == decoded.data()) a.owned = &decoded;
  if (as_is && owned != nullptr) a.owned = owned;
  if (as_is) a.finite = finite;
  std::vector<SparseRowsData> sparse(req.sparse_size());
  for (int t = 0; t < req.sparse_size(); ++t) {
    if (absl::Status s = SparseRowsFromProto(req.sparse(t), &sparse[t]); !s.ok()) {
      return Refused(ToGrpcStatus(s));
    }
  }
  if (!sparse.empty()) a.sparse = &sparse;
  if (std::shared_ptr<Replicator> replicator = CurrentReplicator();
      replicator != nullptr && replicator->replaced()) {
    return Replaced();
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<PushResult> r = store_->Push(a);
  if (!r.ok()) {
    // Not valid (shape, NaN/Inf, worker, version, layout): refused. Another
    // generation (a restore) or a store not initialised is not the push's
    // fault.
    if (absl::IsInvalidArgument(r.status()) || absl::IsFailedPrecondition(r.status())) {
      return Refused(ToGrpcStatus(r.status()));
    }
    return ToGrpcStatus(r.status());
  }
  // Async: applied, so answered once the backups hold it (sync: taken into
  // a step, whose result the worker pulls).
  if (r->applied && !store_->is_sync()) {
    if (grpc::Status w = AwaitReplicated(r->version, absl::Now() + absl::Seconds(30));
        !w.ok()) {
      return w;
    }
  }
  bytes_pushed_ += static_cast<int64_t>(g.size());
  metrics_->push_latency_seconds().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->push_bytes().Increment(static_cast<double>(g.size()));
  if (r->applied) metrics_->gradient_staleness().Observe(static_cast<double>(r->staleness));
  metrics_->model_version().Set(static_cast<double>(r->version));
  if (!r->applied) metrics_->stale_gradients_dropped().Increment();
  if (!sparse.empty() && r->version % kTableGaugeEvery == 0) SetTableGauges();
  resp->set_applied(r->applied);
  resp->set_version(r->version);
  resp->set_staleness(r->staleness);
  return grpc::Status::OK;
}

grpc::Status PsService::Push(grpc::ServerContext* ctx, const PushRequest* req,
                             PushResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  return DoPush(*req, resp);
}

grpc::Status PsService::PushPull(grpc::ServerContext* ctx, const PushRequest* req,
                                 PushPullResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  return DoPushPull(*req, CallDeadline(ctx), resp);
}

grpc::Status PsService::DoPushPull(const PushRequest& req, absl::Time deadline,
                                   PushPullResponse* resp, DataPlaneCall* call) {
  // Sync pulls the step after the pushed one, which must exist (a resent
  // push is answered from memory before its version is looked at).
  if (req.version() == std::numeric_limits<int64_t>::max()) {
    return Refused(InvalidArgument(absl::StrCat("version ", req.version(), " is out of range")));
  }
  grpc::Status s = DoPush(req, resp->mutable_push(),
                          call != nullptr ? call->gradients_finite : std::nullopt,
                          call != nullptr ? call->gradients : nullptr);
  if (!s.ok()) return s;
  ParameterStore::SharedValues* weights = call != nullptr ? &call->weights : nullptr;
  PullEncoding enc;
  enc.dtype = req.pull_dtype();
  enc.min_elements = req.codec_min_elements();
  enc.worker = req.worker_index();
  enc.base = req.pull_base();
  if (!store_->is_sync()) {
    s = DoPull(deadline, req.layout_fingerprint(), 0, req.generation(), enc,
               resp->mutable_pull(), weights);
    if (s.ok() && resp->push().applied()) NoteStepAsPrimary(resp->push().version());
    return s;
  }
  // Sync: the weights of the step this gradient feeds; by then that step
  // is decided, and with it whether the gradient was one of its members.
  s = DoPull(deadline, req.layout_fingerprint(), req.version() + 1, req.generation(), enc,
             resp->mutable_pull(), weights);
  if (!s.ok()) return s;
  if (resp->push().applied() &&
      !store_->StepOutcome(req.worker_index(), req.version()).value_or(true)) {
    resp->mutable_push()->set_applied(false);  // left out of its step
    metrics_->stale_gradients_dropped().Increment();
  }
  NoteStepAsPrimary(req.version() + 1);
  return grpc::Status::OK;
}

void PsService::NoteStepAsPrimary(int64_t version) {
  int64_t from = promoted_from_.load(std::memory_order_relaxed);
  if (from < 0 || version <= from || !promoted_from_.compare_exchange_strong(from, -1)) return;
  spdlog::info(
      "promoted to primary at version {}: the first update since is applied and answered "
      "(version {}), {:.0f} ms after the promotion",
      from, version, absl::ToDoubleMilliseconds(absl::Now() - promoted_at_));
}

grpc::Status PsService::GetStats(grpc::ServerContext* ctx, const PsStatsRequest*,
                                 PsStatsResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  StoreStats s = store_->stats();
  resp->set_version(s.version);
  resp->set_pushes_applied(s.pushes_applied);
  resp->set_pushes_dropped_stale(s.pushes_dropped_stale);
  resp->set_pushes_rejected(pushes_rejected_.load());
  resp->set_steps_torn(s.steps_torn);
  resp->set_applied_digest(s.applied_digest);
  resp->set_pushes_duplicate(s.pushes_duplicate);
  resp->set_steps_applied(s.steps_applied);
  resp->set_staleness_sum(s.staleness_sum);
  resp->set_staleness_max(s.staleness_max);
  resp->set_data_port(data_port_.load());
  {
    absl::MutexLock lock(&shards_mu_);
    for (int port : backup_ports_) resp->add_backup_ports(port);
    if (!backup_ports_.empty()) resp->set_backup_port(backup_ports_.front());
  }
  resp->set_primary_term(s.primary_term);
  resp->set_bytes_pulled(bytes_pulled_.load());
  resp->set_bytes_pushed(bytes_pushed_.load());
  resp->set_generation(s.generation);
  resp->set_initialized(s.initialized);
  resp->set_incarnation(incarnation_);
  resp->set_steps_skipped_nonfinite(s.steps_skipped_nonfinite);
  int64_t sparse_bytes = 0;
  for (const SparseTableStats& t : s.sparse_tables) sparse_bytes += t.bytes;
  resp->set_sparse_bytes(sparse_bytes);
  for (bool a : s.active_workers) resp->add_active_workers(a);
  resp->set_backup(s.backup);
  resp->set_decider_epoch(s.decider_epoch);
  resp->set_replicated_version(-1);
  if (std::shared_ptr<Replicator> replicator = CurrentReplicator(); replicator != nullptr) {
    const ReplicaStats r = UpdateReplicaMetrics(*replicator);
    resp->set_replicated_version(r.replicated_version);
    resp->set_backups_live(r.backups_live);
    resp->set_backups_set(r.backups_set);
    resp->set_bytes_replicated(r.bytes_sent);
    resp->set_bytes_replicated_data_plane(r.bytes_sent_data_plane);
  }
  return grpc::Status::OK;
}

grpc::Status PsService::SetWorkers(grpc::ServerContext* ctx, const SetWorkersRequest* req,
                                   SetWorkersResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  std::vector<bool> active(req->active().begin(), req->active().end());
  absl::Status s = store_->SetActiveWorkers(req->layout_fingerprint(), active);
  if (!s.ok()) return ToGrpcStatus(s);
  resp->set_version(store_->stats().version);
  return grpc::Status::OK;
}

grpc::Status PsService::Snapshot(grpc::ServerContext* ctx, const SnapshotRequest* req,
                                 ShardState* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  switch (req->part()) {
    case SnapshotRequest::CAPTURE: {
      auto captured = std::make_unique<CapturedState>();
      if (absl::Status s = Capture(req->layout_fingerprint(), captured.get()); !s.ok()) {
        return ToGrpcStatus(s);
      }
      StateHeader(captured->fingerprint, captured->store, resp);
      absl::MutexLock lock(&captured_mu_);
      captured_ = std::move(captured);  // an older capture nobody fetched is dropped
      return grpc::Status::OK;
    }
    case SnapshotRequest::CAPTURED: {
      std::unique_ptr<CapturedState> captured;
      {
        absl::MutexLock lock(&captured_mu_);
        captured = std::move(captured_);
      }
      if (captured == nullptr) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "no captured snapshot: none was asked for since this ps started, "
                            "or it was fetched already");
      }
      if (captured->fingerprint != req->layout_fingerprint()) {
        return InvalidArgument(absl::StrCat("the captured snapshot is of layout ",
                                            captured->fingerprint, ", not ",
                                            req->layout_fingerprint()));
      }
      CapturedToState(*captured, resp);
      return grpc::Status::OK;
    }
    case SnapshotRequest::RECENT_CHUNKS: {
      StoreSnapshot recent;
      if (absl::Status s = store_->RecentChunksOf(req->layout_fingerprint(), &recent); !s.ok()) {
        return ToGrpcStatus(s);
      }
      StateHeader(req->layout_fingerprint(), recent, resp);
      return grpc::Status::OK;
    }
    default:
      return ToGrpcStatus(StateOf(req->layout_fingerprint(), resp));
  }
}

grpc::Status PsService::Restore(grpc::ServerContext* ctx, const RestoreRequest* req,
                                RestoreResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  const ShardState& state = req->state();
  absl::StatusOr<StoreSnapshot> snap = StoreSnapshotFromState(state);
  if (!snap.ok()) return ToGrpcStatus(snap.status());
  if (state.layout_fingerprint() != req->init().layout_fingerprint()) {
    return InvalidArgument(absl::StrCat("the state's layout ", state.layout_fingerprint(),
                                        " differs from the configuration's ",
                                        req->init().layout_fingerprint()));
  }
  absl::StatusOr<StoreConfig> c = StoreConfigFromInit(
      req->init(), static_cast<int64_t>(snap->values.size()), options_.step_role);
  if (!c.ok()) return ToGrpcStatus(c.status());
  // A seed's fencing (a primary, a higher term, a newer generation refuse
  // it) is the store's, under the lock it restores with.
  if (req->as_backup()) c->replica = ReplicaRole::kBackup;
  if (req->continues()) {
    // Only a restarted (empty) ps takes up where its backup left off: an
    // initialised one has state of its own that it may have answered for.
    if (req->as_backup() || store_->stats().initialized) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          req->as_backup() ? "a backup's seed does not continue a primary"
                                           : "this ps is initialised; only a restarted (empty) ps "
                                             "continues from its backup's state");
    }
  }
  if (grpc::Status s = CheckShards(state.shards()); !s.ok()) return s;
  if (grpc::Status s = CheckShards(req->init().shards()); !s.ok()) return s;
  absl::Status s = store_->Restore(
      *c, *snap, req->continues() ? RestoreKind::kContinue : RestoreKind::kRollback);
  if (!s.ok()) return ToGrpcStatus(s);
  {
    absl::MutexLock lock(&shards_mu_);
    shards_.assign(req->init().shards().begin(), req->init().shards().end());
    config_ = req->init();
    config_.clear_values();
  }
  metrics_->model_version().Set(static_cast<double>(snap->version));
  resp->set_version(snap->version);
  return grpc::Status::OK;
}

grpc::Status PsService::CommitStep(grpc::ServerContext* ctx, const StepCommitRequest* req,
                                   StepCommitResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  return DoCommitStep(*req, resp);
}

namespace {

StepDecision DecisionFromRequest(const StepCommitRequest& req) {
  StepDecision d;
  d.layout_fingerprint = req.layout_fingerprint();
  d.generation = req.generation();
  d.version = req.version();
  d.members.assign(req.members().begin(), req.members().end());
  d.skip = req.skip();
  d.decider_epoch = req.decider_epoch();
  return d;
}

}  // namespace

grpc::Status PsService::DoCommitStep(const StepCommitRequest& req, StepCommitResponse* resp) {
  absl::Status s = store_->Commit(req.layout_fingerprint(), DecisionFromRequest(req));
  if (!s.ok()) return ToGrpcStatus(s);
  resp->set_version(store_->stats().version);
  return grpc::Status::OK;
}

}  // namespace pscluster

namespace pscluster {

absl::StatusOr<RestoreRequest> PsService::SeedRequest() {
  RestoreRequest req;
  {
    absl::MutexLock lock(&shards_mu_);
    *req.mutable_init() = config_;
  }
  if (absl::Status s = StateOf(req.init().layout_fingerprint(), req.mutable_state()); !s.ok()) {
    return s;
  }
  return req;
}

grpc::Status PsService::AwaitReplicated(int64_t version, absl::Time deadline) {
  const std::shared_ptr<Replicator> replicator = CurrentReplicator();
  if (replicator == nullptr) return grpc::Status::OK;
  const bool held = replicator->WaitReplicated(version, deadline);
  UpdateReplicaMetrics(*replicator);
  // Demoted meanwhile (replaced): what it held is not the primary's.
  if (replicator->replaced() || store_->stats().backup) return Replaced();
  if (held) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                      absl::StrCat("the backups did not confirm version ", version,
                                   " before the call's deadline"));
}

grpc::Status PsService::Replicate(grpc::ServerContext* ctx, const ReplicateRequest* req,
                                  ReplicateResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  return ApplyRecords(*req, nullptr, resp);
}

grpc::Status PsService::DoReplicate(const ReplicateRequest& req, absl::string_view payload,
                                    ReplicateResponse* resp) {
  uint64_t total = 0;
  for (const AppliedUpdateRecord& r : req.updates()) {
    if (!r.gradient().empty() || r.payload_bytes() > payload.size() - total) {
      return grpc::Status(grpc::INVALID_ARGUMENT,
                          absl::StrCat("a replicated record's gradient must be ",
                                       "payload_bytes of the payload (", payload.size(),
                                       " bytes, ", total, " taken)"));
    }
    total += r.payload_bytes();
  }
  if (total != payload.size()) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        absl::StrCat("the records claim ", total, " bytes of a payload of ",
                                     payload.size()));
  }
  return ApplyRecords(req, &payload, resp);
}

grpc::Status PsService::ApplyRecords(const ReplicateRequest& req, const absl::string_view* payload,
                                     ReplicateResponse* resp) {
  if (const StoreStats st = store_->stats(); st.initialized && !st.backup) {
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                        "this ps is the primary of its store; it takes no replicated updates");
  }
  uint64_t at = 0;
  for (const AppliedUpdateRecord& r : req.updates()) {
    AppliedUpdate u;
    u.generation = r.generation();
    u.version = r.version();
    const absl::string_view gradient =
        payload != nullptr ? payload->substr(at, r.payload_bytes()) : absl::string_view(r.gradient());
    at += payload != nullptr ? r.payload_bytes() : 0;
    if (absl::Status s = BytesToFloats(gradient, "gradient", &u.gradient); !s.ok()) {
      return ToGrpcStatus(s);
    }
    u.skipped = r.skipped();
    u.members.assign(r.members().begin(), r.members().end());
    u.member_request_ids.assign(r.member_request_ids().begin(), r.member_request_ids().end());
    u.member_chunks.assign(r.member_chunks().begin(), r.member_chunks().end());
    u.worker = r.worker();
    u.request_id = r.request_id();
    u.staleness = r.staleness();
    u.primary_term = r.primary_term();
    for (const SparseRows& rows : r.sparse()) {
      if (absl::Status s = SparseRowsFromProto(rows, &u.sparse.emplace_back()); !s.ok()) {
        return ToGrpcStatus(s);
      }
    }
    if (absl::Status s = store_->ApplyReplicated(req.layout_fingerprint(), u); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  const int64_t version = store_->stats().version;
  metrics_->model_version().Set(static_cast<double>(version));
  resp->set_version(version);
  return grpc::Status::OK;
}

grpc::Status PsService::Promote(grpc::ServerContext* ctx, const PromoteRequest* req,
                                PromoteResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  std::optional<StepDecision> in_flight;
  if (req->has_in_flight()) in_flight = DecisionFromRequest(req->in_flight());
  absl::Status s = store_->Promote(req->layout_fingerprint(), req->generation(),
                                   req->decides() ? StepRole::kDecide : StepRole::kFollow,
                                   in_flight, req->decider_epoch(), req->primary_term());
  if (!s.ok()) return ToGrpcStatus(s);
  const int64_t version = store_->stats().version;
  spdlog::warn("promoted to primary of its shards at version {} (generation {}, primary term "
               "{}){}: its primary was lost, or handed them back",
               version, req->generation(), store_->stats().primary_term,
               !req->decides()       ? ""
               : in_flight.has_value() ? ", deciding the sync steps from the lost decider's "
                                         "decision in flight on"
                                       : ", deciding the sync steps");
  promoted_at_ = absl::Now();
  promoted_from_ = version;
  resp->set_version(version);
  return grpc::Status::OK;
}

grpc::Status PsService::GetDecision(grpc::ServerContext* ctx, const GetDecisionRequest* req,
                                    StepCommitRequest* resp) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  if (req->fence_below() > 0) {
    absl::Status s = store_->FenceDecisions(req->layout_fingerprint(), req->fence_below());
    if (!s.ok()) return ToGrpcStatus(s);
    spdlog::warn("takes step decisions of decider epoch {} and above from now on: a backup is "
                 "promoted to decide in place of the decider",
                 req->fence_below());
  }
  absl::StatusOr<StepDecision> d = store_->DecisionFor(req->layout_fingerprint(), req->version());
  if (!d.ok()) return ToGrpcStatus(d.status());
  resp->set_layout_fingerprint(d->layout_fingerprint);
  resp->set_generation(d->generation);
  resp->set_version(d->version);
  for (bool m : d->members) resp->add_members(m);
  resp->set_skip(d->skip);
  resp->set_decider_epoch(d->decider_epoch);
  return grpc::Status::OK;
}

grpc::Status PsService::SetBackups(grpc::ServerContext* ctx, const SetBackupsRequest* req,
                                   SetBackupsResponse*) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  const StoreStats st = store_->stats();
  if (st.backup) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this ps is a backup; only a primary keeps backups");
  }
  for (const std::string& a : req->addresses()) {
    if (a.empty()) return InvalidArgument("a backup's address is empty");
  }
  absl::MutexLock lock(&replicator_mu_);
  if (replicator_ != nullptr && replicator_->replaced()) {
    // Fencing: it must not take pushes again; Demote makes it a backup.
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this ps was replaced by its backup: it is demoted, not given backups");
  }
  if (replicator_ != nullptr) replicator_->Stop();  // gives the listener back
  replicator_.reset();
  if (req->addresses_size() > 0) {
    replicator_ = std::make_shared<Replicator>(
        store_, req->layout_fingerprint(), [this] { return SeedRequest(); },
        std::vector<std::string>(req->addresses().begin(), req->addresses().end()),
        options_.replicator);
  }
  return grpc::Status::OK;
}

grpc::Status PsService::SetFollowers(grpc::ServerContext* ctx, const SetFollowersRequest* req,
                                     SetFollowersResponse*) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  if (!followers_handler_) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this ps does not decide sync steps for other ps");
  }
  const StoreStats st = store_->stats();
  if (st.initialized && req->layout_fingerprint() != st.layout_fingerprint) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "SetFollowers for another layout than this ps holds");
  }
  if (st.initialized && !st.decides) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this store does not decide sync steps");
  }
  for (const std::string& a : req->addresses()) {
    if (a.empty()) return InvalidArgument("a follower's address is empty");
  }
  return ToGrpcStatus(followers_handler_(
      std::vector<std::string>(req->addresses().begin(), req->addresses().end())));
}

grpc::Status PsService::Replaced() {
  // Unavailable: the worker asks the chief where the shards are now.
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "this ps was replaced: its backup serves its shards now");
}

grpc::Status PsService::Demote(grpc::ServerContext* ctx, const DemoteRequest* req,
                               DemoteResponse*) {
  if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
  // A backup first: the answers the replicator still holds are released
  // by its Stop, and must fail (AwaitReplicated), not go out as applied.
  absl::Status s = store_->Demote(req->layout_fingerprint());
  if (!s.ok()) return ToGrpcStatus(s);
  {
    absl::MutexLock lock(&replicator_mu_);
    if (replicator_ != nullptr) replicator_->Stop();  // gives the listener back
    replicator_.reset();
  }
  spdlog::warn("demoted: a backup promoted in this store's place serves its shards; it is a "
               "backup from now on, to be seeded");
  return grpc::Status::OK;
}

}  // namespace pscluster
