#include "common/daemon.h"

#include <cstdio>
#include <cstdlib>

#include <malloc.h>

#include <cstring>
#include <iostream>
#include <vector>

#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pscluster {

void ParseFlagsOrExit(int argc, char** argv, const std::string& usage) {
  absl::flags_internal::SetProgramInvocationName(argv[0]);
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  // Our flags live in the mains; list those, not Abseil's own.
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "main.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.normalize_filename = [](absl::string_view f) { return std::string(f); };
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
