// PsService: the gRPC face of a ParameterStore (proto/ps.proto). It
// converts messages and statuses, and counts refused pushes (one counter
// for every reason, in GetStats and /metrics); every rule lives in the
// store.
// Thread-safe; the store and the metrics are borrowed and must outlive the
// service.
#ifndef PSCLUSTER_PS_SERVER_PS_SERVICE_H_
#define PSCLUSTER_PS_SERVER_PS_SERVICE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/replicator.h"
#include "update/parameter_store.h"
#include "wire/codec.h"

namespace pscluster {

struct PsServiceOptions {
  // Sync with several ps: kFollow on every ps but ps 0, which decides the
  // steps for all (ps_server/step_broadcaster.h sends its decisions).
  StepRole step_role = StepRole::kDecide;
  // How a primary reaches and waits for its backups (SetBackups).
  ReplicatorOptions replicator;
};

class PsService final : public ParameterServer::Service {
 public:
  PsService(ParameterStore* store, Metrics* metrics, const PsServiceOptions& options = {});

  grpc::Status Init(grpc::ServerContext*, const InitRequest*, InitResponse*) override;
  grpc::Status Pull(grpc::ServerContext*, const PullRequest*, PullResponse*) override;
  grpc::Status Push(grpc::ServerContext*, const PushRequest*, PushResponse*) override;
  // Sets /metrics' gauges of each sparse table's rows and bytes (every
  // kTableGaugeEvery versions).
  void SetTableGauges();
  static constexpr int64_t kTableGaugeEvery = 64;
  // Rows of the sparse tables this ps holds (ParameterStore::PullRows).
  grpc::Status PullRows(grpc::ServerContext*, const PullRowsRequest*,
                        PullRowsResponse*) override;
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
  // Replicas (docs/replication.md): a backup applies its primary's updates
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

  // PushPull without gRPC: the tcp data plane's (ps_server/data_plane_server.h)
  // handler, after its own token check. The pull waits until `deadline`.
  // What the data plane knows beyond the request, and what it takes back
  // beside the response.
  struct DataPlaneCall {
    // In: whether req.gradients are all finite, when they are fp32 in the
    // store's order (GradientsAsSent) and were checked as they arrived.
    std::optional<bool> gradients_finite;
    // In: fp32 gradients in the store's order read here instead of into
    // req.gradients (then empty), so that a sync store takes them without
    // a copy (PushArgs::owned); it may leave another buffer, of any size
    // and contents, in their place. Null: the gradients are req's.
    std::vector<float>* gradients = nullptr;
    // Out: an fp32 answer's values, not copied into resp but shared with
    // the store (ParameterStore::PullShared), to be sent as
    // resp.pull.values and then let go of.
    ParameterStore::SharedValues weights;
  };
  grpc::Status DoPushPull(const PushRequest& req, absl::Time deadline, PushPullResponse* resp,
                          DataPlaneCall* call = nullptr);
  // CommitStep without gRPC: the tcp data plane's, after its token check.
  grpc::Status DoCommitStep(const StepCommitRequest& req, StepCommitResponse* resp);
  // Replicate without gRPC (the tcp data plane's): the records' gradients
  // are `payload`, each record's payload_bytes of it in turn, not their
  // `gradient` fields; a payload they do not add up to is refused.
  grpc::Status DoReplicate(const ReplicateRequest& req, absl::string_view payload,
                           ReplicateResponse* resp);
  // Whether req's gradients are fp32 in this ps's shard order: used where
  // they lie, not decoded.
  static bool GradientsAsSent(const PushRequest& req);
  // For fp32 gradients sent last shard first (a push streamed during
  // backprop, shards_reversed): where each shard's values go in this ps's
  // order, as (offset, size) in floats, in the order they are sent, so
  // that they can be read into place as they arrive. Empty when req's
  // gradients are not fp32 shards sent reversed or `payload_bytes` is not
  // their size.
  std::vector<std::pair<int64_t, int64_t>> ReversedRuns(const PushRequest& req,
                                                        uint64_t payload_bytes);
  // The tcp data plane's port, for GetStats (0: none).
  void set_data_port(int port) { data_port_ = port; }
  // The ports of the backup stores this ps keeps, in slot order
  // (GetStats; none: it keeps none).
  void set_backup_ports(std::vector<int> ports) {
    absl::MutexLock lock(&shards_mu_);
    backup_ports_ = std::move(ports);
  }

  // Pushes refused as invalid so far (what GetStats reports).
  int64_t pushes_rejected() const { return pushes_rejected_.load(); }

 private:
  // `finite` and `owned`: DataPlaneCall::gradients_finite and ::gradients.
  grpc::Status DoPush(const PushRequest& req, PushResponse* resp,
                      std::optional<bool> finite = std::nullopt,
                      std::vector<float>* owned = nullptr);
  // Replicate's records applied to the store, in order; their gradients
  // are their own, or (the data plane's) consecutive pieces of `payload`.
  grpc::Status ApplyRecords(const ReplicateRequest& req, const absl::string_view* payload,
                            ReplicateResponse* resp);
  // What seeds a backup of this store: its configuration and state now.
  absl::StatusOr<RestoreRequest> SeedRequest();
  // Waits until the backups hold `version`, when there are any.
  grpc::Status AwaitReplicated(int64_t version, absl::Time deadline);
  // The answer of a ps whose backup was promoted in its place.
  static grpc::Status Replaced();
  // Counts a refused push (GetStats and /metrics) and returns `s`.
  grpc::Status Refused(grpc::Status s);
  // How a pull's answer is encoded (PullRequest / PushRequest fields).
  struct PullEncoding {
    std::string dtype;  // empty: fp32
    int64_t min_elements = 0;
    int worker = -1;      // -1: not a worker (no change pulls)
    bool reset = false;   // PullRequest.delta_reset
    int64_t base = 0;     // PushRequest.pull_base
  };
  // The weights into resp, encoded as `enc` says, waiting for min_version
  // until `deadline`; fp32 weights into *weights instead when it is set
  // (DoPushPull's).
  grpc::Status DoPull(absl::Time deadline, uint64_t fingerprint, int64_t min_version,
                      int64_t generation, const PullEncoding& enc, PullResponse* resp,
                      ParameterStore::SharedValues* weights = nullptr);
  // Change pulls: the change from the weights `enc.worker` holds to `w`
  // (n values) into resp, keeping what it will hold (a shadow of its
  // weights) and the answer, for a resend. False when there is no common
  // base: the shadow is then `w`, and the answer must be `w` in fp32.
  bool EncodeChange(const PullEncoding& enc, const CodecOptions& codec, const float* w,
                    int64_t n, PullResponse* resp);
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
  std::atomic<int> data_port_{0};
  // Random per process: tells the chief a restarted ps from the old one.
  const uint64_t incarnation_;
  absl::Mutex shards_mu_;
  std::vector<ShardSpec> shards_ ABSL_GUARDED_BY(shards_mu_);
  std::vector<int> backup_ports_ ABSL_GUARDED_BY(shards_mu_);
  // The last Init's or Restore's configuration (without values): a
  // backup's seed carries it.
  InitRequest config_ ABSL_GUARDED_BY(shards_mu_);
  absl::Mutex replicator_mu_;
  std::shared_ptr<Replicator> replicator_ ABSL_GUARDED_BY(replicator_mu_);
  // /metrics of the replicas (docs/observability.md); null if they could
  // not be registered.
  prometheus::Gauge* backups_set_gauge_ = nullptr;
  prometheus::Gauge* backups_live_gauge_ = nullptr;
  prometheus::Gauge* replicated_version_gauge_ = nullptr;
  prometheus::Gauge* replicated_bytes_gauge_ = nullptr;
  // Sets the gauges from `replicator`'s stats, and returns them.
  ReplicaStats UpdateReplicaMetrics(const Replicator& replicator);
  // The replicator SetBackups installed (null: none).
  std::shared_ptr<Replicator> CurrentReplicator();
  // This store's state now, as Snapshot answers it and a backup's seed
  // carries it.
  absl::Status StateOf(uint64_t fingerprint, ShardState* out);
  // The store's state and the shards it holds, copied at one instant.
  struct CapturedState {
    uint64_t fingerprint = 0;
    StoreSnapshot store;
    std::vector<ShardSpec> shards;
  };
  absl::Status Capture(uint64_t fingerprint, CapturedState* out);
  static void CapturedToState(const CapturedState& captured, ShardState* out);
  // What the last Snapshot(CAPTURE) set aside, until Snapshot(CAPTURED)
  // takes it.
  absl::Mutex captured_mu_;
  std::unique_ptr<CapturedState> captured_ ABSL_GUARDED_BY(captured_mu_);

  // Per worker that pulls changes: the weights it holds once it applied
  // answer `seq`, and that answer.
  struct ChangeState {
    absl::Mutex mu;
    int64_t seq ABSL_GUARDED_BY(mu) = 0;
    std::vector<float> shadow ABSL_GUARDED_BY(mu);
    std::string last ABSL_GUARDED_BY(mu);  // answer `seq`'s values, when a change
    int64_t last_version ABSL_GUARDED_BY(mu) = 0;
    int64_t last_generation ABSL_GUARDED_BY(mu) = 0;
    std::vector<float> scratch ABSL_GUARDED_BY(mu);  // EncodeChange's
  };
  ChangeState* Changes(int worker);

  // Buffers that encoded or reordered pushes are decoded into, reused from
  // push to push (a fresh one is faulted in page by page every time: 80 MB
  // is 20,000 pages). A push takes one, hands it to the store, which swaps
  // it with the one it held (PushArgs::owned), and gives back what it got.
  // As many are kept as pushes were decoded at once, up to kKeptBuffers.
  std::vector<float> TakeBuffer();
  void GiveBuffer(std::vector<float> buffer);
  static constexpr size_t kKeptBuffers = 4;
  absl::Mutex buffers_mu_;
  std::vector<std::vector<float>> buffers_ ABSL_GUARDED_BY(buffers_mu_);
  absl::Mutex changes_mu_;
  std::map<int, std::unique_ptr<ChangeState>> changes_ ABSL_GUARDED_BY(changes_mu_);
  FollowersHandler followers_handler_;  // empty: not the deciding ps
  // After a Promote: the version it was promoted at, until the first
  // update since is answered (logged, NoteStepAsPrimary); -1 otherwise.
  void NoteStepAsPrimary(int64_t version);
  std::atomic<int64_t> promoted_from_{-1};
  absl::Time promoted_at_;  // written before promoted_from_
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVER_PS_SERVICE_H_
