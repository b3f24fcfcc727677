#include "common/usable_cores.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"

namespace pscluster {

std::optional<int> CoresFromCpuMax(absl::string_view cpu_max) {
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::StripAsciiWhitespace(cpu_max), ' ', absl::SkipEmpty());
  int64_t quota = 0, period = 0;
  if (f.size() != 2 || !absl::SimpleAtoi(f[0], &quota) || !absl::SimpleAtoi(f[1], &period) ||
      quota <= 0 || period <= 0) {
    return std::nullopt;  // "max PERIOD": no quota
  }
  return static_cast<int>(std::max<int64_t>(1, (quota + period - 1) / period));
}

std::optional<std::string> CgroupV2Path(absl::string_view proc_self_cgroup) {
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n')) {
    if (absl::ConsumePrefix(&line, "0::") && absl::StartsWith(line, "/")) {
      return std::string(absl::StripTrailingAsciiWhitespace(line));
    }
  }
  return std::nullopt;
}

int CoresWithin(int affinity_cpus, const std::vector<std::string>& cpu_max_lines) {
  int cores = std::max(1, affinity_cpus);
  for (const std::string& line : cpu_max_lines) {
    if (std::optional<int> q = CoresFromCpuMax(line)) cores = std::min(cores, *q);
  }
  return cores;
}

int UsableCores() {
  int cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus < 1) cpus = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<std::string> lines;
  absl::StatusOr<std::string> own = ReadWholeFile("/proc/self/cgroup");
  std::optional<std::string> path = own.ok() ? CgroupV2Path(*own) : std::nullopt;
  // The quota of the process's cgroup and of every parent applies.
  while (path) {
    const std::string dir = "/sys/fs/cgroup" + (*path == "/" ? std::string() : *path);
    if (absl::StatusOr<std::string> line = ReadWholeFile(dir + "/cpu.max"); line.ok()) {
      lines.push_back(*line);
    }
    if (*path == "/") break;
    const size_t slash = path->rfind('/');
    *path = slash == 0 ? "/" : path->substr(0, slash);
  }
  return CoresWithin(cpus, lines);
}

}  // namespace pscluster
