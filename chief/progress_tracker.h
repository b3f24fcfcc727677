// ProgressTracker: what the chief knows about training progress, built from
// the workers' reports. Pure logic (no RPC), so it is unit-tested alone.
// Thread-safe: reports arrive on RPC threads while the chief's loop reads.
#ifndef PSCLUSTER_CHIEF_PROGRESS_TRACKER_H_
#define PSCLUSTER_CHIEF_PROGRESS_TRACKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordination.pb.h"

namespace pscluster {

struct Progress {
  int epoch = 0;            // 1-based epoch the slowest worker is in
  int epochs = 0;
  int64_t global_step = 0;  // newest ps version any worker saw
  int64_t examples = 0;     // trained on, all workers together
  double examples_per_s = 0;  // since the previous snapshot
  double loss = 0;          // mean of the workers' latest windows
  double accuracy = 0;
  double eta_s = -1;        // -1: unknown yet
  int workers_done = 0;
  int num_workers = 0;
  int64_t last_eval_step = -1;
  double last_eval_accuracy = 0;
  double last_eval_loss = 0;
  double last_eval_auc = -1;
  std::vector<OutputEval> last_eval_outputs;  // several outputs: each one's
};

class ProgressTracker {
 public:
  ProgressTracker(int num_workers, int epochs, absl::Time start);

  // InvalidArgument-style problems (an index out of range) are ignored and
  // reported as false.
  bool Record(const ProgressReport& report);
  void RecordEval(const EvalReport& report);

  // The rate covers the time since the previous Snapshot().
  Progress Snapshot(absl::Time now);

  // "epoch 2/5 step 468 examples/s 5123 loss 0.0412 acc 0.9871 eta 23s"
  static std::string Format(const Progress& p);

 private:
  struct Worker {
    bool reported = false;
    ProgressReport latest;
  };
  mutable absl::Mutex mu_;
  const int epochs_;
  const absl::Time start_;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  int64_t examples_at_snapshot_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time snapshot_time_ ABSL_GUARDED_BY(mu_);
  EvalReport last_eval_ ABSL_GUARDED_BY(mu_);
  bool has_eval_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_PROGRESS_TRACKER_H_
