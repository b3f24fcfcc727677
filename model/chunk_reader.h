// ChunkReader: the examples of one chunk of the run's data. Chunk k is
// batch k % chunks_per_epoch of epoch k / chunks_per_epoch's seeded
// permutation of the training set (WorkRequest in proto/coordination.proto):
// every worker computes the same permutations, so the chief hands out
// chunk numbers, not data. Keeps the last few epochs' permutations. The
// examples come from an ExampleSource (model/example_source.h): memory, or
// TFRecord files read chunk by chunk (model/tfrecord_source.h); the
// permutation is a full seeded shuffle of every example either way.
//
// Not thread-safe; one owner (a trainer).
#ifndef PSCLUSTER_MODEL_CHUNK_READER_H_
#define PSCLUSTER_MODEL_CHUNK_READER_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/parallel_for.h"
#include "model/example_source.h"
#include "model/idx_dataset.h"

namespace pscluster {

class ChunkReader {
 public:
  // `source` is borrowed and must outlive the reader; batch >= 1.
  ChunkReader(const ExampleSource* source, int batch, uint64_t seed)
      : ChunkReader(nullptr, source, batch, seed) {}
  // A Dataset in memory: `data` is borrowed and must outlive the reader.
  ChunkReader(const Dataset& data, int batch, uint64_t seed)
      : ChunkReader(std::make_unique<InMemoryExampleSource>(&data), nullptr, batch, seed) {}

  int chunks_per_epoch() const { return chunks_per_epoch_; }
  int pixels() const { return pixels_; }
  int targets_per_example() const { return targets_per_example_; }
  // The source's int64 ids per example (ExampleSource::ids_per_example).
  int ids_per_example() const { return source_->ids_per_example(); }
  int ids_first() const { return source_->ids_first(); }

  // Examples in chunk k: the batch size but for an epoch's last chunk.
  int Examples(int64_t k) const {
    const int64_t begin = (k % chunks_per_epoch_) * batch_;
    return static_cast<int>(std::min<int64_t>(batch_, count_ - begin));
  }

  // Copies chunk k's examples into images (Examples(k) * pixels() floats)
  // and targets (Examples(k) * targets_per_example() floats); returns how
  // many, or the source's error (a bad record of a file: DataLoss naming
  // it). With int64 ids (ids_per_example() > 0) and `ids` given, their
  // ids too (Examples(k) * ids_per_example() values).
  // A large chunk is gathered by up to 4 threads (a GPU worker's 8192
  // MNIST images are 26 MB of scattered rows: several ms on one core).
  absl::StatusOr<int> Fill(int64_t k, float* images, float* targets, int64_t* ids = nullptr) {
    const std::vector<int32_t>& perm = Permutation(static_cast<int>(k / chunks_per_epoch_));
    const int64_t begin = (k % chunks_per_epoch_) * batch_;
    const int n = Examples(k);
    const int64_t bytes = int64_t{n} * pixels_ * static_cast<int64_t>(sizeof(float));
    const int threads = static_cast<int>(std::min<int64_t>(
        std::min(4, HardwareThreads()), std::max<int64_t>(1, bytes / kBytesPerThread)));
    std::mutex mu;
    absl::Status first_error;  // guarded by mu: the lowest part's error
    int64_t error_at = n;
    ParallelFor(n, 1, threads, [&](int64_t from, int64_t to) {
      const int t = targets_per_example_;
      absl::Status s = source_->Gather(&perm[begin + from], static_cast<int>(to - from),
                                       &images[size_t(from) * pixels_], &targets[size_t(from) * t]);
      if (s.ok() && ids != nullptr && ids_per_example() > 0) {
        s = source_->GatherIds(&perm[begin + from], static_cast<int>(to - from),
                               &ids[size_t(from) * ids_per_example()]);
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (from < error_at) {
          error_at = from;
          first_error = std::move(s);
        }
      }
    });
    if (!first_error.ok()) return first_error;
    return n;
  }

 private:
  // Below this many bytes per thread, another thread costs more than it saves.
  static constexpr int64_t kBytesPerThread = 1 << 20;

  // Reads `owned` if set, else `borrowed`.
  ChunkReader(std::unique_ptr<ExampleSource> owned, const ExampleSource* borrowed, int batch,
              uint64_t seed)
      : owned_(std::move(owned)),
        source_(owned_ != nullptr ? owned_.get() : borrowed),
        batch_(batch),
        seed_(seed),
        count_(source_->count()),
        chunks_per_epoch_(static_cast<int>((count_ + batch - 1) / batch)),
        pixels_(source_->pixels()),
        targets_per_example_(source_->targets_per_example()) {}

  const std::vector<int32_t>& Permutation(int epoch) {
    auto it = permutations_.find(epoch);
    if (it == permutations_.end()) {
      // The chief hands out chunks mostly in order: a few epochs suffice.
      if (permutations_.size() > 2) permutations_.erase(permutations_.begin());
      it = permutations_.emplace(epoch, EpochPermutation(count_, seed_, epoch)).first;
    }
    return it->second;
  }

  const std::unique_ptr<ExampleSource> owned_;  // set only by the Dataset constructor
  const ExampleSource* const source_;
  const int batch_;
  const uint64_t seed_;
  const int count_;
  const int chunks_per_epoch_;
  const int pixels_;
  const int targets_per_example_;
  std::map<int, std::vector<int32_t>> permutations_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_CHUNK_READER_H_
