// The benchmarks' command lines: flags "--name=value" ("--name" alone has
// the value ""), each handed to the benchmark's own parser.
#ifndef PSCLUSTER_TESTS_BENCH_BENCH_FLAGS_H_
#define PSCLUSTER_TESTS_BENCH_BENCH_FLAGS_H_

#include <functional>
#include <optional>
#include <string>

namespace pscluster {

// Calls `take(name, value)` for each of argv[1..]; returns the first
// argument it refused (to be named in the caller's usage message), or
// nullopt when it took every one.
inline std::optional<std::string> FirstBadFlag(
    int argc, char** argv,
    const std::function<bool(const std::string& name, const std::string& value)>& take) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (!take(arg.substr(0, eq), eq == std::string::npos ? "" : arg.substr(eq + 1))) return arg;
  }
  return std::nullopt;
}

}  // namespace pscluster

#endif  // PSCLUSTER_TESTS_BENCH_BENCH_FLAGS_H_
