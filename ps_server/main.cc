// ps_server: holds a shard of the model's variables and optimizer state and
// applies the workers' gradients. Its place in the cluster comes from
// TF_CONFIG (or --tf_config); the chief initialises it and, at the end,
// tells it to exit.
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "common/daemon.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/task_server.h"
#include "ps_server/parameter_store.h"
#include "ps_server/ps_service.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, tf_config, "",
          "File holding the TF_CONFIG JSON; default: the TF_CONFIG variable");
ABSL_FLAG(int, max_message_mb, 512, "Largest gRPC message accepted, in MiB");
ABSL_FLAG(int, metrics_port, 0, "Serve Prometheus /metrics on this port; 0: do not serve");

int main(int argc, char** argv) {
  using namespace pscluster;
  BlockTerminationSignals();
  TuneAllocator();
  ParseFlagsOrExit(argc, argv, 
      "Parameter server task. Usage: TF_CONFIG='{...\"task\":{\"type\":\"ps\","
      "\"index\":0}}' ps_server [--tf_config=FILE]");
  TfConfig config = LoadTfConfigOrExit(absl::GetFlag(FLAGS_tf_config),
                                       std::getenv("TF_CONFIG"), kPsJob);
  ConfigureSecurityOrExit(config);  // TLS and token for every channel and server
  const int max_mb = absl::GetFlag(FLAGS_max_message_mb);
  if (max_mb < 1 || max_mb > 2047) {
    ExitWithUsageError("--max_message_mb must be in [1, 2047], got " + std::to_string(max_mb));
  }
  InitLogging(TaskName(config.task));
  std::unique_ptr<Metrics> metrics =
      StartMetricsOrExit(absl::GetFlag(FLAGS_metrics_port), config.task);

  ParameterStore store;
  PsService service(&store, metrics.get());
  RpcOptions rpc;
  rpc.max_message_bytes = max_mb << 20;
  absl::StatusOr<std::unique_ptr<TaskServer>> server =
      TaskServer::Start(config.own_port(), {&service}, nullptr, rpc);
  if (!server.ok()) {
    spdlog::error("{}", std::string(server.status().message()));
    return 1;
  }
  HandleTerminationSignals([&](const std::string& s) { (*server)->RequestShutdown(s); });
  spdlog::info("serving on {}", config.own_address());
  // Ready once the chief has initialised or restored the store.
  std::thread readiness([&] {
    if (store.AwaitInitialized()) (*server)->SetReady(true);
  });
  std::string reason = (*server)->WaitForShutdownRequest();
  StoreStats st = store.stats();
  spdlog::info("shutting down ({}): version={} applied={} dropped_stale={} rejected={} duplicate={}",
               reason, st.version, st.pushes_applied, st.pushes_dropped_stale,
               st.pushes_rejected, st.pushes_duplicate);
  store.Cancel();
  readiness.join();
  (*server)->Stop();
  return 0;
}
