// The training loop under --strategy=parameter_server (docs/how-it-works.md):
// the ps hold the model sharded. This worker asks the chief for one chunk
// (batch) at a time, computes its gradient and pushes it to every ps,
// fetching the next weights in the same round trip (an Exchange,
// worker/exchange.h): over the tcp data plane the gradient leaves layer by
// layer while backprop runs, and with priority pulls the next step starts
// on the first layers' weights while the rest still arrive. In async mode a
// worker too far ahead is told BOUND and asks again, backing off, then
// pulls fresh weights.
//
// Faults: every RPC retries with back-off (wire/ps_client.h); a push
// aborted because the ps were restored from a checkpoint is dropped, the
// weights pulled again and the chief's (rewound) work continued. A step
// whose weights arrived torn is done again. A restarted worker simply starts
// again: the chief hands it new chunks.
//
// Run is called once, from one thread (worker/training_loop.h).
#ifndef PSCLUSTER_WORKER_PS_LOOP_H_
#define PSCLUSTER_WORKER_PS_LOOP_H_

#include "absl/status/status.h"
#include "worker/training_loop.h"

namespace pscluster {

class ParameterServerLoop final : public TrainingLoop {
 public:
  absl::Status Run(const TrainingContext& context) override;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_PS_LOOP_H_
