// PendingStep: what a sync store has gathered for the step from its current
// version, one slot per worker: the worker's gradient with its example
// count, request id, chunk (PushArgs::chunk), sparse rows, and whether it
// held NaN or Inf. A step is made of some of them (its members): their
// gradients weighted by their example counts and summed in (chunk, worker)
// order, so that the sum is the same bits whatever the arrival order was,
// and whichever worker drew which chunk.
//
// Not thread-safe: its owner (ParameterStore) calls it under its lock.
#ifndef PSCLUSTER_UPDATE_PENDING_STEP_H_
#define PSCLUSTER_UPDATE_PENDING_STEP_H_

#include <cstdint>
#include <vector>

#include "update/sparse_shards.h"

namespace pscluster {

struct PushArgs;

class PendingStep {
 public:
  // Empty slots for `num_workers` workers of gradients of `num_floats`.
  void Reset(int num_workers, int64_t num_floats);

  // Whether worker w's gradient is here.
  bool has(int w) const { return examples_[w] >= 0; }
  // How many slots hold a gradient.
  int count() const { return count_; }
  int examples(int w) const { return examples_[w]; }
  uint64_t request_id(int w) const { return request_id_[w]; }
  int64_t chunk(int w) const { return chunk_[w]; }
  const std::vector<SparseRowsData>& sparse(int w) const { return sparse_[w]; }

  // Takes worker w's gradient from `args` (slot w empty), by swapping
  // args.owned and args.sparse when given; `finite`: whether it holds no
  // NaN or Inf.
  void Take(const PushArgs& args, bool finite);

  // Lets go of worker w's gradient.
  void Drop(int w);

  // Lets go of every gradient: the step closed.
  void Clear();

  // Whether one of `members`' gradients holds NaN or Inf.
  bool AnyNonfinite(const std::vector<bool>& members) const;

  // `members` in the order their gradients are summed: (chunk, worker).
  std::vector<int> SumOrder(const std::vector<bool>& members) const;

  // The gradient a step of `members` applies (examples > 0 in all): the
  // lone member's own, or their weighted sum, made on up to `threads`
  // cores, in a buffer of this one's. Valid until the next call; asked
  // again for the same members with no gradient taken or dropped since,
  // the sum made already (a clipped step's norms and its update, a step
  // computed ahead and its replication record read it twice).
  const float* Gradient(const std::vector<bool>& members, int threads);

 private:
  std::vector<std::vector<float>> gradient_;
  std::vector<int> examples_;  // < 0: nothing from that worker yet
  std::vector<uint64_t> request_id_;
  std::vector<int64_t> chunk_;
  std::vector<std::vector<SparseRowsData>> sparse_;
  std::vector<bool> nonfinite_;
  int count_ = 0;
  std::vector<float> sum_;    // Gradient's scratch
  std::vector<bool> summed_;  // the members whose sum sum_ holds; empty: none
};

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_PENDING_STEP_H_
