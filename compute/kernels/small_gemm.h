// A GEMM for the general convolution's shapes, where one side is narrow
// (16 to a few hundred columns, a multiple of 16) and OpenBLAS spends more
// time packing than computing: C[m, n] (+)= A[m, k] B[k, n], without packing,
// register-blocked on AVX-512 (16 floats a vector). A is read through
// strides, so A^T needs no copy either (the weight gradient's columns^T dy).
// Stateless; thread-safe for distinct C.
#ifndef PSCLUSTER_COMPUTE_KERNELS_SMALL_GEMM_H_
#define PSCLUSTER_COMPUTE_KERNELS_SMALL_GEMM_H_

#include <cstdint>

namespace pscluster {
namespace kernels {

// Whether SmallGemm can run here: the CPU has AVX-512F. Fixed per process.
bool SmallGemmAvailable();

// C[i, j] = (accumulate ? C[i, j] : 0) + sum_l A(i, l) * b[l * ldb + j]
// for i < m, j < n, where A(i, l) = a[i * a_row + l * a_col] and C is
// row-major with row stride ldc. The sum over l runs in order, one fused
// multiply-add per term. Returns false, touching nothing, unless
// SmallGemmAvailable() and n % 16 == 0; the caller then uses CpuGemm.
bool SmallGemm(int m, int n, int k, const float* a, int64_t a_row, int64_t a_col, const float* b,
               int ldb, bool accumulate, float* c, int ldc);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_SMALL_GEMM_H_
