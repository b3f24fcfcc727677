#include "update/pending_step.h"

#include <algorithm>
#include <utility>

#include "common/parallel_for.h"
#include "update/parameter_store.h"
#include "update/shard_values.h"

namespace pscluster {

void PendingStep::Reset(int num_workers, int64_t num_floats) {
  gradient_.assign(num_workers, {});
  examples_.assign(num_workers, -1);
  chunk_.assign(num_workers, -1);
  request_id_.assign(num_workers, 0);
  count_ = 0;
  nonfinite_.assign(num_workers, false);
  sparse_.assign(num_workers, {});
  sum_.assign(num_floats, 0.0f);
  summed_.clear();
}

void PendingStep::Take(const PushArgs& args, bool finite) {
  const int w = args.worker;
  if (args.owned != nullptr) {
    gradient_[w].swap(*args.owned);
  } else {
    gradient_[w].assign(args.gradients, args.gradients + args.num_floats);
  }
  sparse_[w].clear();
  if (args.sparse != nullptr) sparse_[w].swap(*args.sparse);
  examples_[w] = args.num_examples;
  request_id_[w] = args.request_id;
  chunk_[w] = args.chunk;
  nonfinite_[w] = !finite;
  ++count_;
  summed_.clear();
}

void PendingStep::Drop(int w) {
  examples_[w] = -1;
  sparse_[w].clear();
  nonfinite_[w] = false;
  --count_;
  summed_.clear();
}

void PendingStep::Clear() {
  for (size_t w = 0; w < examples_.size(); ++w) {
    examples_[w] = -1;
    sparse_[w].clear();
  }
  count_ = 0;
  std::fill(nonfinite_.begin(), nonfinite_.end(), false);
  summed_.clear();
}

bool PendingStep::AnyNonfinite(const std::vector<bool>& members) const {
  for (size_t w = 0; w < members.size(); ++w) {
    if (members[w] && nonfinite_[w]) return true;
  }
  return false;
}

std::vector<int> PendingStep::SumOrder(const std::vector<bool>& members) const {
  std::vector<int> order;
  for (int w = 0; w < static_cast<int>(members.size()); ++w) {
    if (members[w]) order.push_back(w);
  }
  std::sort(order.begin(), order.end(), [this](int a, int b) {
    return std::make_pair(chunk_[a], a) < std::make_pair(chunk_[b], b);
  });
  return order;
}

const float* PendingStep::Gradient(const std::vector<bool>& members, int threads) {
  const int64_t n = static_cast<int64_t>(sum_.size());
  int64_t total = 0;
  for (size_t w = 0; w < members.size(); ++w) {
    if (members[w]) total += examples_[w];
  }
  // In (chunk, worker) order: the sum is the same bits whatever the
  // arrival order was, and whichever worker drew which chunk (the chunks
  // of a step are the run's; who trains them is decided at run time).
  // Each term is rounded before it is added (no fused multiply-add: see
  // BUILD). The first member's term is written, not added to zeros
  // (w * g + 0 is 0 + w * g, bit for bit: -0 becomes +0), and the step of
  // a lone member is its gradient itself: no pass at all (g differs from
  // 0 + 1 * g only where g is -0, which Adam's update takes as +0, and
  // SGD's and momentum's only in the sign of a zero weight).
  const std::vector<int> order = SumOrder(members);
  if (order.size() > 1 && members == summed_) return sum_.data();
  const float* grad = nullptr;
  bool first = true;
  for (int w : order) {
    const float weight = static_cast<float>(examples_[w]) / total;
    const float* g = gradient_[w].data();
    if (order.size() == 1) return g;
    float* s = sum_.data();
    if (first) {
      ParallelFor(n, ShardValues::kMinRange, threads, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) s[i] = weight * g[i] + 0.0f;
      });
    } else {
      ParallelFor(n, ShardValues::kMinRange, threads, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) s[i] += weight * g[i];
      });
    }
    first = false;
    grad = s;
  }
  if (order.size() > 1) summed_ = members;
  return grad;
}

}  // namespace pscluster
