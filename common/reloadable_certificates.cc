#include "common/reloadable_certificates.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

std::string FdPath(int fd) { return fd < 0 ? "" : absl::StrCat("/proc/self/fd/", fd); }

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat("tls: ", what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("writing a memfd");
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReloadableCertificates>> ReloadableCertificates::Create(
    const std::string& cert_pem, const std::string& key_pem, const std::string& ca_pem) {
  if (cert_pem.empty() || key_pem.empty()) {
    return absl::InvalidArgumentError("tls: a certificate and its key are required");
  }
  std::unique_ptr<ReloadableCertificates> c(new ReloadableCertificates());
  {
    absl::MutexLock lock(&c->mu_);
    c->has_ca_ = !ca_pem.empty();
    c->last_stamp_ = static_cast<int64_t>(std::time(nullptr));
    if (absl::Status s = c->Put(cert_pem, key_pem, ca_pem); !s.ok()) return s;
  }
  // It reads the files once now, then every kCertificateRefreshSeconds.
  c->provider_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      FdPath(c->fds_[kKey]), FdPath(c->fds_[kCert]), FdPath(c->fds_[kCa]),
      kCertificateRefreshSeconds);
  return c;
}

ReloadableCertificates::~ReloadableCertificates() {
  provider_.reset();  // stops gRPC's reading thread when no credentials hold it
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

absl::Status ReloadableCertificates::Replace(const std::string& cert_pem,
                                             const std::string& key_pem,
                                             const std::string& ca_pem) {
  if (cert_pem.empty() || key_pem.empty()) {
    return absl::InvalidArgumentError("tls: a certificate and its key are required");
  }
  if (ca_pem.empty() == has_ca_) {
    return absl::FailedPreconditionError(
        has_ca_ ? "tls: the CA cannot be taken away while the process runs"
                : "tls: a CA cannot be added while the process runs");
  }
  absl::MutexLock lock(&mu_);
  last_stamp_ = std::max<int64_t>(last_stamp_ + 1, std::time(nullptr));
  return Put(cert_pem, key_pem, ca_pem);
}

absl::Status ReloadableCertificates::Put(const std::string& cert_pem, const std::string& key_pem,
                                         const std::string& ca_pem) {
  const std::string* const pems[kFiles] = {&cert_pem, &key_pem, &ca_pem};
  static constexpr const char* kNames[kFiles] = {"pscluster-tls-cert", "pscluster-tls-key",
                                                 "pscluster-tls-ca"};
  // Every new file is written before any is moved in: a failure changes
  // nothing.
  int fresh[kFiles] = {-1, -1, -1};
  auto close_fresh = [&fresh] {
    for (int& fd : fresh) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  };
  for (int i = 0; i < kFiles; ++i) {
    if (pems[i]->empty()) continue;  // only the CA may be
    fresh[i] = memfd_create(kNames[i], MFD_CLOEXEC);
    if (fresh[i] < 0) {
      const absl::Status s = Errno("memfd_create");
      close_fresh();
      return s;
    }
    absl::Status s = WriteAll(fresh[i], *pems[i]);
    const timespec times[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(last_stamp_), 0}};
    if (s.ok() && futimens(fresh[i], times) != 0) s = Errno("futimens on a memfd");
    if (!s.ok()) {
      close_fresh();
      return s;
    }
  }
  // The key first: gRPC reads the key, then the certificate; a pair read
  // across the two moves is caught by the stamps. Each move is atomic: a
  // reader opening /proc/self/fd/N gets the old file or the new one.
  for (int i : {kKey, kCert, kCa}) {
    if (fresh[i] < 0) continue;
    if (fds_[i] < 0) {
      fds_[i] = fresh[i];  // Create: the descriptor stays this one
    } else {
      dup3(fresh[i], fds_[i], O_CLOEXEC);  // cannot fail: both are open
      close(fresh[i]);
    }
    fresh[i] = -1;
  }
  return absl::OkStatus();
}

}  // namespace pscluster
