#include "chief/failover_metrics.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace pscluster {
namespace {

constexpr char kStoreInfo[] = "pscluster_ps_store_info";
constexpr char kStoreInfoHelp[] =
    "Where each ps's store is held now (value 1; 0 where it was before): its primary "
    "(role=\"primary\") by its own ps or, after a fail-over, by the backup store of another "
    "ps promoted in its place; with --ps_replicas=1 its backup (role=\"backup\").";
constexpr char kFailovers[] = "pscluster_ps_failovers_total";
constexpr char kFailoversHelp[] =
    "Lost ps, by how their shards came back: \"promoted\" (their backup store serves them "
    "from then on), \"backup\" (a restarted ps took its backup's state), "
    "\"checkpoint\" (every ps went back to the newest checkpoint), \"resumed\" (the same "
    "process answered again, nothing lost).";

// A lost ps is found within about a second and may take up to
// --ps_recovery_timeout_s (default 120 s) to come back.
std::vector<double> PauseBuckets() {
  return {0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 30, 60, 120, 300, 600};
}

std::string Task(int ps) { return absl::StrCat("ps:", ps); }

}  // namespace

absl::StatusOr<std::unique_ptr<FailoverMetrics>> FailoverMetrics::Create(Metrics* metrics) {
  std::unique_ptr<FailoverMetrics> m(new FailoverMetrics(metrics));
  struct Series {
    prometheus::Counter** to;
    const char* how;
  };
  for (const Series& s :
       {Series{&m->promoted_, "promoted"}, Series{&m->from_backup_, "backup"},
        Series{&m->from_checkpoint_, "checkpoint"},
        Series{&m->resumed_, "resumed"}}) {
    absl::StatusOr<prometheus::Counter*> c =
        metrics->AddCounter(kFailovers, kFailoversHelp, {{"how", s.how}});
    if (!c.ok()) return c.status();
    *s.to = *c;
  }
  absl::StatusOr<prometheus::Histogram*> pause = metrics->AddHistogram(
      "pscluster_ps_recovery_pause_seconds",
      "Seconds the workers were paused for each lost ps: from the loss found (two failed "
      "checks, or a new process) to the workers resumed.",
      PauseBuckets());
  if (!pause.ok()) return pause.status();
  m->pause_seconds_ = *pause;
  absl::StatusOr<prometheus::Counter*> reseed = metrics->AddCounter(
      "pscluster_ps_reseed_bytes_total",
      "Bytes of ps state (serialized ShardState: values, optimizer slots, recent answers) "
      "copied from a backup store into a restarted ps.");
  if (!reseed.ok()) return reseed.status();
  m->reseed_bytes_ = *reseed;
  absl::StatusOr<prometheus::Counter*> moved_back = metrics->AddCounter(
      "pscluster_ps_moved_back_total",
      "Times a ps's shards went back to its own ps, once caught up as their backup, from the "
      "backup store of another ps that was promoted in its place.");
  if (!moved_back.ok()) return moved_back.status();
  m->moved_back_ = *moved_back;
  return m;
}

void FailoverMetrics::SetCopies(int store, int primary_holder,
                                const std::vector<int>& backup_holders) {
  absl::MutexLock lock(&mu_);
  for (prometheus::Gauge* g : placed_[store]) g->Set(0);
  Place(store, "primary", primary_holder);
  for (int holder : backup_holders) Place(store, "backup", holder);
}

void FailoverMetrics::Place(int store, const char* role, int holder) {
  absl::StatusOr<prometheus::Gauge*> g = metrics_->AddGauge(
      kStoreInfo, kStoreInfoHelp,
      {{"store", Task(store)}, {"role", role}, {"holder", Task(holder)}});
  if (!g.ok()) {
    // Not a reason to stop training: the log says where the copies are.
    spdlog::warn("metric {}: {}", kStoreInfo, std::string(g.status().message()));
    return;
  }
  (*g)->Set(1);
  std::vector<prometheus::Gauge*>& placed = placed_[store];
  if (std::find(placed.begin(), placed.end(), *g) == placed.end()) placed.push_back(*g);
}

void FailoverMetrics::CountFailover(How how, absl::Duration pause) {
  prometheus::Counter* c = how == How::kPromoted     ? promoted_
                           : how == How::kBackup     ? from_backup_
                           : how == How::kCheckpoint ? from_checkpoint_
                                                     : resumed_;
  c->Increment();
  pause_seconds_->Observe(absl::ToDoubleSeconds(pause));
}

void FailoverMetrics::AddReseedBytes(int64_t bytes) {
  reseed_bytes_->Increment(static_cast<double>(bytes));
}

void FailoverMetrics::CountMovedBack() { moved_back_->Increment(); }

}  // namespace pscluster
