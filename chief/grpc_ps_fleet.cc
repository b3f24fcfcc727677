#include "chief/grpc_ps_fleet.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/retry.h"
#include "common/rpc.h"

namespace pscluster {

GrpcPsFleet::GrpcPsFleet(const Placement* placement,
                         const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                         std::vector<std::string> addresses, const std::atomic<bool>* stop)
    : placement_(placement), stop_(stop), addresses_(std::move(addresses)) {
  for (const auto& channel : channels) ps_.push_back(std::make_shared<Stub>(channel));
  in_use_ = static_cast<int>(addresses_.size());
}

void GrpcPsFleet::set_num_ps(int n) {
  absl::MutexLock lock(&mu_);
  in_use_ = std::clamp(n, 1, static_cast<int>(addresses_.size()));
}

std::string GrpcPsFleet::address(int i) const {
  absl::MutexLock lock(&mu_);
  return addresses_[i];
}

void GrpcPsFleet::MoveTo(int i, const std::string& address) {
  std::shared_ptr<Stub> stub = StubAt(address);
  absl::MutexLock lock(&mu_);
  addresses_[i] = address;
  ps_[i] = std::move(stub);
}

std::shared_ptr<GrpcPsFleet::Stub> GrpcPsFleet::StubOf(int i) const {
  absl::MutexLock lock(&mu_);
  return ps_[i];
}

std::shared_ptr<GrpcPsFleet::Stub> GrpcPsFleet::StubAt(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Stub>& stub = by_address_[address];
  if (stub == nullptr) stub = std::make_shared<Stub>(MakeChannel(address));
  return stub;
}

absl::StatusOr<PsStatsResponse> GrpcPsFleet::Stats(int i, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  PsStatsResponse st;
  grpc::Status s = StubOf(i)->data->GetStats(&ctx, PsStatsRequest(), &st);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("stats of ps:", i));
  return st;
}

absl::Status GrpcPsFleet::SetWorkers(int i, const std::vector<bool>& active,
                                     absl::Duration timeout) {
  SetWorkersRequest req;
  req.set_layout_fingerprint(placement_->fingerprint);
  for (bool a : active) req.add_active(a);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  SetWorkersResponse resp;
  grpc::Status s = StubOf(i)->control->SetWorkers(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("setting the workers of ps:", i));
  return absl::OkStatus();
}

absl::StatusOr<ShardState> GrpcPsFleet::SnapshotPart(int i, SnapshotRequest::Part part,
                                                      absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  SnapshotRequest req;
  req.set_layout_fingerprint(placement_->fingerprint);
  req.set_part(part);
  ShardState state;
  grpc::Status s = StubOf(i)->control->Snapshot(&ctx, req, &state);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("snapshot of ps:", i));
  return state;
}

absl::StatusOr<ShardState> GrpcPsFleet::Snapshot(int i, absl::Duration timeout) {
  return SnapshotPart(i, SnapshotRequest::WHOLE, timeout);
}

absl::StatusOr<ShardState> GrpcPsFleet::CaptureSnapshot(int i, absl::Duration timeout) {
  return SnapshotPart(i, SnapshotRequest::CAPTURE, timeout);
}

absl::StatusOr<ShardState> GrpcPsFleet::FetchCapturedSnapshot(int i, absl::Duration timeout) {
  return SnapshotPart(i, SnapshotRequest::CAPTURED, timeout);
}

absl::StatusOr<ShardState> GrpcPsFleet::RecentChunks(int i, absl::Duration timeout) {
  return SnapshotPart(i, SnapshotRequest::RECENT_CHUNKS, timeout);
}

absl::StatusOr<InitResponse> GrpcPsFleet::Init(int i, const InitRequest& req,
                                               absl::Duration total_timeout) {
  InitResponse resp;
  RetryPolicy policy;
  policy.total_timeout = total_timeout;
  absl::Status s = RetryRpc(
      absl::StrCat("initialising ps:", i), policy,
      [&](absl::Time d) {
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(d));
        return StubOf(i)->control->Init(&ctx, req, &resp);
      },
      stop_);
  if (!s.ok()) return s;
  return resp;
}

absl::Status GrpcPsFleet::Restore(int i, const RestoreRequest& req, absl::Duration total_timeout) {
  RetryPolicy policy;
  policy.total_timeout = total_timeout;
  return RetryRpc(
      absl::StrCat("restoring ps:", i), policy,
      [&](absl::Time d) {
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(d));
        RestoreResponse resp;
        return StubOf(i)->control->Restore(&ctx, req, &resp);
      },
      stop_);
}

absl::Status GrpcPsFleet::SetBackups(int i, const std::vector<std::string>& addresses,
                                     absl::Duration timeout) {
  SetBackupsRequest req;
  req.set_layout_fingerprint(placement_->fingerprint);
  for (const std::string& a : addresses) req.add_addresses(a);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  SetBackupsResponse resp;
  grpc::Status s = StubOf(i)->control->SetBackups(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("setting the backups of ps:", i));
  return absl::OkStatus();
}

absl::StatusOr<ShardState> GrpcPsFleet::SnapshotOfBackup(const std::string& address,
                                                          absl::Duration timeout) {
  std::shared_ptr<Stub> stub = StubAt(address);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  SnapshotRequest req;
  req.set_layout_fingerprint(placement_->fingerprint);
  ShardState state;
  grpc::Status s = stub->control->Snapshot(&ctx, req, &state);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("snapshot of the backup store at ", address));
  return state;
}

absl::StatusOr<StepCommitRequest> GrpcPsFleet::GetDecision(int i, int64_t version,
                                                           int64_t fence_below,
                                                           absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  GetDecisionRequest req;
  req.set_layout_fingerprint(placement_->fingerprint);
  req.set_version(version);
  req.set_fence_below(fence_below);
  StepCommitRequest d;
  grpc::Status s = StubOf(i)->control->GetDecision(&ctx, req, &d);
  if (!s.ok()) {
    return FromGrpcStatus(s, absl::StrCat("ps:", i, "'s decision for step ", version));
  }
  return d;
}

absl::Status GrpcPsFleet::CommitStep(int i, const StepCommitRequest& decision,
                                     absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  StepCommitResponse resp;
  grpc::Status s = StubOf(i)->control->CommitStep(&ctx, decision, &resp);
  if (!s.ok()) {
    return FromGrpcStatus(s, absl::StrCat("giving ps:", i, " the decision of step ",
                                          decision.version()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PsStatsResponse> GrpcPsFleet::StatsAt(const std::string& address,
                                                     absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  PsStatsResponse st;
  grpc::Status s = StubAt(address)->data->GetStats(&ctx, PsStatsRequest(), &st);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("stats of the store at ", address));
  return st;
}

absl::StatusOr<int64_t> GrpcPsFleet::Promote(const std::string& address, int64_t generation,
                                             bool decides, const StepCommitRequest* in_flight,
                                             int64_t decider_epoch, int64_t primary_term,
                                             absl::Duration timeout) {
  PromoteRequest req;
  req.set_layout_fingerprint(placement_->fingerprint);
  req.set_generation(generation);
  req.set_decides(decides);
  if (in_flight != nullptr) *req.mutable_in_flight() = *in_flight;
  req.set_decider_epoch(decider_epoch);
  req.set_primary_term(primary_term);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  PromoteResponse resp;
  grpc::Status s = StubAt(address)->control->Promote(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("promoting the backup store at ", address));
  return resp.version();
}

absl::Status GrpcPsFleet::SetFollowers(int i, const std::vector<std::string>& addresses,
                                       absl::Duration timeout) {
  SetFollowersRequest req;
  req.set_layout_fingerprint(placement_->fingerprint);
  for (const std::string& a : addresses) req.add_addresses(a);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  SetFollowersResponse resp;
  grpc::Status s = StubOf(i)->control->SetFollowers(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("telling ps:", i, " where its followers are"));
  return absl::OkStatus();
}

absl::Status GrpcPsFleet::Demote(const std::string& address, absl::Duration timeout) {
  return DemoteLayout(address, placement_->fingerprint, timeout);
}

absl::Status GrpcPsFleet::DemoteLayout(const std::string& address, uint64_t fingerprint,
                                       absl::Duration timeout) {
  DemoteRequest req;
  req.set_layout_fingerprint(fingerprint);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  DemoteResponse resp;
  grpc::Status s = StubAt(address)->control->Demote(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("demoting the store at ", address));
  return absl::OkStatus();
}

}  // namespace pscluster
