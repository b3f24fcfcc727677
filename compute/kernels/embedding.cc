#include "compute/kernels/embedding.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

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

int64_t IndexEmbeddingIds(int64_t count, const float* ids, int64_t rows, bool padding,
                          EmbeddingIdIndex* index) {
  index->uniques = 0;
  index->ints.clear();
  const int64_t bad = FirstBadId(count, ids, rows, padding);
  if (bad >= 0) return bad;
  // Each position's row, numbered as first named (the rows, in that order,
  // go straight into `ints`); a table of few rows by a direct array, a
  // large one (a whole table, not a window) by a hash map.
  std::vector<int32_t>& rows_named = index->ints;
  std::vector<int32_t>& unique_of = index->unique_of;
  std::vector<int32_t>& counts = index->counts;
  unique_of.resize(count);
  counts.clear();
  auto add = [&rows_named, &counts](int64_t row) {
    rows_named.push_back(static_cast<int32_t>(row));
    counts.push_back(0);
    return static_cast<int32_t>(rows_named.size() - 1);
  };
  if (rows < 4 * count) {
    std::vector<int32_t>& slot = index->slot;
    if (static_cast<int64_t>(slot.size()) < rows) slot.resize(rows, -1);
    for (int64_t k = 0; k < count; ++k) {
      int32_t& u = slot[RowOf(ids[k], padding)];
      if (u < 0) u = add(RowOf(ids[k], padding));
      unique_of[k] = u;
      ++counts[u];
    }
    for (int32_t row : rows_named) slot[row] = -1;  // as it was: -1 everywhere
  } else {
    absl::flat_hash_map<int64_t, int32_t> slot;
    slot.reserve(count);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t row = RowOf(ids[k], padding);
      auto [it, inserted] = slot.try_emplace(row, 0);
      if (inserted) it->second = add(row);
      unique_of[k] = it->second;
      ++counts[it->second];
    }
  }
  const int64_t uniques = static_cast<int64_t>(rows_named.size());
  index->uniques = uniques;
  std::vector<int32_t>& out = index->ints;
  out.resize(2 * uniques + 1 + count);
  int32_t* starts = out.data() + uniques;
  int32_t* positions = starts + uniques + 1;
  // The counts become each row's next free place among the positions.
  starts[0] = 0;
  for (int64_t u = 0; u < uniques; ++u) {
    starts[u + 1] = starts[u] + counts[u];
    counts[u] = starts[u];
  }
  for (int64_t k = 0; k < count; ++k) positions[counts[unique_of[k]]++] = static_cast<int32_t>(k);
  return -1;
}

}  // namespace kernels
}  // namespace pscluster
