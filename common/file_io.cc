#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace pscluster {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open " + path);
  std::string bytes;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    bytes.reserve(static_cast<size_t>(st.st_size));
  }
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "cannot read " + path);
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::vector<std::string_view>& pieces) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "cannot create " + tmp);
  absl::Status status;
  for (std::string_view piece : pieces) {
    const char* data = piece.data();
    size_t left = piece.size();
    while (status.ok() && left > 0) {
      const ssize_t w = ::write(fd, data, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        status = ErrnoStatus(w < 0 ? errno : EIO, "cannot write " + tmp);
        break;
      }
      data += w;
      left -= static_cast<size_t>(w);
    }
  }
  if (status.ok() && ::fsync(fd) != 0) {
    status = ErrnoStatus(errno, "cannot fsync " + tmp);
  }
  if (::close(fd) != 0 && status.ok()) {
    status = ErrnoStatus(errno, "cannot close " + tmp);
  }
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  // Make the rename itself durable.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);  // best effort: some file systems refuse it
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

}  // namespace pscluster
