#include "ps_server/replicator.h"

#include <algorithm>
#include <cstring>

#include "absl/time/clock.h"
#include "common/retry.h"
#include "common/security.h"
#include "proto/ps.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "update/store_state.h"
#include "wire/data_plane.h"

namespace pscluster {
namespace {

// Calling a backup again: at once at first, at most every 100 ms while it
// is down (a restarted one is seeded within that of answering).
// A backup's refusal of updates: restarted, behind, or of another
// generation. It takes a fresh seed, whichever way the updates came.
bool NeedsSeed(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
         s.error_code() == grpc::StatusCode::ABORTED ||
         (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
          s.error_message().find("not initialised") != std::string::npos);
}

// The backup answered that it is a primary (promoted in this store's
// place): PsService's answer to a seed or records sent to a primary.
bool PromotedAnswer(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::ALREADY_EXISTS;
}

RetryPolicy CallAgainPolicy() {
  RetryPolicy p;
  p.initial_backoff = absl::Milliseconds(1);
  p.max_backoff = absl::Milliseconds(100);
  return p;
}

// u as a record; its gradient in the record (gRPC) or, with
// `payload_bytes` saying how much, left where it is for the data plane's
// payload.
void ToRecord(const AppliedUpdate& u, bool gradient_inline, AppliedUpdateRecord* r) {
  r->set_generation(u.generation);
  r->set_version(u.version);
  const size_t bytes = u.gradient.size() * sizeof(float);
  if (gradient_inline) {
    r->mutable_gradient()->assign(reinterpret_cast<const char*>(u.gradient.data()), bytes);
  } else {
    r->set_payload_bytes(bytes);
  }
  r->set_skipped(u.skipped);
  for (bool m : u.members) r->add_members(m);
  for (uint64_t id : u.member_request_ids) r->add_member_request_ids(id);
  for (int64_t chunk : u.member_chunks) r->add_member_chunks(chunk);
  r->set_worker(u.worker);
  r->set_request_id(u.request_id);
  r->set_staleness(u.staleness);
  r->set_primary_term(u.primary_term);
  r->mutable_clip_scales()->Assign(u.clip_scales.begin(), u.clip_scales.end());
  for (const SparseRowsData& rows : u.sparse) SparseRowsToProto(rows, r->add_sparse());
}

}  // namespace

Replicator::Replicator(ParameterStore* store, uint64_t layout_fingerprint, SeedFn seed,
                       const std::vector<std::string>& backups,
                       const ReplicatorOptions& options)
    : store_(store),
      layout_fingerprint_(layout_fingerprint),
      seed_(std::move(seed)),
      options_(options) {
  std::vector<Backup*> started;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& address : backups) {
      backups_.push_back(std::make_unique<Backup>());
      backups_.back()->address = address;
      started.push_back(backups_.back().get());
    }
  }
  store_->SetUpdateListener([this](AppliedUpdate u) { Collect(std::move(u)); });
  for (Backup* b : started) senders_.emplace_back([this, b] { Send(b); });
}

Replicator::~Replicator() { Stop(); }

void Replicator::Stop() {
  if (stop_.exchange(true)) return;
  store_->SetUpdateListener(nullptr);
  {
    absl::MutexLock lock(&mu_);
    changed_.SignalAll();
  }
  for (std::thread& t : senders_) t.join();
}

void Replicator::Collect(AppliedUpdate u) {
  const bool restored = u.restored;
  // One copy for every backup's queue, made before the lock.
  std::shared_ptr<const AppliedUpdate> shared =
      restored ? nullptr : std::make_shared<const AppliedUpdate>(std::move(u));
  absl::MutexLock lock(&mu_);
  for (const std::unique_ptr<Backup>& b : backups_) {
    if (restored) {
      // Restored from a checkpoint: what a backup holds is of another
      // state (maybe at a higher version); only a fresh seed follows.
      b->queue.clear();
      b->collecting = false;
      b->held = -1;
      continue;
    }
    if (!b->collecting) continue;
    if (static_cast<int>(b->queue.size()) >= options_.max_queued) {
      // Further behind than a seed costs: seed it afresh.
      b->queue.clear();
      b->collecting = false;
      continue;
    }
    b->queue.push_back(shared);
  }
  changed_.SignalAll();
}

bool Replicator::WaitReplicated(int64_t version, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::unique_ptr<Backup>& b : backups_) {
      if (!b->refused && b->held < version) return false;
    }
    return true;
  };
  while (!stop_ && !replaced_ && !done()) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) return !replaced_ && (stop_ || done());
  }
  return !replaced_;
}

ReplicationStats Replicator::stats() const {
  absl::MutexLock lock(&mu_);
  ReplicationStats s;
  s.backups_set = static_cast<int>(backups_.size());
  int64_t lowest = -1;
  bool any = false;
  for (const std::unique_ptr<Backup>& b : backups_) {
    if (!b->live) continue;
    ++s.backups_live;
    lowest = any ? std::min(lowest, b->held) : b->held;
    any = true;
  }
  s.replicated_version = any ? lowest : -1;
  s.bytes_sent = bytes_sent_.load();
  s.bytes_sent_data_plane = bytes_sent_data_plane_.load();
  return s;
}

void Replicator::MarkFailing(Backup* b, absl::Time failing_since) {
  if (absl::Now() - failing_since < options_.lost_after) return;
  absl::MutexLock lock(&mu_);
  if (!b->live) return;
  b->live = false;
  spdlog::warn("backup at {} has not answered for {}: answers wait for it until it does or "
               "this ps is told to go on without it",
               b->address, absl::FormatDuration(absl::Now() - failing_since));
}

void Replicator::MarkReplaced(Backup* b, const std::string& why) {
  absl::MutexLock lock(&mu_);
  if (replaced_) return;
  replaced_ = true;
  changed_.SignalAll();
  spdlog::error("the backup at {} is a primary now, or follows a newer one ({}): this ps was "
                "replaced, it answers no more pushes",
                b->address, why);
}

bool Replicator::Seed(Backup* b, PsControl::Stub* stub) {
  {
    // Updates from here on are queued; those the snapshot below holds
    // already are skipped by the backup (it has their versions).
    absl::MutexLock lock(&mu_);
    b->queue.clear();
    b->collecting = true;
  }
  absl::StatusOr<RestoreRequest> req = seed_();
  if (!req.ok()) return false;  // not initialised yet, or shutting down
  req->set_as_backup(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  RestoreResponse resp;
  grpc::Status s = stub->Restore(&ctx, *req, &resp);
  if (PromotedAnswer(s)) {
    MarkReplaced(b, s.error_message());
    return false;
  }
  if (!s.ok()) {
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
        s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      // Not a place for a backup (a primary, or of a newer generation):
      // answers do not wait for it; it is asked again in case it changes.
      absl::MutexLock lock(&mu_);
      if (!b->refused) {
        spdlog::error("backup at {} refused to be seeded: {}", b->address, s.error_message());
        b->live = false;
        b->refused = true;
        changed_.SignalAll();
      }
    }
    return false;
  }
  bytes_sent_ += static_cast<int64_t>(req->ByteSizeLong());
  absl::MutexLock lock(&mu_);
  if (!b->collecting) return false;  // the store was restored meanwhile: stale
  b->held = resp.version();
  if (!b->live) spdlog::info("backup at {} keeps up again from version {}", b->address, b->held);
  b->live = true;
  b->refused = false;
  changed_.SignalAll();
  return true;
}

void Replicator::Send(Backup* b) {
  // One backup's sender thread: seed it, then send the records in order over
  // the data plane or gRPC, and react to each refusal (seed again, replaced,
  // stop). Kept in one piece (122 lines): the loop's state (seeded, the
  // transport, where the records stand) is its own.
  const std::shared_ptr<grpc::Channel> channel = MakeChannel(b->address, options_.rpc);
  std::unique_ptr<PsControl::Stub> stub = PsControl::NewStub(channel);
  std::unique_ptr<ParameterServer::Stub> stats_stub = ParameterServer::NewStub(channel);
  // The backup's tcp data plane (its port asked over gRPC before a dial),
  // as StepBroadcaster reaches the other ps: when it fails, the updates go
  // over gRPC, and so do the next ones for 10 s.
  auto port_of = DataPortFromStats(stats_stub.get(), b->address);
  DataChannel data(b->address, port_of,
                   options_.rpc.security ? options_.rpc.security : ProcessSecurity(), &stop_);
  absl::Time grpc_until = absl::InfinitePast();  // after the data plane failed
  bool seeded = false;
  absl::Time failing_since = absl::InfiniteFuture();  // of the calls now failing
  std::unique_ptr<Backoff> backoff = std::make_unique<Backoff>(CallAgainPolicy());
  auto failed = [&] {
    if (failing_since == absl::InfiniteFuture()) failing_since = absl::Now();
    MarkFailing(b, failing_since);
    absl::SleepFor(backoff->Next());
  };
  auto succeeded = [&] {
    if (failing_since == absl::InfiniteFuture()) return;
    failing_since = absl::InfiniteFuture();
    backoff = std::make_unique<Backoff>(CallAgainPolicy());
  };
  while (!stop_ && !replaced_) {
    if (!seeded && !store_->stats().initialized) {
      absl::SleepFor(absl::Milliseconds(20));  // nothing to seed with yet
      continue;
    }
    if (!seeded) {
      seeded = Seed(b, stub.get());
      if (seeded) {
        succeeded();
      } else {
        failed();
      }
      continue;
    }
    ReplicateRequest req;
    req.set_layout_fingerprint(layout_fingerprint_);
    std::vector<std::shared_ptr<const AppliedUpdate>> batch;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && b->collecting && b->queue.empty()) {
        changed_.WaitWithTimeout(&mu_, absl::Milliseconds(200));
      }
      if (stop_) break;
      if (!b->collecting) {  // dropped for a fresh seed
        seeded = false;
        continue;
      }
      const int n = std::min<int>(options_.max_batch, static_cast<int>(b->queue.size()));
      batch.assign(b->queue.begin(), b->queue.begin() + n);
    }
    // Made outside the lock, which the store's listener (under the store's
    // lock) takes. Over the data plane the gradients go from where they
    // lie; over gRPC they are copied into the records.
    ReplicateResponse resp;
    grpc::Status s;
    bool via_data_plane = false;
    if (absl::Now() >= grpc_until) {
      std::vector<absl::string_view> payload;
      for (const std::shared_ptr<const AppliedUpdate>& u : batch) {
        ToRecord(*u, /*gradient_inline=*/false, req.add_updates());
        payload.emplace_back(reinterpret_cast<const char*>(u->gradient.data()),
                             u->gradient.size() * sizeof(float));
      }
      s = data.Unary(DataKind::kReplicate, &req, &resp, absl::Now() + absl::Seconds(2),
                     std::move(payload));
      via_data_plane = s.ok();
      if (!s.ok() && !NeedsSeed(s) && !PromotedAnswer(s)) {
        // Not reached, or not understood (an older ps): gRPC's answer is
        // the one that counts, and records the backup already holds are
        // skipped by it.
        spdlog::warn("updates go to the backup at {} over gRPC for 10 s: its data plane "
                     "answered {}",
                     b->address, s.error_message());
        grpc_until = absl::Now() + absl::Seconds(10);
        req.clear_updates();
      }
    }
    if (!via_data_plane && !NeedsSeed(s) && !PromotedAnswer(s) && absl::Now() < grpc_until) {
      for (const std::shared_ptr<const AppliedUpdate>& u : batch) {
        ToRecord(*u, /*gradient_inline=*/true, req.add_updates());
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(DeadlineIn(std::chrono::seconds(2)));
      s = stub->Replicate(&ctx, req, &resp);
    }
    if (s.ok()) {
      succeeded();
      int64_t bytes = static_cast<int64_t>(req.ByteSizeLong());
      int64_t payload = 0;
      for (const AppliedUpdateRecord& r : req.updates()) payload += r.payload_bytes();
      bytes_sent_ += bytes + payload;
      if (via_data_plane) bytes_sent_data_plane_ += bytes + payload;
      absl::MutexLock lock(&mu_);
      // What was sent is still at the queue's front: only this thread
      // takes from it, and a fresh seed clears it (then held is the seed's).
      if (b->collecting) {  // else dropped for a fresh seed meanwhile
        b->queue.erase(b->queue.begin(), b->queue.begin() + std::min<size_t>(
                                                                 req.updates_size(),
                                                                 b->queue.size()));
        b->held = std::max(b->held, resp.version());
      }
      if (!b->live) spdlog::info("backup at {} keeps up again", b->address);
      b->live = true;
      changed_.SignalAll();
      continue;
    }
    if (PromotedAnswer(s)) {
      MarkReplaced(b, s.error_message());
      break;
    }
    if (NeedsSeed(s)) {
      spdlog::info("backup at {} needs a fresh seed: {}", b->address, s.error_message());
      seeded = false;
      continue;
    }
    failed();
  }
}

}  // namespace pscluster
