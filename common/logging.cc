#include "common/logging.h"

#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace pscluster {

void InitLogging(const std::string& task_name) {
  auto logger = spdlog::stderr_logger_mt(task_name);
  logger->set_pattern("%H:%M:%S.%e %^%L%$ %n] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace pscluster
