// Logging set-up for the daemons: one spdlog logger to stderr whose lines
// carry the time and the task ("ps:0"), so interleaved logs stay readable.
#ifndef PSCLUSTER_COMMON_LOGGING_H_
#define PSCLUSTER_COMMON_LOGGING_H_

#include <string>

namespace pscluster {

// Call once from main, before any other thread starts.
void InitLogging(const std::string& task_name);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_LOGGING_H_
