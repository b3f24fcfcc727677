// TrainingLoop: the seam between what every strategy shares and what each
// does alone. Trainer::Run (worker/trainer.h) gets the plan, starts the
// heartbeat, builds the model spec and loads the data, all gathered in a
// TrainingContext; the loop the plan's strategy names then trains until the
// chief says DONE and logs the `done:` line (worker/step_report.h): the
// parameter servers' (worker/ps_loop.h) or the ring all-reduce's
// (worker/mirrored_loop.h).
//
// Everything a TrainingContext points to is borrowed and outlives Run.
// A loop runs once, on the thread that calls Run; `stop` may be set from any
// thread.
#ifndef PSCLUSTER_WORKER_TRAINING_LOOP_H_
#define PSCLUSTER_WORKER_TRAINING_LOOP_H_

#include <atomic>
#include <cstdint>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compute/compute_backend.h"
#include "model/dataset.h"
#include "model/example_source.h"
#include "model/model_spec.h"
#include "model/sparse_layout.h"
#include "proto/coordination.pb.h"
#include "wire/chief_client.h"
#include "worker/step_report.h"
#include "worker/trainer_options.h"

namespace pscluster {

// What Trainer::Run has set up when the loop starts.
struct TrainingContext {
  const TrainerOptions* options = nullptr;
  const TrainingPlan* plan = nullptr;
  const ModelSpec* spec = nullptr;
  // The model's sparse embedding tables (model/sparse_layout.h), each a
  // window of `sparse_window` rows at the end of spec's flat vector; empty
  // when the tables travel whole (TrainingPlan.dense_embeddings).
  const std::vector<SparseTableInfo>* sparse_tables = nullptr;
  int64_t sparse_window = 0;
  // The training set (memory or TFRecord files), checked against spec.
  const ExampleSource* data = nullptr;
  int worker = 0;  // rank among the cluster's workers
  uint64_t incarnation = 0;  // this process's, as its heartbeats carry it
  ChiefClient* chief = nullptr;
  const std::atomic<bool>* stop = nullptr;  // a stop was requested
  // Leave the run after the step in flight (Trainer::RequestLeave).
  const std::atomic<bool>* leave = nullptr;
  // Set by the loop once it is done with the chief's work: the heartbeats
  // then say so, and the chief stops counting on this worker.
  std::atomic<bool>* finished = nullptr;
};

class TrainingLoop {
 public:
  virtual ~TrainingLoop() = default;

  // Trains until the chief says DONE (OK), a stop is requested or the chief
  // asks to stop (Cancelled), or fails with a status naming what went wrong.
  virtual absl::Status Run(const TrainingContext& context) = 0;
};

// What both loops set up alike from the context: the compute backend (this
// worker's device and threads, the plan's batch and seed) and the step
// report's settings for `chunks_per_epoch` chunks an epoch.
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateLoopBackend(const TrainingContext& context);
StepReport::Options LoopReportOptions(const TrainingContext& context, int chunks_per_epoch);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_TRAINING_LOOP_H_
