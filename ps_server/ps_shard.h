// PsShard: what a ps's two gRPC services share (ps_data_service.h, the
// workers' data path; ps_control_service.h, the chief's and the other ps's
// control): the store and its metrics, what the ps holds (its shards and
// the configuration a backup's seed carries), the replicator that keeps
// its backups, the ports it tells of, its counters, and the note of a
// promotion until the first update since.
// Thread-safe; the store and the metrics are borrowed and must outlive it.
#ifndef PSCLUSTER_PS_SERVER_PS_SHARD_H_
#define PSCLUSTER_PS_SERVER_PS_SHARD_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "proto/ps.pb.h"
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
  // Tests only (tests/elastic_ps_test): the process dies as a Restore of a
  // new placement arrives, as if killed while its shards were copied to it.
  bool exit_on_new_placement = false;
};

// INVALID_ARGUMENT with `message`.
grpc::Status InvalidArgumentStatus(const std::string& message);

class PsShard {
 public:
  PsShard(ParameterStore* store, Metrics* metrics, const PsServiceOptions& options);
  PsShard(const PsShard&) = delete;
  PsShard& operator=(const PsShard&) = delete;

  ParameterStore* store() const { return store_; }
  Metrics* metrics() const { return metrics_; }
  const PsServiceOptions& options() const { return options_; }

  // What the ps holds from now on (Init, Restore): `init`'s shards, and
  // its configuration without the values (a backup's seed carries it).
  void SetHeld(const InitRequest& init);
  // The shards of a restore's request checked against those held, so that
  // a checkpoint of another layout or variable is refused (OK when none is
  // held yet).
  grpc::Status CheckShards(const google::protobuf::RepeatedPtrField<ShardSpec>& shards);
  // The shards held as the pieces of an encoded message; empty before
  // Init.
  std::vector<WirePiece> Pieces();

  // The store's state and the shards it holds, copied at one instant.
  struct CapturedState {
    uint64_t fingerprint = 0;
    StoreState store;
    std::vector<ShardSpec> shards;
  };
  absl::Status Capture(uint64_t fingerprint, CapturedState* out);
  static void CapturedToState(const CapturedState& captured, ShardState* out);
  // The store's state now, as Snapshot answers it and a backup's seed
  // carries it.
  absl::Status StateOf(uint64_t fingerprint, ShardState* out);
  // What seeds a backup of this store: its configuration and state now.
  absl::StatusOr<RestoreRequest> SeedRequest();

  // The replicator SetBackups installed (null: none).
  std::shared_ptr<Replicator> CurrentReplicator();
  // Keeps the backups at `addresses` up to date from now on (none: no
  // backups), stopping the replicator before. FAILED_PRECONDITION when
  // this ps was replaced by its backup (fencing: it must not take pushes
  // again; Demote makes it a backup).
  grpc::Status SetBackups(uint64_t fingerprint, std::vector<std::string> addresses);
  // Stops the replicator, if any (demoted: the new primary seeds this
  // store).
  void StopReplicator();
  // Waits until the backups hold `version`, when there are any (those of
  // the replicator set now: one SetBackups put in place of the replicator
  // waited on is waited on in turn). UNAVAILABLE (Replaced) once the store
  // is demoted or replaced, whenever the call comes: a demoted store may
  // hold an update its successor lacks (docs/replication.md, move back).
  grpc::Status AwaitReplicated(int64_t version, absl::Time deadline);
  // The answer of a ps whose backup was promoted in its place.
  static grpc::Status Replaced();

  // GetStats' answer.
  void Stats(PsStatsResponse* resp);
  // Counts a refused push (GetStats and /metrics) and returns `s`.
  grpc::Status Refused(grpc::Status s);
  int64_t pushes_rejected() const { return pushes_rejected_.load(); }
  void AddBytesPulled(int64_t n) { bytes_pulled_ += n; }
  void AddBytesPushed(int64_t n) { bytes_pushed_ += n; }
  // Whether the chief drains this ps before it stops (the Init or Restore
  // held said so: InitRequest.drain_on_stop).
  bool drains_on_stop();
  // Stopped, waiting to be drained (GetStats' leaving).
  void set_leaving() { leaving_ = true; }
  // The tcp data plane's port, for GetStats (0: none).
  void set_data_port(int port) { data_port_ = port; }
  // The ports of the backup stores this ps keeps, in slot order
  // (GetStats; none: it keeps none).
  void set_backup_ports(std::vector<int> ports);

  // Promoted at `version`: logged with the first update answered since
  // (NoteStepAsPrimary).
  void NotePromoted(int64_t version);
  // An update to `version` was answered.
  void NoteStepAsPrimary(int64_t version);

 private:
  // Sets the backup gauges from `replicator`'s stats, and returns them.
  ReplicationStats UpdateReplicationMetrics(const Replicator& replicator);

  ParameterStore* const store_;
  Metrics* const metrics_;
  const PsServiceOptions options_;
  std::atomic<int64_t> pushes_rejected_{0};
  std::atomic<int64_t> bytes_pulled_{0};
  std::atomic<int64_t> bytes_pushed_{0};
  std::atomic<int> data_port_{0};
  std::atomic<bool> leaving_{false};
  // Random per process: tells the chief a restarted ps from the old one.
  const uint64_t incarnation_;
  absl::Mutex shards_mu_;
  std::vector<ShardSpec> shards_ ABSL_GUARDED_BY(shards_mu_);
  std::vector<int> backup_ports_ ABSL_GUARDED_BY(shards_mu_);
  InitRequest config_ ABSL_GUARDED_BY(shards_mu_);  // without values
  absl::Mutex replicator_mu_;
  std::shared_ptr<Replicator> replicator_ ABSL_GUARDED_BY(replicator_mu_);
  // /metrics of the backups (docs/observability.md); null if they could
  // not be registered.
  prometheus::Gauge* backups_set_gauge_ = nullptr;
  prometheus::Gauge* backups_live_gauge_ = nullptr;
  prometheus::Gauge* replicated_version_gauge_ = nullptr;
  prometheus::Gauge* replicated_bytes_gauge_ = nullptr;
  // After a Promote: the version it was promoted at, until the first
  // update since is answered; -1 otherwise.
  std::atomic<int64_t> promoted_from_{-1};
  absl::Time promoted_at_;  // written before promoted_from_
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVER_PS_SHARD_H_
