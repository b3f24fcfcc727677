// Start-up helpers for the daemons' mains: read TF_CONFIG and check that it
// names the role the binary plays, set up transport security. Errors print
// one line and exit with code 2 (bad input), as every daemon documents.
//
// Linking this library defines the security flags every daemon takes:
// --tls_cert, --tls_key, --tls_ca, --tls_server_name, --auth_token_file.
#ifndef PSCLUSTER_COMMON_DAEMON_H_
#define PSCLUSTER_COMMON_DAEMON_H_

#include <string>

#include <memory>

#include "common/cluster_spec.h"
#include "common/exit_codes.h"
#include "common/metrics.h"

namespace pscluster {

// Parses the command line into the Abseil flags of the daemon's main and
// of this library, in Abseil's syntax. --help (or -h) prints `usage` and
// those flags, then exits 0. Any bad input exits 2 with one line naming it:
// an unknown flag, a value that does not parse (Abseil's own message,
// e.g. "Illegal value 'abc' specified for flag 'epochs'"), a missing value,
// an argument that is not a flag. Abseil's own flags (--flagfile, ...) are
// not taken.
void ParseFlagsOrExit(int argc, char** argv, const std::string& usage);

// Keeps glibc malloc from handing large buffers back to the system after
// every message (millions of page faults per run otherwise): raises the
// mmap and trim thresholds. Call early in main.
void TuneAllocator();

// Prints "error: <message>" to stderr and exits with code 2.
[[noreturn]] void ExitWithUsageError(const std::string& message);

// Prints "error: <message>" to stderr and exits with kExitBadData (the
// data is missing or unreadable: starting again changes nothing).
[[noreturn]] void ExitWithDataError(const std::string& message);

// Reads --tf_config=FILE when given, else `env_value` (the TF_CONFIG
// variable), and checks that task.type is `expected_type`.
TfConfig LoadTfConfigOrExit(const std::string& file_flag, const char* env_value,
                            const std::string& expected_type);

// Reads the security flags and `config`'s rpc_layer (LoadSecurityConfig,
// common/security.h) and installs the result for every channel and server
// of the process (SetProcessSecurity). Call right after the TF_CONFIG is
// loaded, before any channel or server exists. Exits 2 naming the flag.
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
