// ParamsWatermark: how much of the next step's weights has arrived, while
// the pull that brings them is still being read. Each ps answers with its
// shards in model order, several ps at once, so pieces arrive out of order
// across ps; what the forward pass can use is the prefix [0, to) of the
// flat parameter vector that has wholly arrived. The threads that read the
// answers (wire/ps_client.h) mark pieces; the compute threads wait,
// layer by layer, for the prefix that holds the layer's weights (P3's
// priority pull).
//
// Thread-safe. Waiting for a prefix already in is one atomic load.
#ifndef PSCLUSTER_MODEL_PARAMS_WATERMARK_H_
#define PSCLUSTER_MODEL_PARAMS_WATERMARK_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pscluster {

class ParamsWatermark {
 public:
  // A watermark over `size` floats with all of them in (the first step's
  // weights come from a whole pull).
  explicit ParamsWatermark(int64_t size);

  // A new pull: nothing has arrived.
  void Reset();
  // [begin, end) has arrived. Pieces may come in any order and overlap.
  void MarkArrived(int64_t begin, int64_t end);
  void MarkAllArrived() { MarkArrived(0, size_); }
  // The pull failed: waiters return Aborted with `why` (the caller throws
  // away what it computed on these weights).
  void Fail(const std::string& why);
  // Blocks until [0, to) has arrived: OK; Aborted after Fail();
  // DeadlineExceeded at `deadline`.
  absl::Status WaitArrived(int64_t to, absl::Time deadline = absl::InfiniteFuture()) const;
  // The prefix that has arrived.
  int64_t arrived() const { return prefix_.load(std::memory_order_acquire); }
  // When everything had arrived (InfinitePast for the whole weights the
  // watermark starts with; InfiniteFuture while some are still out).
  absl::Time complete_at() const;

 private:
  const int64_t size_;
  std::atomic<int64_t> prefix_;
  mutable absl::Mutex mu_;
  // Pieces past the prefix, begin -> end, disjoint.
  std::map<int64_t, int64_t> pieces_ ABSL_GUARDED_BY(mu_);
  std::string failed_ ABSL_GUARDED_BY(mu_);
  absl::Time complete_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_PARAMS_WATERMARK_H_
