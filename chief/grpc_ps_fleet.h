// GrpcPsFleet: PsFleet over gRPC, one stub per ps on the channels it is
// given (the chief's one channel per task). Pulling the weights is not
// here: the chief's export uses wire/ps_client.h like the workers.
//
// Thread-safe; the placement and the stop flag are
// borrowed and must outlive the fleet.
#ifndef PSCLUSTER_CHIEF_GRPC_PS_FLEET_H_
#define PSCLUSTER_CHIEF_GRPC_PS_FLEET_H_

#include <atomic>
#include <memory>
#include <vector>

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "chief/ps_fleet.h"
#include "model/placement.h"
#include "proto/ps.grpc.pb.h"

namespace pscluster {

class GrpcPsFleet final : public PsFleet {
 public:
  // channels[i] leads to ps i, at addresses[i]; retried calls end
  // Cancelled once *stop.
  GrpcPsFleet(const Placement* placement,
              const std::vector<std::shared_ptr<grpc::Channel>>& channels,
              std::vector<std::string> addresses, const std::atomic<bool>* stop);

  // The ps in use: the first num_ps() of those given (all of them until
  // set_num_ps; the chief's --min_ps adds and drains ps). The others answer
  // Stats and StatsAt, to be found when they come.
  int num_ps() const override {
    absl::MutexLock lock(&mu_);
    return in_use_;
  }
  int num_listed() const { return static_cast<int>(ps_.size()); }
  void set_num_ps(int n);
  std::string address(int ps) const override;
  void MoveTo(int ps, const std::string& address) override;
  absl::StatusOr<PsStatsResponse> Stats(int ps, absl::Duration timeout) override;
  absl::Status SetWorkers(int ps, const std::vector<bool>& active, absl::Duration timeout) override;
  absl::StatusOr<ShardState> Snapshot(int ps, absl::Duration timeout) override;
  absl::StatusOr<ShardState> CaptureSnapshot(int ps, absl::Duration timeout) override;
  absl::StatusOr<ShardState> FetchCapturedSnapshot(int ps, absl::Duration timeout) override;
  absl::StatusOr<ShardState> RecentChunks(int ps, absl::Duration timeout) override;
  absl::StatusOr<InitResponse> Init(int ps, const InitRequest& request,
                                    absl::Duration total_timeout) override;
  absl::Status SetBackups(int ps, const std::vector<std::string>& addresses,
                          absl::Duration timeout) override;
  absl::Status Restore(int ps, const RestoreRequest& request,
                       absl::Duration total_timeout) override;
  absl::StatusOr<ShardState> SnapshotOfBackup(const std::string& address,
                                              absl::Duration timeout) override;
  absl::StatusOr<StepCommitRequest> GetDecision(int ps, int64_t version, int64_t fence_below,
                                                absl::Duration timeout) override;
  absl::Status CommitStep(int ps, const StepCommitRequest& decision,
                          absl::Duration timeout) override;
  absl::StatusOr<PsStatsResponse> StatsAt(const std::string& address,
                                          absl::Duration timeout) override;
  absl::StatusOr<int64_t> Promote(const std::string& address, int64_t generation, bool decides,
                                  const StepCommitRequest* in_flight, int64_t decider_epoch,
                                  int64_t primary_term, absl::Duration timeout) override;
  absl::Status SetFollowers(int ps, const std::vector<std::string>& addresses,
                            absl::Duration timeout) override;
  absl::Status Demote(const std::string& address, absl::Duration timeout) override;
  // Demote of a store that holds the shards of `fingerprint`'s placement
  // (one the chief has just placed the shards away from).
  absl::Status DemoteLayout(const std::string& address, uint64_t fingerprint,
                            absl::Duration timeout);

 private:
  absl::StatusOr<ShardState> SnapshotPart(int ps, SnapshotRequest::Part part,
                                          absl::Duration timeout);
  // A ps's two services, over one channel.
  struct Stub {
    explicit Stub(const std::shared_ptr<grpc::Channel>& channel)
        : data(ParameterServer::NewStub(channel)), control(PsControl::NewStub(channel)) {}
    std::unique_ptr<ParameterServer::Stub> data;
    std::unique_ptr<PsControl::Stub> control;
  };
  // The stub that reaches ps i's shards now.
  std::shared_ptr<Stub> StubOf(int i) const;
  // A stub for a store by its address, made once.
  std::shared_ptr<Stub> StubAt(const std::string& address);

  const Placement* const placement_;
  const std::atomic<bool>* const stop_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<Stub>> ps_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  int in_use_ ABSL_GUARDED_BY(mu_) = 0;
  // Stubs by address (backup stores, restarted ps's own stores).
  std::map<std::string, std::shared_ptr<Stub>> by_address_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_GRPC_PS_FLEET_H_
