#include "worker/batch_source.h"

#include <utility>

namespace pscluster {

BatchSource::BatchSource(ChunkReader* chunks, int batch, int stride_guess, bool prefetch)
    : chunks_(chunks), prefetch_(prefetch), stride_(stride_guess > 0 ? stride_guess : 1) {
  for (Buffer& b : buffers_) {
    b.images.resize(static_cast<size_t>(batch) * chunks->pixels());
    b.targets.resize(static_cast<size_t>(batch) * chunks->targets_per_example());
    b.ids.resize(static_cast<size_t>(batch) * chunks->ids_per_example());
  }
}

BatchSource::~BatchSource() { Join(); }

void BatchSource::Join() {
  if (gatherer_.joinable()) gatherer_.join();
}

void BatchSource::PinIn(ComputeBackend* backend) {
  for (Buffer& b : buffers_) {
    backend->PinHostMemory(b.images.data(), b.images.size() * sizeof(float));
    backend->PinHostMemory(b.targets.data(), b.targets.size() * sizeof(float));
  }
}

absl::StatusOr<Batch> BatchSource::Get(int64_t k) {
  Join();  // the reader is not thread-safe: the gatherer is done first
  ++gets_;
  Buffer& spare = buffers_[1 - current_];
  if (spare.chunk == k) {
    ++hits_;
    current_ = 1 - current_;
  } else {
    Gather(k, &buffers_[current_]);
  }
  if (last_ >= 0 && k > last_) stride_ = k - last_;
  last_ = k;
  Buffer& now = buffers_[current_];
  if (!now.size.ok()) {
    now.chunk = -1;
    return now.size.status();
  }
  if (prefetch_) {
    Buffer* next = &buffers_[1 - current_];
    const int64_t guess = k + stride_;
    next->chunk = -1;
    gatherer_ = std::thread([this, next, guess] { Gather(guess, next); });
  }
  return View(now);
}

absl::StatusOr<Batch> BatchSource::Peek(int64_t k) {
  Join();
  Buffer& spare = buffers_[1 - current_];
  if (spare.chunk != k) Gather(k, &spare);
  if (!spare.size.ok()) {
    spare.chunk = -1;
    return spare.size.status();
  }
  return View(spare);
}

void BatchSource::Gather(int64_t k, Buffer* b) {
  b->size = chunks_->Fill(k, b->images.data(), b->targets.data(), b->ids.data());
  b->chunk = k;
}

Batch BatchSource::View(const Buffer& b) {
  return Batch{b.images.data(), b.targets.data(), *b.size, static_cast<uint64_t>(b.chunk),
               b.ids.empty() ? nullptr : b.ids.data()};
}

}  // namespace pscluster
