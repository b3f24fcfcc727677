#include "worker/step_report.h"

#include <algorithm>

#include "proto/coordination.pb.h"
#include "spdlog/spdlog.h"

namespace pscluster {

StepReport::StepReport(ChiefClient* chief, const Options& options)
    : chief_(chief),
      options_(options),
      report_every_(absl::Seconds(std::max(0.1f, options.report_interval_s))),
      next_report_(absl::Now() + report_every_) {}

void StepReport::StartClock() {
  if (!start_.has_value()) start_ = absl::Now();
}

void StepReport::AddStep(int examples, float loss, int correct, double compute_s,
                         double comm_s) {
  ++steps_;
  examples_ += examples;
  window_.loss_sum += double(loss) * examples;
  window_.correct += correct;
  window_.examples += examples;
  window_.compute_s += compute_s;
  window_.comm_s += comm_s;
  total_compute_s_ += compute_s;
  total_comm_s_ += comm_s;
}

absl::Status StepReport::MaybeReport(absl::Time now, int64_t global_version) {
  if (now < next_report_) return absl::OkStatus();
  next_report_ = now + report_every_;
  absl::StatusOr<bool> stop = Report(/*done=*/false, global_version);
  if (stop.ok() && *stop) return absl::CancelledError("the chief asked to stop");
  return absl::OkStatus();
}

absl::Status StepReport::Finish(std::string_view own, std::string_view tail,
                                int64_t global_version) {
  const double wall_s = start_.has_value() ? absl::ToDoubleSeconds(absl::Now() - *start_) : 0.0;
  spdlog::info("done: {} steps, {} examples, {}; images_per_s={:.0f} compute_s={:.2f} "
               "comm_s={:.2f} wall_s={:.2f} {}",
               steps_, examples_, own, wall_s > 0 ? examples_ / wall_s : 0.0, total_compute_s_,
               total_comm_s_, wall_s, tail);
  absl::StatusOr<bool> ack = Report(/*done=*/true, global_version);
  if (!ack.ok()) return ack.status();
  return absl::OkStatus();
}

absl::StatusOr<bool> StepReport::Report(bool done, int64_t global_version) {
  ProgressReport r;
  r.set_worker_index(options_.worker);
  r.set_epoch(epoch_);
  r.set_step(steps_);
  r.set_examples(examples_);
  r.set_loss(window_.examples ? window_.loss_sum / window_.examples : 0);
  r.set_accuracy(window_.examples ? double(window_.correct) /
                                        (double(window_.examples) * options_.answers_per_example)
                                  : 0);
  r.set_global_version(global_version);
  r.set_done(done);
  r.set_compute_s(window_.compute_s);
  r.set_comm_s(window_.comm_s);
  // Sync steps per epoch with every worker alive.
  r.set_steps_per_epoch((options_.chunks_per_epoch + options_.num_workers - 1) /
                        options_.num_workers);
  r.set_epoch_examples(options_.epoch_examples);
  window_ = Window();
  return chief_->Report(r, done ? options_.final_timeout : absl::Seconds(10));
}

}  // namespace pscluster
