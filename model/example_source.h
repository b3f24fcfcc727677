// ExampleSource: the examples of one split, by index, whatever holds them:
// memory (a Dataset read from IDX or NumPy files, InMemoryExampleSource) or
// files read on demand (TFRecordSource, model/tfrecord_source.h). ChunkReader
// asks a source for the examples of a chunk and never for a file.
//
// Gather is const and thread-safe in every implementation (several threads
// may gather disjoint parts of one chunk); set_target_check is called once,
// before the first Gather.
#ifndef PSCLUSTER_MODEL_EXAMPLE_SOURCE_H_
#define PSCLUSTER_MODEL_EXAMPLE_SOURCE_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "model/idx_dataset.h"

namespace pscluster {

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;

  virtual int count() const = 0;
  virtual int height() const = 0;
  virtual int width() const = 0;
  virtual int channels() const = 0;
  virtual int targets_per_example() const = 0;
  int pixels() const { return height() * width() * channels(); }

  // Copies examples indices[0..n) into images (n * pixels() floats, NHWC)
  // and targets (n * targets_per_example() floats). Indices are in
  // [0, count()). A source that reads files checks each record then:
  // DataLoss naming the file, the record and what is wrong.
  virtual absl::Status Gather(const int32_t* indices, int n, float* images,
                              float* targets) const = 0;

  // Int64 ids (Dataset::ids): values [ids_first(), ids_first() +
  // ids_per_example()) of an example are ids given by GatherIds, 0 among
  // the floats. 0 per example: none.
  virtual int ids_per_example() const { return 0; }
  virtual int ids_first() const { return 0; }
  // Copies the int64 ids of examples indices[0..n) into ids (n *
  // ids_per_example() values). Thread-safe as Gather.
  virtual absl::Status GatherIds(const int32_t* /*indices*/, int /*n*/,
                                 int64_t* /*ids*/) const {
    return absl::OkStatus();
  }

  // The examples' whole contents when they sit in memory (their labels can
  // then be checked up front), else nullptr.
  virtual const Dataset* in_memory() const { return nullptr; }

  // A check every target value read later must pass (CheckTarget against
  // the model), applied by sources that read on demand; its message is
  // appended to the record's name.
  using TargetCheck = std::function<absl::Status(float)>;
  void set_target_check(TargetCheck check) { target_check_ = std::move(check); }

 protected:
  TargetCheck target_check_;
};

// A Dataset in memory as an ExampleSource: owned, or borrowed (it must
// then outlive the source).
class InMemoryExampleSource : public ExampleSource {
 public:
  explicit InMemoryExampleSource(Dataset data) : owned_(std::move(data)), data_(owned_) {}
  explicit InMemoryExampleSource(const Dataset* borrowed) : data_(*borrowed) {}
  InMemoryExampleSource(const InMemoryExampleSource&) = delete;
  InMemoryExampleSource& operator=(const InMemoryExampleSource&) = delete;

  int count() const override { return data_.count; }
  int height() const override { return data_.height; }
  int width() const override { return data_.width; }
  int channels() const override { return data_.channels; }
  int targets_per_example() const override { return data_.targets_per_example; }
  const Dataset* in_memory() const override { return &data_; }
  int ids_per_example() const override { return data_.ids_per_example; }
  int ids_first() const override { return data_.ids_first; }

  absl::Status Gather(const int32_t* indices, int n, float* images,
                      float* targets) const override {
    const size_t p = static_cast<size_t>(pixels());
    const size_t t = static_cast<size_t>(data_.targets_per_example);
    for (int i = 0; i < n; ++i) {
      const size_t e = static_cast<size_t>(indices[i]);
      std::memcpy(&images[size_t(i) * p], &data_.images[e * p], p * sizeof(float));
      std::memcpy(&targets[size_t(i) * t], &data_.targets[e * t], t * sizeof(float));
    }
    return absl::OkStatus();
  }

  absl::Status GatherIds(const int32_t* indices, int n, int64_t* ids) const override {
    const size_t k = static_cast<size_t>(data_.ids_per_example);
    for (int i = 0; i < n; ++i) {
      std::memcpy(&ids[size_t(i) * k], &data_.ids[size_t(indices[i]) * k], k * sizeof(int64_t));
    }
    return absl::OkStatus();
  }

 private:
  const Dataset owned_;
  const Dataset& data_;  // owned_ or the borrowed one
};

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_EXAMPLE_SOURCE_H_
