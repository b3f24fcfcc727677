// PsClient: talks to every parameter server at once. One RPC per ps per
// call, all in flight together (gRPC's callback API); each carries all of
// that ps's shards as raw float32 bytes, gathered from and scattered into
// the model's flat parameter vector by the shared placement.
//
// Not thread-safe: one training loop (or the evaluator) owns it. Message
// buffers are reused from call to call.
#ifndef PSCLUSTER_WORKER_PS_CLIENT_H_
#define PSCLUSTER_WORKER_PS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/placement.h"
#include "common/rpc.h"
#include "proto/ps.grpc.pb.h"

namespace pscluster {

class PsClient {
 public:
  // `placement` is borrowed and must outlive the client. InvalidArgument
  // when the cluster's ps count differs from the placement's.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      const ClusterSpec& cluster, const Placement* placement,
      const RpcOptions& options = {});

  // Fills `params` (the flat vector) from every ps once each is at version
  // >= min_version. Retries while a ps is unreachable or not initialised,
  // up to `timeout`; the error then names the ps.
  absl::Status PullAll(int64_t min_version, float* params, absl::Duration timeout);

  // Pushes `grads` (flat), computed on the weights of versions(), to every
  // ps and, unless `last`, fetches the weights of the next step into
  // `params`. Sync: waits until the step is applied.
  absl::Status PushPullAll(int worker, int num_examples, bool last,
                           const float* grads, float* params, absl::Duration timeout);

  // Version of each ps's shards in `params` after the last call.
  const std::vector<int64_t>& versions() const { return versions_; }
  // The smallest of versions(): the global step the weights belong to.
  int64_t version() const;
  int64_t pushes_dropped() const { return pushes_dropped_; }


 private:
  PsClient() = default;
  struct PerPs {
    std::unique_ptr<ParameterServer::Stub> stub;
    std::string address;
    PullRequest pull_req;
    PullResponse pull_resp;
    PushRequest push_req;
    PushPullResponse push_resp;
  };

  const Placement* placement_ = nullptr;  // borrowed
  std::vector<PerPs> ps_;
  std::vector<int64_t> versions_;
  std::vector<float> wire_;  // gather/scatter scratch
  uint64_t next_request_id_ = 0;
  int64_t pushes_dropped_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_PS_CLIENT_H_
