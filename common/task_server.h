// TaskServer: the gRPC server every daemon runs on its TF_CONFIG address.
// It always serves the standard grpc.health.v1 service and TaskControl
// (Shutdown, and Evaluate where an evaluate function is given), plus the
// daemon's own services, over TLS or plaintext as options.security (or the
// process's, common/security.h) says. TaskControl checks the cluster token
// (CheckAuth); the health service stays open to probes. The daemon's main
// blocks in WaitForShutdownRequest() and then calls Stop().
//
// Health has two names (docs/observability.md):
//   ""               the process is up: SERVING from Start() until Stop().
//                    The chief waits for every task on this one.
//   kReadyService    the task is ready for its role: NOT_SERVING from
//                    Start() until SetReady(true), and again from the
//                    moment a shutdown is requested (RequestShutdown, a
//                    Shutdown RPC, Stop) on; readiness probes use it.
//
// Thread-safe. The services passed to Start are borrowed and must outlive
// the TaskServer.
#ifndef PSCLUSTER_COMMON_TASK_SERVER_H_
#define PSCLUSTER_COMMON_TASK_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc.h"
#include "proto/coordination.grpc.pb.h"

namespace pscluster {

// The health service name that means "ready for its role".
inline constexpr char kReadyService[] = "pscluster.Ready";

class TaskServer {
 public:
  using EvaluateFn =
      std::function<grpc::Status(const EvaluateRequest&, EvalReport*)>;

  // Binds 0.0.0.0:port (all interfaces, as TensorFlow's servers do).
  // Unavailable naming the port when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<TaskServer>> Start(
      int port, const std::vector<grpc::Service*>& services,
      EvaluateFn evaluate = nullptr, const RpcOptions& options = {});

  ~TaskServer();

  // The port it listens on (the one chosen when Start was given 0).
  int port() const { return port_; }

  // Blocks until a Shutdown RPC arrives or RequestShutdown is called;
  // returns the reason.
  std::string WaitForShutdownRequest();
  // Also marks kReadyService NOT_SERVING for good. `run_failed`: the chief
  // gave the run up (the first request decides).
  void RequestShutdown(const std::string& reason, bool run_failed = false);
  bool shutdown_requested() const;
  // The shutdown came from a chief that gave the run up: exit with
  // kExitRunFailed (common/exit_codes.h).
  bool run_failed() const;

  // Marks kReadyService SERVING (true) or NOT_SERVING (false). Once a
  // shutdown is requested it stays NOT_SERVING whatever is asked.
  void SetReady(bool ready);

  // Stops serving: kReadyService turns NOT_SERVING, then in-flight calls
  // get `grace` to finish.
  void Stop(absl::Duration grace = absl::Seconds(2));

 private:
  class ControlService;
  TaskServer() = default;
  // Sets kReadyService's status. Called with mu_ held, so that a
  // SetReady(true) racing a shutdown cannot leave the task SERVING.
  void SetReadyLocked(bool ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<ControlService> control_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  mutable absl::Mutex mu_;
  bool shutdown_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool run_failed_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// Call first in main, before any thread starts (gRPC starts some): blocks
// SIGINT and SIGTERM so that every thread inherits the mask, and ignores
// SIGPIPE (a closed log pipe must not kill a daemon).
void BlockTerminationSignals();

// Starts a thread that turns SIGINT and SIGTERM into
// `on_signal(signal_name)`. The second signal exits the process at once.
// Requires BlockTerminationSignals() earlier in main.
void HandleTerminationSignals(std::function<void(const std::string&)> on_signal);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_TASK_SERVER_H_
