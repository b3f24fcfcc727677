// ParameterServerRun: the chief's run under --strategy=parameter_server
// (docs/how-it-works.md), as a StrategyRun. The ps hold the model
// sharded; the run places the variables, initialises the ps (or finds them
// initialised, or restores them from the newest checkpoint), hands the data
// to workers one chunk at a time (Dispatcher, its WorkSource), keeps the
// sync worker set on every ps (MembershipSync), watches the ps
// (PsRecovery), takes checkpoints (Checkpointer), and at the end reads the
// step count and the weights from the ps.
//
// Faults it rides out:
//   worker lost  no heartbeat within heartbeat_timeout: its unfinished
//                chunks go to the others and sync steps stop waiting for
//                it until it is back (it rejoins by asking for work).
//   ps lost      it stops answering, or answers as a new process: workers
//                are paused until it is back. The same process resumes as
//                it was. A new one takes its backup's state with
//                --ps_replicas=1 (nothing else moves), or else every ps is
//                restored from the newest checkpoint (a new generation) and
//                the data position rewinds to the checkpoint's; steps since
//                it are lost (PsRecovery says which and why).
//   chief lost   a restarted chief finds the ps initialised and keeps their
//                parameters; the data position comes from the newest
//                checkpoint in checkpoint_dir.
// Checkpoints: every checkpoint_every_steps / checkpoint_every and at the
// end, with workers paused between steps so that every shard's values and
// optimizer slots belong to one consistent cut. The newest is also kept in
// memory, so ps recovery never depends on a disk.
//
// Thread-safety as StrategyRun: work() (the Dispatcher) is thread-safe,
// the rest is the Chief's thread's. Everything borrowed outlives the run.
#ifndef PSCLUSTER_CHIEF_PS_RUN_H_
#define PSCLUSTER_CHIEF_PS_RUN_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "chief/checkpointer.h"
#include "chief/chief_options.h"
#include "chief/dispatcher.h"
#include "chief/failover_metrics.h"
#include "chief/grpc_ps_fleet.h"
#include "chief/membership.h"
#include "chief/ps_recovery.h"
#include "chief/ps_setup.h"
#include "chief/strategy_run.h"
#include "common/metrics.h"
#include "model/model_spec.h"
#include "model/placement.h"
#include "model/sparse_layout.h"
#include "proto/coordination.pb.h"
#include "proto/ps.pb.h"

namespace pscluster {

// The optimizer the ps run: `given` in sync mode; in async mode its
// learning rate scaled by `scaling` for `num_workers` and its decay counted
// in rounds of num_workers updates. `why` (may be null) gets a line saying
// what changed.
OptimizerConfig EffectiveOptimizer(const OptimizerConfig& given, UpdateMode mode, int num_workers,
                                   AsyncLrScaling scaling, std::string* why);

// The sparse tables' per-row optimizer, as EffectiveOptimizer: in async
// mode its rate scaled by `scaling` and its decay counted in rounds, so
// that the same --embedding_* flags mean the same per example sync or
// async.
SparseOptimizerConfig EffectiveSparseOptimizer(const SparseOptimizerConfig& given, UpdateMode mode,
                                               int num_workers, AsyncLrScaling scaling);

// The model placed over the plan's ps (num_ps, min_shard_bytes).
Placement PlaceForPlan(const ModelSpec& spec, const TrainingPlan& plan);

class ParameterServerRun final : public StrategyRun {
 public:
  // Places the model over the ps of `plan` and sets up what every ps is
  // given (logging an async learning-rate scaling). InvalidArgument naming
  // TF_CONFIG when the cluster lists no ps. `options`, `spec`, `stop` and
  // `metrics` (where the ps's copies and fail-overs are counted,
  // FailoverMetrics) are borrowed and outlive the run.
  static absl::StatusOr<std::unique_ptr<ParameterServerRun>> Create(const ChiefOptions& options,
                                                                    const ModelSpec* spec,
                                                                    TrainingPlan plan,
                                                                    const std::atomic<bool>* stop,
                                                                    Metrics* metrics);
  ParameterServerRun(const ParameterServerRun&) = delete;
  ParameterServerRun& operator=(const ParameterServerRun&) = delete;

  const TrainingPlan& plan() const override { return plan_; }
  // The dispatcher, paused until PlanHandedOut.
  absl::Status Prepare(absl::Time* start) override;
  WorkSource* work() override { return dispatcher_.get(); }
  absl::Status Start(ClusterTasks* tasks, absl::Time* start) override;
  void PlanHandedOut() override;
  PsFleet* staleness_source() override { return ps_.get(); }
  bool AllFinished() const override { return dispatcher_->AllFinished(); }
  absl::Status Tick() override;
  int64_t done_chunks() const override { return dispatcher_->done_chunks(); }
  int64_t total_chunks() const override { return dispatcher_->total_chunks(); }
  std::string ProgressNote() const override { return ""; }
  std::string DoneNote() const override;
  absl::Status TakeFinalCheckpoint() override;
  absl::StatusOr<int64_t> FinalSteps() override;
  absl::StatusOr<const std::vector<float>*> FinalWeights(int64_t steps) override;
  const ModelSpec* FinalLayout() const override {
    return final_layout_.has_value() ? &*final_layout_ : nullptr;
  }
  bool WaitsForUnlistedEvaluator() const override { return true; }
  absl::Status KeepUpWhileFinishing() override;

 private:
  ParameterServerRun(const ChiefOptions& options, const ModelSpec* spec, TrainingPlan plan,
                     const std::atomic<bool>* stop,
                     std::unique_ptr<FailoverMetrics> failover_metrics);

  // Start's steps: the ps initialised (or found so), or every ps restored
  // from the newest checkpoint on disk; then the run's set-up logged.
  absl::Status StartParameterServers(absl::Time* start);
  // A restarted chief (the ps were initialised): the data position.
  absl::Status ResumeRun(int64_t generation, absl::Time* start);
  // That the optimizer state in `snap` (a checkpoint on disk this run
  // starts from) is what this run's optimizers keep: their slot names, the
  // sparse tables' floats per row. Bad input naming the flag otherwise.
  absl::Status CheckOptimizerState(const Snapshot& snap) const;
  // The chunks in every ps's record of its last updates (sorted), and in
  // *reaches_back_to the version from which on those records are whole on
  // every ps (the largest int64 when a ps did not answer: none then). In
  // *held, each {worker, chunk} whose gradient waits in the step being
  // gathered on some ps (sync).
  // `if_unknown` ends the warning logged when a ps does not answer.
  std::vector<int64_t> ChunksEveryPsHolds(absl::string_view if_unknown, int64_t* reaches_back_to,
                                          std::vector<std::pair<int, int64_t>>* held);
  // --ps_replicas=R: gives every ps's store its backups
  // (docs/replication.md): of the R + 1 places for a copy of ps i's store
  // (its own store, and the backup store for it on each of the next R ps),
  // every one but the store that serves the shards, once its process
  // answers; again when a place comes back (a restarted ps, a backup lost
  // and back). A place still holding a primary (one replaced while it was
  // cut off) is demoted first. It never drops a backup: CheckBackups and
  // the recovery do.
  absl::Status KeepBackups();
  // At the end of the run: every store's backup set and holding its
  // version (a ps restarted late in the run is seeded before the final
  // checkpoint), waiting at most `timeout`; logged when not.
  void AwaitBackups(absl::Duration timeout);
  static constexpr absl::Duration kBackupsAtTheEnd = absl::Seconds(10);
  // The longest a GetWork answered PAUSE is held (Dispatcher's hold_paused).
  static constexpr absl::Duration kHoldPaused = absl::Milliseconds(250);
  // The address of the `slot`-th backup store ps `ps`'s process keeps
  // (its --backup_port + slot, or a free port).
  absl::StatusOr<std::string> BackupStoreOf(int ps, int slot);
  std::vector<StoreCopies> copies_;  // per ps
  void LogSetup() const;
  // Lost workers logged, the sync set brought to the ps.
  void CheckWorkers();

  // --min_ps (chief/ps_resize.cc): the next ps listed is added once it
  // answers, and the last ps in use is drained when it asks to leave.
  absl::Status CheckPsSet();
  // The shards placed again over the first `num_ps` ps, training paused:
  // a checkpoint of every ps, resharded, restored onto the new set under
  // the next generation, the workers told. A ps that fails its part (the
  // added one killed during its copy) sends every ps back to the
  // checkpoint as it was placed; OK then, nothing lost. `why` is logged.
  // With a checkpoint directory, the checkpoint is written once training
  // goes on: the pause is the move's alone.
  absl::Status PlaceShardsAgain(int num_ps, const std::string& why);
  // PlaceShardsAgain while the workers are paused; *taken: the checkpoint
  // was taken (the newest in memory, placed either way).
  absl::Status MoveShardsPaused(int num_ps, const std::string& why, bool* taken);
  // The ps in use given to the workers and, sync, to the deciding ps.
  absl::Status PublishPsSet();
  std::vector<bool> leave_refused_;  // per ps: its ask to leave was logged

  // The final weights in the model's own layout (model_spec_): the sparse
  // tables whole, from the rows in `ps` (each ps's state) and the rows'
  // initial values for ids never trained; `flat` in spec_'s layout. An
  // unbounded table has no whole: its rows that exist, by increasing id,
  // with their ids in *layout (model_spec_ otherwise).
  absl::StatusOr<std::vector<float>> ModelLayout(const std::vector<float>& flat,
                                                 const std::vector<ShardState>& ps,
                                                 ModelSpec* layout) const;

  const ChiefOptions& options_;
  const ModelSpec& model_spec_;  // the model's, tables whole
  TrainingPlan plan_;            // num_ps: the ps in use (--min_ps changes it)
  // The model's sparse tables (none with --dense_embeddings), and the
  // layout the ps and the checkpoints use: model_spec_ with each table a
  // window of one row after the dense variables (model/sparse_layout.h).
  std::vector<SparseTableInfo> tables_;
  const ModelSpec spec_;
  const std::atomic<bool>& stop_;
  Placement placement_;  // over the ps in use
  PsSetup ps_setup_;     // points at placement_
  const std::unique_ptr<FailoverMetrics> failover_metrics_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<GrpcPsFleet> ps_;
  std::unique_ptr<MembershipSync> membership_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<PsRecovery> recovery_;
  int64_t highest_version_ = 0;  // seen on any ps
  absl::Time next_ps_check_;
  absl::Time next_version_check_;
  // The pull of FinalWeights(), kept for the export, and its layout.
  std::optional<std::vector<float>> final_weights_;
  std::optional<ModelSpec> final_layout_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_PS_RUN_H_
