#include "compute/kernels/embedding.h"

#include <algorithm>

namespace pscluster {
namespace kernels {

namespace {

// The row of `id`: itself, or with `padding` the row -(id + 1) of a
// negative one.
inline int64_t RowOf(float id, bool padding) {
  const int64_t i = static_cast<int64_t>(id);
  return padding && i < 0 ? -(i + 1) : i;
}

}  // namespace

int64_t FirstBadId(int64_t count, const float* ids, int64_t rows, bool padding) {
  const float low = padding ? -static_cast<float>(rows) : 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    // Written so that NaN fails too; a padded id is a whole number.
    if (!(ids[i] >= low && ids[i] < static_cast<float>(rows))) return i;
    if (ids[i] < 0.0f && ids[i] != static_cast<float>(static_cast<int64_t>(ids[i]))) return i;
    const int64_t row = RowOf(ids[i], padding);
    if (row < 0 || row >= rows) return i;
  }
  return -1;
}

void EmbeddingForward(int64_t count, const float* ids, const float* table, int dim, float* y,
                      bool padding) {
  for (int64_t i = 0; i < count; ++i) {
    const float* row = table + RowOf(ids[i], padding) * dim;
    std::copy(row, row + dim, y + i * dim);
  }
}

void EmbeddingBackward(int64_t count, const float* ids, const float* dy, int dim, float* dtable,
                       bool padding) {
  for (int64_t i = 0; i < count; ++i) {
    float* row = dtable + RowOf(ids[i], padding) * dim;
    const float* g = dy + i * dim;
    for (int d = 0; d < dim; ++d) row[d] += g[d];
  }
}

}  // namespace kernels
}  // namespace pscluster
