// BatchSource: the batches of the chunks a worker trains on, gathered from
// the data set (ChunkReader). A worker whose device computes while its
// cores wait (the GPU) gathers the chunk it will most likely train on next
// in the background, during the step and its push and pull, into a second
// buffer; when the chief then leases that chunk, the batch is ready. The
// guess is the last step's chunk plus the last stride between this
// worker's chunks (with one worker in sync, always right); a wrong guess
// costs only the background work.
//
// Not thread-safe: one owner (the training loop). The data set and the
// reader are borrowed.
#ifndef PSCLUSTER_WORKER_BATCH_SOURCE_H_
#define PSCLUSTER_WORKER_BATCH_SOURCE_H_

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "compute/compute_backend.h"
#include "model/chunk_reader.h"

namespace pscluster {

class BatchSource {
 public:
  // `stride_guess`: the first guess's distance between this worker's
  // chunks (the number of workers). `prefetch`: gather ahead at all.
  BatchSource(ChunkReader* chunks, int batch, int stride_guess, bool prefetch);
  ~BatchSource();
  BatchSource(const BatchSource&) = delete;
  BatchSource& operator=(const BatchSource&) = delete;

  // Chunk k's batch (Batch::key = k), valid until the next call: the one
  // gathered ahead when the guess was k, else gathered now. Then starts
  // gathering the next guess, if prefetching. The reader's error (a bad
  // record: DataLoss) when chunk k cannot be read; a guess that fails costs
  // nothing unless it is asked for.
  absl::StatusOr<Batch> Get(int64_t k);

  // Chunk k's batch ahead of its Get (the chunk the chief named as this
  // worker's next): the one gathered ahead, or gathered now. A Get of k
  // then takes it without gathering it again; valid until the next Get or
  // Peek, and the batch Get returned last stays valid. The reader's error
  // when chunk k cannot be read.
  absl::StatusOr<Batch> Peek(int64_t k);

  // Lets `backend` page-lock both buffers (ComputeBackend::PinHostMemory).
  void PinIn(ComputeBackend* backend);

  // Chunks whose batch was ready when asked for, and all asked for.
  int64_t hits() const { return hits_; }
  int64_t gets() const { return gets_; }

 private:
  struct Buffer {
    std::vector<float> images;
    std::vector<float> targets;
    std::vector<int64_t> ids;  // the chunk's int64 ids, if the data has any
    int64_t chunk = -1;  // what it holds, -1: nothing
    absl::StatusOr<int> size = 0;  // examples, or why the chunk is not there
  };
  void Join();
  // Chunk k's examples into *b (its size the reader's answer or error).
  void Gather(int64_t k, Buffer* b);
  // The batch `b` holds (its size OK).
  static Batch View(const Buffer& b);

  ChunkReader* const chunks_;
  const bool prefetch_;
  Buffer buffers_[2];
  int current_ = 0;        // the buffer Get returned last
  int64_t last_ = -1;      // the chunk Get returned last
  int64_t stride_;         // the guess's distance
  std::thread gatherer_;   // filling buffers_[1 - current_], if joinable
  int64_t hits_ = 0, gets_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_BATCH_SOURCE_H_
