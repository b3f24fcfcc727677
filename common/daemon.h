// The start-up every daemon's main shares: StartDaemonOrExit (signals, the
// allocator, flags, TF_CONFIG, transport security), then, once the main has
// checked its own flags, StartLoggingAndMetricsOrExit. Errors print one line
// and exit with code 2 (bad input), as every daemon documents. For mains
// only; not thread-safe (call before any thread starts).
//
// Linking this library defines the flags every daemon takes: --tf_config,
// --metrics_port, and the security flags --tls_cert, --tls_key, --tls_ca,
// --tls_server_name, --auth_token_file.
#ifndef PSCLUSTER_COMMON_DAEMON_H_
#define PSCLUSTER_COMMON_DAEMON_H_

#include <string>

#include <memory>

#include "common/cluster_spec.h"
#include "common/command_line.h"
#include "common/exit_codes.h"
#include "common/metrics.h"

namespace pscluster {

// The first thing a daemon's main does, in this order: SIGINT and SIGTERM
// blocked (BlockTerminationSignals: every thread inherits the mask), the
// allocator tuned, the command line parsed (ParseFlagsOrExit; --help
// prints `usage`), TF_CONFIG read from --tf_config or `tf_config_env` (the
// TF_CONFIG variable, which main reads) and checked to name `role`'s task,
// and the process's transport security installed. Exits 2 on bad input.
TfConfig StartDaemonOrExit(int argc, char** argv, const char* tf_config_env,
                           const std::string& role, const std::string& usage);

// After the main has checked its own flags: log lines carry the task's name
// ("ps:0"), and /metrics is served on --metrics_port (StartMetricsOrExit).
std::unique_ptr<Metrics> StartLoggingAndMetricsOrExit(const TfConfig& config);

// Keeps glibc malloc from handing large buffers back to the system after
// every message (millions of page faults per run otherwise): raises the
// mmap and trim thresholds. Call early in main.
void TuneAllocator();

// Reads --tf_config=FILE when given, else `env_value` (the TF_CONFIG
// variable), and checks that task.type is `expected_type`.
TfConfig LoadTfConfigOrExit(const std::string& file_flag, const char* env_value,
                            const std::string& expected_type);

// Reads the security flags and `config`'s rpc_layer (LoadSecurityConfig,
// common/security.h) and installs the result for every channel and server
// of the process (SetProcessSecurity). Call right after the TF_CONFIG is
// loaded, before any channel or server exists. Exits 2 naming the flag.
// Then, for the life of the process, a thread reads the files again on
// SIGHUP or when one changes (ReloadSecurity: rotated tokens and
// identities lists take effect without a restart).
void ConfigureSecurityOrExit(const TfConfig& config);

// Serves Prometheus /metrics on 0.0.0.0:port: the standard metrics of
// `task`'s role (common/metrics.h), labelled task="ps:0" etc.; or nothing
// when port is 0 (the metrics then still count). A port outside [0, 65535]
// exits 2; one that cannot be bound exits 1, naming it.
std::unique_ptr<Metrics> StartMetricsOrExit(int port, const TaskId& task);

// "ps:0" for logs.
std::string TaskName(const TaskId& task);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_DAEMON_H_
