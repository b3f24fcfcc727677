#include "common/tensorboard_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/errno_status.h"
#include "common/tfrecord.h"

namespace pscluster {
namespace {

constexpr char kEventFilePrefix[] = "events.out.tfevents.";

std::string Hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
    return "localhost";
  }
  return name;
}

double WallTimeSeconds() {
  return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Create(
    const std::string& logdir, const std::string& suffix) {
  if (logdir.empty()) {
    return absl::InvalidArgumentError("TensorBoard logdir is empty");
  }
  if (suffix.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TensorBoard event file suffix '", suffix, "' contains '/'"));
  }
  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  if (ec) {
    return ErrnoStatus(ec.value(),
                       absl::StrCat("cannot create logdir ", logdir));
  }
  if (!std::filesystem::is_directory(logdir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("logdir ", logdir, " exists and is not a directory"));
  }
  const int64_t seconds = absl::ToUnixSeconds(absl::Now());
  std::string path = absl::StrFormat(
      "%s/%s%010d.%s%s", logdir, kEventFilePrefix, seconds, Hostname(), suffix);
  const int fd = ::open(
      path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return ErrnoStatus(errno, absl::StrCat("cannot create event file ", path));
  }
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path, fd));
  tensorflow::Event event;
  event.set_wall_time(WallTimeSeconds());
  event.set_file_version(kEventFileVersion);
  {
    absl::MutexLock lock(&writer->mu_);
    absl::Status status = writer->WriteEventLocked(event);
    if (!status.ok()) {
      ::close(writer->fd_);
      writer->fd_ = -1;
      ::unlink(path.c_str());
      return status;
    }
  }
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() { Close().IgnoreError(); }

absl::Status TensorBoardWriter::AddScalars(
    int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  if (values.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": AddScalars at step ", step, " with no values"));
  }
  tensorflow::Event event;
  event.set_wall_time(WallTimeSeconds());
  event.set_step(step);
  tensorflow::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : values) {
    if (tag.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": empty tag in AddScalars at step ", step));
    }
    tensorflow::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(value);
  }
  absl::MutexLock lock(&mu_);
  return WriteEventLocked(event);
}

absl::Status TensorBoardWriter::WriteEventLocked(
    const tensorflow::Event& event) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": event file is closed"));
  }
  std::string record;
  AppendTFRecord(event.SerializeAsString(), &record);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      // A partial record would make every later record unreadable.
      if (done > 0 && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
        return ErrnoStatus(errno,
                           absl::StrCat("cannot write to ", path_,
                                        " nor roll back a partial record"));
      }
      return ErrnoStatus(err, absl::StrCat("cannot write to ", path_));
    }
    done += static_cast<size_t>(n);
  }
  size_ += record.size();
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::Flush() {
  absl::MutexLock lock(&mu_);
  if (fd_ < 0) return absl::OkStatus();
  if (::fsync(fd_) != 0) {
    return ErrnoStatus(errno, absl::StrCat("cannot fsync ", path_));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::Close() {
  absl::MutexLock lock(&mu_);
  if (fd_ < 0) return absl::OkStatus();
  absl::Status status;
  if (::fsync(fd_) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("cannot fsync ", path_));
  }
  if (::close(fd_) != 0 && status.ok()) {
    status = ErrnoStatus(errno, absl::StrCat("cannot close ", path_));
  }
  fd_ = -1;
  return status;
}

absl::StatusOr<std::vector<tensorflow::Event>> ReadEventFile(
    const std::string& path) {
  absl::StatusOr<std::vector<std::string>> records = ReadTFRecordFile(path);
  if (!records.ok()) return records.status();
  std::vector<tensorflow::Event> events(records->size());
  for (size_t i = 0; i < records->size(); ++i) {
    if (!events[i].ParseFromString((*records)[i])) {
      return absl::DataLossError(
          absl::StrCat(path, ": record ", i, " (", (*records)[i].size(),
                       " bytes) is not a tensorflow.Event"));
    }
  }
  return events;
}

absl::StatusOr<std::vector<std::string>> ListEventFiles(
    const std::string& logdir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(logdir, ec);
  if (ec) return ErrnoStatus(ec.value(), absl::StrCat("cannot list ", logdir));
  std::vector<std::string> paths;
  // increment(ec), not ++: the latter throws on a directory read error.
  while (it != std::filesystem::directory_iterator()) {
    std::error_code type_ec;
    if (absl::StartsWith(it->path().filename().string(), kEventFilePrefix) &&
        it->is_regular_file(type_ec)) {
      paths.push_back(it->path().string());
    }
    it.increment(ec);
    if (ec) break;
  }
  if (ec) return ErrnoStatus(ec.value(), absl::StrCat("cannot list ", logdir));
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace pscluster
