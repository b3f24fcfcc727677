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

// Where a GEMM's operands lie in memory when its reduction runs over
// k_outer runs of k_inner terms (outer major): term (o, l) of row i reads
// A at a[i * a_row + o * a_outer + l * a_col] and B's row at
// b + o * b_outer + l * ldb. A convolution reads its input through this
// without im2col: o a window row, l a run of window_w * channels floats.
struct StridedOperands {
  int k_outer = 1, k_inner = 0;
  const float* a = nullptr;
  int64_t a_row = 0, a_outer = 0, a_col = 1;
  const float* b = nullptr;
  int64_t b_outer = 0, ldb = 0;
};

// C[i, j] = (accumulate ? C[i, j] : 0) + sum over (o, l) of A(i, o, l) *
// B(o, l)[j] for i < m, j < n, in order, one fused multiply-add per term;
// SmallGemm's refusals.
bool SmallGemmStrided(int m, int n, const StridedOperands& op, bool accumulate, float* c,
                      int ldc);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_SMALL_GEMM_H_
