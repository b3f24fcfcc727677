// ParallelFor: an element-wise loop over [0, n) split into contiguous
// ranges run at once on up to `threads` threads (the caller's among them).
// For the parameter server's passes over large arrays (the optimizer's
// update, the gradients' finiteness check, sync's weighted sum): each
// element is computed exactly as by one loop, so the split never changes a
// result, only how many cores share the memory traffic.
//
// A range is at least `min_range` elements: below 2 x min_range the loop
// runs on the caller alone, with no thread started. Threads are started
// per call (tens of microseconds), so min_range should be worth
// milliseconds: the ps uses 256 Ki floats.
#ifndef PSCLUSTER_COMMON_PARALLEL_FOR_H_
#define PSCLUSTER_COMMON_PARALLEL_FOR_H_

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace pscluster {

// The number of cores this process may use (at least 1).
inline int HardwareThreads() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

template <typename Fn>
void ParallelFor(int64_t n, int64_t min_range, int threads, Fn&& fn) {
  const int64_t by_size = min_range > 0 ? n / min_range : 1;
  const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, by_size)));
  if (t <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> helpers;
  helpers.reserve(t - 1);
  for (int k = 1; k < t; ++k) {
    const int64_t begin = n * k / t;
    const int64_t end = n * (k + 1) / t;
    helpers.emplace_back([&fn, begin, end] { fn(begin, end); });
  }
  fn(int64_t{0}, n / t);
  for (std::thread& h : helpers) h.join();
}

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_PARALLEL_FOR_H_
