// ClusterTasks: every task of the cluster besides the chief (ps, workers,
// evaluator), one gRPC channel each, and what the chief asks of them as
// tasks: to answer the health service before the run starts, to evaluate
// the final weights (an evaluator listed in the cluster), and to exit when
// the run is over (TaskControl).
//
// Thread-safe; the stop flag is borrowed and must outlive the object.
#ifndef PSCLUSTER_CHIEF_CLUSTER_TASKS_H_
#define PSCLUSTER_CHIEF_CLUSTER_TASKS_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "proto/coordination.pb.h"

namespace pscluster {

class ClusterTasks {
 public:
  // Channels to the ps, the workers and the evaluators of `cluster`. Calls
  // that wait end Cancelled once *stop.
  ClusterTasks(const ClusterSpec& cluster, const std::atomic<bool>* stop);

  // The channels to ps 0, 1, ..., for the ps fleet.
  std::vector<std::shared_ptr<grpc::Channel>> ps_channels() const;

  // Waits until every task answers the health service, or, with
  // `min_workers` > 0, every ps and evaluator and at least that many
  // workers (the others join later: absent_workers()), and with `min_ps` >
  // 0 the first that many ps only (ps_serving()). DeadlineExceeded naming
  // the tasks that did not within `timeout`.
  absl::Status WaitUntilServing(absl::Duration timeout, int min_workers = 0, int min_ps = 0);
  // The workers that had not answered when WaitUntilServing returned.
  std::vector<int> absent_workers() const;
  // How many of the first ps answered when WaitUntilServing returned (all
  // but with min_ps).
  int ps_serving() const { return ps_serving_; }

  // Whether the cluster lists an evaluator.
  bool has_evaluator() const;
  // Asks the cluster's (first) evaluator to evaluate the weights of at
  // least `min_version`; the call and its retries take up to `timeout`.
  // NotFound when the cluster lists none.
  absl::StatusOr<EvalReport> Evaluate(int64_t min_version, absl::Duration timeout);

  // Tells every task to exit, giving `reason`. A task that is gone (its
  // port refused, its name no longer resolved) is left; one that does not
  // answer within 5 s (cut off, or slow) is told again until 30 s have
  // passed, then logged and left. `run_failed`: the run was given up, and
  // the tasks exit with kExitRunFailed (common/exit_codes.h).
  void ShutdownAll(const std::string& reason, bool run_failed = false);

 private:
  struct Task {
    TaskId id;
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
  };
  static std::string Name(const Task& t);
  // Set by WaitUntilServing, read by its caller's thread after it.
  std::vector<int> absent_workers_;
  int ps_serving_ = 0;
  // One Shutdown call to `t`.
  static absl::Status Shutdown(const Task& t, const ShutdownRequest& req,
                               absl::Duration timeout, bool wait_for_ready);

  static constexpr absl::Duration kShutdownReach = absl::Seconds(30);

  const std::atomic<bool>* const stop_;
  int num_ps_ = 0, num_workers_ = 0, num_evaluators_ = 0;
  std::vector<Task> tasks_;  // ps, then workers, then evaluators
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_CLUSTER_TASKS_H_
