#include "update/sparse_table.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "common/crc32c.h"

namespace pscluster {
namespace {

// Rows per block: a power of two whose block is at most 64 KiB, at least 1.
uint32_t RowsPerBlock(int64_t floats_per_row) {
  const int64_t row_bytes = floats_per_row * int64_t{sizeof(float)} + 2 * int64_t{sizeof(int64_t)};
  uint32_t rows = 1;
  while (rows < (1u << 16) && int64_t{rows} * 2 * row_bytes <= (int64_t{1} << 16)) rows *= 2;
  return rows;
}

absl::Status BadOption(const SparseTableOptions& o, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("sparse table ", o.name, ": ", what));
}

}  // namespace


size_t SparseTable::SlotHash::operator()(IdKey key) const { return absl::Hash<int64_t>()(key.id); }

absl::StatusOr<std::unique_ptr<SparseTable>> SparseTable::Create(
    const SparseTableOptions& options) {
  if (options.width <= 0) {
    return BadOption(options, absl::StrCat("width ", options.width, " must be > 0"));
  }
  if (options.input_dim < 0) {
    return BadOption(options,
                     absl::StrCat("input_dim ", options.input_dim, " must be >= 0 (0: unbounded)"));
  }
  if (options.admit_after < 1) {
    return BadOption(options, absl::StrCat("admit_after ", options.admit_after, " must be >= 1"));
  }
  if (options.evict_after < 0) {
    return BadOption(options,
                     absl::StrCat("evict_after ", options.evict_after, " must be >= 0 (0: never)"));
  }
  absl::StatusOr<std::unique_ptr<SparseOptimizer>> optimizer =
      SparseOptimizer::Create(options.optimizer, options.width);
  if (!optimizer.ok()) {
    return BadOption(options, std::string(optimizer.status().message()));
  }
  return std::unique_ptr<SparseTable>(new SparseTable(options, *std::move(optimizer)));
}

SparseTable::SparseTable(const SparseTableOptions& options,
                         std::unique_ptr<SparseOptimizer> optimizer)
    : options_(options),
      optimizer_(std::move(optimizer)),
      floats_per_row_(optimizer_->floats_per_row()),
      rows_per_block_(RowsPerBlock(floats_per_row_)),
      index_(0, SlotHash{this}, SlotEq{this}) {}

float* SparseTable::RowOf(uint32_t slot) {
  return blocks_[slot / rows_per_block_].rows.data() + (slot % rows_per_block_) * floats_per_row_;
}

const float* SparseTable::RowOf(uint32_t slot) const {
  return blocks_[slot / rows_per_block_].rows.data() + (slot % rows_per_block_) * floats_per_row_;
}

int64_t SparseTable::IdOf(uint32_t slot) const {
  return blocks_[slot / rows_per_block_].ids[slot % rows_per_block_];
}

int64_t& SparseTable::LastUpdateOf(uint32_t slot) {
  return blocks_[slot / rows_per_block_].last_update[slot % rows_per_block_];
}

int64_t SparseTable::LastUpdateOf(uint32_t slot) const {
  return blocks_[slot / rows_per_block_].last_update[slot % rows_per_block_];
}

uint32_t SparseTable::NewSlot(int64_t id) {
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    if (slots_used_ % rows_per_block_ == 0) {
      // Moving a Block moves its vectors' buffers, so rows already handed
      // out stay where they are when blocks_ grows.
      Block block;
      block.rows.resize(size_t{rows_per_block_} * floats_per_row_);
      block.ids.resize(rows_per_block_);
      block.last_update.resize(rows_per_block_);
      blocks_.push_back(std::move(block));
    }
    slot = slots_used_++;
  }
  // The id first: the index hashes the slot by it.
  blocks_[slot / rows_per_block_].ids[slot % rows_per_block_] = id;
  index_.insert(slot);
  return slot;
}

absl::Status SparseTable::CheckIds(absl::Span<const int64_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("sparse table ", options_.name, ": id ", id,
                                                     " (index ", i, ") is negative"));
    }
    if (options_.input_dim > 0 && id >= options_.input_dim) {
      return absl::InvalidArgumentError(absl::StrCat("sparse table ", options_.name, ": id ", id,
                                                     " (index ", i, ") is out of range [0, ",
                                                     options_.input_dim, ")"));
    }
  }
  return absl::OkStatus();
}

void SparseTable::Read(absl::Span<const int64_t> ids, float* out) const {
  const int width = options_.width;
  for (size_t i = 0; i < ids.size(); ++i) {
    float* dst = out + i * width;
    auto it = index_.find(IdKey{ids[i]});
    if (it != index_.end()) {
      const float* row = RowOf(*it);
      std::copy(row, row + width, dst);
    } else {
      InitialRow(options_.initializer, options_.fan_in, options_.fan_out, options_.seed,
                 options_.table, ids[i], width, dst);
    }
  }
}

bool SparseTable::Admit(int64_t id, int64_t iterations) {
  if (options_.admit_after <= 1) return true;
  Pending& pending = pending_[id];
  pending.count++;
  pending.last_seen = iterations;
  if (pending.count < options_.admit_after) return false;
  pending_.erase(id);
  return true;
}

void SparseTable::Apply(absl::Span<const int64_t> ids, const float* grads, int64_t iterations) {
  const int width = options_.width;
  apply_rows_.clear();
  // Gradients are passed straight through unless a row is dropped; from the
  // first drop on, the kept ones are gathered into apply_grads_.
  bool dropped_any = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    uint32_t slot;
    auto it = index_.find(IdKey{id});
    if (it != index_.end()) {
      slot = *it;
    } else if (Admit(id, iterations)) {
      slot = NewSlot(id);
      float* row = RowOf(slot);
      InitialRow(options_.initializer, options_.fan_in, options_.fan_out, options_.seed,
                 options_.table, id, width, row);
      optimizer_->InitRow(row);
      counts_.admitted++;
    } else {
      counts_.dropped_unadmitted++;
      if (!dropped_any) {
        dropped_any = true;
        apply_grads_.assign(grads, grads + i * width);
      }
      continue;
    }
    LastUpdateOf(slot) = iterations;
    apply_rows_.push_back(RowOf(slot));
    if (dropped_any) {
      apply_grads_.insert(apply_grads_.end(), grads + i * width, grads + (i + 1) * width);
    }
  }
  if (apply_rows_.empty()) return;
  optimizer_->Apply(apply_rows_, dropped_any ? apply_grads_.data() : grads, iterations);
}

int64_t SparseTable::Evict(int64_t iterations) {
  if (options_.evict_after == 0) return 0;
  int64_t evicted = 0;
  for (auto it = index_.begin(); it != index_.end();) {
    const uint32_t slot = *it;
    if (iterations - LastUpdateOf(slot) > options_.evict_after) {
      index_.erase(it++);
      free_.push_back(slot);
      evicted++;
    } else {
      ++it;
    }
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (iterations - it->second.last_seen > options_.evict_after) {
      pending_.erase(it++);
    } else {
      ++it;
    }
  }
  counts_.evicted += evicted;
  return evicted;
}

SparseTableStats SparseTable::stats() const {
  SparseTableStats stats = counts_;
  stats.rows = static_cast<int64_t>(index_.size());
  stats.pending_ids = static_cast<int64_t>(pending_.size());
  stats.bytes = bytes();
  return stats;
}

int64_t SparseTable::bytes() const {
  int64_t total = sizeof(*this) + blocks_.capacity() * sizeof(Block);
  for (const Block& block : blocks_) {
    total += block.rows.capacity() * sizeof(float) + block.ids.capacity() * sizeof(int64_t) +
             block.last_update.capacity() * sizeof(int64_t);
  }
  // A flat hash table's slot plus its one control byte.
  total += index_.capacity() * (sizeof(uint32_t) + 1);
  total += pending_.capacity() * (sizeof(std::pair<const int64_t, Pending>) + 1);
  total += free_.capacity() * sizeof(uint32_t);
  total += (apply_rows_.capacity() * sizeof(float*)) + apply_grads_.capacity() * sizeof(float);
  return total;
}

std::vector<uint32_t> SparseTable::SlotsInIdOrder() const {
  std::vector<uint32_t> slots(index_.begin(), index_.end());
  std::sort(slots.begin(), slots.end(),
            [this](uint32_t a, uint32_t b) { return IdOf(a) < IdOf(b); });
  return slots;
}

SparseTable::Rows SparseTable::Export() const {
  const std::vector<uint32_t> slots = SlotsInIdOrder();
  Rows out;
  out.ids.reserve(slots.size());
  out.rows.reserve(slots.size() * floats_per_row_);
  out.last_update.reserve(slots.size());
  for (uint32_t slot : slots) {
    const float* row = RowOf(slot);
    out.ids.push_back(IdOf(slot));
    out.rows.insert(out.rows.end(), row, row + floats_per_row_);
    out.last_update.push_back(LastUpdateOf(slot));
  }
  return out;
}

void SparseTable::Clear() {
  index_.clear();
  blocks_.clear();
  free_.clear();
  pending_.clear();
  slots_used_ = 0;
}

absl::Status SparseTable::Import(const Rows& rows) {
  const size_t n = rows.ids.size();
  if (rows.rows.size() != n * floats_per_row_ || rows.last_update.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sparse table ", options_.name, ": import of ", n, " ids has ", rows.rows.size(),
        " floats and ", rows.last_update.size(), " last updates; ", n, " rows need ",
        n * floats_per_row_, " floats (", floats_per_row_, " a row) and ", n, " last updates"));
  }
  if (absl::Status ids_ok = CheckIds(rows.ids); !ids_ok.ok()) return ids_ok;
  std::vector<int64_t> sorted = rows.ids;
  std::sort(sorted.begin(), sorted.end());
  auto repeated = std::adjacent_find(sorted.begin(), sorted.end());
  if (repeated != sorted.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse table ", options_.name, ": import repeats id ", *repeated));
  }
  Clear();
  index_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = NewSlot(rows.ids[i]);
    const float* src = rows.rows.data() + i * floats_per_row_;
    std::copy(src, src + floats_per_row_, RowOf(slot));
    LastUpdateOf(slot) = rows.last_update[i];
  }
  return absl::OkStatus();
}

uint32_t SparseTable::Crc() const {
  uint32_t crc = 0;
  for (uint32_t slot : SlotsInIdOrder()) {
    const int64_t id = IdOf(slot);
    crc = crc32c::Extend(crc, &id, sizeof id);
    crc = crc32c::Extend(crc, RowOf(slot), floats_per_row_ * sizeof(float));
  }
  return crc;
}

}  // namespace pscluster
