// ShardValues: the values of the shards one store holds, their optimizer's
// state, and the one rule that updates them: the optimizer on the trainable
// values, a moving average on BatchNormalization's moving statistics.
//
// Readers (ParameterStore::PullShared) hold the values by reference outside
// the store's lock, so a buffer is written in place only while no one else
// holds it; an update made while it is held first copies the values into a
// buffer no one holds. Buffers that were the values wait among the spares
// until their readers are done, to be reused rather than allocated (and
// faulted in) again.
//
// Not thread-safe: its owner calls it under its own lock.
#ifndef PSCLUSTER_UPDATE_SHARD_VALUES_H_
#define PSCLUSTER_UPDATE_SHARD_VALUES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "update/optimizer.h"

namespace pscluster {

// Values [offset, offset + size) of the store that are a BatchNormalization
// moving statistic: updated as v = momentum * v + (1 - momentum) * g from
// the pushed (sync: averaged) values g, never by the optimizer.
struct MovingStatistic {
  int64_t offset = 0;
  int64_t size = 0;
  float momentum = 0.0f;
};

class ShardValues {
 public:
  // `threads`: the cores a pass over the values may use when the shard is
  // large (common/parallel_for.h); results do not depend on it.
  explicit ShardValues(int threads) : threads_(threads) {}
  ShardValues(const ShardValues&) = delete;
  ShardValues& operator=(const ShardValues&) = delete;

  // The update rule from now on: `optimizer` (its state as it comes) and
  // the moving statistics (disjoint, in range). The values stay.
  void Configure(std::unique_ptr<Optimizer> optimizer, std::vector<MovingStatistic> moving);

  // The values, as readers share them; never null.
  const std::shared_ptr<std::vector<float>>& shared() const { return values_; }
  const std::vector<float>& values() const { return *values_; }
  const Optimizer& optimizer() const { return *optimizer_; }

  // The values to overwrite whole (Init, Restore): their contents may be
  // any.
  std::vector<float>& Replaceable();

  // One update from `grad` (as many floats as the values).
  void Update(const float* grad);

  // The same update written into *out: the values and the optimizer stay
  // as they are (Optimizer::ApplyAside).
  void UpdateAside(const float* grad, std::vector<float>* out);

  // `next`, UpdateAside's output for the current values, becomes the
  // values, and the optimizer takes the state it set aside then.
  void TakeAhead(std::shared_ptr<std::vector<float>> next);

  // A buffer from the spares that no reader holds any more, or a new one.
  std::shared_ptr<std::vector<float>> TakeSpare();

  // to = from's values, copied on up to `threads` cores for a large shard
  // (to holds from.size() floats).
  static void CopyValues(const std::vector<float>& from, void* to, int threads);

  // Below 2 x this many values a pass runs on one thread.
  static constexpr int64_t kMinRange = 256 << 10;

 private:
  // The values to write into: themselves when no reader holds them, else a
  // copy in a buffer no reader holds (which becomes the values).
  std::vector<float>& Writable();

  static constexpr size_t kKeptSpares = 4;
  const int threads_;
  std::shared_ptr<std::vector<float>> values_ = std::make_shared<std::vector<float>>();
  std::vector<std::shared_ptr<std::vector<float>>> spares_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<MovingStatistic> moving_statistics_;
  std::vector<float> moving_;  // Update's scratch
};

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_SHARD_VALUES_H_
