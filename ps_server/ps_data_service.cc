#include "ps_server/ps_data_service.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/rpc.h"
#include "common/security.h"
#include "common/status_macros.h"
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
                      absl::StrCat(what, " has ", n, " bytes, not a whole number of float32s"));
}

// The codec a request's dtype names: empty and "float32" (older workers)
// mean fp32.
absl::StatusOr<Codec> CodecOfDtype(const std::string& dtype) {
  if (dtype.empty() || dtype == "float32") return Codec::kFloat32;
  return ParseCodec(dtype);
}

}  // namespace

std::vector<float> PsDataService::TakeBuffer() {
  absl::MutexLock lock(&buffers_mu_);
  if (buffers_.empty()) return {};
  std::vector<float> b = std::move(buffers_.back());
  buffers_.pop_back();
  return b;
}

void PsDataService::GiveBuffer(std::vector<float> buffer) {
  if (buffer.capacity() == 0) return;
  absl::MutexLock lock(&buffers_mu_);
  if (buffers_.size() < kKeptBuffers) buffers_.push_back(std::move(buffer));
}

PsDataService::ChangeState* PsDataService::Changes(int worker) {
  absl::MutexLock lock(&changes_mu_);
  std::unique_ptr<ChangeState>& st = changes_[worker];
  if (st == nullptr) st = std::make_unique<ChangeState>();
  return st.get();
}

bool PsDataService::EncodeChange(const PullEncoding& enc, const CodecOptions& codec, const float* w,
                                 int64_t n, PullResponse* resp) {
  const std::vector<WirePiece> pieces = shard_->Pieces();
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

grpc::Status PsDataService::DoPull(absl::Time deadline, uint64_t fingerprint, int64_t min_version,
                                   int64_t generation, const PullEncoding& enc, PullResponse* resp,
                                   ParameterStore::SharedValues* weights) {
  absl::StatusOr<Codec> codec = CodecOfDtype(enc.dtype);
  if (!codec.ok()) return InvalidArgumentStatus(absl::StrCat("pull: ", codec.status().message()));
  deadline = std::min(deadline, absl::Now() + kMaxPullWait);
  int64_t version = 0;
  int64_t current_generation = 0;
  const absl::Time start = absl::Now();
  // The store's own buffer, read (encoded or copied) without its lock.
  ParameterStore::SharedValues values;
  absl::Status s = store_->PullShared(fingerprint, min_version, deadline, &values, &version,
                                      generation, &current_generation);
  if (!s.ok()) return ToGrpcStatus(s);
  if (grpc::Status r = shard_->AwaitReplicated(version, deadline); !r.ok()) return r;
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
    EncodePieces(o, shard_->Pieces(), w, &bytes);
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
      resp->mutable_values()->assign(reinterpret_cast<const char*>(w), static_cast<size_t>(sent));
    }
  }
  shard_->AddBytesPulled(sent);
  // Includes the wait for min_version: how long pulls are held.
  metrics_->pull_latency_seconds().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->pull_bytes().Increment(static_cast<double>(sent));
  return grpc::Status::OK;
}

grpc::Status PsDataService::Pull(grpc::ServerContext* ctx, const PullRequest* req,
                                 PullResponse* resp) {
  // -1: a reader that is not a worker (a worker's first pull, the
  // evaluator's, the chief's); a worker's index must be its own.
  if (grpc::Status s = req->worker_index() >= 0
                           ? CheckAuth(ctx, Rpc::kPsPull, Role::kWorker, req->worker_index())
                           : CheckAuth(ctx, Rpc::kPsPull);
      !s.ok()) {
    return s;
  }
  // Proto3 cannot tell an unset generation from 0; readers that do not
  // care (the evaluator, the chief) send -1.
  PullEncoding enc;
  enc.dtype = req->dtype();
  enc.min_elements = req->codec_min_elements();
  enc.worker = req->worker_index();
  enc.reset = req->delta_reset();
  return DoPull(CallDeadline(ctx), req->layout_fingerprint(), req->min_version(), req->generation(),
                enc, resp);
}

void PsDataService::SetTableGauges() {
  const StoreStats st = store_->stats();
  for (size_t t = 0; t < st.sparse_tables.size(); ++t) {
    const prometheus::Labels labels = {{"table", std::to_string(t)}};
    absl::StatusOr<prometheus::Gauge*> rows = metrics_->AddGauge(
        "pscluster_sparse_table_rows", "Rows of a sparse embedding table this ps holds.", labels);
    absl::StatusOr<prometheus::Gauge*> bytes = metrics_->AddGauge(
        "pscluster_sparse_table_bytes",
        "Memory of the rows (values, optimizer slots, index) of a sparse embedding table "
        "this ps holds.",
        labels);
    if (rows.ok()) (*rows)->Set(static_cast<double>(st.sparse_tables[t].rows));
    if (bytes.ok()) (*bytes)->Set(static_cast<double>(st.sparse_tables[t].bytes));
  }
}

grpc::Status PsDataService::PullRows(grpc::ServerContext* ctx, const PullRowsRequest* req,
                                     PullRowsResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kPsPullRows); !s.ok()) return s;
  const absl::Time start = absl::Now();
  int64_t version = 0, generation = 0;
  absl::Status s =
      ReadRows(req->layout_fingerprint(), req->rows(), req->min_version(), CallDeadline(ctx),
               req->generation(), resp->mutable_rows(), &version, &generation);
  if (!s.ok()) return ToGrpcStatus(s);
  resp->set_version(version);
  resp->set_generation(generation);
  metrics_->pull_latency_seconds().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  return grpc::Status::OK;
}

absl::Status PsDataService::ReadRows(uint64_t layout_fingerprint,
                                     const google::protobuf::RepeatedPtrField<SparseRows>& ids,
                                     int64_t min_version, absl::Time deadline, int64_t generation,
                                     google::protobuf::RepeatedPtrField<SparseRows>* out,
                                     int64_t* version, int64_t* out_generation) {
  std::vector<SparseRowsData> rows(ids.size());
  for (int t = 0; t < ids.size(); ++t) {
    rows[t].table = ids[t].table();
    rows[t].ids.assign(ids[t].ids().begin(), ids[t].ids().end());
  }
  PSCLUSTER_RETURN_IF_ERROR(store_->PullRows(layout_fingerprint, min_version, deadline, &rows,
                                             version, generation, out_generation));
  int64_t sent = 0;
  for (const SparseRowsData& r : rows) {
    SparseRowsToProto(r, out->Add());
    sent += static_cast<int64_t>(r.values.size() * sizeof(float));
  }
  shard_->AddBytesPulled(sent);
  metrics_->pull_bytes().Increment(static_cast<double>(sent));
  return absl::OkStatus();
}

bool PsDataService::GradientsAsSent(const PushRequest& req) {
  absl::StatusOr<Codec> codec = CodecOfDtype(req.dtype());
  return codec.ok() && *codec == Codec::kFloat32 && !req.shards_reversed();
}

std::vector<std::pair<int64_t, int64_t>> PsDataService::ReversedRuns(const PushRequest& req,
                                                                     uint64_t payload_bytes) {
  absl::StatusOr<Codec> codec = CodecOfDtype(req.dtype());
  if (!codec.ok() || *codec != Codec::kFloat32 || !req.shards_reversed()) return {};
  const std::vector<WirePiece> pieces = shard_->Pieces();
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

grpc::Status PsDataService::DoPush(const PushRequest& req, PushResponse* resp,
                                   std::optional<bool> finite, std::vector<float>* owned) {
  // A push from its wire form to the store and back: decode (as sent, by
  // shard, or reordered), the sparse rows, the store, the backups, the
  // counters. 103 lines in the order a push goes through them.
  const absl::string_view g = owned != nullptr
                                  ? absl::string_view(reinterpret_cast<const char*>(owned->data()),
                                                      owned->size() * sizeof(float))
                                  : absl::string_view(req.gradients());
  absl::StatusOr<Codec> codec = CodecOfDtype(req.dtype());
  if (!codec.ok()) {
    return shard_->Refused(
        InvalidArgumentStatus(absl::StrCat("gradients: ", codec.status().message())));
  }
  // The decoded gradient, when it is not used where it lies; what the
  // store leaves in its place goes back to the pool, however this ends.
  std::vector<float> decoded;
  struct GiveBack {
    PsDataService* service;
    std::vector<float>& buffer;
    ~GiveBack() { service->GiveBuffer(std::move(buffer)); }
  } give_back{this, decoded};
  const float* grads = reinterpret_cast<const float*>(g.data());
  int64_t num_floats = static_cast<int64_t>(g.size() / sizeof(float));
  // fp32 in the ps's shard order is used where it lies.
  const bool as_is = GradientsAsSent(req);
  const std::vector<WirePiece> pieces = as_is ? std::vector<WirePiece>() : shard_->Pieces();
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
      return shard_->Refused(InvalidArgumentStatus(
          absl::StrCat("gradients encoded as ", req.dtype(), ": ", s.message())));
    }
    grads = decoded.data();
  } else {
    if (g.size() % sizeof(float) != 0) return shard_->Refused(BadBytes("gradients", g.size()));
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
      return shard_->Refused(ToGrpcStatus(s));
    }
  }
  if (!sparse.empty()) a.sparse = &sparse;
  if (std::shared_ptr<Replicator> replicator = shard_->CurrentReplicator();
      replicator != nullptr && replicator->replaced()) {
    return PsShard::Replaced();
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<PushResult> r = store_->Push(a);
  if (!r.ok()) {
    // Not valid (shape, NaN/Inf, worker, version, layout): refused. Another
    // generation (a restore) or a store not initialised is not the push's
    // fault.
    if (absl::IsInvalidArgument(r.status()) || absl::IsFailedPrecondition(r.status())) {
      return shard_->Refused(ToGrpcStatus(r.status()));
    }
    return ToGrpcStatus(r.status());
  }
  // Async: applied, so answered once the backups hold it (sync: taken into
  // a step, whose result the worker pulls).
  if (r->applied && !store_->is_sync()) {
    if (grpc::Status w = shard_->AwaitReplicated(r->version, absl::Now() + absl::Seconds(30));
        !w.ok()) {
      return w;
    }
  }
  shard_->AddBytesPushed(static_cast<int64_t>(g.size()));
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

grpc::Status PsDataService::Push(grpc::ServerContext* ctx, const PushRequest* req,
                                 PushResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kPsPush, Role::kWorker, req->worker_index()); !s.ok()) {
    return s;
  }
  return DoPush(*req, resp);
}

grpc::Status PsDataService::PushPull(grpc::ServerContext* ctx, const PushRequest* req,
                                     PushPullResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kPsPushPull, Role::kWorker, req->worker_index());
      !s.ok()) {
    return s;
  }
  return DoPushPull(*req, CallDeadline(ctx), resp);
}

grpc::Status PsDataService::DoPushPull(const PushRequest& req, absl::Time deadline,
                                       PushPullResponse* resp, DataPlaneCall* call) {
  // Sync pulls the step after the pushed one, which must exist (a resent
  // push is answered from memory before its version is looked at).
  if (req.version() == std::numeric_limits<int64_t>::max()) {
    return shard_->Refused(
        InvalidArgumentStatus(absl::StrCat("version ", req.version(), " is out of range")));
  }
  grpc::Status s =
      DoPush(req, resp->mutable_push(), call != nullptr ? call->gradients_finite : std::nullopt,
             call != nullptr ? call->gradients : nullptr);
  if (!s.ok()) return s;
  ParameterStore::SharedValues* weights = call != nullptr ? &call->weights : nullptr;
  PullEncoding enc;
  enc.dtype = req.pull_dtype();
  enc.min_elements = req.codec_min_elements();
  enc.worker = req.worker_index();
  enc.base = req.pull_base();
  if (!store_->is_sync()) {
    s = DoPull(deadline, req.layout_fingerprint(), 0, req.generation(), enc, resp->mutable_pull(),
               weights);
    if (s.ok() && resp->push().applied()) shard_->NoteStepAsPrimary(resp->push().version());
    if (s.ok()) PullNextRows(req, 0, deadline, resp);
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
  shard_->NoteStepAsPrimary(req.version() + 1);
  PullNextRows(req, req.version() + 1, deadline, resp);
  return grpc::Status::OK;
}

void PsDataService::PullNextRows(const PushRequest& req, int64_t min_version, absl::Time deadline,
                                 PushPullResponse* resp) {
  resp->clear_next_rows();
  if (req.next_rows_size() == 0) return;
  int64_t version = 0;
  if (!ReadRows(req.layout_fingerprint(), req.next_rows(), min_version, deadline, req.generation(),
                resp->mutable_next_rows(), &version)
           .ok()) {
    resp->clear_next_rows();  // the push stands; the worker pulls the rows itself
  }
}

grpc::Status PsDataService::GetStats(grpc::ServerContext* ctx, const PsStatsRequest*,
                                     PsStatsResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kPsGetStats); !s.ok()) return s;
  shard_->Stats(resp);
  return grpc::Status::OK;
}

}  // namespace pscluster
