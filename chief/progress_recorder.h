// ProgressRecorder: where the chief's progress figures go besides its log:
// the Prometheus gauges (model version, examples/s, loss, accuracy, workers
// not done) and, with a logdir, TensorBoard scalars (train/loss,
// train/accuracy, train/examples_per_second, train/staleness and, at the
// end, final/test_accuracy and final/test_loss). The staleness is the mean
// over the pushes since the previous record, from ps:0's counters.
//
// Not thread-safe: the chief's loop calls it. The metrics and the fleet
// are borrowed and must outlive it.
#ifndef PSCLUSTER_CHIEF_PROGRESS_RECORDER_H_
#define PSCLUSTER_CHIEF_PROGRESS_RECORDER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "chief/progress_tracker.h"
#include "chief/ps_fleet.h"
#include "common/metrics.h"
#include "common/tensorboard_writer.h"

namespace pscluster {

class ProgressRecorder {
 public:
  // `logdir` empty: no TensorBoard file. Errors creating the event file
  // name it. `fleet` null (no ps): no staleness.
  static absl::StatusOr<std::unique_ptr<ProgressRecorder>> Create(const std::string& logdir,
                                                                  Metrics* metrics, PsFleet* fleet);

  void Record(const Progress& p);
  // The evaluator's verdict on the final weights of `step`.
  void RecordFinal(int64_t step, double test_accuracy, double test_loss);
  // Closes the TensorBoard file; nothing is recorded after.
  void Close();

 private:
  ProgressRecorder(Metrics* metrics, PsFleet* fleet, std::unique_ptr<TensorBoardWriter> tensorboard)
      : metrics_(metrics), fleet_(fleet), tensorboard_(std::move(tensorboard)) {}

  Metrics* const metrics_;
  PsFleet* const fleet_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // null: no logdir
  int64_t stale_sum_before_ = 0;
  int64_t pushes_before_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_PROGRESS_RECORDER_H_
