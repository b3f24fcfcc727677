// PsService: the gRPC face of a ParameterStore (proto/ps.proto). It
// converts messages and statuses, and counts refused pushes (one counter
// for every reason, in GetStats and /metrics); every rule lives in the
// store.
// Thread-safe; the store and the metrics are borrowed and must outlive the
// service.
#ifndef PSCLUSTER_PS_SERVER_PS_SERVICE_H_
#define PSCLUSTER_PS_SERVER_PS_SERVICE_H_

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "common/codec.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/parameter_store.h"

namespace pscluster {

struct PsServiceOptions {
  // Sync with several ps: kFollow on every ps but ps 0, which decides the
  // steps for all (ps_server/step_broadcaster.h sends its decisions).
  StepRole step_role = StepRole::kDecide;
};

class PsService final : public ParameterServer::Service {
 public:
  PsService(ParameterStore* store, Metrics* metrics, const PsServiceOptions& options = {});

  grpc::Status Init(grpc::ServerContext*, const InitRequest*, InitResponse*) override;
  grpc::Status Pull(grpc::ServerContext*, const PullRequest*, PullResponse*) override;
  grpc::Status Push(grpc::ServerContext*, const PushRequest*, PushResponse*) override;
  grpc::Status PushPull(grpc::ServerContext*, const PushRequest*,
                        PushPullResponse*) override;
  grpc::Status GetStats(grpc::ServerContext*, const PsStatsRequest*,
                        PsStatsResponse*) override;
  grpc::Status SetWorkers(grpc::ServerContext*, const SetWorkersRequest*,
                          SetWorkersResponse*) override;
  grpc::Status Snapshot(grpc::ServerContext*, const SnapshotRequest*, ShardState*) override;
  grpc::Status Restore(grpc::ServerContext*, const RestoreRequest*, RestoreResponse*) override;
  grpc::Status CommitStep(grpc::ServerContext*, const StepCommitRequest*,
                          StepCommitResponse*) override;

  // Pushes refused as invalid so far (what GetStats reports).
  int64_t pushes_rejected() const { return pushes_rejected_.load(); }

 private:
  grpc::Status DoPush(const PushRequest& req, PushResponse* resp);
  // Counts a refused push (GetStats and /metrics) and returns `s`.
  grpc::Status Refused(grpc::Status s);
  grpc::Status ConfigFromInit(const InitRequest* req, int64_t num_floats,
                              StoreConfig* out) const;
  // The weights into resp, encoded with `dtype` (PullRequest.dtype).
  grpc::Status DoPull(grpc::ServerContext* ctx, uint64_t fingerprint, int64_t min_version,
                      int64_t generation, const std::string& dtype, int64_t min_elements,
                      PullResponse* resp);
  // This ps's shards as the pieces of an encoded message; empty before
  // Init.
  std::vector<WirePiece> Pieces();
  // The shards this ps holds (from Init or Restore); checked against a
  // restore's so that a checkpoint of another layout or variable is refused.
  grpc::Status CheckShards(const google::protobuf::RepeatedPtrField<ShardSpec>& shards);

  ParameterStore* const store_;
  Metrics* const metrics_;
  const PsServiceOptions options_;
  std::atomic<int64_t> pushes_rejected_{0};
  std::atomic<int64_t> bytes_pulled_{0};
  std::atomic<int64_t> bytes_pushed_{0};
  // Random per process: tells the chief a restarted ps from the old one.
  const uint64_t incarnation_;
  absl::Mutex shards_mu_;
  std::vector<ShardSpec> shards_ ABSL_GUARDED_BY(shards_mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVER_PS_SERVICE_H_
