#include "common/daemon.h"

#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/security.h"
#include "common/task_server.h"
#include "prometheus/counter.h"
#include "spdlog/spdlog.h"

// Transport security, the same on every daemon (docs/security.md).
ABSL_FLAG(std::string, tf_config, "",
          "File holding the TF_CONFIG JSON; default: the TF_CONFIG variable");
ABSL_FLAG(int, metrics_port, 0, "Serve Prometheus /metrics on this port; 0: do not serve");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of this task, used as server and as client; "
          "turns TLS on. Needs --tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert (unencrypted)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s): with it TLS is mutual, servers require client certs "
          "signed by it and clients verify servers against it");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name that clients check in servers' certificates instead of the host of the "
          "TF_CONFIG address (e.g. one name in a cert shared by all tasks)");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the shared cluster token (whitespace trimmed): sent on every call, "
          "required on every call of ours (health checks stay open); with "
          "--auth_identities_file, this task's own token");
ABSL_FLAG(std::string, auth_identities_file, "",
          "File listing each task's token digest ('worker/3 SHA256HEX' lines): a call's token "
          "must be one of them and names the caller (docs/security.md)");
ABSL_FLAG(bool, authorize, false,
          "Authorize every call by the caller's identity (its certificate's "
          "URI:pscluster://ROLE/INDEX, or its token in --auth_identities_file) against the "
          "table in docs/security.md: a worker may not control the ps, report evaluations or "
          "push as another worker");

namespace pscluster {


void TuneAllocator() {
  // Buffers up to 64 MiB come from the heap and stay mapped; freed memory
  // is returned only when 1 GiB sits unused at the top of the heap.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

TfConfig LoadTfConfigOrExit(const std::string& file_flag, const char* env_value,
                            const std::string& expected_type) {
  absl::StatusOr<TfConfig> config = LoadTfConfig(file_flag, env_value);
  if (!config.ok()) ExitWithUsageError(std::string(config.status().message()));
  if (config->task.type != expected_type) {
    ExitWithUsageError(absl::StrCat(config->source, ": task.type is \"",
                                    config->task.type, "\" but this binary runs a ",
                                    expected_type, " task"));
  }
  return *std::move(config);
}

namespace {

// What identifies a file's content for the reloader: its inode, size and
// modification time (a Kubernetes Secret's update swaps a symlink, which
// stat follows).
std::string FileStamp(const std::string& path) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

// Reads the security files again on SIGHUP, or when one changes (looked at
// every 5 s): ReloadSecurity, logged. Runs for the life of the process.
void StartSecurityReloader(const SecurityFlags& flags, const TfConfig& config,
                           std::optional<Role> role) {
  const std::vector<std::string> files = {flags.tls_cert, flags.tls_key, flags.tls_ca,
                                          flags.auth_token_file, flags.auth_identities_file};
  if (std::all_of(files.begin(), files.end(), [](const std::string& f) { return f.empty(); })) {
    return;  // nothing to read again
  }
  std::optional<TaskIdentity> self;
  if (role.has_value()) self = TaskIdentity{*role, config.task.index};
  std::thread([flags, files, self, rpc_layer = config.rpc_layer, source = config.source] {
    auto stamps = [&files] {
      std::string all;
      for (const std::string& f : files) absl::StrAppend(&all, FileStamp(f), ";");
      return all;
    };
    std::string last = stamps();
    sigset_t hup;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    while (true) {
      const timespec wait = {5, 0};
      const bool signalled = sigtimedwait(&hup, nullptr, &wait) == SIGHUP;
      const std::string now = stamps();
      if (!signalled && now == last) continue;
      last = now;
      std::string what;
      const absl::Status s = ReloadSecurity(flags, rpc_layer, source, self, &what);
      const char* why = signalled ? "SIGHUP" : "a file changed";
      if (s.ok()) {
        spdlog::info("security files read again ({}): {}", why, what);
      } else {
        spdlog::warn("security files read again ({}): {}", why, std::string(s.message()));
      }
    }
  }).detach();
}

}  // namespace

void ConfigureSecurityOrExit(const TfConfig& config) {
  SecurityFlags flags;
  flags.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  flags.tls_key = absl::GetFlag(FLAGS_tls_key);
  flags.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  flags.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  flags.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  flags.auth_identities_file = absl::GetFlag(FLAGS_auth_identities_file);
  flags.authorize = absl::GetFlag(FLAGS_authorize);
  absl::StatusOr<SecurityConfig> security =
      LoadSecurityConfig(flags, config.rpc_layer, config.source);
  if (!security.ok()) ExitWithUsageError(std::string(security.status().message()));
  // Its own identity is the task TF_CONFIG names (a certificate or token
  // of another task would act as that one).
  const std::optional<Role> role = RoleFromName(config.task.type);
  if (role.has_value()) {
    absl::Status own = CheckOwnIdentity(*security, TaskIdentity{*role, config.task.index});
    if (!own.ok()) ExitWithUsageError(std::string(own.message()));
  }
  SetProcessSecurity(*std::move(security));
  StartSecurityReloader(flags, config, role);
}

std::unique_ptr<Metrics> StartMetricsOrExit(int port, const TaskId& task) {
  if (port < 0 || port > 65535) {
    ExitWithUsageError(absl::StrCat("--metrics_port=", port, ": must be in [0, 65535]"));
  }
  // LoadTfConfigOrExit has checked that the type is the binary's role.
  const MetricsRole role = task.type == kPsJob       ? MetricsRole::kPs
                           : task.type == kWorkerJob ? MetricsRole::kWorker
                           : task.type == kChiefJob  ? MetricsRole::kChief
                                                     : MetricsRole::kEvaluator;
  absl::StatusOr<std::unique_ptr<Metrics>> m =
      Metrics::Start(port == 0 ? "" : absl::StrCat("0.0.0.0:", port), TaskName(task), role);
  if (!m.ok()) {
    std::fprintf(stderr, "error: --metrics_port=%d: %s\n", port,
                 std::string(m.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(m);
}

TfConfig StartDaemonOrExit(int argc, char** argv, const char* tf_config_env,
                           const std::string& role, const std::string& usage) {
  BlockTerminationSignals();
  TuneAllocator();
  ParseFlagsOrExit(argc, argv, usage);
  TfConfig config = LoadTfConfigOrExit(absl::GetFlag(FLAGS_tf_config), tf_config_env, role);
  ConfigureSecurityOrExit(config);  // TLS and token for every channel and server
  return config;
}

std::unique_ptr<Metrics> StartLoggingAndMetricsOrExit(const TfConfig& config) {
  InitLogging(TaskName(config.task));
  std::unique_ptr<Metrics> metrics =
      StartMetricsOrExit(absl::GetFlag(FLAGS_metrics_port), config.task);
  // Refused calls (--authorize), by method and the caller's role. The
  // daemons stop their servers before their Metrics goes.
  SetDeniedCallHook([m = metrics.get()](const std::string& method, const std::string& role) {
    absl::StatusOr<prometheus::Counter*> c =
        m->AddCounter("pscluster_denied_calls_total",
                      "Calls refused by --authorize's table (docs/security.md), by method and "
                      "the caller's role",
                      {{"method", method}, {"role", role}});
    if (c.ok()) (*c)->Increment();
  });
  return metrics;
}

std::string TaskName(const TaskId& task) {
  return absl::StrCat(task.type, ":", task.index);
}

}  // namespace pscluster
