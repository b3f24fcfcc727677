#include "compute/kernels/blas_env.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace kernels {

absl::Status ReexecWithBlasEnvironment(char** argv) {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* threads = std::getenv("OPENBLAS_NUM_THREADS");
  const bool threads_ok = threads != nullptr && std::strcmp(threads, "1") == 0;
  if (coretype == nullptr && threads_ok) return absl::OkStatus();
  unsetenv("OPENBLAS_CORETYPE");
  setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/1);
  // The re-executed process sees the fixed environment, so this happens once.
  execv("/proc/self/exe", argv);
  return absl::InternalError(absl::StrCat(
      "re-exec of /proc/self/exe to fix the OpenBLAS environment failed: ",
      std::strerror(errno)));
}

}  // namespace kernels
}  // namespace pscluster
