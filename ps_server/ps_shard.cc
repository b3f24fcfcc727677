#include "ps_server/ps_shard.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "update/store_state.h"

namespace pscluster {

grpc::Status InvalidArgumentStatus(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

PsShard::PsShard(ParameterStore* store, Metrics* metrics, const PsServiceOptions& options)
    : store_(store),
      metrics_(metrics),
      options_(options),
      incarnation_(std::random_device{}() | (uint64_t{std::random_device{}()} << 32)) {
  auto gauge = [&](const char* name, const char* help) -> prometheus::Gauge* {
    absl::StatusOr<prometheus::Gauge*> g = metrics_->AddGauge(name, help);
    return g.ok() ? *g : nullptr;
  };
  backups_set_gauge_ =
      gauge("pscluster_backups", "Backups of this ps's store it keeps up to date (--ps_replicas).");
  backups_live_gauge_ =
      gauge("pscluster_backups_live", "Of those, the ones that keep up: answers wait for them.");
  replicated_version_gauge_ = gauge("pscluster_replicated_version",
                                    "The version every backup that keeps up holds (-1: none yet).");
  replicated_bytes_gauge_ =
      gauge("pscluster_replicated_bytes", "Bytes sent to the backups: seeds and updates.");
}

void PsShard::SetHeld(const InitRequest& init) {
  absl::MutexLock lock(&shards_mu_);
  shards_.assign(init.shards().begin(), init.shards().end());
  config_ = init;
  config_.clear_values();
}

bool PsShard::drains_on_stop() {
  absl::MutexLock lock(&shards_mu_);
  return config_.drain_on_stop();
}

grpc::Status PsShard::CheckShards(const google::protobuf::RepeatedPtrField<ShardSpec>& shards) {
  absl::MutexLock lock(&shards_mu_);
  if (shards_.empty()) return grpc::Status::OK;  // nothing held yet
  for (const ShardSpec& s : shards) {
    bool known = false;
    for (const ShardSpec& mine : shards_) {
      if (mine.variable() == s.variable() && mine.part() == s.part()) {
        if (mine.offset() != s.offset() || mine.size() != s.size()) {
          return InvalidArgumentStatus(absl::StrCat(
              "variable ", s.variable(), " part ", s.part(), " is [", s.offset(), ", +", s.size(),
              ") in the request but [", mine.offset(), ", +", mine.size(), ") on this ps"));
        }
        known = true;
      }
    }
    if (!known) {
      return InvalidArgumentStatus(absl::StrCat("unknown variable ", s.variable(), " part ",
                                                s.part(), ": this ps does not hold it"));
    }
  }
  if (shards.size() != static_cast<int>(shards_.size())) {
    return InvalidArgumentStatus(absl::StrCat("the request names ", shards.size(),
                                              " shards; this ps holds ", shards_.size()));
  }
  return grpc::Status::OK;
}

std::vector<WirePiece> PsShard::Pieces() {
  absl::MutexLock lock(&shards_mu_);
  std::vector<WirePiece> pieces;
  for (const ShardSpec& s : shards_) pieces.push_back({s.size(), s.moving_statistic()});
  return pieces;
}

absl::Status PsShard::Capture(uint64_t fingerprint, CapturedState* out) {
  PSCLUSTER_RETURN_IF_ERROR(store_->Snapshot(fingerprint, &out->store));
  out->fingerprint = fingerprint;
  absl::MutexLock lock(&shards_mu_);
  out->shards = shards_;
  return absl::OkStatus();
}

void PsShard::CapturedToState(const CapturedState& captured, ShardState* out) {
  out->set_layout_fingerprint(captured.fingerprint);
  for (const ShardSpec& sh : captured.shards) *out->add_shards() = sh;
  StoreStateToProto(captured.store, out);
}

absl::Status PsShard::StateOf(uint64_t fingerprint, ShardState* out) {
  CapturedState captured;
  PSCLUSTER_RETURN_IF_ERROR(Capture(fingerprint, &captured));
  CapturedToState(captured, out);
  return absl::OkStatus();
}

absl::StatusOr<RestoreRequest> PsShard::SeedRequest() {
  RestoreRequest req;
  {
    absl::MutexLock lock(&shards_mu_);
    *req.mutable_init() = config_;
  }
  if (absl::Status s = StateOf(req.init().layout_fingerprint(), req.mutable_state()); !s.ok()) {
    return s;
  }
  return req;
}

std::shared_ptr<Replicator> PsShard::CurrentReplicator() {
  absl::MutexLock lock(&replicator_mu_);
  return replicator_;
}

grpc::Status PsShard::SetBackups(uint64_t fingerprint, std::vector<std::string> addresses) {
  absl::MutexLock lock(&replicator_mu_);
  if (replicator_ != nullptr && replicator_->replaced()) {
    // Fencing: it must not take pushes again; Demote makes it a backup.
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this ps was replaced by its backup: it is demoted, not given backups");
  }
  if (replicator_ != nullptr) replicator_->Stop();  // gives the listener back
  replicator_.reset();
  if (!addresses.empty()) {
    replicator_ = std::make_shared<Replicator>(
        store_, fingerprint, [this] { return SeedRequest(); }, std::move(addresses),
        options_.replicator);
  }
  return grpc::Status::OK;
}

void PsShard::StopReplicator() {
  absl::MutexLock lock(&replicator_mu_);
  if (replicator_ != nullptr) replicator_->Stop();  // gives the listener back
  replicator_.reset();
}

ReplicationStats PsShard::UpdateReplicationMetrics(const Replicator& replicator) {
  const ReplicationStats r = replicator.stats();
  if (backups_set_gauge_) backups_set_gauge_->Set(r.backups_set);
  if (backups_live_gauge_) backups_live_gauge_->Set(r.backups_live);
  if (replicated_version_gauge_)
    replicated_version_gauge_->Set(static_cast<double>(r.replicated_version));
  if (replicated_bytes_gauge_) replicated_bytes_gauge_->Set(static_cast<double>(r.bytes_sent));
  return r;
}

grpc::Status PsShard::AwaitReplicated(int64_t version, absl::Time deadline) {
  std::shared_ptr<Replicator> replicator = CurrentReplicator();
  for (;;) {
    // Demoted (a move back, or replaced): what it holds may be ahead of
    // the store promoted in its place (an update whose record was still on
    // its way), and no answer may tell a worker of it. Demote makes the
    // store a backup before it stops the replicator, so a caller that
    // finds none here, or a stopped one, sees the demotion.
    if (store_->stats().backup) return Replaced();
    // No backups set: none can be promoted lacking this version (a backup
    // set later is seeded with a state that holds it).
    if (replicator == nullptr) return grpc::Status::OK;
    const bool held = replicator->WaitReplicated(version, deadline);
    UpdateReplicationMetrics(*replicator);
    if (replicator->replaced() || store_->stats().backup) return Replaced();
    std::shared_ptr<Replicator> now = replicator->stopped() ? CurrentReplicator() : replicator;
    if (now == replicator) {
      if (held) return grpc::Status::OK;
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("the backups did not confirm version ", version,
                                       " before the call's deadline"));
    }
    // Stopped, not demoted: SetBackups put another replicator in its place
    // (its backups hold `version` once seeded), or none (the chief's word:
    // go on alone). Its Stop confirmed nothing: wait on what is set now.
    replicator = std::move(now);
  }
}

grpc::Status PsShard::Replaced() {
  // Unavailable: the worker asks the chief where the shards are now.
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "this ps was replaced: its backup serves its shards now");
}

void PsShard::Stats(PsStatsResponse* resp) {
  StoreStats s = store_->stats();
  resp->set_version(s.version);
  resp->set_pushes_applied(s.pushes_applied);
  resp->set_pushes_dropped_stale(s.pushes_dropped_stale);
  resp->set_pushes_rejected(pushes_rejected_.load());
  resp->set_steps_torn(s.steps_torn);
  resp->set_applied_digest(s.applied_digest);
  resp->set_pushes_duplicate(s.pushes_duplicate);
  resp->set_steps_applied(s.steps_applied);
  resp->set_staleness_sum(s.staleness_sum);
  resp->set_staleness_max(s.staleness_max);
  resp->set_data_port(data_port_.load());
  resp->set_leaving(leaving_.load());
  {
    absl::MutexLock lock(&shards_mu_);
    for (int port : backup_ports_) resp->add_backup_ports(port);
    if (!backup_ports_.empty()) resp->set_backup_port(backup_ports_.front());
  }
  resp->set_primary_term(s.primary_term);
  resp->set_bytes_pulled(bytes_pulled_.load());
  resp->set_bytes_pushed(bytes_pushed_.load());
  resp->set_generation(s.generation);
  resp->set_initialized(s.initialized);
  resp->set_incarnation(incarnation_);
  resp->set_steps_skipped_nonfinite(s.steps_skipped_nonfinite);
  int64_t sparse_bytes = 0;
  for (const SparseTableStats& t : s.sparse_tables) sparse_bytes += t.bytes;
  resp->set_sparse_bytes(sparse_bytes);
  for (bool a : s.active_workers) resp->add_active_workers(a);
  resp->set_backup(s.backup);
  resp->set_decider_epoch(s.decider_epoch);
  resp->set_replicated_version(-1);
  if (std::shared_ptr<Replicator> replicator = CurrentReplicator(); replicator != nullptr) {
    const ReplicationStats r = UpdateReplicationMetrics(*replicator);
    resp->set_replicated_version(r.replicated_version);
    resp->set_backups_live(r.backups_live);
    resp->set_backups_set(r.backups_set);
    resp->set_bytes_replicated(r.bytes_sent);
    resp->set_bytes_replicated_data_plane(r.bytes_sent_data_plane);
  }
}

grpc::Status PsShard::Refused(grpc::Status s) {
  ++pushes_rejected_;
  metrics_->pushes_rejected().Increment();
  return s;
}

void PsShard::set_backup_ports(std::vector<int> ports) {
  absl::MutexLock lock(&shards_mu_);
  backup_ports_ = std::move(ports);
}

void PsShard::NotePromoted(int64_t version) {
  promoted_at_ = absl::Now();
  promoted_from_ = version;
}

void PsShard::NoteStepAsPrimary(int64_t version) {
  int64_t from = promoted_from_.load(std::memory_order_relaxed);
  if (from < 0 || version <= from || !promoted_from_.compare_exchange_strong(from, -1)) return;
  spdlog::info(
      "promoted to primary at version {}: the first update since is applied and answered "
      "(version {}), {:.0f} ms after the promotion",
      from, version, absl::ToDoubleMilliseconds(absl::Now() - promoted_at_));
}

}  // namespace pscluster
