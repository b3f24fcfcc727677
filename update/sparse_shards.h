// SparseShards: the rows of the model's sparse embedding tables that one
// store holds (docs/sparse_embeddings.md), and the sparse part of the
// update being made: a sync step's members' rows summed per id, an async
// push's rows, or a primary's record's.
//
// Not thread-safe: its owner (ParameterStore) calls it under its lock.
#ifndef PSCLUSTER_UPDATE_SPARSE_SHARDS_H_
#define PSCLUSTER_UPDATE_SPARSE_SHARDS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "update/sparse_table.h"

namespace pscluster {

class PendingStep;

// Rows of one sparse table: distinct ids, and `width` floats for each (a
// gradient's rows in a push or an update, the values in a pull).
struct SparseRowsData {
  int table = 0;
  std::vector<int64_t> ids;
  std::vector<float> values;  // ids.size() x width
};

class SparseShards {
 public:
  // The tables from now on, in table order (empty: the model has none);
  // the update being made is forgotten.
  void Reset(std::vector<std::unique_ptr<SparseTable>> tables);

  size_t size() const { return tables_.size(); }

  // Checks a push's or a record's rows against the tables (each table at
  // most once, each id once, `width` values a row: InvalidArgument);
  // *finite is false when one holds NaN or Inf.
  absl::Status Check(const std::vector<SparseRowsData>& rows, bool* finite) const;

  // Fills rows[i].values from rows[i].ids (held rows, or the rows as they
  // would be made). InvalidArgument for an unknown table or an id out of
  // its range.
  absl::Status Read(std::vector<SparseRowsData>* rows) const;

  // The update being made: `members`' pending rows summed per id, weighted
  // as the dense gradient, in the same (chunk, worker) order.
  void SumStep(const PendingStep& pending, const std::vector<bool>& members);
  // The update being made: `rows` as they are (an async push's, a record's).
  void SetStep(std::vector<SparseRowsData> rows);
  void ClearStep() { step_.clear(); }
  // Hands the update being made over (to a primary's record), leaving none.
  std::vector<SparseRowsData> TakeStep();

  // Applies the update being made as the update from `version` (and evicts
  // rows gone cold, every kEvictEvery updates).
  void Apply(int64_t version);

  // Each table's rows, in table order (a snapshot's).
  std::vector<SparseTable::Rows> Export() const;
  std::vector<SparseTableStats> stats() const;

 private:
  // InvalidArgument for a table the model does not have.
  absl::Status CheckTable(int table) const;

  static constexpr int64_t kEvictEvery = 256;
  std::vector<std::unique_ptr<SparseTable>> tables_;
  std::vector<SparseRowsData> step_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_SPARSE_SHARDS_H_
