#include "common/daemon.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace pscluster {

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

std::string TaskName(const TaskId& task) {
  return absl::StrCat(task.type, ":", task.index);
}

}  // namespace pscluster
