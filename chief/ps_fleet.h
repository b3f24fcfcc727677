// PsFleet: the chief's calls to its parameter servers, each addressed by ps
// task index. An interface with no gRPC in it, so that the steps built on it
// (membership, ps set-up and recovery, checkpoints, progress) can be tested
// with fakes; GrpcPsFleet (chief/grpc_ps_fleet.h) talks to the real ps.
//
// The fleet fills in the layout fingerprint of the run's placement where a
// request carries one the caller did not build (SetWorkers, Snapshot).
// Errors name the ps ("stats of ps:1: ..."). Implementations say which calls
// are thread-safe; the chief makes them from its one loop.
#ifndef PSCLUSTER_CHIEF_PS_FLEET_H_
#define PSCLUSTER_CHIEF_PS_FLEET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"

namespace pscluster {

class PsFleet {
 public:
  virtual ~PsFleet() = default;

  virtual int num_ps() const = 0;

  // Where ps `ps`'s shards are served (host:port): its own address until
  // a backup store is promoted in its place; then, after MoveTo, the
  // backup store's, and every call for ps `ps` goes there.
  virtual std::string address(int ps) const = 0;
  virtual void MoveTo(int ps, const std::string& address) = 0;

  // One attempt each, bounded by `timeout`.
  virtual absl::StatusOr<PsStatsResponse> Stats(int ps, absl::Duration timeout) = 0;
  // Tells the ps whom sync steps wait for (active[w]: worker w).
  virtual absl::Status SetWorkers(int ps, const std::vector<bool>& active,
                                  absl::Duration timeout) = 0;
  // The ps's values, slots, version and generation.
  virtual absl::StatusOr<ShardState> Snapshot(int ps, absl::Duration timeout) = 0;
  // Has the ps copy its state aside in its memory and answers only that
  // state's version and generation (SnapshotRequest.CAPTURE).
  virtual absl::StatusOr<ShardState> CaptureSnapshot(int ps, absl::Duration timeout) = 0;
  // The whole state the ps's last capture set aside (which the ps then
  // drops); FailedPrecondition when it holds none.
  virtual absl::StatusOr<ShardState> FetchCapturedSnapshot(int ps, absl::Duration timeout) = 0;
  // The ps's version, generation and recent chunks, no values
  // (SnapshotRequest.RECENT_CHUNKS).
  virtual absl::StatusOr<ShardState> RecentChunks(int ps, absl::Duration timeout) = 0;

  // Retried while the ps is unreachable (common/retry.h) for up to
  // `total_timeout`; Cancelled once the chief is asked to stop.
  virtual absl::StatusOr<InitResponse> Init(int ps, const InitRequest& request,
                                            absl::Duration total_timeout) = 0;
  virtual absl::Status Restore(int ps, const RestoreRequest& request,
                               absl::Duration total_timeout) = 0;
  // The backups (host:port) the ps keeps up to date (docs/replication.md).
  virtual absl::Status SetBackups(int ps, const std::vector<std::string>& addresses,
                                  absl::Duration timeout) = 0;
  // The state of the backup store at `address` (a ps's --backup_port).
  virtual absl::StatusOr<ShardState> SnapshotOfBackup(const std::string& address,
                                                      absl::Duration timeout) = 0;
  // Sync: a ps's kept decision for the step from `version` (NotFound: not
  // made or taken yet), a following ps fenced at decider epoch
  // `fence_below` first when it is above 0; handing a decision to a
  // following ps.
  virtual absl::StatusOr<StepCommitRequest> GetDecision(int ps, int64_t version,
                                                        int64_t fence_below,
                                                        absl::Duration timeout) = 0;
  virtual absl::Status CommitStep(int ps, const StepCommitRequest& decision,
                                  absl::Duration timeout) = 0;

  // Calls to a store by its address: a backup store, or a restarted ps's
  // own store while its shards are served elsewhere. One attempt each.
  virtual absl::StatusOr<PsStatsResponse> StatsAt(const std::string& address,
                                                  absl::Duration timeout) = 0;
  // Makes the backup store at `address` the primary of its shards under
  // `generation`; the version it holds.
  // `decides`: it decides the sync steps from now on (it replaces ps 0),
  // starting from `in_flight` (null: none) for the step it is at, under
  // `decider_epoch` (following: the lowest it takes). `primary_term`:
  // above every term a copy of its shards had, so that its backups refuse
  // the replaced primary's records (0: one above its own).
  virtual absl::StatusOr<int64_t> Promote(const std::string& address, int64_t generation,
                                          bool decides, const StepCommitRequest* in_flight,
                                          int64_t decider_epoch, int64_t primary_term,
                                          absl::Duration timeout) = 0;
  // Makes the primary store at `address` (one a backup was promoted in
  // place of) a backup, to be seeded.
  virtual absl::Status Demote(const std::string& address, absl::Duration timeout) = 0;
  // Sync: tells the deciding ps `ps` where its followers are served (the
  // others' addresses, in order).
  virtual absl::Status SetFollowers(int ps, const std::vector<std::string>& addresses,
                                    absl::Duration timeout) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_PS_FLEET_H_
