// PsControlService: the control of a ps (proto/ps.proto's PsControl
// service), by the chief (Init, the sync worker set, checkpoints' Snapshot
// and Restore, fail-over: Promote, Demote, SetBackups, SetFollowers,
// GetDecision) and by the other ps (a primary's records and seeds to its
// backups: Replicate, Restore; the decider's step decisions: CommitStep).
// It converts messages and statuses; every rule lives in the store.
// Thread-safe; the shard (ps_shard.h) is borrowed and must outlive it.
#ifndef PSCLUSTER_PS_SERVER_PS_CONTROL_SERVICE_H_
#define PSCLUSTER_PS_SERVER_PS_CONTROL_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/ps_shard.h"

namespace pscluster {

class PsControlService final : public PsControl::Service {
 public:
  explicit PsControlService(PsShard* shard) : shard_(shard) {}

  grpc::Status Init(grpc::ServerContext*, const InitRequest*, InitResponse*) override;
  grpc::Status SetWorkers(grpc::ServerContext*, const SetWorkersRequest*,
                          SetWorkersResponse*) override;
  grpc::Status Snapshot(grpc::ServerContext*, const SnapshotRequest*, ShardState*) override;
  grpc::Status Restore(grpc::ServerContext*, const RestoreRequest*, RestoreResponse*) override;
  grpc::Status CommitStep(grpc::ServerContext*, const StepCommitRequest*,
                          StepCommitResponse*) override;
  // Backups (docs/replication.md): a backup applies its primary's updates
  // (Replicate) and becomes the primary (Promote); a primary keeps the
  // backups it is given up to date (SetBackups) and answers a worker only
  // once they hold what the answer says.
  grpc::Status Replicate(grpc::ServerContext*, const ReplicateRequest*,
                         ReplicateResponse*) override;
  grpc::Status Promote(grpc::ServerContext*, const PromoteRequest*, PromoteResponse*) override;
  // A primary replaced by its promoted backup becomes a backup (and stops
  // keeping backups of its own), to be seeded by the new primary.
  grpc::Status Demote(grpc::ServerContext*, const DemoteRequest*, DemoteResponse*) override;
  grpc::Status GetDecision(grpc::ServerContext*, const GetDecisionRequest*,
                           StepCommitRequest*) override;
  grpc::Status SetBackups(grpc::ServerContext*, const SetBackupsRequest*,
                          SetBackupsResponse*) override;
  // Sync, on the deciding ps: where its followers are served now (a
  // backup promoted); FAILED_PRECONDITION on any other ps.
  grpc::Status SetFollowers(grpc::ServerContext*, const SetFollowersRequest*,
                            SetFollowersResponse*) override;
  // What SetFollowers calls on a deciding store (ps_server/step_broadcaster.h's,
  // made at start on ps 0, or when a backup store is promoted to decide);
  // set before serving.
  using FollowersHandler = std::function<absl::Status(const std::vector<std::string>&)>;
  void set_followers_handler(FollowersHandler handler) { followers_handler_ = std::move(handler); }

  // CommitStep without gRPC: the tcp data plane's, after its token check.
  grpc::Status DoCommitStep(const StepCommitRequest& req, StepCommitResponse* resp);
  // Replicate without gRPC (the tcp data plane's): the records' gradients
  // are `payload`, each record's payload_bytes of it in turn, not their
  // `gradient` fields; a payload they do not add up to is refused.
  grpc::Status DoReplicate(const ReplicateRequest& req, absl::string_view payload,
                           ReplicateResponse* resp);

 private:
  // Replicate's records applied to the store, in order; their gradients
  // are their own, or (the data plane's) consecutive pieces of `payload`.
  grpc::Status ApplyRecords(const ReplicateRequest& req, const absl::string_view* payload,
                            ReplicateResponse* resp);

  PsShard* const shard_;
  ParameterStore* const store_ = shard_->store();
  // What the last Snapshot(CAPTURE) set aside, until Snapshot(CAPTURED)
  // takes it.
  absl::Mutex captured_mu_;
  std::unique_ptr<PsShard::CapturedState> captured_ ABSL_GUARDED_BY(captured_mu_);
  FollowersHandler followers_handler_;  // empty: not the deciding ps
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVER_PS_CONTROL_SERVICE_H_
