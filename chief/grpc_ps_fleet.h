// GrpcPsFleet: PsFleet over gRPC, one stub per ps on the channels it is
// given (the chief's one channel per task). Pulling the weights is not
// here: the chief's export uses wire/ps_client.h like the workers.
//
// Thread-safe (gRPC stubs are); the placement and the stop flag are
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

#include "chief/ps_fleet.h"
#include "model/placement.h"
#include "proto/ps.grpc.pb.h"

namespace pscluster {

class GrpcPsFleet final : public PsFleet {
 public:
  // channels[i] leads to ps i; retried calls end Cancelled once *stop.
  GrpcPsFleet(const Placement* placement,
              const std::vector<std::shared_ptr<grpc::Channel>>& channels,
              const std::atomic<bool>* stop);

  int num_ps() const override { return static_cast<int>(ps_.size()); }
  absl::StatusOr<PsStatsResponse> Stats(int ps, absl::Duration timeout) override;
  absl::Status SetWorkers(int ps, const std::vector<bool>& active, absl::Duration timeout) override;
  absl::StatusOr<ShardState> Snapshot(int ps, absl::Duration timeout) override;
  absl::StatusOr<InitResponse> Init(int ps, const InitRequest& request,
                                    absl::Duration total_timeout) override;
  absl::Status SetBackups(int ps, const std::vector<std::string>& addresses,
                          absl::Duration timeout) override;
  absl::Status Restore(int ps, const RestoreRequest& request,
                       absl::Duration total_timeout) override;
  absl::StatusOr<ShardState> SnapshotOfBackup(const std::string& address,
                                              absl::Duration timeout) override;
  absl::StatusOr<StepCommitRequest> GetDecision(int ps, int64_t version,
                                                absl::Duration timeout) override;
  absl::Status CommitStep(int ps, const StepCommitRequest& decision,
                          absl::Duration timeout) override;

 private:
  const Placement* const placement_;
  const std::atomic<bool>* const stop_;
  std::vector<std::unique_ptr<ParameterServer::Stub>> ps_;
  // Backup stores' stubs, by address.
  std::map<std::string, std::unique_ptr<ParameterServer::Stub>> backups_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_GRPC_PS_FLEET_H_
