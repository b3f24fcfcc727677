// PsService: a ps's gRPC services over one store (proto/ps.proto), sharing
// one PsShard (ps_shard.h): the workers' data path (PsDataService, the
// ParameterServer service: pulls, pushes, stats) and the control of the ps
// by the chief and the other ps (PsControlService, the PsControl service:
// initialisation, checkpoints, the sync worker set, replication,
// fail-over). A server registers both (grpc_services()); the tcp data
// plane (data_plane_server.h) calls their handlers directly.
// Thread-safe; the store and the metrics are borrowed and must outlive it.
#ifndef PSCLUSTER_PS_SERVER_PS_SERVICE_H_
#define PSCLUSTER_PS_SERVER_PS_SERVICE_H_

#include <vector>

#include "common/metrics.h"
#include "grpcpp/grpcpp.h"
#include "ps_server/ps_control_service.h"
#include "ps_server/ps_data_service.h"
#include "ps_server/ps_shard.h"
#include "update/parameter_store.h"

namespace pscluster {

class PsService {
 public:
  PsService(ParameterStore* store, Metrics* metrics, const PsServiceOptions& options = {})
      : shard_(store, metrics, options), data_(&shard_), control_(&shard_) {}
  PsService(const PsService&) = delete;
  PsService& operator=(const PsService&) = delete;

  PsShard& shard() { return shard_; }
  PsDataService& data() { return data_; }
  PsControlService& control() { return control_; }
  // Both services, to register with a server.
  std::vector<grpc::Service*> grpc_services() { return {&data_, &control_}; }

 private:
  PsShard shard_;
  PsDataService data_;
  PsControlService control_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVER_PS_SERVICE_H_
