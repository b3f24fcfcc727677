// The TLS certificate, key and CA that gRPC uses, replaceable while the
// process runs.
//
// gRPC's servers and channels take their certificates from a certificate
// provider; the one gRPC 1.51 offers that changes over time,
// FileWatcherCertificateProvider, reads files every interval. This class
// gives it files of its own, held in memory (memfd, never on disk, gone
// with the process) and named by their /proc/self/fd paths: Replace puts
// new contents in place whole (a new memfd moved onto the same descriptor
// by dup3), so gRPC reads either the old set or the new one. gRPC checks
// each file's modification time (in seconds) before and after it reads the
// key and the certificate, and reads again when one moved; every Replace
// gives its files a time no earlier set had, so a pair read across a
// Replace is always caught.
//
// Handshakes from then on use the new material (within
// kCertificateRefreshSeconds); connections open before keep the
// certificates they were made with.
//
// Linux only (memfd_create). Thread-safe.
#ifndef PSCLUSTER_COMMON_RELOADABLE_CERTIFICATES_H_
#define PSCLUSTER_COMMON_RELOADABLE_CERTIFICATES_H_

#include <grpcpp/security/tls_certificate_provider.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace pscluster {

// How often gRPC looks at the files: a Replace takes effect within it.
inline constexpr unsigned kCertificateRefreshSeconds = 1;

class ReloadableCertificates {
 public:
  // `cert_pem` (the chain) and `key_pem` are required; `ca_pem` may be
  // empty (no root is watched: clients trust the system's roots, servers
  // ask no client certificate). The PEM is not parsed here: the caller
  // checks it (common/security.cc's CheckTlsMaterial).
  static absl::StatusOr<std::unique_ptr<ReloadableCertificates>> Create(
      const std::string& cert_pem, const std::string& key_pem, const std::string& ca_pem);

  // Closes the files. Every credentials object made with provider() must
  // be gone first (gRPC would read closed descriptors).
  ~ReloadableCertificates();
  ReloadableCertificates(const ReloadableCertificates&) = delete;
  ReloadableCertificates& operator=(const ReloadableCertificates&) = delete;

  // Puts new material in place. FailedPrecondition when `ca_pem` is empty
  // where Create's was not, or the other way round (that changes what
  // gRPC watches: it takes new credentials).
  absl::Status Replace(const std::string& cert_pem, const std::string& key_pem,
                       const std::string& ca_pem);

  // For TlsServerCredentialsOptions and TlsChannelCredentialsOptions: the
  // identity pair always, the root certificates when has_ca().
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider() const {
    return provider_;
  }
  bool has_ca() const { return has_ca_; }

 private:
  enum File { kCert, kKey, kCa, kFiles };

  ReloadableCertificates() = default;
  // Writes each PEM to a new memfd whose mtime is last_stamp_ and moves it
  // onto its descriptor (the CA's only when given). On error nothing moved.
  absl::Status Put(const std::string& cert_pem, const std::string& key_pem,
                   const std::string& ca_pem) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  bool has_ca_ = false;
  int fds_[kFiles] = {-1, -1, -1};              // set by Create, then fixed
  int64_t last_stamp_ ABSL_GUARDED_BY(mu_) = 0;  // the files' mtime, in seconds
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_RELOADABLE_CERTIFICATES_H_
