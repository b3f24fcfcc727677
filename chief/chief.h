// Chief: coordinates one training run. It waits until every task of the
// cluster answers the health service, places the model's variables over
// the ps tasks and initialises them, hands the plan to workers and the
// evaluator (Coordinator service), logs progress, and when every worker is
// done asks the evaluator for the final evaluation, prints the `final:`
// line, exports the weights (safetensors) and tells every task to exit.
//
// Run() is called once; RequestStop() may be called from any thread.
#ifndef PSCLUSTER_CHIEF_CHIEF_H_
#define PSCLUSTER_CHIEF_CHIEF_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/metrics.h"
#include "proto/coordination.pb.h"
#include "proto/ps.pb.h"

namespace pscluster {

struct ChiefOptions {
  TfConfig config;
  TrainingPlan plan;            // model, batch, epochs, mode, seed, ...
  OptimizerConfig optimizer;
  int replicas_to_aggregate = 0;  // 0: every worker
  int max_staleness = 0;
  absl::Duration wait_for_cluster = absl::Minutes(2);
  absl::Duration log_every = absl::Seconds(2);
  // A worker that neither reports nor answers health checks this long is
  // declared lost and the run fails.
  absl::Duration worker_silence = absl::Seconds(60);
  absl::Duration final_eval_timeout = absl::Minutes(10);
  // TensorBoard event files (scalars: loss, accuracy, examples/s,
  // staleness) go here; empty: none.
  std::string logdir;
  // The trained weights are written here in safetensors format; empty:
  // not exported.
  std::string export_path;
};

// The figures of the final line.
struct RunResult {
  bool has_eval = false;
  double test_accuracy = 0;
  double test_loss = 0;
  int64_t steps = 0;
  int epochs = 0;
  double wall_s = 0;
};

class Chief {
 public:
  // `metrics` is borrowed and must outlive the Chief.
  Chief(ChiefOptions options, Metrics* metrics)
      : options_(std::move(options)), metrics_(metrics) {}

  absl::StatusOr<RunResult> Run();
  void RequestStop(const std::string& why);

 private:
  class Impl;
  const ChiefOptions options_;
  Metrics* const metrics_;
  std::atomic<bool> stop_{false};
};

// "final: test_accuracy=0.9912 test_loss=0.0290 steps=N epochs=N wall_s=N"
std::string FinalLine(const RunResult& r);

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_CHIEF_H_
