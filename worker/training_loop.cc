#include "worker/training_loop.h"

#include <algorithm>

#include "compute/backend_factory.h"

namespace pscluster {

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateLoopBackend(const TrainingContext& context) {
  BackendOptions options;
  options.device = context.options->device;
  options.max_batch = context.plan->batch_size();
  options.num_threads = context.options->threads;
  options.seed = context.plan->seed();
  return CreateBackend(*context.spec, options);
}

StepReport::Options LoopReportOptions(const TrainingContext& context, int chunks_per_epoch) {
  StepReport::Options options;
  options.worker = context.worker;
  options.num_workers = context.plan->num_workers();
  options.chunks_per_epoch = chunks_per_epoch;
  options.epoch_examples = context.data->count();
  options.answers_per_example =
      context.spec->loss == LossKind::kBinaryCrossentropy ? context.spec->num_classes : 1;
  if (!context.spec->outputs.empty()) {
    // Several outputs: the accuracy is over every output's answers (a
    // binary output's columns, a classifier's one; a regression has none).
    int answers = 0;
    for (const OutputSpec& o : context.spec->outputs) {
      const LossKind k = o.group.loss;
      answers += k == LossKind::kBinaryCrossentropy ? o.group.width
                 : k == LossKind::kMeanSquaredError || k == LossKind::kMeanAbsoluteError ? 0
                                                                                         : 1;
    }
    options.answers_per_example = std::max(answers, 1);
  }
  options.report_interval_s = context.plan->report_interval_s();
  options.final_timeout = context.options->step_timeout;
  return options;
}

}  // namespace pscluster
