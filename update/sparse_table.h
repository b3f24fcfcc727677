// One row-sparse embedding table's rows on one parameter server
// (docs/sparse_embeddings.md): id -> the row's values and its optimizer
// slots, contiguous as SparseOptimizer lays them out, made on first touch
// from (seed, table, id) so that nothing needs sending to make a row.
//
// A SparseTable is not thread-safe: its owner (the ParameterStore) locks
// around every call. The free functions are pure and thread-safe.
#ifndef PSCLUSTER_UPDATE_SPARSE_TABLE_H_
#define PSCLUSTER_UPDATE_SPARSE_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/model_spec.h"
#include "model/sparse_layout.h"
#include "update/sparse_optimizer.h"

namespace pscluster {

// RowOwner(table, id, num_ps), the ps that holds a row, is
// model/sparse_layout.h's: workers and ps share it.

// InitialRow (a row's initial values from (seed, table, id)) is
// model/model_spec.h's: InitialParameters makes a whole table the same way.

struct SparseTableOptions {
  std::string name;       // the variable, "emb/embeddings"
  int table = 0;          // its index among the model's sparse tables
  int width = 0;          // output_dim
  int64_t input_dim = 0;  // ids in [0, input_dim); 0: unbounded (any id >= 0)
  Initializer initializer = Initializer::RandomUniform();  // Keras's Embedding default
  int64_t fan_in = 0,
          fan_out = 0;  // input_dim and output_dim, for VarianceScaling
  uint64_t seed = 1;
  SparseOptimizerOptions optimizer;
  // Growing tables: a new id gets a row once its gradient has come this many
  // times (1: at once); the gradient that admits it is applied. Until then
  // reads give its initial values and its gradients are dropped (counted).
  int admit_after = 1;
  // Rows not updated for more than this many updates of the table are
  // evicted by Evict (0: never).
  int64_t evict_after = 0;
};

struct SparseTableStats {
  int64_t rows = 0;                // rows held
  int64_t admitted = 0;            // rows ever made by Apply
  int64_t evicted = 0;             // rows dropped by Evict
  int64_t dropped_unadmitted = 0;  // gradient rows dropped: the id not yet admitted
  int64_t pending_ids = 0;         // ids seen but not yet admitted
  int64_t bytes = 0;               // SparseTable::bytes()
};

class SparseTable {
 public:
  // InvalidArgument naming the bad value: width <= 0, input_dim < 0,
  // admit_after < 1, evict_after < 0, or a bad optimizer
  // (SparseOptimizer::Create's errors).
  static absl::StatusOr<std::unique_ptr<SparseTable>> Create(const SparseTableOptions& options);

  SparseTable(const SparseTable&) = delete;
  SparseTable& operator=(const SparseTable&) = delete;

  const SparseTableOptions& options() const { return options_; }
  int width() const { return options_.width; }
  int64_t floats_per_row() const { return floats_per_row_; }
  const std::vector<std::string>& slot_names() const { return optimizer_->slot_names(); }

  // InvalidArgument naming the first id outside [0, input_dim) of a bounded
  // table; negative ids are refused by every table.
  absl::Status CheckIds(absl::Span<const int64_t> ids) const;

  // out[i * width, (i + 1) * width) = row ids[i]'s values: the held row's,
  // or its initial values (InitialRow) when none is held. Changes nothing.
  void Read(absl::Span<const int64_t> ids, float* out) const;

  // One update of the table: `ids` distinct (the caller deduplicated, as
  // SumDuplicateRows does), grads ids.size() x width, finite (the caller
  // checked). A row not held is made first (InitialRow + InitRow) when its
  // id is admitted (admit_after), else its gradient is dropped and counted.
  // `iterations` is the table's update count before this update (adam's bias
  // correction) and becomes each updated row's last update. Rows are updated
  // in the order of ids.
  void Apply(absl::Span<const int64_t> ids, const float* grads, int64_t iterations);

  // Drops the rows whose last update is more than evict_after updates before
  // `iterations` (none when evict_after is 0) and returns how many; a row
  // dropped is made afresh from its initial values when touched again.
  // Also forgets pending (not yet admitted) ids not seen for that long.
  int64_t Evict(int64_t iterations);

  SparseTableStats stats() const;

  // Bytes the table has allocated: rows, slots, ids and last updates, the
  // index and the pending ids. What a /metrics gauge and the memory test read.
  int64_t bytes() const;

  // Every held row in increasing id order: its id, its values then its slots
  // (floats_per_row floats), and its last update. What a checkpoint and a
  // backup's seed hold.
  struct Rows {
    std::vector<int64_t> ids;
    std::vector<float> rows;  // ids.size() x floats_per_row
    std::vector<int64_t> last_update;
  };
  Rows Export() const;

  // Replaces every row with `rows` (in any id order) and clears the pending
  // ids. InvalidArgument, and nothing changed, when the sizes do not fit or
  // an id repeats or is out of range (CheckIds).
  absl::Status Import(const Rows& rows);

  // CRC-32C of the held rows in increasing id order (each row's id, values
  // and slots, bit for bit), so that two tables holding the same rows agree
  // whatever order they were made in. Last updates are left out: they are
  // bookkeeping for eviction, not part of the model.
  uint32_t Crc() const;

 private:
  // Rows live in fixed-size blocks, so that a row never moves once made
  // (Apply holds pointers to rows while it makes others) and a table pays
  // at most one partly used block beyond its rows. A row's slot number s is
  // row s % rows_per_block_ of block s / rows_per_block_; freed slots
  // (evicted rows) are reused before a block is added.
  struct Block {
    std::vector<float> rows;  // rows_per_block_ x floats_per_row_
    std::vector<int64_t> ids;
    std::vector<int64_t> last_update;
  };

  // The index holds slot numbers (4 bytes each instead of an id and a slot)
  // and finds them by id: hashing and comparing a slot reads its id from
  // the blocks. Lookups pass an IdKey.
  struct IdKey {
    int64_t id;
  };
  struct SlotHash {
    using is_transparent = void;
    const SparseTable* table;
    size_t operator()(uint32_t slot) const { return (*this)(IdKey{table->IdOf(slot)}); }
    size_t operator()(IdKey key) const;
  };
  struct SlotEq {
    using is_transparent = void;
    const SparseTable* table;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t slot, IdKey key) const { return table->IdOf(slot) == key.id; }
    bool operator()(IdKey key, uint32_t slot) const { return table->IdOf(slot) == key.id; }
  };

  // A not yet admitted id: how many of its gradients have come, and the
  // update that brought the last one.
  struct Pending {
    int count = 0;
    int64_t last_seen = 0;
  };

  SparseTable(const SparseTableOptions& options, std::unique_ptr<SparseOptimizer> optimizer);

  float* RowOf(uint32_t slot);
  const float* RowOf(uint32_t slot) const;
  int64_t IdOf(uint32_t slot) const;
  int64_t& LastUpdateOf(uint32_t slot);
  int64_t LastUpdateOf(uint32_t slot) const;
  // A slot for a new row of `id` (reused or appended), its id set and the
  // index updated; the row's contents are the caller's. Slots are 32-bit:
  // a table holds fewer than 2^32 rows on one ps.
  uint32_t NewSlot(int64_t id);
  // Counts a gradient of an id not held; true when it is admitted now.
  bool Admit(int64_t id, int64_t iterations);
  // The held slots in increasing id order.
  std::vector<uint32_t> SlotsInIdOrder() const;
  void Clear();

  // Constant after construction.
  const SparseTableOptions options_;
  const std::unique_ptr<SparseOptimizer> optimizer_;
  const int64_t floats_per_row_;
  const uint32_t rows_per_block_;

  std::vector<Block> blocks_;
  uint32_t slots_used_ = 0;     // slots ever handed out (the blocks' rows in use or freed)
  std::vector<uint32_t> free_;  // slots of evicted rows
  absl::flat_hash_set<uint32_t, SlotHash, SlotEq> index_;
  absl::flat_hash_map<int64_t, Pending> pending_;
  SparseTableStats counts_;  // admitted, evicted, dropped_unadmitted

  // Apply's scratch, kept to save an allocation per update.
  std::vector<float*> apply_rows_;
  std::vector<float> apply_grads_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_SPARSE_TABLE_H_
