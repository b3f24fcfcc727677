// How many CPU cores this process may use, for a main that picks a default
// thread count. Plain functions; UsableCores reads /proc and /sys, the
// rest is pure (and tested with canned file contents).
#ifndef PSCLUSTER_COMMON_USABLE_CORES_H_
#define PSCLUSTER_COMMON_USABLE_CORES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace pscluster {

// The CPUs of this process's affinity mask (what `nproc` counts: taskset,
// a cpuset), capped by every cgroup v2 CPU quota above it (Docker's
// --cpus, Compose's cpus:, a Kubernetes CPU limit), rounded up; at least 1.
int UsableCores();

// Cores a cgroup v2 cpu.max line allows: "200000 100000" -> 2,
// "150000 100000" -> 2 (rounded up); nullopt for "max 100000" (no quota)
// or a line that does not parse.
std::optional<int> CoresFromCpuMax(absl::string_view cpu_max);

// The cgroup v2 path of the process from /proc/self/cgroup's "0::/path"
// line ("/" in a container with its own cgroup namespace); nullopt without
// one (cgroup v1 only).
std::optional<std::string> CgroupV2Path(absl::string_view proc_self_cgroup);

// `affinity_cpus` (at least 1) capped by each quota among `cpu_max_lines`
// (the cgroup's own cpu.max and its parents'; unreadable ones left out).
int CoresWithin(int affinity_cpus, const std::vector<std::string>& cpu_max_lines);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_USABLE_CORES_H_
