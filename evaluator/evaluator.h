// Evaluator: the side-car that scores the newest weights on held-out data.
// Periodically (and on request from the chief) it pulls the weights from
// every ps (multi_worker_mirrored: reads a worker's replica), runs the model
// forward over the whole test set and reports accuracy and loss. Thread-safe:
// Evaluate() may be called from RPC threads while RunPeriodic() runs;
// evaluations are serialised.
#ifndef PSCLUSTER_EVALUATOR_EVALUATOR_H_
#define PSCLUSTER_EVALUATOR_EVALUATOR_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/metrics.h"
#include "common/tensorboard_writer.h"
#include "compute/compute_backend.h"
#include "compute/device_choice.h"
#include "model/idx_dataset.h"
#include "model/model_spec.h"
#include "model/placement.h"
#include "proto/coordination.pb.h"
#include "wire/chief_client.h"
#include "wire/ps_client.h"
#include "wire/ring_client.h"
#include "wire/sparse_batch.h"

namespace pscluster {

struct EvaluatorOptions {
  TfConfig config;
  std::string data_dir;
  int threads = 1;     // CPU backend
  DeviceChoice device;  // main resolves kAuto first, to log the choice
  absl::Duration interval = absl::Seconds(30);
  absl::Duration startup_timeout = absl::Minutes(2);
  // TensorBoard scalars eval/accuracy and eval/loss go here; empty: none.
  std::string logdir;
  Metrics* metrics = nullptr;  // borrowed; outlives the Evaluator
  // An evaluator not listed in the cluster (as TensorFlow and the Kubeflow
  // operator set it up) has no server the chief could stop: it ends its
  // periodic loop itself once the chief no longer answers.
  bool stop_when_chief_gone = false;
};

class Evaluator {
 public:
  explicit Evaluator(EvaluatorOptions options) : options_(std::move(options)) {}

  // Waits for the chief's plan, loads the test set, connects to the ps.
  // `stop` must outlive the Evaluator: once true, it also cancels a pull
  // from the ps in flight.
  absl::Status Prepare(const std::atomic<bool>* stop);

  // Evaluates every `interval` while the weights changed, until *stop (or,
  // with stop_when_chief_gone, until the chief stops answering).
  void RunPeriodic(const std::atomic<bool>* stop);

  // Evaluates weights of at least `min_version` (waits for them).
  // Unavailable before Prepare() finished.
  absl::StatusOr<EvalReport> Evaluate(int64_t min_version, bool final);

 private:
  absl::StatusOr<EvalReport> EvaluateLocked(int64_t min_version, bool final,
                                            bool only_if_new, absl::Duration pull_timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ps in use now (the chief adds and drains ps with --min_ps): the
  // shards placed over them and the ps client made again when their count
  // changed.
  absl::Status FollowPlacement() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const EvaluatorOptions options_;
  absl::Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  ModelSpec spec_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Placement> placement_ ABSL_GUARDED_BY(mu_);
  PlacementOptions placement_options_ ABSL_GUARDED_BY(mu_);
  PsClientOptions ps_options_ ABSL_GUARDED_BY(mu_);
  Dataset test_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ChiefClient> chief_ ABSL_GUARDED_BY(mu_);
  // The weights come from the ps, or (multi_worker_mirrored) from the
  // workers' replicas: one of the two is set.
  std::unique_ptr<PsClient> ps_ ABSL_GUARDED_BY(mu_);
  // Sparse embedding tables: the test set's rows (null: none).
  std::unique_ptr<SparseBatch> sparse_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<RingClient> replicas_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ComputeBackend> backend_ ABSL_GUARDED_BY(mu_);
  std::vector<float> params_ ABSL_GUARDED_BY(mu_);
  int64_t last_version_ ABSL_GUARDED_BY(mu_) = -1;
  std::unique_ptr<TensorBoardWriter> tensorboard_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_EVALUATOR_EVALUATOR_H_
