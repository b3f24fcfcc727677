#include "update/shard_values.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "common/parallel_for.h"

namespace pscluster {
namespace {

// Whether `b` has no holder but the store. References are made only under
// the store's lock, so once this is true it stays true until the store
// hands `b` out again. The fence orders the last reader's reads of the
// buffer (before its release of the reference) before the writes that
// follow.
bool HeldByStoreOnly(const std::shared_ptr<std::vector<float>>& b) {
  if (b.use_count() != 1) return false;
  std::atomic_thread_fence(std::memory_order_acquire);
  return true;
}

}  // namespace

void ShardValues::Configure(std::unique_ptr<Optimizer> optimizer,
                            std::vector<MovingStatistic> moving) {
  optimizer_ = std::move(optimizer);
  optimizer_->set_threads(threads_);
  moving_statistics_ = std::move(moving);
}

std::shared_ptr<std::vector<float>> ShardValues::TakeSpare() {
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if (HeldByStoreOnly(*it)) {
      std::shared_ptr<std::vector<float>> b = std::move(*it);
      spares_.erase(it);
      return b;
    }
  }
  return std::make_shared<std::vector<float>>();
}

std::vector<float>& ShardValues::Replaceable() {
  if (!HeldByStoreOnly(values_)) {
    std::shared_ptr<std::vector<float>> fresh = TakeSpare();
    // The buffer being read waits among the spares for its readers (or,
    // when there are enough spares, is freed by the last of them).
    if (spares_.size() < kKeptSpares) spares_.push_back(values_);
    values_ = std::move(fresh);
  }
  return *values_;
}

std::vector<float>& ShardValues::Writable() {
  if (HeldByStoreOnly(values_)) return *values_;
  const std::shared_ptr<const std::vector<float>> held = values_;
  std::vector<float>& to = Replaceable();
  to.resize(held->size());
  CopyValues(*held, to.data(), threads_);
  return to;
}

void ShardValues::CopyValues(const std::vector<float>& from, void* to, int threads) {
  char* dst = static_cast<char*>(to);
  ParallelFor(static_cast<int64_t>(from.size()), kMinRange, threads, [&](int64_t b, int64_t e) {
    std::memcpy(dst + b * sizeof(float), from.data() + b, (e - b) * sizeof(float));
  });
}

void ShardValues::Update(const float* grad) {
  // The optimizer runs over everything (its rules are element-wise); the
  // moving statistics' values are then put back and averaged instead. What
  // the optimizer's slots hold for them is never read.
  std::vector<float>& values = Writable();
  int64_t saved = 0;
  for (const MovingStatistic& m : moving_statistics_) saved += m.size;
  moving_.resize(saved);
  float* keep = moving_.data();
  for (const MovingStatistic& m : moving_statistics_) {
    std::copy(values.data() + m.offset, values.data() + m.offset + m.size, keep);
    keep += m.size;
  }
  optimizer_->Apply(grad, values.data());
  keep = moving_.data();
  for (const MovingStatistic& m : moving_statistics_) {
    float* v = values.data() + m.offset;
    const float* g = grad + m.offset;
    for (int64_t i = 0; i < m.size; ++i) {
      v[i] = m.momentum * keep[i] + (1.0f - m.momentum) * g[i];
    }
    keep += m.size;
  }
}

void ShardValues::UpdateAside(const float* grad, std::vector<float>* out) {
  const std::vector<float>& in = *values_;
  out->resize(in.size());
  optimizer_->ApplyAside(grad, in.data(), out->data());
  for (const MovingStatistic& m : moving_statistics_) {
    const float* keep = in.data() + m.offset;
    float* v = out->data() + m.offset;
    const float* g = grad + m.offset;
    for (int64_t i = 0; i < m.size; ++i) {
      v[i] = m.momentum * keep[i] + (1.0f - m.momentum) * g[i];
    }
  }
}

void ShardValues::TakeAhead(std::shared_ptr<std::vector<float>> next) {
  // The old buffer waits among the spares for its readers.
  if (spares_.size() < kKeptSpares) spares_.push_back(std::move(values_));
  values_ = std::move(next);
  optimizer_->TakeAside();
}

}  // namespace pscluster
