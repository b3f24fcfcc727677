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

 private:
  const Placement* const placement_;
  const std::atomic<bool>* const stop_;
  std::vector<std::unique_ptr<ParameterServer::Stub>> ps_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_GRPC_PS_FLEET_H_
