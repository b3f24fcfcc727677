#include "worker/trainer.h"

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_spec.h"
#include "model/dataset.h"
#include "model/idx_dataset.h"
#include "model/keras_model.h"
#include "model/model_spec.h"
#include "proto/coordination.pb.h"
#include "wire/chief_client.h"
#include "worker/heartbeat.h"
#include "worker/mirrored_loop.h"
#include "worker/ps_loop.h"
#include "worker/training_loop.h"

namespace pscluster {
namespace {

// The worker's rank among the cluster's workers (TF_CONFIG's sparse form
// may skip indices); ps slots and data shards go by rank.
int WorkerRank(const TfConfig& config) {
  const std::vector<int> indices = config.cluster.task_indices(kWorkerJob);
  return static_cast<int>(std::find(indices.begin(), indices.end(), config.task.index) -
                          indices.begin());
}

// The one place a strategy picks its loop.
std::unique_ptr<TrainingLoop> LoopFor(Strategy strategy) {
  if (strategy == MULTI_WORKER_MIRRORED) return std::make_unique<MirroredLoop>();
  return std::make_unique<ParameterServerLoop>();
}

}  // namespace

absl::Status Trainer::Run() {
  const int worker = WorkerRank(options_.config);
  absl::StatusOr<std::unique_ptr<ChiefClient>> chief =
      ChiefClient::Create(options_.config.cluster);
  if (!chief.ok()) return chief.status();
  absl::StatusOr<TrainingPlan> plan =
      (*chief)->WaitForPlan(options_.config.task, options_.startup_timeout, &stop_);
  if (!plan.ok()) return plan.status();
  if (options_.on_plan) options_.on_plan();
  const uint64_t incarnation =
      std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  // Beats until Run returns, the loop's state gone first.
  Heartbeat heartbeat(
      options_.config.cluster, worker, incarnation,
      absl::Seconds(plan->heartbeat_interval_s() > 0 ? plan->heartbeat_interval_s() : 0.5f),
      &finished_);

  absl::StatusOr<ModelSpec> spec = PlanModelSpec(plan->model(), plan->model_json(), plan->loss());
  if (!spec.ok()) return spec.status();
  if (plan->num_workers() != options_.config.cluster.num_tasks(kWorkerJob)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the chief plans for ", plan->num_workers(), " workers but this worker's ",
        options_.config.source, " lists ", options_.config.cluster.num_tasks(kWorkerJob)));
  }
  // TFRecord data is read chunk by chunk; the other formats sit in memory.
  absl::StatusOr<std::unique_ptr<ExampleSource>> data =
      OpenExampleSource(options_.data_dir, Split::kTrain, OutputNames(*spec));
  if (!data.ok()) return absl::DataLossError(data.status().message());
  if (absl::Status s = CheckSourceFitsModel(data->get(), options_.data_dir, *spec); !s.ok()) {
    return absl::DataLossError(s.message());  // the worker exits kExitBadData
  }

  // Sparse tables: each a window of the batch's distinct ids at most.
  std::vector<SparseTableInfo> tables;
  int64_t window = 0;
  if (!plan->dense_embeddings() && plan->strategy() != MULTI_WORKER_MIRRORED) {
    absl::StatusOr<std::vector<SparseTableInfo>> found = FindSparseTables(*spec);
    if (!found.ok()) return found.status();
    tables = *std::move(found);
    if (plan->embedding_unbounded()) MakeUnbounded(&tables);
    for (const SparseTableInfo& t : tables) {
      int64_t ids = 0;
      for (const SparseTableInfo::Columns& c : t.columns) ids += c.count;
      window = std::max(window, ids * plan->batch_size());
    }
    if (!tables.empty()) *spec = WithSparseTables(*spec, window, &tables);
  }
  if (const ExampleSource& d = **data; d.ids_per_example() > 0) {
    if (absl::Status s = CheckIdsRead(tables, d.ids_first(), d.ids_per_example()); !s.ok()) {
      return absl::DataLossError(absl::StrCat(options_.data_dir, ": ", s.message()));
    }
  }

  TrainingContext context;
  context.options = &options_;
  context.plan = &*plan;
  context.spec = &*spec;
  context.sparse_tables = &tables;
  context.sparse_window = window;
  context.data = data->get();
  context.worker = worker;
  context.incarnation = incarnation;
  context.chief = chief->get();
  context.stop = &stop_;
  context.leave = &leave_;
  context.finished = &finished_;
  training_ = true;
  absl::Status s = LoopFor(plan->strategy())->Run(context);
  training_ = false;
  return s;
}

}  // namespace pscluster
