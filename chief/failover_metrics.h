// FailoverMetrics: what the chief of a parameter-server run exports about
// its ps's copies and fail-overs (docs/observability.md, docs/replication.md):
// where each ps's store and its backup live, each lost ps and how it came
// back, the pause each loss caused, and the bytes copied from a backup to
// re-seed a restarted ps. The series are the chief's Metrics' (role kChief),
// labelled task="chief:0" like the others:
//
//   pscluster_ps_store_info{store="ps:1",role="primary",holder="ps:1"} 1
//   pscluster_ps_store_info{store="ps:1",role="backup",holder="ps:2"} 1
//   pscluster_ps_failovers_total{how="promoted"|"backup"|"checkpoint"|"resumed"}
//   pscluster_ps_recovery_pause_seconds (histogram)
//   pscluster_ps_reseed_bytes_total
//   pscluster_ps_moved_back_total
//
// The placement is an info-style gauge (Prometheus's `_info` convention:
// value 1, the facts in the labels) rather than one series per backup
// (ps_backup_of{ps,backup}): it names the primaries too, so that a run
// without replicas still says where each store is, and more backups are
// more series of the same family. The label values are task names, as in
// the ps's own task label, so that the series join their metrics
// (label_replace); the label cannot be "task", the chief's on every series.
//
// Thread-safe (prometheus-cpp's metrics are). The Metrics is borrowed and
// must outlive this object.
#ifndef PSCLUSTER_CHIEF_FAILOVER_METRICS_H_
#define PSCLUSTER_CHIEF_FAILOVER_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"

namespace pscluster {

class FailoverMetrics {
 public:
  // How a lost ps came back: the value of the label how=.
  enum class How {
    kPromoted,    // its backup store serves its shards from now on ("promoted")
    kBackup,      // a restarted ps took its backup's state ("backup")
    kCheckpoint,  // every ps went back to the newest checkpoint ("checkpoint")
    kResumed,     // the same process answered again, nothing lost ("resumed")
  };

  // Registers the families in `metrics`, each fail-over counter at 0 (so
  // that rate() and increase() see the first one). Errors only for names
  // prometheus-cpp refuses (InvalidArgument), which would be a bug here.
  static absl::StatusOr<std::unique_ptr<FailoverMetrics>> Create(Metrics* metrics);

  FailoverMetrics(const FailoverMetrics&) = delete;
  FailoverMetrics& operator=(const FailoverMetrics&) = delete;

  // Where ps `store`'s store is now: its primary on ps `primary_holder`
  // (its own, or the backup store of another ps promoted in its place),
  // its backups on the ps `backup_holders` (none: none). The series of
  // where it was before go to 0.
  void SetCopies(int store, int primary_holder, const std::vector<int>& backup_holders);

  // A lost ps came back `how`, the workers paused for `pause` (from the
  // loss found to the workers resumed).
  void CountFailover(How how, absl::Duration pause);

  // `bytes` of ShardState (serialized) copied from a backup store into a
  // restarted ps.
  void AddReseedBytes(int64_t bytes);

  // A ps's shards went back to its own ps from the promoted backup store
  // that served them (PsRecovery::MoveBack).
  void CountMovedBack();

 private:
  explicit FailoverMetrics(Metrics* metrics) : metrics_(metrics) {}

  // One series of pscluster_ps_store_info, set to 1, and kept in
  // placed_[store].
  void Place(int store, const char* role, int holder) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Metrics* const metrics_;
  absl::Mutex mu_;
  std::map<int, std::vector<prometheus::Gauge*>> placed_ ABSL_GUARDED_BY(mu_);
  // Owned by metrics_; set in Create, then only read.
  prometheus::Counter* promoted_ = nullptr;
  prometheus::Counter* from_backup_ = nullptr;
  prometheus::Counter* from_checkpoint_ = nullptr;
  prometheus::Counter* resumed_ = nullptr;
  prometheus::Histogram* pause_seconds_ = nullptr;
  prometheus::Counter* reseed_bytes_ = nullptr;
  prometheus::Counter* moved_back_ = nullptr;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_FAILOVER_METRICS_H_
