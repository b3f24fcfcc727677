#include "compute/kernels/blas_env.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace kernels {

const char* BestOpenBlasCoreType() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

absl::Status ReexecWithBlasEnvironment(char** argv) {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* best = BestOpenBlasCoreType();
  const bool core_ok = best == nullptr ? coretype == nullptr
                                       : coretype != nullptr && std::strcmp(coretype, best) == 0;
  const char* threads = std::getenv("OPENBLAS_NUM_THREADS");
  const bool threads_ok = threads != nullptr && std::strcmp(threads, "1") == 0;
  if (core_ok && threads_ok) return absl::OkStatus();
  if (best == nullptr) {
    unsetenv("OPENBLAS_CORETYPE");
  } else {
    setenv("OPENBLAS_CORETYPE", best, /*overwrite=*/1);
  }
  setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/1);
  // The re-executed process sees the fixed environment, so this happens once.
  execv("/proc/self/exe", argv);
  return absl::InternalError(absl::StrCat(
      "re-exec of /proc/self/exe to fix the OpenBLAS environment failed: ",
      std::strerror(errno)));
}

}  // namespace kernels
}  // namespace pscluster
