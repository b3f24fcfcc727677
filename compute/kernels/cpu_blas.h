// A thin, row-major wrapper around the system's CBLAS sgemm (OpenBLAS), and
// the process-wide OpenBLAS settings the CPU kernels rely on.
//
// The kernels call BLAS from several threads of their own, so BLAS must run
// each call on the calling thread: UseSingleThreadedBlas() sets that for the
// whole process (OpenBLAS's thread count is a global).
#ifndef PSCLUSTER_COMPUTE_KERNELS_CPU_BLAS_H_
#define PSCLUSTER_COMPUTE_KERNELS_CPU_BLAS_H_

#include <string>

namespace pscluster {
namespace kernels {

// C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, all row-major, where
// op(X) is X or X^T. Leading dimensions are row strides in elements. With
// beta == 0, C need not be initialised. Thread-safe for distinct C.
void CpuGemm(bool transpose_a, bool transpose_b, int m, int n, int k,
             float alpha, const float* a, int lda, const float* b, int ldb,
             float beta, float* c, int ldc);

// Makes every BLAS call run on its caller's thread. Process-wide; idempotent;
// safe to call while no BLAS call is in flight.
void UseSingleThreadedBlas();

// The kernel family OpenBLAS picked at load time ("SkylakeX", "Haswell",
// "Zen", ...): worth printing, since OPENBLAS_CORETYPE can force a slow one.
std::string BlasCoreName();

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_CPU_BLAS_H_
