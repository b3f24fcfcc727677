#include "chief/progress_recorder.h"

#include <utility>
#include <vector>

#include "spdlog/spdlog.h"

namespace pscluster {

absl::StatusOr<std::unique_ptr<ProgressRecorder>> ProgressRecorder::Create(
    const std::string& logdir, Metrics* metrics, PsFleet* fleet) {
  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (!logdir.empty()) {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w =
        TensorBoardWriter::Create(logdir, ".chief");
    if (!w.ok()) return w.status();
    tensorboard = *std::move(w);
    spdlog::info("TensorBoard events: {}", tensorboard->path());
  }
  return std::unique_ptr<ProgressRecorder>(
      new ProgressRecorder(metrics, fleet, std::move(tensorboard)));
}

void ProgressRecorder::Record(const Progress& p) {
  // Mean staleness since the last progress line, from ps:0's counters.
  double staleness = -1;
  if (absl::StatusOr<PsStatsResponse> st = fleet_ != nullptr
                                                ? fleet_->Stats(0, absl::Seconds(2))
                                                : absl::StatusOr<PsStatsResponse>(
                                                      absl::NotFoundError("no ps"));
      st.ok()) {
    const int64_t pushes = st->pushes_applied() + st->pushes_dropped_stale();
    staleness = pushes > pushes_before_
                    ? double(st->staleness_sum() - stale_sum_before_) / (pushes - pushes_before_)
                    : 0.0;
    stale_sum_before_ = st->staleness_sum();
    pushes_before_ = pushes;
  }
  metrics_->model_version().Set(static_cast<double>(p.global_step));
  metrics_->examples_per_second().Set(p.examples_per_s);
  metrics_->loss().Set(p.loss);
  metrics_->accuracy().Set(p.accuracy);
  metrics_->pending_workers().Set(p.num_workers - p.workers_done);
  if (tensorboard_ && p.examples > 0) {
    std::vector<std::pair<std::string, float>> scalars = {
        {"train/loss", static_cast<float>(p.loss)},
        {"train/accuracy", static_cast<float>(p.accuracy)},
        {"train/examples_per_second", static_cast<float>(p.examples_per_s)}};
    if (staleness >= 0) scalars.push_back({"train/staleness", static_cast<float>(staleness)});
    absl::Status s = tensorboard_->AddScalars(p.global_step, scalars);
    if (!s.ok()) spdlog::warn("TensorBoard: {}", std::string(s.message()));
  }
}

void ProgressRecorder::RecordFinal(int64_t step, double test_accuracy, double test_loss) {
  if (!tensorboard_) return;
  (void)tensorboard_->AddScalars(
      step, {{"final/test_accuracy", test_accuracy}, {"final/test_loss", test_loss}});
}

void ProgressRecorder::Close() {
  if (tensorboard_) (void)tensorboard_->Close();
}

}  // namespace pscluster
