// cuBLAS, loaded when a GPU first needs it. CUDA builds only.
//
// The seven cuBLAS entry points the CUDA backend and kernels call
// (cublasCreate, cublasDestroy, cublasSetStream, cublasSetMathMode,
// cublasSgemm, cublasGetStatusString, cublasGetStatusName, under the
// names cublas_v2.h gives them) are defined in cublas_loader.cc: each opens
// the toolkit's libcublas with dlopen on the first call and forwards to it.
// The binaries do not link libcublas, so a process that never uses a GPU
// never loads it: libcublas and libcublasLt's initialisers take about
// 0.45 s of CPU at every start of a process that links them (twice for a
// worker, which re-executes itself for OpenBLAS's settings), and a CPU-only
// machine needs no cuBLAS at all. Thread-safe.
#ifndef PSCLUSTER_COMPUTE_KERNELS_CUBLAS_LOADER_H_
#define PSCLUSTER_COMPUTE_KERNELS_CUBLAS_LOADER_H_

#include <string>

#include "absl/status/status.h"

namespace pscluster {
namespace kernels {

// The soname opened: "libcublas.so.<major>" of the toolkit built against.
const char* CublasSoname();

// Opens libcublas (once; later calls return the first answer): by soname
// (LD_LIBRARY_PATH, the binary's runpath, ld.so's cache), then from the
// library folder of the toolkit the build used. FailedPrecondition naming
// the soname, the folders and dlerror's reason when it cannot, or when the
// library lacks an entry point.
absl::Status LoadCublas();

// Whether this process has opened libcublas (through LoadCublas or any of
// the entry points above).
bool CublasLoaded();

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_CUBLAS_LOADER_H_
