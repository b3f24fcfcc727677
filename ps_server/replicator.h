// Replicator: on a primary ps, keeps its backups (stores on other ps that
// take no pushes) up to date, so that a lost ps is replaced by a backup at
// the same version instead of a checkpoint (docs/replication.md).
//
// One thread per backup. It seeds the backup with the store's state
// (PsControl.Restore with as_backup), then sends every update the
// store makes, in order (Replicate), a batch at a time. The ps service asks
// WaitReplicated before it answers a worker, so that whatever a worker was
// told, every backup that keeps up holds. The updates go over the backup's
// tcp data plane (DataKind::kReplicate, the gradients sent from where they
// lie): over gRPC each took about 0.7 ms on loopback, a tenth of an async
// worker's step (docs/benchmarks/replication.md). When the data plane
// cannot be reached or is not understood, they go over gRPC for 10 s
// before it is tried again, as the step decisions do.
//
// A backup that fails every call is asked again and again, and answers
// wait for it: a primary cut off from its backup must never answer what
// the backup lacks, since the backup may be promoted in its place. It goes
// on without it only when told to (SetBackups with none: the chief's word,
// once it found the backup lost). After `lost_after` it counts as not live
// in stats() (the chief sees it in GetStats). A backup that refuses the
// next update (restarted, behind, another generation: the store was
// restored from a checkpoint) is seeded again at once. Too many updates
// waiting for a slow backup are dropped for a fresh seed too.
//
// Fencing: a backup that answers ALREADY_EXISTS to a seed or to records
// means this store was replaced: the backup is a primary (promoted in this
// store's place), or it follows a primary of a higher term than the
// store's (with several backups, one was promoted and seeded it; every
// record and seed carries the store's term: AppliedUpdate::primary_term).
// replaced() turns true, waits return false at once, and the ps takes no
// more pushes (docs/replication.md). A backup that follows a lower term
// than this store's records (not seeded by it since it was promoted)
// answers FAILED_PRECONDITION and is seeded again, as one that is behind.
//
// Thread-safe. The store is borrowed and must outlive the replicator.
#ifndef PSCLUSTER_PS_SERVER_REPLICATOR_H_
#define PSCLUSTER_PS_SERVER_REPLICATOR_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/rpc.h"
#include "proto/ps.grpc.pb.h"
#include "update/parameter_store.h"

namespace pscluster {

struct ReplicatorOptions {
  RpcOptions rpc;
  // A backup failing every call this long counts as not live in stats();
  // answers still wait for it.
  absl::Duration lost_after = absl::Seconds(1);
  // Updates in one Replicate call, and waiting at most for one backup
  // before it is seeded afresh instead.
  int max_batch = 8;
  int max_queued = 256;
};

struct ReplicationStats {
  int64_t replicated_version = -1;  // held by every live backup; -1: none yet
  int backups_live = 0;
  int backups_set = 0;
  int64_t bytes_sent = 0;  // seeds and updates
  int64_t bytes_sent_data_plane = 0;  // of which updates over the data plane
};

class Replicator {
 public:
  // What seeds a backup: the store's configuration and state now (the
  // ps service's Snapshot, with its InitRequest).
  using SeedFn = std::function<absl::StatusOr<RestoreRequest>()>;

  // Starts keeping `backups` (host:port) up to date, and sets itself as
  // the store's update listener (taken back on destruction).
  Replicator(ParameterStore* store, uint64_t layout_fingerprint, SeedFn seed,
             const std::vector<std::string>& backups, const ReplicatorOptions& options = {});
  ~Replicator();

  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // Stops keeping the backups: gives the store's listener back, joins the
  // senders; waits return at once from then on. Once; the destructor's.
  void Stop();

  // Waits until every backup holds `version` (true), or `deadline` or a
  // backup found promoted (false). A backup that refused its seed for
  // good (another layout or generation) is not waited for. After Stop it
  // returns true at once (see stopped()).
  bool WaitReplicated(int64_t version, absl::Time deadline);

  // Whether a backup answered that it is the primary now (see Fencing).
  bool replaced() const { return replaced_.load(); }

  // Whether Stop was called: a wait it ended (WaitReplicated true) was
  // confirmed by no backup.
  bool stopped() const { return stop_.load(); }

  ReplicationStats stats() const;

 private:
  struct Backup {
    std::string address;
    // Updates not yet sent, shared by every backup's queue.
    std::deque<std::shared_ptr<const AppliedUpdate>> queue;
    bool collecting = false;          // the listener queues updates
    bool live = true;                 // answering (stats)
    bool refused = false;             // refused its seed: answers do not wait for it
    int64_t held = -1;                // the version it holds
  };
  // The store's listener (under the store's lock).
  void Collect(AppliedUpdate u);
  void Send(Backup* b);
  // Seeds b; true when it took the state.
  bool Seed(Backup* b, PsControl::Stub* stub);
  void MarkFailing(Backup* b, absl::Time failing_since);
  // `b` answered that it is a primary: this store was replaced.
  void MarkReplaced(Backup* b, const std::string& why);

  ParameterStore* const store_;  // borrowed
  const uint64_t layout_fingerprint_;
  std::atomic<bool> replaced_{false};
  const SeedFn seed_;
  const ReplicatorOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> bytes_sent_data_plane_{0};
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // an update queued, a backup advanced or was lost
  std::vector<std::unique_ptr<Backup>> backups_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> senders_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVER_REPLICATOR_H_
