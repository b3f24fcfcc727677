#include "compute/kernels/embedding.h"

#include <algorithm>

namespace pscluster {
namespace kernels {

int64_t FirstBadId(int64_t count, const float* ids, int64_t rows, bool padding) {
  for (int64_t i = 0; i < count; ++i) {
    if (padding && ids[i] == -1.0f) continue;
    // Written so that NaN fails too.
    if (!(ids[i] >= 0.0f && ids[i] < static_cast<float>(rows))) return i;
    if (static_cast<int64_t>(ids[i]) >= rows) return i;
  }
  return -1;
}

void EmbeddingForward(int64_t count, const float* ids, const float* table, int dim, float* y,
                      bool padding) {
  for (int64_t i = 0; i < count; ++i) {
    if (padding && ids[i] == -1.0f) {
      std::fill(y + i * dim, y + (i + 1) * dim, 0.0f);
      continue;
    }
    const float* row = table + static_cast<int64_t>(ids[i]) * dim;
    std::copy(row, row + dim, y + i * dim);
  }
}

void EmbeddingBackward(int64_t count, const float* ids, const float* dy, int dim, float* dtable,
                       bool padding) {
  for (int64_t i = 0; i < count; ++i) {
    if (padding && ids[i] == -1.0f) continue;
    float* row = dtable + static_cast<int64_t>(ids[i]) * dim;
    const float* g = dy + i * dim;
    for (int d = 0; d < dim; ++d) row[d] += g[d];
  }
}

}  // namespace kernels
}  // namespace pscluster
