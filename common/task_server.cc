#include "common/task_server.h"

#include <signal.h>

#include <cstdlib>
#include <thread>

#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "common/security.h"
#include "spdlog/spdlog.h"

namespace pscluster {

class TaskServer::ControlService final : public TaskControl::Service {
 public:
  ControlService(TaskServer* owner, EvaluateFn evaluate)
      : owner_(owner), evaluate_(std::move(evaluate)) {}

  grpc::Status Shutdown(grpc::ServerContext* ctx, const ShutdownRequest* req,
                        ShutdownResponse*) override {
    if (grpc::Status s = CheckAuth(ctx, Rpc::kTaskShutdown); !s.ok()) return s;
    owner_->RequestShutdown(req->reason().empty() ? "Shutdown RPC" : req->reason(),
                            req->run_failed());
    return grpc::Status::OK;
  }

  grpc::Status Evaluate(grpc::ServerContext* ctx, const EvaluateRequest* req,
                        EvalReport* resp) override {
    if (grpc::Status s = CheckAuth(ctx, Rpc::kTaskEvaluate); !s.ok()) return s;
    if (!evaluate_) {
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          "this task is not an evaluator");
    }
    return evaluate_(*req, resp);
  }

 private:
  TaskServer* const owner_;  // owns this service
  const EvaluateFn evaluate_;
};

absl::StatusOr<std::unique_ptr<TaskServer>> TaskServer::Start(
    int port, const std::vector<grpc::Service*>& services, EvaluateFn evaluate,
    const RpcOptions& options) {
  std::unique_ptr<TaskServer> ts(new TaskServer());
  ts->control_ = std::make_unique<ControlService>(ts.get(), std::move(evaluate));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureServer(builder, options);
  int bound_port = 0;
  const std::string address = absl::StrCat("0.0.0.0:", port);
  builder.AddListeningPort(address, ListeningCredentials(options), &bound_port);
  builder.RegisterService(ts->control_.get());
  for (grpc::Service* s : services) builder.RegisterService(s);
  ts->server_ = builder.BuildAndStart();
  if (!ts->server_ || bound_port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address, " (port in use or not permitted)"));
  }
  ts->port_ = bound_port;
  {
    // "" is SERVING already (gRPC's default); until this line a check of
    // kReadyService gets NOT_FOUND, which probes take as not ready too.
    absl::MutexLock lock(&ts->mu_);
    ts->SetReadyLocked(false);
  }
  spdlog::info("gRPC on 0.0.0.0:{}: {}", bound_port,
               DescribeSecurity(options.security ? *options.security : *ProcessSecurity()));
  return ts;
}

TaskServer::~TaskServer() { Stop(absl::ZeroDuration()); }

std::string TaskServer::WaitForShutdownRequest() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shutdown_requested_));
  return reason_;
}

void TaskServer::RequestShutdown(const std::string& reason, bool run_failed) {
  absl::MutexLock lock(&mu_);
  if (shutdown_requested_) return;
  shutdown_requested_ = true;
  run_failed_ = run_failed;
  reason_ = reason;
  SetReadyLocked(false);
}

void TaskServer::SetReady(bool ready) {
  absl::MutexLock lock(&mu_);
  SetReadyLocked(ready && !shutdown_requested_ && !stopped_);
}

void TaskServer::SetReadyLocked(bool ready) {
  if (!server_) return;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(kReadyService, ready);
  }
}

bool TaskServer::run_failed() const {
  absl::MutexLock lock(&mu_);
  return run_failed_;
}

bool TaskServer::shutdown_requested() const {
  absl::MutexLock lock(&mu_);
  return shutdown_requested_;
}

void TaskServer::Stop(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    SetReadyLocked(false);
  }
  if (server_) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    server_->Wait();
  }
}

namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  // SIGHUP too: the security reloader waits for it (common/daemon.h);
  // without one it stays pending and ends nothing.
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void HandleTerminationSignals(std::function<void(const std::string&)> on_signal) {
  sigset_t set = TerminationSignals();
  std::thread([set, on_signal = std::move(on_signal)] {
    int count = 0;
    while (true) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      if (++count > 1) {
        spdlog::warn("second {}: exiting now", name);
        std::_Exit(128 + sig);
      }
      spdlog::info("{} received: shutting down", name);
      on_signal(name);
    }
  }).detach();
}

}  // namespace pscluster
