// PsService: the gRPC face of a ParameterStore (proto/ps.proto). It only
// converts messages and statuses; every rule lives in the store.
// Thread-safe; the store and the metrics are borrowed and must outlive the
// service.
#ifndef PSCLUSTER_PS_SERVER_PS_SERVICE_H_
#define PSCLUSTER_PS_SERVER_PS_SERVICE_H_

#include <atomic>

#include "common/metrics.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/parameter_store.h"

namespace pscluster {

class PsService final : public ParameterServer::Service {
 public:
  PsService(ParameterStore* store, Metrics* metrics)
      : store_(store), metrics_(metrics) {}

  grpc::Status Init(grpc::ServerContext*, const InitRequest*, InitResponse*) override;
  grpc::Status Pull(grpc::ServerContext*, const PullRequest*, PullResponse*) override;
  grpc::Status Push(grpc::ServerContext*, const PushRequest*, PushResponse*) override;
  grpc::Status PushPull(grpc::ServerContext*, const PushRequest*,
                        PushPullResponse*) override;
  grpc::Status GetStats(grpc::ServerContext*, const PsStatsRequest*,
                        PsStatsResponse*) override;

 private:
  grpc::Status DoPush(const PushRequest& req, PushResponse* resp);
  grpc::Status DoPull(grpc::ServerContext* ctx, uint64_t fingerprint,
                      int64_t min_version, PullResponse* resp);

  ParameterStore* const store_;
  Metrics* const metrics_;
  std::atomic<int64_t> bytes_pulled_{0};
  std::atomic<int64_t> bytes_pushed_{0};
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVER_PS_SERVICE_H_
