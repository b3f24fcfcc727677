// Scalar summaries in TensorBoard's event file format, so that
// `tensorboard --logdir DIR` plots a run's loss, accuracy and throughput.
//
// A writer owns one file, <logdir>/events.out.tfevents.<seconds>.<host><suffix>
// (TensorFlow's name pattern), made of TFRecords (common/tfrecord.h) each
// holding a serialized tensorflow.Event (proto/tensorboard_event.proto): first
// {wall_time, file_version: "brain.Event:2"}, then one Event per AddScalars.
// All methods are thread-safe; events are written whole, in call order.
#ifndef PSCLUSTER_COMMON_TENSORBOARD_WRITER_H_
#define PSCLUSTER_COMMON_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/tensorboard_event.pb.h"

namespace pscluster {

inline constexpr char kEventFileVersion[] = "brain.Event:2";

class TensorBoardWriter {
 public:
  // Creates `logdir` (with parents) if needed, then a new event file in it
  // and writes the file_version event. `suffix` is appended to the name
  // verbatim (e.g. ".chief"); it must not contain '/'. Two writers created
  // in the same second on one host need different suffixes: an existing
  // file is never overwritten (AlreadyExists naming it). Other errors name
  // the directory or file and the system's reason.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Create(
      const std::string& logdir, const std::string& suffix = "");

  // Closes the file (errors are dropped; call Close() to see them).
  ~TensorBoardWriter();

  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends one Event at `step` and the current wall time whose Summary
  // holds one simple_value per (tag, value), in order. The record is handed
  // to the OS before returning, so TensorBoard sees it at once; it is not
  // fsync'ed (see Flush). InvalidArgument when `values` is empty or a tag is
  // empty; FailedPrecondition after Close; a failed write names the file and
  // is rolled back, so the file stays readable.
  absl::Status AddScalars(
      int64_t step, const std::vector<std::pair<std::string, float>>& values);
  absl::Status AddScalar(int64_t step, const std::string& tag, float value) {
    return AddScalars(step, {{tag, value}});
  }

  // Makes every event written so far durable (fsync).
  absl::Status Flush();

  // Flushes and closes the file; later Add* calls fail. Idempotent.
  absl::Status Close();

  // The event file's full path.
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, int fd)
      : path_(std::move(path)), fd_(fd) {}

  // Serializes `event` into one record and appends it; rolls the file back
  // to its previous size if the write fails part way.
  absl::Status WriteEventLocked(const tensorflow::Event& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;

  absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);             // -1 once closed
  uint64_t size_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of whole records written
};

// Reads an event file back (for tests and tools): every record's CRCs are
// verified and each is parsed as a tensorflow.Event. DataLoss names the path
// and the offset or index of the bad record.
absl::StatusOr<std::vector<tensorflow::Event>> ReadEventFile(
    const std::string& path);

// Full paths of the event files ("events.out.tfevents.*") directly in
// `logdir`, sorted by name, i.e. by creation second. NotFound if `logdir`
// does not exist.
absl::StatusOr<std::vector<std::string>> ListEventFiles(
    const std::string& logdir);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_TENSORBOARD_WRITER_H_
