// reshaping.h's ZeroPadding2D as a data-parallel algorithm over
// parallel_kernels.h's executors, forward (one call per output element)
// and back (one per input element), and embedding.h's Embedding: a gather
// forward, and backward a sum per row of the rows' gradients in the order
// of their positions, over an EmbeddingIdIndex the host built (no atomics:
// the sums are the CPU's bit for bit). The same code runs on CUDA
// (gpu_kernels.cu) and on the host (emulated_device.cc).
// Stateless templates: thread-safety is the executor's.
#ifndef PSCLUSTER_COMPUTE_KERNELS_PARALLEL_RESHAPING_H_
#define PSCLUSTER_COMPUTE_KERNELS_PARALLEL_RESHAPING_H_

#include <cstdint>

#include "compute/kernels/parallel_kernels.h"
#include "compute/kernels/reshaping.h"

namespace pscluster {
namespace kernels {
namespace parallel {

// ---- Element functors ------------------------------------------------------

// ZeroPadding2D forward (one call per output element, `forward`) or back
// (one per input element): the inside is the same pixel shifted by (top,
// left).
struct ZeroPad2DFn {
  PaddingShape s;
  bool forward;
  const float* from;
  float* to;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int oh = s.in_h + s.top + s.bottom, ow = s.in_w + s.left + s.right;
    const int h_size = forward ? oh : s.in_h, w_size = forward ? ow : s.in_w;
    const int c = static_cast<int>(i % static_cast<I>(s.channels));
    I t = i / static_cast<I>(s.channels);
    const int w = static_cast<int>(t % static_cast<I>(w_size));
    t /= static_cast<I>(w_size);
    const int h = static_cast<int>(t % static_cast<I>(h_size));
    const int64_t n = t / static_cast<I>(h_size);
    if (forward) {
      const int ih = h - s.top, iw = w - s.left;
      to[i] = ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w
                  ? 0.0f
                  : from[((n * s.in_h + ih) * s.in_w + iw) * s.channels + c];
    } else {
      to[i] = from[((n * oh + h + s.top) * ow + w + s.left) * s.channels + c];
    }
  }
};

// y[k, d] = table[row of ids[k], d] (embedding.h's EmbeddingForward; ids
// checked on the host by IndexEmbeddingIds).
struct EmbeddingGatherFn {
  int dim;
  bool padding;
  const float* ids;
  const float* table;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const I k = i / static_cast<I>(dim), d = i % static_cast<I>(dim);
    int64_t row = static_cast<int64_t>(ids[k]);
    if (padding && row < 0) row = -(row + 1);
    y[i] = table[row * dim + d];
  }
};

// dtable[rows[u], d] += dy[p, d] for the positions p of row u in order
// (positions[starts[u]], ..., positions[starts[u + 1] - 1]): one call per
// (u, d), each the only writer of its element.
struct EmbeddingRowSumFn {
  int dim;
  const int32_t* rows;
  const int32_t* starts;
  const int32_t* positions;
  const float* dy;
  float* dtable;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const I u = i / static_cast<I>(dim), d = i % static_cast<I>(dim);
    float* out = dtable + int64_t{rows[u]} * dim + d;
    float sum = *out;
    for (int32_t p = starts[u]; p < starts[u + 1]; ++p) sum += dy[int64_t{positions[p]} * dim + d];
    *out = sum;
  }
};

// ---- Layer algorithms ------------------------------------------------------

template <typename Exec>
void EmbeddingForward(const Exec& e, int64_t count, int dim, bool padding, const float* ids,
                      const float* table, float* y) {
  e.ForEach("EmbeddingGather", count * dim, EmbeddingGatherFn{dim, padding, ids, table, y});
}

// `index`: device memory in EmbeddingIdIndex's layout for `uniques` rows.
template <typename Exec>
void EmbeddingBackward(const Exec& e, int64_t uniques, int dim, const int32_t* index,
                       const float* dy, float* dtable) {
  if (uniques == 0) return;
  const int32_t* rows = index;
  const int32_t* starts = rows + uniques;
  const int32_t* positions = starts + uniques + 1;
  e.ForEach("EmbeddingRowSum", uniques * dim,
            EmbeddingRowSumFn{dim, rows, starts, positions, dy, dtable});
}

template <typename Exec>
void Fill(const Exec& e, int64_t n, float value, float* y) {
  e.ForEach("Fill", n, FillFn{y, value});
}

template <typename Exec>
void ZeroPad2DForward(const Exec& e, const PaddingShape& s, const float* x, float* y) {
  e.ForEach("ZeroPad2D", int64_t{s.batch} * s.out_h() * s.out_w() * s.channels,
            ZeroPad2DFn{s, true, x, y});
}

template <typename Exec>
void ZeroPad2DBackward(const Exec& e, const PaddingShape& s, const float* dy, float* dx) {
  e.ForEach("ZeroPad2DBackward", int64_t{s.batch} * s.in_h * s.in_w * s.channels,
            ZeroPad2DFn{s, false, dy, dx});
}

}  // namespace parallel
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_PARALLEL_RESHAPING_H_
