// ChunkReader: the examples of one chunk of the run's data. Chunk k is
// batch k % chunks_per_epoch of epoch k / chunks_per_epoch's seeded
// permutation of the training set (WorkRequest in proto/coordination.proto):
// every worker computes the same permutations, so the chief hands out
// chunk numbers, not data. Keeps the last few epochs' permutations.
//
// Not thread-safe; one owner (a trainer).
#ifndef PSCLUSTER_MODEL_CHUNK_READER_H_
#define PSCLUSTER_MODEL_CHUNK_READER_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "common/parallel_for.h"
#include "model/dataset.h"
#include "model/idx_dataset.h"

namespace pscluster {

class ChunkReader {
 public:
  // `data` is borrowed and must outlive the reader; batch >= 1.
  ChunkReader(const Dataset& data, int batch, uint64_t seed)
      : data_(data),
        batch_(batch),
        seed_(seed),
        chunks_per_epoch_(static_cast<int>((data.count + batch - 1) / batch)),
        pixels_(data.height * data.width * data.channels),
        targets_per_example_(data.targets_per_example) {}

  int chunks_per_epoch() const { return chunks_per_epoch_; }
  int pixels() const { return pixels_; }
  int targets_per_example() const { return targets_per_example_; }

  // Examples in chunk k: the batch size but for an epoch's last chunk.
  int Examples(int64_t k) const {
    const int64_t begin = (k % chunks_per_epoch_) * batch_;
    return static_cast<int>(std::min<int64_t>(batch_, data_.count - begin));
  }

  // Copies chunk k's examples into images (Examples(k) * pixels() floats)
  // and targets (Examples(k) * targets_per_example() floats); returns how
  // many.
  // A large chunk is gathered by up to 4 threads (a GPU worker's 8192
  // MNIST images are 26 MB of scattered rows: several ms on one core).
  int Fill(int64_t k, float* images, float* targets) {
    const std::vector<int32_t>& perm = Permutation(static_cast<int>(k / chunks_per_epoch_));
    const int64_t begin = (k % chunks_per_epoch_) * batch_;
    const int n = Examples(k);
    const int64_t bytes = int64_t{n} * pixels_ * static_cast<int64_t>(sizeof(float));
    const int threads = static_cast<int>(std::min<int64_t>(
        std::min(4, HardwareThreads()), std::max<int64_t>(1, bytes / kBytesPerThread)));
    ParallelFor(n, 1, threads, [&](int64_t from, int64_t to) {
      for (int64_t i = from; i < to; ++i) {
        const int32_t e = perm[begin + i];
        std::memcpy(&images[size_t(i) * pixels_], &data_.images[size_t(e) * pixels_],
                    pixels_ * sizeof(float));
        const int t = targets_per_example_;
        std::memcpy(&targets[size_t(i) * t], &data_.targets[size_t(e) * t], t * sizeof(float));
      }
    });
    return n;
  }

 private:
  // Below this many bytes per thread, another thread costs more than it saves.
  static constexpr int64_t kBytesPerThread = 1 << 20;

  const std::vector<int32_t>& Permutation(int epoch) {
    auto it = permutations_.find(epoch);
    if (it == permutations_.end()) {
      // The chief hands out chunks mostly in order: a few epochs suffice.
      if (permutations_.size() > 2) permutations_.erase(permutations_.begin());
      it = permutations_.emplace(epoch, EpochPermutation(data_.count, seed_, epoch)).first;
    }
    return it->second;
  }

  const Dataset& data_;
  const int batch_;
  const uint64_t seed_;
  const int chunks_per_epoch_;
  const int pixels_;
  const int targets_per_example_;
  std::map<int, std::vector<int32_t>> permutations_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_CHUNK_READER_H_
