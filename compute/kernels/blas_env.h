// For main() only: OpenBLAS reads OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS
// when the library is loaded, before main runs, so correcting them takes a
// re-exec of the binary. Two settings hurt the CPU kernels:
//   - the wrong kernel family: OPENBLAS_CORETYPE preset to "Haswell" on an
//     AVX-512 machine halves sgemm speed, and Debian's OpenBLAS 0.3.21 does
//     not know newer CPUs (an Emerald Rapids Xeon, model 207, is detected
//     as "Prescott", SSE3 only: 1.8x slower on a ResNet step than
//     "SkylakeX"). So the family is chosen from the CPU's own flags.
//   - more than one OpenBLAS thread: the kernels call BLAS from threads of
//     their own (compute/cpu_network.h), and OpenBLAS's pool would compete with
//     them for the cores.
#ifndef PSCLUSTER_COMPUTE_KERNELS_BLAS_ENV_H_
#define PSCLUSTER_COMPUTE_KERNELS_BLAS_ENV_H_

#include "absl/status/status.h"

namespace pscluster {
namespace kernels {

// The OpenBLAS kernel family for this CPU: "SkylakeX" with AVX-512
// (F, BW, DQ, VL), "Haswell" with AVX2 and FMA, else null (OpenBLAS's own
// detection).
const char* BestOpenBlasCoreType();

// If OPENBLAS_CORETYPE is not BestOpenBlasCoreType() (unset when that is
// null), or OPENBLAS_NUM_THREADS is not "1", sets both so and re-executes
// /proc/self/exe with `argv`. Returns OkStatus only when no re-exec was needed (the environment
// is already right); on a failed exec returns the reason and leaves the
// process running with the environment already fixed for any child.
absl::Status ReexecWithBlasEnvironment(char** argv);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_BLAS_ENV_H_
