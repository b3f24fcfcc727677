// Exchange: one step's push-pull to every ps (PsClient::PushPullAll), on a
// thread of its own: beside the step when the gradient leaves during
// backprop (streamed), and with priority pulls beyond it too, its weights
// still arriving while the next step starts on them. An exchange started
// after another (`before`) waits for that one to be over before it sends,
// and sends nothing (skipped) when that one failed or was torn.
//
// Ownership and threads: the loop's thread starts, waits for and joins an
// exchange; the exchange's thread uses the PsClient, the gradient and the
// weights of its Wiring (borrowed: they outlive every exchange) until it is
// over. An exchange owns the one before it until its own thread is past
// that one (ReleaseBefore). WaitAnsweredOrDone and applied_early may be
// called while it runs; the outcome (status() to generation()) is read
// after Join. Destroying an exchange joins it.
#ifndef PSCLUSTER_WORKER_EXCHANGE_H_
#define PSCLUSTER_WORKER_EXCHANGE_H_

#include <cstdint>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "model/gradient_watermark.h"
#include "model/params_watermark.h"
#include "wire/ps_client.h"

namespace pscluster {

class Exchange {
 public:
  // What every exchange of one loop works on; borrowed from the loop.
  struct Wiring {
    PsClient* ps = nullptr;
    int worker = 0;  // rank among the cluster's workers
    const float* grads = nullptr;
    float* params = nullptr;  // written once ParamsFree (or Join)
    absl::Duration timeout;  // of the whole call, retries included
    const GradientWatermark* ready = nullptr;  // streamed: what is final
    ParamsWatermark* arrived = nullptr;  // priority pulls only; else null
    int64_t chunk = -1;  // the chunk the gradient is of (PushRequest.chunk)
  };

  // Starts the push-pull of `examples` examples' gradient: streamed while
  // backprop runs when `streamed` (else the gradient is whole), after the
  // call `before` (may be null) is over, and not at all when that one
  // failed or was torn.
  static std::unique_ptr<Exchange> Start(const Wiring& wiring, std::unique_ptr<Exchange> before,
                                         int examples, bool streamed);
  ~Exchange();

  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // The call before this one, while this one holds it; else null.
  Exchange* before() const { return before_.get(); }
  // Drops the call before: this one's thread is past it (answered or over).
  void ReleaseBefore() { before_.reset(); }
  // The step that reads the weights is done: the answer may write them.
  // Called at most once, before Join.
  void ParamsFree() { params_free_.Notify(); }
  // Blocks until every ps has answered (the push's fate is known) or the
  // call is over; returns whether it is over.
  bool WaitAnsweredOrDone();
  // Whether the push was applied, as the answers said (once answered).
  bool applied_early();
  // Lets the call write the weights (if the step had not yet) and waits
  // for its thread.
  void Join();

  // The call's outcome, read after Join: its status, whether its weights
  // were torn (PsClient::last_pull_torn), whether it was skipped (nothing
  // sent), and the client's state once it was over.
  const absl::Status& status() const { return status_; }
  bool torn() const { return torn_; }
  bool skipped() const { return skipped_; }
  bool push_applied() const { return push_applied_; }
  const PsClient::CallStats& stats() const { return stats_; }
  int64_t version() const { return version_; }
  int64_t generation() const { return generation_; }

 private:
  Exchange() = default;
  // The thread: waits for `before_`, then calls the ps.
  void Call(const Wiring& wiring, int examples, bool streamed);
  void Answered(bool applied);
  void WaitDone();

  std::thread thread_;
  absl::Notification params_free_;
  std::unique_ptr<Exchange> before_;

  absl::Mutex mu_;
  bool answered_ ABSL_GUARDED_BY(mu_) = false;
  bool applied_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  // Written by the thread before `done_`, read after it.
  absl::Status status_;
  bool torn_ = false;
  bool skipped_ = false;
  bool push_applied_ = false;
  PsClient::CallStats stats_;
  int64_t version_ = 0;
  int64_t generation_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_EXCHANGE_H_
