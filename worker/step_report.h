// StepReport: a worker's account of its training, the same under either
// strategy (worker/ps_loop.h, worker/mirrored_loop.h): the window of steps
// since the last ProgressReport, sent to the chief every report interval of
// the plan; the run's totals; and the common part of the `done:` line,
//   done: N steps, M examples, <the loop's own>; images_per_s=I
//   compute_s=C comm_s=R wall_s=W <the loop's own>
// whose keys tests and scripts parse (tests/netlab/netlab.py,
// tests/scale_test.cc, tests/bench/): its text does not change.
//
// Not thread-safe: the loop's thread makes every call. The chief client is
// borrowed and outlives the StepReport.
#ifndef PSCLUSTER_WORKER_STEP_REPORT_H_
#define PSCLUSTER_WORKER_STEP_REPORT_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "wire/chief_client.h"

namespace pscluster {

class StepReport {
 public:
  struct Options {
    int worker = 0;  // rank among the cluster's workers
    int num_workers = 1;  // the plan's
    int chunks_per_epoch = 0;  // chunks (batches of one worker) in an epoch
    int64_t epoch_examples = 0;  // the training set's size
    // Right answers an example can give (compute/kernels/loss_head.h): 1,
    // or a binary model's outputs; the accuracy reported is per answer.
    int answers_per_example = 1;
    float report_interval_s = 0;  // the plan's; at least 0.1 s is used
    // How long the last report (done) may take; the others take 10 s.
    absl::Duration final_timeout = absl::Minutes(5);
  };
  // The first report is due one interval from now.
  StepReport(ChiefClient* chief, const Options& options);

  // Starts the wall clock of the done line; later calls do nothing. Not
  // called at all: wall_s=0.
  void StartClock();
  // The epoch of the step under way (reports say it).
  void set_epoch(int epoch) { epoch_ = epoch; }
  // Counts a step of `examples` examples with its mean loss, its correct
  // predictions, and its time split into compute and communication.
  void AddStep(int examples, float loss, int correct, double compute_s, double comm_s);
  // Sends a ProgressReport of the window (then emptied) when one is due at
  // `now`; `global_version` is the version of the weights in hand. A report
  // that fails is skipped; Cancelled when the chief asks to stop.
  absl::Status MaybeReport(absl::Time now, int64_t global_version);
  // Logs the done line around the loop's own parts `own` (after the
  // examples) and `tail` (after wall_s), then sends the last report.
  absl::Status Finish(std::string_view own, std::string_view tail, int64_t global_version);

  int64_t steps() const { return steps_; }
  // `total` / steps(), 0 before the first step: the done line's per-step
  // figures.
  double PerStep(int64_t total) const {
    return steps_ > 0 ? static_cast<double>(total) / steps_ : 0.0;
  }
  double total_comm_s() const { return total_comm_s_; }

 private:
  // Running sums between two progress reports.
  struct Window {
    double loss_sum = 0;
    int64_t correct = 0;
    int64_t examples = 0;
    double compute_s = 0;
    double comm_s = 0;
  };

  // Sends the window (then emptied); true when the chief asks to stop.
  absl::StatusOr<bool> Report(bool done, int64_t global_version);

  ChiefClient* const chief_;
  const Options options_;
  const absl::Duration report_every_;

  absl::Time next_report_;
  Window window_;
  int epoch_ = 0;
  int64_t steps_ = 0;
  int64_t examples_ = 0;
  double total_compute_s_ = 0;
  double total_comm_s_ = 0;
  std::optional<absl::Time> start_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_STEP_REPORT_H_
