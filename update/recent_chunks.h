// RecentChunks: the chunks (PushArgs::chunk) of the last updates a store
// made, and from which version on it holds every one of them.
//
// A worker tells the chief that a chunk is done only when it next asks for
// work, so the chief's done set lags the ps's state. A checkpoint counts
// these chunks done besides the chief's, and a chief that restarts takes
// them as done, so that no chunk whose gradient a state holds is trained
// again on top of it (chief/checkpointer.cc, chief/ps_run.cc).
//
// Not thread-safe: the store keeps it under its lock.
#ifndef PSCLUSTER_UPDATE_RECENT_CHUNKS_H_
#define PSCLUSTER_UPDATE_RECENT_CHUNKS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace pscluster {

class RecentChunks {
 public:
  // Holds nothing; the updates from `version` on are to be added.
  void Reset(int64_t version) {
    chunks_.clear();
    blocks_.clear();
    counts_.clear();
    since_ = version;
  }

  // Continues another store's record (a backup seeded from its primary, a
  // primary restored from its backup): `chunks` are those of its updates
  // from `since` up to `version`.
  void Load(absl::Span<const int64_t> chunks, int64_t since, int64_t version) {
    Reset(since);
    chunks_.assign(chunks.begin(), chunks.end());
    for (int64_t k : chunks_) ++counts_[k];
    blocks_.push_back({chunks_.size(), version - since});
  }

  // One update (a sync step, an async push) and the chunks of its
  // gradients (those < 0, pushed without one, are left out); then the
  // oldest updates go until no more than `keep` chunks (and updates) are
  // held.
  void Add(absl::Span<const int64_t> chunks, size_t keep) {
    size_t n = 0;
    for (int64_t k : chunks) {
      if (k < 0) continue;
      chunks_.push_back(k);
      ++counts_[k];
      ++n;
    }
    blocks_.push_back({n, 1});
    while ((chunks_.size() > keep || blocks_.size() > keep) && !blocks_.empty()) {
      for (size_t i = 0; i < blocks_.front().chunks; ++i) {
        auto it = counts_.find(chunks_[i]);
        if (--it->second == 0) counts_.erase(it);
      }
      chunks_.erase(chunks_.begin(), chunks_.begin() + blocks_.front().chunks);
      since_ += blocks_.front().updates;
      blocks_.pop_front();
    }
  }

  // Oldest first.
  std::vector<int64_t> chunks() const { return {chunks_.begin(), chunks_.end()}; }
  // Whether an update held took chunk `k`.
  bool Contains(int64_t k) const { return counts_.contains(k); }
  // Every update from this version on has its chunks in chunks().
  int64_t since() const { return since_; }

 private:
  struct Block {
    size_t chunks;    // how many of chunks_
    int64_t updates;  // the versions they span
  };
  std::deque<int64_t> chunks_;
  std::deque<Block> blocks_;
  absl::flat_hash_map<int64_t, int> counts_;  // chunks_ by value, for Contains
  int64_t since_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_RECENT_CHUNKS_H_
