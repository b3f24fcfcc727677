#include "compute/kernels/cpu_blas.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

// Every transpose combination, with padded leading dimensions and beta = 1,
// against a naive triple loop.
TEST(CpuGemmTest, MatchesNaiveProduct) {
  UseSingleThreadedBlas();
  const int m = 5, n = 7, k = 3, pad = 2;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      // op(A) is m x k; stored as k x m when transposed.
      const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad,
                ldc = n + pad;
      std::vector<float> a((ta ? k : m) * lda), b((tb ? n : k) * ldb),
          c(m * ldc);
      for (float& v : a) v = dist(rng);
      for (float& v : b) v = dist(rng);
      for (float& v : c) v = dist(rng);
      std::vector<float> want = c;
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double sum = 0;
          for (int p = 0; p < k; ++p) {
            const float av = ta ? a[p * lda + i] : a[i * lda + p];
            const float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
            sum += double{av} * bv;
          }
          want[i * ldc + j] = static_cast<float>(0.5 * sum + c[i * ldc + j]);
        }
      }
      CpuGemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f,
              c.data(), ldc);
      for (int i = 0; i < m * ldc; ++i) {
        EXPECT_NEAR(c[i], want[i], 1e-5)
            << "ta=" << ta << " tb=" << tb << " i=" << i;
      }
    }
  }
}

TEST(CpuGemmTest, NamesTheBlasCore) { EXPECT_FALSE(BlasCoreName().empty()); }

}  // namespace
}  // namespace kernels
}  // namespace pscluster
