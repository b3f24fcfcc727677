// FailoverMetrics: what the chief of a parameter-server run exports about
// its ps's copies and fail-overs (docs/observability.md, docs/replication.md):
// where each ps's store and its backup live, each lost ps and how it came
// back, the pause each loss caused, and the bytes copied from a backup to
// re-seed a restarted ps. The series are the chief's Metrics' (role kChief),
// labelled task="chief:0" like the others:
//
//   pscluster_ps_store_info{store="ps:1",role="primary",holder="ps:1"} 1
//   pscluster_ps_store_info{store="ps:1",role="backup",holder="ps:2"} 1
//   pscluster_ps_failovers_total{how="backup"|"checkpoint"|"resumed"}
//   pscluster_ps_recovery_pause_seconds (histogram)
//   pscluster_ps_reseed_bytes_total
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
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"

namespace pscluster {

class FailoverMetrics {
 public:
  // How a lost ps came back: the value of the label how=.
  enum class How {
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

  // Ps `holder` holds a copy of ps `store`'s store: its primary when
  // holder == store, else a backup. The series stays: the chief places
  // each backup on the same ps for the whole run.
  void SetCopy(int store, int holder);

  // A lost ps came back `how`, the workers paused for `pause` (from the
  // loss found to the workers resumed).
  void CountFailover(How how, absl::Duration pause);

  // `bytes` of ShardState (serialized) copied from a backup store into a
  // restarted ps.
  void AddReseedBytes(int64_t bytes);

 private:
  explicit FailoverMetrics(Metrics* metrics) : metrics_(metrics) {}

  Metrics* const metrics_;
  // Owned by metrics_; set in Create, then only read.
  prometheus::Counter* from_backup_ = nullptr;
  prometheus::Counter* from_checkpoint_ = nullptr;
  prometheus::Counter* resumed_ = nullptr;
  prometheus::Histogram* pause_seconds_ = nullptr;
  prometheus::Counter* reseed_bytes_ = nullptr;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_FAILOVER_METRICS_H_
