#include "compute/kernels/small_gemm.h"

#include <immintrin.h>

#include <utility>

namespace pscluster {
namespace kernels {
namespace {

// The build targets x86-64-v3 (AVX2); only these functions use AVX-512,
// after SmallGemmAvailable() has checked the CPU.
#define PSC_AVX512 __attribute__((target("avx512f")))

// C's block of R rows and V vectors of 16 columns: R * V accumulators in
// registers (at most 24 of the 32), B's row loaded once per l, A's
// elements broadcast.
template <int R, int V>
PSC_AVX512 void Block(const StridedOperands& op, const float* a, const float* b, bool accumulate,
                      float* c, int ldc) {
  __m512 sum[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) {
      sum[r][v] = accumulate ? _mm512_loadu_ps(c + int64_t{r} * ldc + 16 * v)
                             : _mm512_setzero_ps();
    }
  }
  const int64_t a_row = op.a_row, a_col = op.a_col, ldb = op.ldb;
  for (int o = 0; o < op.k_outer; ++o) {
    const float* ao = a + o * op.a_outer;
    const float* bo = b + o * op.b_outer;
    for (int l = 0; l < op.k_inner; ++l) {
      const float* brow = bo + l * ldb;
      __m512 bv[V];
      for (int v = 0; v < V; ++v) bv[v] = _mm512_loadu_ps(brow + 16 * v);
      const float* al = ao + l * a_col;
      for (int r = 0; r < R; ++r) {
        const __m512 av = _mm512_set1_ps(al[r * a_row]);
        for (int v = 0; v < V; ++v) sum[r][v] = _mm512_fmadd_ps(av, bv[v], sum[r][v]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(c + int64_t{r} * ldc + 16 * v, sum[r][v]);
  }
}

using BlockFn = void (*)(const StridedOperands&, const float*, const float*, bool, float*, int);

// Rows per block for V vectors: 24 accumulators at most.
constexpr int kRows[5] = {0, 12, 12, 8, 6};

template <int V, int... R>
constexpr void FillRow(BlockFn* row, std::integer_sequence<int, R...>) {
  ((row[R + 1] = &Block<R + 1, V>), ...);
}

// kBlocks[V][R]: the block of R rows (1..kRows[V]) and V vectors.
struct BlockTable {
  BlockFn fn[5][13] = {};
  constexpr BlockTable() {
    FillRow<1>(fn[1], std::make_integer_sequence<int, kRows[1]>());
    FillRow<2>(fn[2], std::make_integer_sequence<int, kRows[2]>());
    FillRow<3>(fn[3], std::make_integer_sequence<int, kRows[3]>());
    FillRow<4>(fn[4], std::make_integer_sequence<int, kRows[4]>());
  }
};
constexpr BlockTable kBlocks;

}  // namespace

bool SmallGemmAvailable() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available;
}

bool SmallGemmStrided(int m, int n, const StridedOperands& op, bool accumulate, float* c,
                      int ldc) {
  if (n % 16 != 0 || !SmallGemmAvailable()) return false;
  for (int j = 0; j < n;) {
    const int v = (n - j) / 16 >= 4 ? 4 : (n - j) / 16;
    const int rows = kRows[v];
    for (int i = 0; i < m; i += rows) {
      const int r = m - i < rows ? m - i : rows;
      kBlocks.fn[v][r](op, op.a + i * op.a_row, op.b + j, accumulate, c + int64_t{i} * ldc + j,
                       ldc);
    }
    j += 16 * v;
  }
  return true;
}

bool SmallGemm(int m, int n, int k, const float* a, int64_t a_row, int64_t a_col, const float* b,
               int ldb, bool accumulate, float* c, int ldc) {
  StridedOperands op;
  op.k_inner = k;
  op.a = a;
  op.a_row = a_row;
  op.a_col = a_col;
  op.b = b;
  op.ldb = ldb;
  return SmallGemmStrided(m, n, op, accumulate, c, ldc);
}

}  // namespace kernels
}  // namespace pscluster
