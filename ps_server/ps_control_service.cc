#include "ps_server/ps_control_service.h"

#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/security.h"
#include "spdlog/spdlog.h"
#include "update/store_state.h"

namespace pscluster {
namespace {

// A state's header, without its values: the layout, version, generation
// and recent chunks (the answer to CAPTURE and to RECENT_CHUNKS).
void StateHeader(uint64_t fingerprint, const StoreState& store, ShardState* out) {
  out->set_layout_fingerprint(fingerprint);
  out->set_version(store.version);
  out->set_generation(store.generation);
  out->mutable_recent_chunks()->Assign(store.recent_chunks.begin(), store.recent_chunks.end());
  out->set_recent_chunks_since(store.recent_chunks_since);
  out->mutable_pending_chunks()->Assign(store.pending_chunks.begin(), store.pending_chunks.end());
}

}  // namespace

grpc::Status PsControlService::Init(grpc::ServerContext* ctx, const InitRequest* req,
                                    InitResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kControlInit); !s.ok()) return s;
  std::vector<float> values;
  if (absl::Status s = BytesToFloats(req->values(), "values", &values); !s.ok()) {
    return ToGrpcStatus(s);
  }
  absl::StatusOr<StoreConfig> c =
      StoreConfigFromInit(*req, static_cast<int64_t>(values.size()), shard_->options().step_role);
  if (!c.ok()) return ToGrpcStatus(c.status());
  bool already = false;
  absl::Status s = store_->Init(*c, values.data(), &already);
  if (!s.ok()) return ToGrpcStatus(s);
  if (!already) shard_->SetHeld(*req);
  const StoreStats st = store_->stats();
  resp->set_already_initialized(already);
  resp->set_version(st.version);
  resp->set_generation(st.generation);
  return grpc::Status::OK;
}

grpc::Status PsControlService::SetWorkers(grpc::ServerContext* ctx, const SetWorkersRequest* req,
                                          SetWorkersResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kControlSetWorkers); !s.ok()) return s;
  std::vector<bool> active(req->active().begin(), req->active().end());
  absl::Status s = store_->SetActiveWorkers(req->layout_fingerprint(), active);
  if (!s.ok()) return ToGrpcStatus(s);
  resp->set_version(store_->stats().version);
  return grpc::Status::OK;
}

grpc::Status PsControlService::Snapshot(grpc::ServerContext* ctx, const SnapshotRequest* req,
                                        ShardState* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kControlSnapshot); !s.ok()) return s;
  switch (req->part()) {
    case SnapshotRequest::CAPTURE: {
      auto captured = std::make_unique<PsShard::CapturedState>();
      if (absl::Status s = shard_->Capture(req->layout_fingerprint(), captured.get()); !s.ok()) {
        return ToGrpcStatus(s);
      }
      StateHeader(captured->fingerprint, captured->store, resp);
      absl::MutexLock lock(&captured_mu_);
      captured_ = std::move(captured);  // an older capture nobody fetched is dropped
      return grpc::Status::OK;
    }
    case SnapshotRequest::CAPTURED: {
      std::unique_ptr<PsShard::CapturedState> captured;
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
        return InvalidArgumentStatus(absl::StrCat("the captured snapshot is of layout ",
                                                  captured->fingerprint, ", not ",
                                                  req->layout_fingerprint()));
      }
      PsShard::CapturedToState(*captured, resp);
      return grpc::Status::OK;
    }
    case SnapshotRequest::RECENT_CHUNKS: {
      StoreState recent;
      if (absl::Status s = store_->RecentChunksOf(req->layout_fingerprint(), &recent); !s.ok()) {
        return ToGrpcStatus(s);
      }
      StateHeader(req->layout_fingerprint(), recent, resp);
      return grpc::Status::OK;
    }
    default:
      return ToGrpcStatus(shard_->StateOf(req->layout_fingerprint(), resp));
  }
}

grpc::Status PsControlService::Restore(grpc::ServerContext* ctx, const RestoreRequest* req,
                                       RestoreResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kControlRestore); !s.ok()) return s;
  const ShardState& state = req->state();
  absl::StatusOr<StoreState> snap = StoreStateFromProto(state);
  if (!snap.ok()) return ToGrpcStatus(snap.status());
  if (state.layout_fingerprint() != req->init().layout_fingerprint()) {
    return InvalidArgumentStatus(absl::StrCat("the state's layout ", state.layout_fingerprint(),
                                              " differs from the configuration's ",
                                              req->init().layout_fingerprint()));
  }
  if (req->kept_size() > 0) {
    // A move's floats that stay here: taken from this store as it is
    // (the workers are paused), if it is what the chief took them from.
    if (!req->new_placement()) {
      return InvalidArgumentStatus("kept ranges come only with a new placement");
    }
    StoreState own;
    if (absl::Status s = store_->Snapshot(req->kept_layout(), &own); !s.ok()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("the floats to keep: ", s.message()));
    }
    if (own.version != req->kept_version()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("the floats to keep are of version ", req->kept_version(),
                                       "; this ps holds version ", own.version));
    }
    int64_t num_floats = 0;
    for (const ShardSpec& sh : req->init().shards()) num_floats += sh.size();
    if (absl::Status s = MergeKept(own, req->kept(), num_floats, &*snap); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  absl::StatusOr<StoreConfig> c = StoreConfigFromInit(
      req->init(), static_cast<int64_t>(snap->values.size()), shard_->options().step_role);
  if (!c.ok()) return ToGrpcStatus(c.status());
  // A seed's fencing (a primary, a higher term, a newer generation refuse
  // it) is the store's, under the lock it restores with.
  if (req->as_backup()) c->store_role = StoreRole::kBackup;
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
  if (req->new_placement() && shard_->options().exit_on_new_placement) {
    spdlog::error("exiting as a new placement's shards arrive (a test's fault)");
    std::_Exit(9);
  }
  if (!req->new_placement()) {
    if (grpc::Status s = shard_->CheckShards(state.shards()); !s.ok()) return s;
    if (grpc::Status s = shard_->CheckShards(req->init().shards()); !s.ok()) return s;
  }
  const int64_t version = snap->version;
  absl::Status s = store_->Restore(*c, *std::move(snap),
                                   req->new_placement() ? RestoreKind::kMove
                                   : req->continues()   ? RestoreKind::kContinue
                                                        : RestoreKind::kRollback);
  if (!s.ok()) return ToGrpcStatus(s);
  shard_->SetHeld(req->init());
  shard_->metrics()->model_version().Set(static_cast<double>(version));
  resp->set_version(version);
  return grpc::Status::OK;
}

grpc::Status PsControlService::CommitStep(grpc::ServerContext* ctx, const StepCommitRequest* req,
                                          StepCommitResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kControlCommitStep); !s.ok()) return s;
  return DoCommitStep(*req, resp);
}

grpc::Status PsControlService::DoCommitStep(const StepCommitRequest& req,
                                            StepCommitResponse* resp) {
  // A clipped step's norms are answered once the members' gradients are
  // here: well within the sender's 2 s deadline, or Unavailable (it asks
  // again).
  std::vector<double> norms;
  absl::Status s = store_->Commit(req.layout_fingerprint(), DecisionFromRequest(req), &norms,
                                  absl::Now() + absl::Seconds(1));
  if (!s.ok()) return ToGrpcStatus(s);
  resp->set_version(store_->stats().version);
  resp->mutable_clip_norms()->Assign(norms.begin(), norms.end());
  return grpc::Status::OK;
}

grpc::Status PsControlService::Replicate(grpc::ServerContext* ctx, const ReplicateRequest* req,
                                         ReplicateResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kControlReplicate); !s.ok()) return s;
  return ApplyRecords(*req, nullptr, resp);
}

grpc::Status PsControlService::DoReplicate(const ReplicateRequest& req, absl::string_view payload,
                                           ReplicateResponse* resp) {
  uint64_t total = 0;
  for (const AppliedUpdateRecord& r : req.updates()) {
    if (!r.gradient().empty() || r.payload_bytes() > payload.size() - total) {
      return grpc::Status(
          grpc::INVALID_ARGUMENT,
          absl::StrCat("a replicated record's gradient must be ", "payload_bytes of the payload (",
                       payload.size(), " bytes, ", total, " taken)"));
    }
    total += r.payload_bytes();
  }
  if (total != payload.size()) {
    return grpc::Status(
        grpc::INVALID_ARGUMENT,
        absl::StrCat("the records claim ", total, " bytes of a payload of ", payload.size()));
  }
  return ApplyRecords(req, &payload, resp);
}

grpc::Status PsControlService::ApplyRecords(const ReplicateRequest& req,
                                            const absl::string_view* payload,
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
    const absl::string_view gradient = payload != nullptr ? payload->substr(at, r.payload_bytes())
                                                          : absl::string_view(r.gradient());
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
    u.clip_scales.assign(r.clip_scales().begin(), r.clip_scales().end());
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
  shard_->metrics()->model_version().Set(static_cast<double>(version));
  resp->set_version(version);
  return grpc::Status::OK;
}

grpc::Status PsControlService::Promote(grpc::ServerContext* ctx, const PromoteRequest* req,
                                       PromoteResponse* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kControlPromote); !s.ok()) return s;
  std::optional<StepDecision> in_flight;
  if (req->has_in_flight()) in_flight = DecisionFromRequest(req->in_flight());
  absl::Status s = store_->Promote(req->layout_fingerprint(), req->generation(),
                                   req->decides() ? StepRole::kDecide : StepRole::kFollow,
                                   in_flight, req->decider_epoch(), req->primary_term());
  if (!s.ok()) return ToGrpcStatus(s);
  const int64_t version = store_->stats().version;
  spdlog::warn(
      "promoted to primary of its shards at version {} (generation {}, primary term "
      "{}){}: its primary was lost, or handed them back",
      version, req->generation(), store_->stats().primary_term,
      !req->decides()         ? ""
      : in_flight.has_value() ? ", deciding the sync steps from the lost decider's "
                                "decision in flight on"
                              : ", deciding the sync steps");
  shard_->NotePromoted(version);
  resp->set_version(version);
  return grpc::Status::OK;
}

grpc::Status PsControlService::GetDecision(grpc::ServerContext* ctx, const GetDecisionRequest* req,
                                           StepCommitRequest* resp) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kControlGetDecision); !s.ok()) return s;
  if (req->fence_below() > 0) {
    absl::Status s = store_->FenceDecisions(req->layout_fingerprint(), req->fence_below());
    if (!s.ok()) return ToGrpcStatus(s);
    spdlog::warn(
        "takes step decisions of decider epoch {} and above from now on: a backup is "
        "promoted to decide in place of the decider",
        req->fence_below());
  }
  absl::StatusOr<StepDecision> d = store_->DecisionFor(req->layout_fingerprint(), req->version());
  if (!d.ok()) return ToGrpcStatus(d.status());
  DecisionToRequest(*d, resp);
  return grpc::Status::OK;
}

grpc::Status PsControlService::SetBackups(grpc::ServerContext* ctx, const SetBackupsRequest* req,
                                          SetBackupsResponse*) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kControlSetBackups); !s.ok()) return s;
  const StoreStats st = store_->stats();
  if (st.backup) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this ps is a backup; only a primary keeps backups");
  }
  for (const std::string& a : req->addresses()) {
    if (a.empty()) return InvalidArgumentStatus("a backup's address is empty");
  }
  return shard_->SetBackups(
      req->layout_fingerprint(),
      std::vector<std::string>(req->addresses().begin(), req->addresses().end()));
}

grpc::Status PsControlService::SetFollowers(grpc::ServerContext* ctx,
                                            const SetFollowersRequest* req, SetFollowersResponse*) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kControlSetFollowers); !s.ok()) return s;
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
    if (a.empty()) return InvalidArgumentStatus("a follower's address is empty");
  }
  return ToGrpcStatus(followers_handler_(
      std::vector<std::string>(req->addresses().begin(), req->addresses().end())));
}

grpc::Status PsControlService::Demote(grpc::ServerContext* ctx, const DemoteRequest* req,
                                      DemoteResponse*) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kControlDemote); !s.ok()) return s;
  // A backup first: the answers the replicator still holds are released
  // by its Stop, and must fail (AwaitReplicated), not go out as applied;
  // so must those that come to AwaitReplicated after the replicator is
  // gone (it checks the role first).
  absl::Status s = store_->Demote(req->layout_fingerprint());
  if (!s.ok()) return ToGrpcStatus(s);
  shard_->StopReplicator();
  spdlog::warn(
      "demoted: a backup promoted in this store's place serves its shards; it is a "
      "backup from now on, to be seeded");
  return grpc::Status::OK;
}

}  // namespace pscluster
