// SmallGemm against a float64 product: plain and transposed A (through
// strides), every block width (16 to 64 columns and remainders past 64),
// row counts that leave partial blocks, accumulate, and the refusals. On a
// CPU without AVX-512F each case checks the refusal instead: false, C
// untouched, so that the caller's CpuGemm computes it (no case skips: CI's
// machines differ in this).
#include "compute/kernels/small_gemm.h"

#include <cmath>
#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

struct Case {
  int m, n, k;
  bool transpose_a;
};

class SmallGemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(SmallGemmTest, MatchesFloat64) {
  const Case t = GetParam();
  // A is [m, k] or, transposed, stored as [k, m] with a padded row.
  const int lda = t.transpose_a ? t.m + 3 : t.k + 5;
  const int64_t a_rows = t.transpose_a ? t.k : t.m;
  const std::vector<float> a = RandomFloats(a_rows * lda, 11);
  const int ldb = t.n + 16;
  const std::vector<float> b = RandomFloats(int64_t{t.k} * ldb, 12);
  const int ldc = t.n + 7;
  const std::vector<float> c0 = RandomFloats(int64_t{t.m} * ldc, 13);
  const int64_t a_row = t.transpose_a ? 1 : lda;
  const int64_t a_col = t.transpose_a ? lda : 1;
  if (!SmallGemmAvailable()) {
    std::vector<float> c = c0;
    EXPECT_FALSE(
        SmallGemm(t.m, t.n, t.k, a.data(), a_row, a_col, b.data(), ldb, true, c.data(), ldc));
    EXPECT_EQ(c, c0) << "no AVX-512F: C left as it was";
    return;
  }

  std::vector<double> product(int64_t{t.m} * ldc), sum(int64_t{t.m} * ldc);
  for (int i = 0; i < t.m; ++i) {
    for (int j = 0; j < ldc; ++j) {
      double v = 0;
      for (int l = 0; j < t.n && l < t.k; ++l) v += double{a[i * a_row + l * a_col]} * b[l * ldb + j];
      const int64_t at = int64_t{i} * ldc + j;
      // Columns past n are C's padding: left as they were.
      product[at] = j < t.n ? v : c0[at];
      sum[at] = j < t.n ? v + c0[at] : c0[at];
    }
  }
  std::vector<float> c = c0;
  ASSERT_TRUE(SmallGemm(t.m, t.n, t.k, a.data(), a_row, a_col, b.data(), ldb, false, c.data(), ldc));
  EXPECT_TRUE(GradientsNear(c.data(), product, 1e-5, 1e-5)) << "C = AB";
  c = c0;
  ASSERT_TRUE(SmallGemm(t.m, t.n, t.k, a.data(), a_row, a_col, b.data(), ldb, true, c.data(), ldc));
  EXPECT_TRUE(GradientsNear(c.data(), sum, 1e-5, 1e-5)) << "C += AB";
}

INSTANTIATE_TEST_SUITE_P(Shapes, SmallGemmTest,
                         ::testing::Values(Case{37, 16, 9, false}, Case{25, 32, 144, false},
                                           Case{17, 48, 20, false}, Case{13, 64, 300, false},
                                           Case{29, 144, 16, false}, Case{7, 80, 3, false},
                                           Case{144, 16, 250, true}, Case{50, 64, 31, true},
                                           Case{9, 32, 0, false}));

// The two-level reduction as a convolution uses it: A's outer runs are
// rows of an image apart, B's outer runs follow each other or (the weight
// gradient's form) are strided rows of a padded input.
TEST(SmallGemmStridedTest, MatchesFloat64) {
  const int m = 19, n = 48;
  StridedOperands op;
  op.k_outer = 3;
  op.k_inner = 20;
  op.a_row = 4;
  op.a_outer = 101;
  op.a_col = 1;
  op.ldb = n + 5;
  op.b_outer = op.ldb * 23;
  const std::vector<float> a = RandomFloats((m - 1) * op.a_row + 2 * op.a_outer + op.k_inner, 21);
  const std::vector<float> b = RandomFloats(2 * op.b_outer + op.k_inner * op.ldb, 22);
  op.a = a.data();
  op.b = b.data();
  const int ldc = n + 3;
  const std::vector<float> c0 = RandomFloats(int64_t{m} * ldc, 23);
  std::vector<double> sum(int64_t{m} * ldc);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < ldc; ++j) {
      double v = c0[int64_t{i} * ldc + j];
      for (int o = 0; j < n && o < op.k_outer; ++o) {
        for (int l = 0; l < op.k_inner; ++l) {
          v += double{a[i * op.a_row + o * op.a_outer + l * op.a_col]} *
               b[o * op.b_outer + l * op.ldb + j];
        }
      }
      sum[int64_t{i} * ldc + j] = v;
    }
  }
  std::vector<float> c = c0;
  if (!SmallGemmAvailable()) {
    EXPECT_FALSE(SmallGemmStrided(m, n, op, true, c.data(), ldc));
    EXPECT_EQ(c, c0) << "no AVX-512F: C left as it was";
    return;
  }
  ASSERT_TRUE(SmallGemmStrided(m, n, op, true, c.data(), ldc));
  EXPECT_TRUE(GradientsNear(c.data(), sum, 1e-5, 1e-5));
}

TEST(SmallGemmRefusalTest, NarrowOrOddWidthIsLeftToBlas) {
  std::vector<float> a(8, 1.0f), b(8, 1.0f), c(8, 5.0f);
  EXPECT_FALSE(SmallGemm(2, 4, 2, a.data(), 2, 1, b.data(), 4, false, c.data(), 4));
  for (float v : c) EXPECT_EQ(v, 5.0f);
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
