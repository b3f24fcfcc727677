#include "ps_server/ps_service.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/rpc.h"

namespace pscluster {
namespace {

// A pull without a client deadline still ends, so a lost worker cannot pin
// a server thread forever.
constexpr absl::Duration kMaxPullWait = absl::Minutes(10);

grpc::Status BadBytes(const char* what, size_t n) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      absl::StrCat(what, " has ", n,
                                   " bytes, not a whole number of float32s"));
}

}  // namespace

grpc::Status PsService::Init(grpc::ServerContext*, const InitRequest* req,
                             InitResponse* resp) {
  if (req->values().size() % sizeof(float) != 0) return BadBytes("values", req->values().size());
  StoreConfig c;
  c.layout_fingerprint = req->layout_fingerprint();
  c.num_floats = static_cast<int64_t>(req->values().size() / sizeof(float));
  int64_t expected = 0;
  for (const ShardSpec& s : req->shards()) expected += s.size();
  if (expected != c.num_floats) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("shards add up to ", expected,
                                     " floats but values hold ", c.num_floats));
  }
  switch (req->mode()) {
    case SYNC: c.rule = UpdateRule::kSync; break;
    case ASYNC: c.rule = UpdateRule::kAsync; break;
    default:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("unknown update mode ", req->mode()));
  }
  c.num_workers = req->num_workers();
  c.replicas_to_aggregate = req->replicas_to_aggregate();
  c.max_staleness = req->max_staleness();
  const OptimizerConfig& o = req->optimizer();
  c.optimizer.name = o.name();
  c.optimizer.learning_rate = o.learning_rate();
  c.optimizer.momentum = o.momentum();
  c.optimizer.beta1 = o.beta1();
  c.optimizer.beta2 = o.beta2();
  c.optimizer.epsilon = o.epsilon();
  c.optimizer.decay_rate = o.decay_steps() > 0 ? o.decay_rate() : 1.0f;
  c.optimizer.decay_steps = o.decay_steps();
  // The bytes may not be float-aligned inside the protobuf string.
  std::vector<float> values(c.num_floats);
  std::memcpy(values.data(), req->values().data(), req->values().size());
  bool already = false;
  absl::Status s = store_->Init(c, values.data(), &already);
  if (!s.ok()) return ToGrpcStatus(s);
  resp->set_already_initialized(already);
  resp->set_version(store_->stats().version);
  return grpc::Status::OK;
}

grpc::Status PsService::DoPull(grpc::ServerContext* ctx, uint64_t fingerprint,
                               int64_t min_version, PullResponse* resp) {
  absl::Time deadline = absl::Now() + kMaxPullWait;
  if (ctx != nullptr) {
    deadline = std::min(deadline, absl::FromChrono(ctx->deadline()));
  }
  int64_t version = 0;
  const absl::Time start = absl::Now();
  absl::Status s = store_->Pull(fingerprint, min_version, deadline,
                                resp->mutable_values(), &version);
  if (!s.ok()) return ToGrpcStatus(s);
  resp->set_version(version);
  bytes_pulled_ += static_cast<int64_t>(resp->values().size());
  // Includes the wait for min_version: how long pulls are held.
  metrics_->pull_latency_seconds().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->pull_bytes().Increment(static_cast<double>(resp->values().size()));
  return grpc::Status::OK;
}

grpc::Status PsService::Pull(grpc::ServerContext* ctx, const PullRequest* req,
                             PullResponse* resp) {
  return DoPull(ctx, req->layout_fingerprint(), req->min_version(), resp);
}

grpc::Status PsService::DoPush(const PushRequest& req, PushResponse* resp) {
  const std::string& g = req.gradients();
  if (g.size() % sizeof(float) != 0) return BadBytes("gradients", g.size());
  // Protobuf strings come from the allocator, 16-byte aligned in practice;
  // copy only if not.
  std::vector<float> copy;
  const float* grads = reinterpret_cast<const float*>(g.data());
  if (reinterpret_cast<uintptr_t>(g.data()) % alignof(float) != 0) {
    copy.resize(g.size() / sizeof(float));
    std::memcpy(copy.data(), g.data(), g.size());
    grads = copy.data();
  }
  PushArgs a;
  a.layout_fingerprint = req.layout_fingerprint();
  a.worker = req.worker_index();
  a.version = req.version();
  a.request_id = req.request_id();
  a.num_examples = req.num_examples();
  a.gradients = grads;
  a.num_floats = static_cast<int64_t>(g.size() / sizeof(float));
  a.last = req.last();
  const absl::Time start = absl::Now();
  absl::StatusOr<PushResult> r = store_->Push(a);
  if (!r.ok()) {
    if (absl::IsInvalidArgument(r.status()) || absl::IsFailedPrecondition(r.status())) {
      metrics_->pushes_rejected().Increment();
    }
    return ToGrpcStatus(r.status());
  }
  bytes_pushed_ += static_cast<int64_t>(g.size());
  metrics_->push_latency_seconds().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->push_bytes().Increment(static_cast<double>(g.size()));
  metrics_->gradient_staleness().Observe(static_cast<double>(r->staleness));
  metrics_->model_version().Set(static_cast<double>(r->version));
  if (!r->applied) metrics_->stale_gradients_dropped().Increment();
  resp->set_applied(r->applied);
  resp->set_version(r->version);
  return grpc::Status::OK;
}

grpc::Status PsService::Push(grpc::ServerContext*, const PushRequest* req,
                             PushResponse* resp) {
  return DoPush(*req, resp);
}

grpc::Status PsService::PushPull(grpc::ServerContext* ctx, const PushRequest* req,
                                 PushPullResponse* resp) {
  grpc::Status s = DoPush(*req, resp->mutable_push());
  if (!s.ok()) return s;
  // Sync: the weights of the step this gradient feeds. Async: the newest.
  return DoPull(ctx, req->layout_fingerprint(), req->version() + 1,
                resp->mutable_pull());
}

grpc::Status PsService::GetStats(grpc::ServerContext*, const PsStatsRequest*,
                                 PsStatsResponse* resp) {
  StoreStats s = store_->stats();
  resp->set_version(s.version);
  resp->set_pushes_applied(s.pushes_applied);
  resp->set_pushes_dropped_stale(s.pushes_dropped_stale);
  resp->set_pushes_rejected(s.pushes_rejected);
  resp->set_pushes_duplicate(s.pushes_duplicate);
  resp->set_steps_applied(s.steps_applied);
  resp->set_staleness_sum(s.staleness_sum);
  resp->set_bytes_pulled(bytes_pulled_.load());
  resp->set_bytes_pushed(bytes_pushed_.load());
  return grpc::Status::OK;
}

}  // namespace pscluster
