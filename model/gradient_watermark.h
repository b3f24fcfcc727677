// GradientWatermark: how much of a step's gradient is final, while
// backprop still runs. Backprop produces the last layer's gradient first,
// and the flat parameter vector holds the layers in model order, so what
// is final is always a suffix [from, size) of the gradient: the compute
// thread lowers `from` layer by layer, and the threads that send the
// gradient (wire/ps_client.h) wait for the suffix they need.
//
// Thread-safe.
#ifndef PSCLUSTER_MODEL_GRADIENT_WATERMARK_H_
#define PSCLUSTER_MODEL_GRADIENT_WATERMARK_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pscluster {

class GradientWatermark {
 public:
  // A new step of a `size`-float gradient: nothing final yet.
  void Reset(int64_t size);
  // [from, size) is final. A call that would raise the watermark is
  // ignored: what was final stays final.
  void MarkFinalFrom(int64_t from);
  void MarkAllFinal() { MarkFinalFrom(0); }
  // The step failed (its gradient will never be final): waiters return
  // Aborted with `why`.
  void Fail(const std::string& why);
  // Whether [from, size) is final now.
  bool FinalFrom(int64_t from) const;
  // Blocks until [from, size) is final: OK; Aborted after Fail();
  // DeadlineExceeded at `deadline`.
  absl::Status WaitFinalFrom(int64_t from, absl::Time deadline) const;

 private:
  mutable absl::Mutex mu_;
  int64_t final_from_ ABSL_GUARDED_BY(mu_) = 0;
  std::string failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_GRADIENT_WATERMARK_H_
