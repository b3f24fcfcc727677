// Sparse embedding tables in a model (docs/sparse_embeddings.md): which of
// a model's variables are tables whose rows travel one by one rather than
// whole, where a batch's ids for each are, and the per-batch "window" that
// stands for a table in the flat parameter vector of a worker or an
// evaluator.
//
// A table is not placed on the ps as shards (model/placement.h skips it):
// its rows are spread over every ps by RowOwner (update/sparse_table.h).
// In the flat vector a table becomes a window of `window` rows, after every
// dense variable (so the dense variables' offsets, and the placement's
// fingerprint, do not depend on the window): a batch's distinct ids are
// numbered 0, 1, ... (RowWindow), the examples' ids replaced by those
// numbers, and the rows of those ids copied into the window from the ps
// before the step; the window's gradient rows are then the batch's
// gradient of each id, summed over its uses. The network computes an
// ordinary Embedding of `window` rows and knows nothing of this.
//
// Plain functions and one class used by one thread.
#ifndef PSCLUSTER_MODEL_SPARSE_LAYOUT_H_
#define PSCLUSTER_MODEL_SPARSE_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model_spec.h"

namespace pscluster {

// The ps that holds row `id` of table `table` among `num_ps` ps: the
// splitmix64 finalizer (a bijective 64-bit mix) of (table << 56) ^ id, mod
// num_ps, so that a table's rows spread evenly whatever its ids are. Pure;
// the same on every daemon. 0 when num_ps < 1.
int RowOwner(int table, int64_t id, int num_ps);

// One sparse table of a model.
struct SparseTableInfo {
  int table = 0;         // index among the model's tables
  std::string variable;  // "<layer>/embeddings"
  int width = 0;         // output_dim
  // The model's: ids in [0, input_dim). 0: unbounded (the chief's
  // --embedding_unbounded), any id >= 0, as the ps's SparseTableOptions.
  int64_t input_dim = 0;
  Initializer initializer;
  int64_t fan_in = 0, fan_out = 0;
  // Keras's mask_zero: id 0 is padding. In the window its row is pulled
  // and pushed like any id's (Keras reads and trains row 0 where nothing
  // masks it, e.g. an Attention whose keys are all padding), and its
  // number k is written -(k + 1), the sign marking the mask.
  bool mask_zero = false;
  // Where a batch's ids for it are: per use of the table (an Embedding
  // node), the first id's index in an example and how many follow.
  struct Columns {
    int64_t first = 0;
    int64_t count = 0;
  };
  std::vector<Columns> columns;
  // In the flat vector of a spec made by WithSparseTables: the window's
  // offset (window x width floats).
  int64_t offset = 0;
};

// The model's Embedding tables, in variable order. InvalidArgument naming
// the layer when an Embedding does not read a model input directly (its
// ids must be the examples' values, not a layer's output), and naming both
// tables when two read overlapping but different inputs.
absl::StatusOr<std::vector<SparseTableInfo>> FindSparseTables(const ModelSpec& spec);

// `spec` with every table of `tables` (FindSparseTables's) a window of
// `window` rows (>= 1) after the dense variables: its Embedding layers'
// input_dim and the variable's shape are the window's, and
// num_parameters counts it. tables[i].offset is set to the window's offset.
ModelSpec WithSparseTables(const ModelSpec& spec, int64_t window,
                           std::vector<SparseTableInfo>* tables);

// Whether variable `name` is one of `tables`.
bool IsSparseTable(const std::vector<SparseTableInfo>& tables, const std::string& name);

// Sets every table unbounded (input_dim 0): ids are any int64 >= 0.
void MakeUnbounded(std::vector<SparseTableInfo>* tables);

// Whether every int64 id of the data (values [first, first + per_example)
// of an example, Dataset::ids) is read by a table of `tables`: else it
// would reach the network as the float 0 beside it. InvalidArgument
// naming the first value no table reads.
absl::Status CheckIdsRead(const std::vector<SparseTableInfo>& tables, int first, int per_example);

// Int64 ids given beside float examples (Dataset::ids): per example,
// `per_example` ids standing for its values [first, first + per_example).
struct ExampleIds {
  const int64_t* ids = nullptr;  // n * per_example; nullptr: none
  int first = 0;
  int per_example = 0;
};

// Numbers a batch's distinct ids per table and rewrites the examples' ids
// as those numbers (exact in float32: below the window). Tables that read
// the same inputs (a DeepFM's first-order and factor tables over one set
// of ids) share one numbering; FindSparseTables refuses tables whose
// inputs only overlap. One per loop; reused from batch to batch.
class RowWindow {
 public:
  explicit RowWindow(std::vector<SparseTableInfo> tables);

  // Reads ids from `examples` (n examples of `example_size` floats; the
  // values `ids` stands for from there) into *out (the examples, ids
  // renumbered). InvalidArgument naming the example, the table and the id
  // when an id is outside [0, input_dim) (an unbounded table: negative), as
  // Keras refuses it (a float's fraction is cut off, as Keras's cast to int
  // does), or when a table's distinct ids exceed `window`.
  absl::Status Map(const float* examples, const ExampleIds& ids, int n, int64_t example_size,
                   int64_t window, std::vector<float>* out);
  absl::Status Map(const float* examples, int n, int64_t example_size, int64_t window,
                   std::vector<float>* out) {
    return Map(examples, ExampleIds{}, n, example_size, window, out);
  }

  const std::vector<SparseTableInfo>& tables() const { return tables_; }
  // Table t's distinct ids of the last Map, in the order numbered.
  const std::vector<int64_t>& ids(int t) const { return ids_[numbering_[t]]; }
  // The most distinct ids any table had in the last Map (at least 1): the
  // window that holds them all, as scoring a whole test set needs.
  int64_t widest() const;

 private:
  std::vector<SparseTableInfo> tables_;
  // Per table, the first table reading the same columns (itself if none):
  // whose ids_ it shares.
  std::vector<size_t> numbering_;
  std::vector<std::vector<int64_t>> ids_;  // filled for numbering_[t] == t
  std::vector<absl::flat_hash_map<int64_t, int64_t>> index_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_SPARSE_LAYOUT_H_
