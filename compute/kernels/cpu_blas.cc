#include "compute/kernels/cpu_blas.h"

#include <cblas.h>

namespace pscluster {
namespace kernels {

void CpuGemm(bool transpose_a, bool transpose_b, int m, int n, int k,
             float alpha, const float* a, int lda, const float* b, int ldb,
             float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
              b, ldb, beta, c, ldc);
}

void UseSingleThreadedBlas() { openblas_set_num_threads(1); }

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? std::string("unknown") : std::string(name);
}

}  // namespace kernels
}  // namespace pscluster
