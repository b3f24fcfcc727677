// For main() only: OpenBLAS reads OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS
// when the library is loaded, before main runs, so correcting them takes a
// re-exec of the binary. Two settings hurt the CPU kernels:
//   - OPENBLAS_CORETYPE forces a kernel family (e.g. "Haswell" on an AVX-512
//     machine, which halves sgemm speed); OpenBLAS detects the right one
//     itself when the variable is absent.
//   - more than one OpenBLAS thread: the kernels call BLAS from threads of
//     their own (compute/cpu_network.h), and OpenBLAS's pool would compete with
//     them for the cores.
#ifndef PSCLUSTER_COMPUTE_KERNELS_BLAS_ENV_H_
#define PSCLUSTER_COMPUTE_KERNELS_BLAS_ENV_H_

#include "absl/status/status.h"

namespace pscluster {
namespace kernels {

// If OPENBLAS_CORETYPE is set, or OPENBLAS_NUM_THREADS is not "1", removes
// the former, sets the latter to "1" and re-executes /proc/self/exe with
// `argv`. Returns OkStatus only when no re-exec was needed (the environment
// is already right); on a failed exec returns the reason and leaves the
// process running with the environment already fixed for any child.
absl::Status ReexecWithBlasEnvironment(char** argv);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_BLAS_ENV_H_
