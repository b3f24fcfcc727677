#include "worker/exchange.h"

#include <utility>

namespace pscluster {

std::unique_ptr<Exchange> Exchange::Start(const Wiring& wiring, std::unique_ptr<Exchange> before,
                                          int examples, bool streamed) {
  std::unique_ptr<Exchange> x(new Exchange());
  x->before_ = std::move(before);
  x->thread_ = std::thread(&Exchange::Call, x.get(), wiring, examples, streamed);
  return x;
}

Exchange::~Exchange() {
  if (thread_.joinable()) Join();
}

void Exchange::Call(const Wiring& wiring, int examples, bool streamed) {
  if (before_ != nullptr) {
    before_->WaitDone();
    skipped_ = !before_->status_.ok() || before_->torn_;
  }
  if (!skipped_) {
    PsClient::Overlap o;
    o.ready = wiring.ready;
    o.params_free = &params_free_;
    o.arrived = wiring.arrived;
    o.answered = [this](bool applied) { Answered(applied); };
    PsClient& ps = *wiring.ps;
    status_ = ps.PushPullAll(wiring.worker, examples, wiring.grads, wiring.params,
                             wiring.timeout, streamed ? &o : nullptr, wiring.chunk);
    torn_ = ps.last_pull_torn();
    push_applied_ = ps.last_push_applied();
    stats_ = ps.last_call();
    version_ = ps.version();
    generation_ = ps.generation();
  }
  absl::MutexLock l(&mu_);
  done_ = true;
}

bool Exchange::WaitAnsweredOrDone() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](Exchange* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) { return e->answered_ || e->done_; },
      this));
  return done_;
}

bool Exchange::applied_early() {
  absl::MutexLock l(&mu_);
  return applied_;
}

void Exchange::Answered(bool applied) {
  absl::MutexLock l(&mu_);
  answered_ = true;
  applied_ = applied;
}

void Exchange::WaitDone() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(&done_));
}

void Exchange::Join() {
  if (!params_free_.HasBeenNotified()) params_free_.Notify();
  thread_.join();
}

}  // namespace pscluster
