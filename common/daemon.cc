#include "common/daemon.h"

#include <cstdio>
#include <cstdlib>

#include <malloc.h>

#include <cstring>
#include <iostream>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/security.h"

// Transport security, the same on every daemon (README, "Security").
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
          "required on every call of ours (health checks stay open)");

namespace pscluster {

void ParseFlagsOrExit(int argc, char** argv, const std::string& usage) {
  absl::flags_internal::SetProgramInvocationName(argv[0]);
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  // Our flags live in the mains and, shared by every main, in this file
  // (security); list those, not Abseil's own. FlagsHelp below keeps files
  // whose name, as normalize_filename gives it, contains "main".
  config.normalize_filename = [](absl::string_view f) {
    if (absl::EndsWith(f, "common/daemon.cc")) {
      return std::string("common/daemon.cc (shared by every daemon main)");
    }
    return std::string(f);
  };
  config.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "main");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0 ||
        std::strcmp(argv[i], "-help") == 0) {
      // Abseil's own --help exits 1; asking for help is not an error.
      absl::flags_internal::SetFlagsHelpMode(absl::flags_internal::HelpMode::kShort);
      absl::flags_internal::FlagsHelp(std::cout, "main",
                                      absl::flags_internal::HelpFormat::kHumanReadable,
                                      usage);
      std::exit(0);
    }
  }
  // Abseil names a bad flag or value itself (and exits 1).
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    ExitWithUsageError(absl::StrCat("unexpected argument '", rest[1],
                                    "' (flags look like --name=value; try --help)"));
  }
}

void TuneAllocator() {
  // Buffers up to 64 MiB come from the heap and stay mapped; freed memory
  // is returned only when 1 GiB sits unused at the top of the heap.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

void ExitWithUsageError(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::exit(2);
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

void ConfigureSecurityOrExit(const TfConfig& config) {
  SecurityFlags flags;
  flags.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  flags.tls_key = absl::GetFlag(FLAGS_tls_key);
  flags.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  flags.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  flags.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  absl::StatusOr<SecurityConfig> security =
      LoadSecurityConfig(flags, config.rpc_layer, config.source);
  if (!security.ok()) ExitWithUsageError(std::string(security.status().message()));
  SetProcessSecurity(*std::move(security));
}

std::unique_ptr<Metrics> StartMetricsOrExit(int port, const std::string& task) {
  if (port < 0 || port > 65535) {
    ExitWithUsageError(absl::StrCat("--metrics_port=", port, ": must be in [0, 65535]"));
  }
  absl::StatusOr<std::unique_ptr<Metrics>> m =
      Metrics::Start(port == 0 ? "" : absl::StrCat("0.0.0.0:", port), task);
  if (!m.ok()) {
    std::fprintf(stderr, "error: --metrics_port=%d: %s\n", port,
                 std::string(m.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(m);
}

std::string TaskName(const TaskId& task) {
  return absl::StrCat(task.type, ":", task.index);
}

}  // namespace pscluster
