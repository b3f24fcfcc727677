// Keras's Embedding on the CPU: a gather of table rows by id forward and a
// scatter-add of the rows' gradients backward. Ids arrive as float32 (the
// examples' values, exact below 2^24) and are truncated to integers as
// Keras's cast to int does. Stateless functions; each call works on its
// own arguments. Work is O(ids * dim): nothing is proportional to the rows.
#ifndef PSCLUSTER_COMPUTE_KERNELS_EMBEDDING_H_
#define PSCLUSTER_COMPUTE_KERNELS_EMBEDDING_H_

#include <cstdint>
#include <vector>

namespace pscluster {
namespace kernels {

// With `padding` (a masked table's window, model/sparse_layout.h), a
// negative id -(k + 1) is a padded step whose id 0 has window row k: it
// reads and trains row k as Keras's padded step reads and trains row 0 (a
// mask tells the layers after it to leave the step out; where none does,
// as in an Attention whose keys are all padding, the row counts).

// The index of the first of ids[0, count) outside [0, rows) (negative,
// NaN, or at least rows; with `padding`, negative ones -(k + 1) with k in
// [0, rows) are not), or -1 when there is none.
int64_t FirstBadId(int64_t count, const float* ids, int64_t rows, bool padding = false);

// y[i, :] = table[ids[i], :] for i < count; `table` is [rows, dim] and
// every id is in range (FirstBadId).
void EmbeddingForward(int64_t count, const float* ids, const float* table, int dim, float* y,
                      bool padding = false);

// dtable[ids[i], :] += dy[i, :] for i < count, in order of i: an id met
// twice gets both rows' gradients. Rows no id names are left as they are.
void EmbeddingBackward(int64_t count, const float* ids, const float* dy, int dim, float* dtable,
                       bool padding = false);

// The rows a batch's ids name, each with its positions in order: what a
// device's backward (parallel_reshaping.h's EmbeddingBackward) sums, one
// row per thread and no atomics, to EmbeddingBackward's sums bit for bit.
// `ints` holds rows[uniques] (each row once, in the order first named),
// starts[uniques + 1] and positions[count] (row u's ids are at
// positions[starts[u]], ..., positions[starts[u + 1] - 1], increasing).
struct EmbeddingIdIndex {
  int64_t uniques = 0;
  std::vector<int32_t> ints;
  // IndexEmbeddingIds's scratch, kept with the index so that one reused
  // from batch to batch allocates nothing once grown: each position's row
  // number, the rows' counts, and the direct row -> number array (all -1
  // between calls).
  std::vector<int32_t> unique_of, counts, slot;
};

// Builds *index for ids[0, count) of a table of `rows` rows (`padding` as
// above), reusing its storage. Returns FirstBadId(count, ids, rows,
// padding): -1 when every id is in range, else the first bad one's index
// (and *index is left empty). Needs count and rows below 2^31. O(count)
// time; memory O(count), or O(rows) where rows is under 4 * count.
int64_t IndexEmbeddingIds(int64_t count, const float* ids, int64_t rows, bool padding,
                          EmbeddingIdIndex* index);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_EMBEDDING_H_
