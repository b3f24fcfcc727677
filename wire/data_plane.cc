#include "wire/data_plane.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

void FreeCtx(SSL_CTX* ctx) { SSL_CTX_free(ctx); }

std::string SslErrors() { return OpenSslErrors("no detail"); }

// Loads a PEM certificate chain and key into `ctx`.
absl::Status UseCertificate(SSL_CTX* ctx, const SecurityConfig& config) {
  std::unique_ptr<BIO, void (*)(BIO*)> bio(
      BIO_new_mem_buf(config.cert_pem.data(), static_cast<int>(config.cert_pem.size())),
      BIO_free_all);
  X509* leaf = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
  if (leaf == nullptr || SSL_CTX_use_certificate(ctx, leaf) != 1) {
    X509_free(leaf);
    return absl::InvalidArgumentError("tls: cannot use the certificate: " + SslErrors());
  }
  X509_free(leaf);
  while (X509* extra = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx, extra) != 1) {
      X509_free(extra);
      return absl::InvalidArgumentError("tls: cannot use the chain: " + SslErrors());
    }
  }
  ERR_clear_error();  // the loop's end reads past the last certificate
  std::unique_ptr<BIO, void (*)(BIO*)> kbio(
      BIO_new_mem_buf(config.key_pem.data(), static_cast<int>(config.key_pem.size())),
      BIO_free_all);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(kbio.get(), nullptr, nullptr, nullptr);
  const bool ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx, key) == 1 &&
                  SSL_CTX_check_private_key(ctx) == 1;
  EVP_PKEY_free(key);
  if (!ok) return absl::InvalidArgumentError("tls: cannot use the key: " + SslErrors());
  return absl::OkStatus();
}

absl::Status TrustCa(SSL_CTX* ctx, const std::string& ca_pem) {
  std::unique_ptr<BIO, void (*)(BIO*)> bio(
      BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size())), BIO_free_all);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int n = 0;
  while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store, ca);
    X509_free(ca);
    ++n;
  }
  ERR_clear_error();
  if (n == 0) return absl::InvalidArgumentError("tls: the CA holds no certificate");
  return absl::OkStatus();
}

absl::StatusOr<SslCtxPtr> NewCtx(const SSL_METHOD* method) {
  SslCtxPtr ctx(SSL_CTX_new(method), FreeCtx);
  if (ctx == nullptr) return absl::InternalError("tls: SSL_CTX_new: " + SslErrors());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_AUTO_RETRY);
  return ctx;
}

// OpenSSL writes a TLS socket with write(2), which cannot be told not to
// raise SIGPIPE when the peer has gone (send's MSG_NOSIGNAL): a process
// ignores SIGPIPE from its first TLS socket on, as every daemon does from
// its start (common/task_server.cc). Such a write fails with EPIPE instead.
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] { signal(SIGPIPE, SIG_IGN); });
}

// poll() for `events` until `deadline`; DeadlineExceeded after it.
absl::Status WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    int ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("deadline");
      ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
    }
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, ms);
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) return absl::UnavailableError(strerror(errno));
  }
}

}  // namespace

absl::StatusOr<SslCtxPtr> MakeServerSslCtx(const SecurityConfig& config) {
  if (!config.tls) return SslCtxPtr(nullptr, FreeCtx);
  absl::StatusOr<SslCtxPtr> ctx = NewCtx(TLS_server_method());
  if (!ctx.ok()) return ctx.status();
  PSCLUSTER_RETURN_IF_ERROR(UseCertificate(ctx->get(), config));
  if (config.mutual_tls()) {
    PSCLUSTER_RETURN_IF_ERROR(TrustCa(ctx->get(), config.ca_pem));
    SSL_CTX_set_verify(ctx->get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return ctx;
}

absl::StatusOr<SslCtxPtr> MakeClientSslCtx(const SecurityConfig& config) {
  if (!config.tls) return SslCtxPtr(nullptr, FreeCtx);
  absl::StatusOr<SslCtxPtr> ctx = NewCtx(TLS_client_method());
  if (!ctx.ok()) return ctx.status();
  // As gRPC's channel credentials: our certificate when we have one, the
  // CA when given, else the system's roots.
  if (!config.cert_pem.empty()) {
    PSCLUSTER_RETURN_IF_ERROR(UseCertificate(ctx->get(), config));
  }
  if (!config.ca_pem.empty()) {
    PSCLUSTER_RETURN_IF_ERROR(TrustCa(ctx->get(), config.ca_pem));
  } else {
    SSL_CTX_set_default_verify_paths(ctx->get());
  }
  SSL_CTX_set_verify(ctx->get(), SSL_VERIFY_PEER, nullptr);
  return ctx;
}

absl::StatusOr<std::shared_ptr<SSL_CTX>> TlsContexts::Get() {
  std::shared_ptr<const SecurityConfig> now = security_->process ? ProcessSecurity() : security_;
  if (!now->tls) return nullptr;
  std::lock_guard<std::mutex> l(mu_);
  const bool same = made_from_ != nullptr && made_from_->cert_pem == now->cert_pem &&
                    made_from_->key_pem == now->key_pem && made_from_->ca_pem == now->ca_pem;
  if (!same) {
    absl::StatusOr<SslCtxPtr> made =
        side_ == kServer ? MakeServerSslCtx(*now) : MakeClientSslCtx(*now);
    if (!made.ok()) return made.status();
    ctx_ = std::shared_ptr<SSL_CTX>(made->release(), FreeCtx);
    made_from_ = std::move(now);
  }
  return ctx_;
}

absl::StatusOr<Transport> ParseTransport(absl::string_view name) {
  if (name.empty() || name == "grpc") return TRANSPORT_GRPC;
  if (name == "tcp") return TRANSPORT_TCP;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport '", name, "' (grpc or tcp)"));
}

const char* TransportName(Transport t) { return t == TRANSPORT_TCP ? "tcp" : "grpc"; }

std::string HostOf(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || address.find(':') != colon) return address;
  return address.substr(0, colon);
}

// ---------------------------------------------------------------- DataSocket

absl::StatusOr<std::unique_ptr<DataSocket>> DataSocket::Dial(const std::string& host, int port,
                                                             SSL_CTX* tls,
                                                             const std::string& server_name,
                                                             absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int e = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); e != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", host, ": ", gai_strerror(e)));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, freeaddrinfo);
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      last = absl::UnavailableError(strerror(errno));
      continue;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = absl::UnavailableError(absl::StrCat("connect: ", strerror(errno)));
      close(fd);
      continue;
    }
    absl::Status w = WaitFor(fd, POLLOUT, deadline);
    int err = 0;
    socklen_t len = sizeof(err);
    if (w.ok()) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (!w.ok() || err != 0) {
      last = w.ok() ? absl::UnavailableError(absl::StrCat("connect: ", strerror(err)))
                    : absl::DeadlineExceededError("connect: deadline");
      close(fd);
      continue;
    }
    // Blocking from here on; deadlines through SO_RCVTIMEO/SO_SNDTIMEO.
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFL, 0);
    SSL* ssl = nullptr;
    if (tls != nullptr) {
      IgnoreSigpipe();
      ssl = SSL_new(tls);
      SSL_set_fd(ssl, fd);
      in6_addr ip6;
      in_addr ip4;
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      if (inet_pton(AF_INET, server_name.c_str(), &ip4) == 1 ||
          inet_pton(AF_INET6, server_name.c_str(), &ip6) == 1) {
        X509_VERIFY_PARAM_set1_ip_asc(param, server_name.c_str());
      } else {
        SSL_set_tlsext_host_name(ssl, server_name.c_str());
        X509_VERIFY_PARAM_set1_host(param, server_name.c_str(), 0);
      }
    }
    std::unique_ptr<DataSocket> s(new DataSocket(fd, ssl));
    if (ssl != nullptr) {
      s->SetDeadline(deadline);
      if (SSL_connect(ssl) != 1) {
        const long verify = SSL_get_verify_result(ssl);
        return absl::UnavailableError(absl::StrCat(
            "tls handshake with ", host, ":", port, ": ",
            verify != X509_V_OK ? X509_verify_cert_error_string(verify) : SslErrors().c_str()));
      }
    }
    return s;
  }
  return absl::Status(last.code(), absl::StrCat("dial ", host, ":", port, ": ", last.message()));
}

absl::StatusOr<std::unique_ptr<DataSocket>> DataSocket::Accept(int fd, SSL_CTX* tls,
                                                               absl::Time deadline) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // The ps waits for a connection's next call without a deadline: a peer
  // whose host vanished (no FIN, no RST) is found by keepalive probes
  // instead, within 10 + 3 x 5 s.
  const int idle_s = 10, interval_s = 5, probes = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  SSL* ssl = nullptr;
  if (tls != nullptr) {
    IgnoreSigpipe();
    ssl = SSL_new(tls);
    SSL_set_fd(ssl, fd);
  }
  std::unique_ptr<DataSocket> s(new DataSocket(fd, ssl));
  if (ssl != nullptr) {
    s->SetDeadline(deadline);
    if (SSL_accept(ssl) != 1) {
      return absl::UnauthenticatedError("tls handshake: " + SslErrors());
    }
  }
  return s;
}

std::string DataSocket::PeerName() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "tcp:?";
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
    port = ntohs(in->sin6_port);
  }
  return absl::StrCat("tcp:", host, ":", port);
}

std::string DataSocket::PeerCertificatePem() const {
  if (ssl_ == nullptr) return "";
  X509* cert = SSL_get_peer_certificate(ssl_);  // a reference of our own
  if (cert == nullptr) return "";
  std::string pem;
  if (BIO* bio = BIO_new(BIO_s_mem())) {
    if (PEM_write_bio_X509(bio, cert) == 1) {
      char* data = nullptr;
      const long n = BIO_get_mem_data(bio, &data);
      if (n > 0) pem.assign(data, static_cast<size_t>(n));
    }
    BIO_free(bio);
  }
  X509_free(cert);
  return pem;
}

DataSocket::~DataSocket() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  close(fd_);
}

void DataSocket::Shutdown() { shutdown(fd_, SHUT_RDWR); }

void DataSocket::SetDeadline(absl::Time deadline) {
  deadline_ = deadline;
  timeval tv{0, 0};  // zero: no timeout
  if (deadline != absl::InfiniteFuture()) {
    const int64_t us = std::max<int64_t>(absl::ToInt64Microseconds(deadline - absl::Now()), 1);
    tv.tv_sec = us / 1000000;
    tv.tv_usec = us % 1000000;
  }
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

absl::Status DataSocket::IoError(const char* what, int ret) {
  if (ret == 0 && ssl_ == nullptr) return absl::UnavailableError(absl::StrCat(what, ": closed"));
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": deadline"));
  }
  if (ssl_ != nullptr) {
    return absl::UnavailableError(absl::StrCat(what, ": tls: ", SslErrors()));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
}

absl::Status DataSocket::ReadFull(char* data, size_t n) {
  while (n > 0) {
    errno = 0;
    const int chunk = static_cast<int>(std::min<size_t>(n, 1 << 30));
    const long r = ssl_ != nullptr ? SSL_read(ssl_, data, chunk) : recv(fd_, data, chunk, 0);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return IoError("read", static_cast<int>(r));
    }
    data += r;
    n -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::Status DataSocket::ReadSized(std::string* out, uint64_t n) {
  // Up to this much beyond what has arrived is allocated at a time.
  constexpr uint64_t kStep = uint64_t{4} << 20;
  uint64_t have = 0;
  out->resize(static_cast<size_t>(std::min(n, kStep)));
  while (true) {
    PSCLUSTER_RETURN_IF_ERROR(ReadFull(out->data() + have, out->size() - have));
    have = out->size();
    if (have == n) return absl::OkStatus();
    out->resize(static_cast<size_t>(std::min(n, have + std::max(have, kStep))));
  }
}

absl::Status DataSocket::WriteFull(const char* data, size_t n) {
  while (n > 0) {
    errno = 0;
    const int chunk = static_cast<int>(std::min<size_t>(n, 1 << 30));
    const long r = ssl_ != nullptr ? SSL_write(ssl_, data, chunk)
                                   : send(fd_, data, chunk, MSG_NOSIGNAL);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return IoError("write", static_cast<int>(r));
    }
    data += r;
    n -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::Status DataSocket::WriteFrame(const FrameHeader& header, absl::string_view meta,
                                    absl::string_view payload) {
  return WriteFrameGathered(header, meta, absl::MakeConstSpan(&payload, 1));
}

absl::Status DataSocket::WriteFrameGathered(const FrameHeader& header, absl::string_view meta,
                                            absl::Span<const absl::string_view> payload) {
  if (ssl_ != nullptr) {
    std::string head(reinterpret_cast<const char*>(&header), sizeof(header));
    head.append(meta.data(), meta.size());
    PSCLUSTER_RETURN_IF_ERROR(WriteFull(head.data(), head.size()));
    for (absl::string_view piece : payload) {
      PSCLUSTER_RETURN_IF_ERROR(WriteFull(piece.data(), piece.size()));
    }
    return absl::OkStatus();
  }
  // One sendmsg for every part (up to IOV_MAX at a time).
  constexpr size_t kInline = 16;
  iovec inline_iov[kInline];
  std::vector<iovec> more;
  iovec* iov = inline_iov;
  if (payload.size() + 2 > kInline) {
    more.resize(payload.size() + 2);
    iov = more.data();
  }
  int count = 0;
  iov[count++] = {const_cast<FrameHeader*>(&header), sizeof(header)};
  if (!meta.empty()) iov[count++] = {const_cast<char*>(meta.data()), meta.size()};
  for (absl::string_view piece : payload) {
    if (!piece.empty()) iov[count++] = {const_cast<char*>(piece.data()), piece.size()};
  }
  return WriteV(iov, count);
}

namespace {

// Drops the first `done` bytes from the `*count` pieces at `*v`: whole
// pieces, then the start of the next (sendmsg and recvmsg may stop anywhere).
void SkipDone(size_t done, iovec** v, int* count) {
  while (*count > 0 && done >= (*v)->iov_len) {
    done -= (*v)->iov_len;
    ++*v;
    --*count;
  }
  if (*count > 0) {
    (*v)->iov_base = static_cast<char*>((*v)->iov_base) + done;
    (*v)->iov_len -= done;
  }
}

}  // namespace

absl::Status DataSocket::WriteV(iovec* v, int count) {
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = v;
    msg.msg_iovlen = std::min(count, IOV_MAX);
    errno = 0;
    const ssize_t r = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return IoError("write", static_cast<int>(r));
    SkipDone(static_cast<size_t>(r), &v, &count);
  }
  return absl::OkStatus();
}

absl::Status DataSocket::Read(absl::Span<const absl::Span<char>> pieces) {
  if (ssl_ != nullptr) {
    for (absl::Span<char> piece : pieces) {
      PSCLUSTER_RETURN_IF_ERROR(ReadFull(piece.data(), piece.size()));
    }
    return absl::OkStatus();
  }
  std::vector<iovec> iov;
  iov.reserve(pieces.size());
  for (absl::Span<char> piece : pieces) {
    if (!piece.empty()) iov.push_back({piece.data(), piece.size()});
  }
  iovec* v = iov.data();
  int count = static_cast<int>(iov.size());
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = v;
    msg.msg_iovlen = std::min(count, IOV_MAX);
    errno = 0;
    const ssize_t r = recvmsg(fd_, &msg, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return IoError("read", static_cast<int>(r));
    SkipDone(static_cast<size_t>(r), &v, &count);
  }
  return absl::OkStatus();
}

absl::Status DataSocket::WaitReadable(const std::atomic<bool>& stop) {
  while (true) {
    if (stop) return absl::CancelledError("stop requested");
    // Bytes TLS has decrypted already are not in the socket any more.
    if (ssl_ != nullptr && SSL_pending(ssl_) > 0) return absl::OkStatus();
    absl::Time until = absl::Now() + absl::Milliseconds(100);
    if (deadline_ < until) until = deadline_;
    absl::Status w = WaitFor(fd_, POLLIN, until);
    if (w.ok()) return w;
    if (!absl::IsDeadlineExceeded(w)) return w;
    if (absl::Now() >= deadline_) return absl::DeadlineExceededError("read: deadline");
  }
}

absl::Status DataSocket::ReadFrame(FrameHeader* header, std::string* meta,
                                   std::string* payload, uint64_t max_payload) {
  PSCLUSTER_RETURN_IF_ERROR(ReadFrameHead(header, meta, max_payload));
  payload->resize(header->payload_size);
  return ReadFull(payload->data(), payload->size());
}

absl::Status DataSocket::ReadFrameHead(FrameHeader* header, std::string* meta,
                                       uint64_t max_payload) {
  if (absl::Status s = ReadFull(reinterpret_cast<char*>(header), sizeof(*header)); !s.ok()) {
    return s;
  }
  if (header->magic != kFrameMagic) {
    return absl::InvalidArgumentError("not a data-plane frame (bad magic)");
  }
  if (header->meta_size > kMaxMetaBytes || header->payload_size > max_payload) {
    return absl::ResourceExhaustedError(
        absl::StrCat("frame of ", header->meta_size, " + ", header->payload_size,
                     " bytes exceeds the limit of ", kMaxMetaBytes, " + ", max_payload));
  }
  meta->resize(header->meta_size);
  return ReadFull(meta->data(), meta->size());
}

// --------------------------------------------------------------- DataChannel

DataChannel::DataChannel(std::string address,
                         std::function<absl::StatusOr<int>(absl::Time deadline)> port_of,
                         std::shared_ptr<const SecurityConfig> security,
                         const std::atomic<bool>* stop)
    : address_(std::move(address)),
      host_(HostOf(address_)),
      port_of_(std::move(port_of)),
      security_(std::move(security)),
      stop_(stop),
      tls_(TlsContexts::kClient, security_) {
  thread_ = std::thread([this] { Loop(); });
}

DataChannel::~DataChannel() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    if (socket_ != nullptr) socket_->Shutdown();
  }
  cv_.notify_all();
  thread_.join();
}

void DataChannel::Start(DataKind kind, google::protobuf::Message* req, std::string* bytes,
                        google::protobuf::Message* resp,
                        std::function<std::string*(google::protobuf::Message*)> resp_bytes,
                        absl::Time deadline, std::function<void(grpc::Status)> done,
                        PayloadSource source, PayloadSink sink) {
  {
    std::lock_guard<std::mutex> l(mu_);
    pending_.reset(new Call{kind, req, bytes, resp, std::move(resp_bytes), deadline,
                            std::move(done), std::move(source), std::move(sink), {}});
  }
  cv_.notify_all();
}

DataChannel::Call DataChannel::PushPullCall(PushRequest* req, PushPullResponse* resp,
                                            absl::Time deadline,
                                            std::function<void(grpc::Status)> done,
                                            PayloadSource source, PayloadSink sink,
                                            PayloadRuns runs) {
  return Call{DataKind::kPushPull,
              req,
              req->mutable_gradients(),
              resp,
              [](google::protobuf::Message* m) {
                return static_cast<PushPullResponse*>(m)->mutable_pull()->mutable_values();
              },
              deadline,
              std::move(done),
              std::move(source),
              std::move(sink),
              std::move(runs)};
}

void DataChannel::StartPushPull(PushRequest* req, PushPullResponse* resp, absl::Time deadline,
                                std::function<void(grpc::Status)> done, PayloadSource source,
                                PayloadSink sink, PayloadRuns runs) {
  {
    std::lock_guard<std::mutex> l(mu_);
    pending_ = std::make_unique<Call>(PushPullCall(req, resp, deadline, std::move(done),
                                                   std::move(source), std::move(sink),
                                                   std::move(runs)));
  }
  cv_.notify_all();
}

std::function<absl::StatusOr<int>(absl::Time deadline)> DataPortFromStats(
    ParameterServer::Stub* stub, std::string address) {
  return [stub, address = std::move(address)](absl::Time deadline) -> absl::StatusOr<int> {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    PsStatsResponse stats;
    grpc::Status s = stub->GetStats(&ctx, PsStatsRequest(), &stats);
    if (!s.ok()) return FromGrpcStatus(s, "ask ps " + address + " for its data port");
    if (stats.data_port() <= 0) {
      // Unimplemented: a caller that can falls back to gRPC (a primary's
      // replicator, the step broadcaster); not a refusal of what it sent.
      return absl::UnimplementedError("ps " + address + " serves no tcp data plane");
    }
    return stats.data_port();
  };
}

grpc::Status DataChannel::Unary(DataKind kind, google::protobuf::Message* req,
                                google::protobuf::Message* resp, absl::Time deadline,
                                std::vector<absl::string_view> payload) {
  struct Call call {
    kind, req, nullptr, resp, nullptr, deadline, nullptr, {}, {}, {}
  };
  call.runs.from = std::move(payload);
  return Run(call);
}

grpc::Status DataChannel::PushPull(PushRequest* req, PushPullResponse* resp, absl::Time deadline,
                                   PayloadSource source, PayloadSink sink, PayloadRuns runs) {
  Call call = PushPullCall(req, resp, deadline, nullptr, std::move(source), std::move(sink),
                           std::move(runs));
  return Run(call);
}

void DataChannel::Cancel() {
  std::lock_guard<std::mutex> l(mu_);
  if (socket_ != nullptr) socket_->Shutdown();
}

void DataChannel::Loop() {
  while (true) {
    std::unique_ptr<Call> call;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stopping_ || pending_ != nullptr; });
      if (stopping_) {
        if (pending_ != nullptr) pending_->done(grpc::Status(grpc::CANCELLED, "closing"));
        return;
      }
      call = std::move(pending_);
    }
    call->done(Run(*call));
  }
}

absl::Status DataChannel::Connect(absl::Time deadline) {
  // The process's certificates of now, for a config that is the process's.
  absl::StatusOr<std::shared_ptr<SSL_CTX>> tls = tls_.Get();
  if (!tls.ok()) return tls.status();
  absl::StatusOr<int> port = port_of_(deadline);
  if (!port.ok()) return port.status();
  const std::string name = security_->server_name.empty() ? host_ : security_->server_name;
  absl::StatusOr<std::unique_ptr<DataSocket>> s =
      DataSocket::Dial(host_, *port, tls->get(), name, deadline);
  if (!s.ok()) return s.status();
  std::shared_ptr<DataSocket> socket(std::move(*s));
  socket->SetDeadline(deadline);
  FrameHeader hello;
  hello.kind = static_cast<uint32_t>(DataKind::kHello);
  const std::string token = CurrentToken(*security_);  // a reloaded one, for the process's
  hello.meta_size = static_cast<uint32_t>(token.size());
  if (absl::Status w = socket->WriteFrame(hello, token, {}); !w.ok()) return w;
  FrameHeader answer;
  if (absl::Status r = socket->ReadFrame(&answer, &meta_, &payload_, 0); !r.ok()) return r;
  if (answer.code != 0) {
    return FromGrpcStatus(
        grpc::Status(static_cast<grpc::StatusCode>(answer.code), meta_), "data plane");
  }
  std::lock_guard<std::mutex> l(mu_);
  if (stopping_) return absl::CancelledError("closing");
  socket_ = std::move(socket);
  return absl::OkStatus();
}

grpc::Status DataChannel::Run(Call& call) {
  // One frame's whole exchange, in the order it happens on the socket: dial,
  // header, payload (whole, scattered or streamed as it is produced), answer.
  // Kept in one piece (142 lines): every step shares the socket and the rule
  // that a failure anywhere leaves the connection broken.
  // After a failed read or write the connection's state is unknown (half a
  // frame may be in it): the next call dials again.
  auto broken = [this](const absl::Status& s) {
    std::lock_guard<std::mutex> l(mu_);
    socket_.reset();
    return ToGrpcStatus(s);
  };
  if (call.runs.scattered != nullptr) *call.runs.scattered = false;
  std::shared_ptr<DataSocket> socket;
  {
    std::lock_guard<std::mutex> l(mu_);
    socket = socket_;
  }
  if (socket == nullptr) {
    if (absl::Status s = Connect(call.deadline); !s.ok()) return broken(s);
    std::lock_guard<std::mutex> l(mu_);
    socket = socket_;
  }
  socket->SetDeadline(call.deadline);
  // The message without its bytes field, then the bytes themselves.
  std::string bytes;
  if (call.bytes != nullptr) bytes.swap(*call.bytes);
  const bool serialized = call.req->SerializeToString(&meta_);
  if (call.bytes != nullptr) bytes.swap(*call.bytes);
  if (!serialized) return grpc::Status(grpc::INTERNAL, "cannot serialize the request");
  FrameHeader h;
  h.kind = static_cast<uint32_t>(call.kind);
  h.meta_size = static_cast<uint32_t>(meta_.size());
  const bool streamed = static_cast<bool>(call.source.more);
  const bool from_runs = !streamed && !call.runs.from.empty();
  if (from_runs) {
    h.payload_size = 0;
    for (absl::string_view run : call.runs.from) h.payload_size += run.size();
  } else {
    h.payload_size = streamed ? call.source.size : call.bytes != nullptr ? call.bytes->size() : 0;
  }
  h.timeout_us = std::max<int64_t>(absl::ToInt64Microseconds(call.deadline - absl::Now()), 0);
  if (from_runs) {
    if (absl::Status s = socket->WriteFrameGathered(h, meta_, absl::MakeConstSpan(call.runs.from));
        !s.ok()) {
      return broken(s);
    }
  } else if (!streamed) {
    const absl::string_view payload = call.bytes != nullptr ? *call.bytes : absl::string_view();
    if (absl::Status s = socket->WriteFrame(h, meta_, payload); !s.ok()) return broken(s);
  } else {
    // The header and meta now, the payload as it is produced.
    if (absl::Status s = socket->WriteFrame(h, meta_, {}); !s.ok()) return broken(s);
    for (size_t sent = 0; sent < call.source.size;) {
      absl::StatusOr<size_t> have = call.source.more(sent, call.deadline);
      if (!have.ok()) return broken(have.status());  // half a frame is out
      if (*have <= sent || *have > call.source.size || *have > call.bytes->size()) {
        return broken(absl::InternalError(absl::StrCat(
            "the payload source offered ", *have, " of ", call.source.size, " bytes after ",
            sent)));
      }
      absl::string_view more(call.bytes->data() + sent, *have - sent);
      if (absl::Status s = socket->Write(more); !s.ok()) return broken(s);
      sent = *have;
    }
  }
  // A sync call may wait long for the other workers' pushes: watch the
  // stop flag meanwhile.
  if (stop_ != nullptr) {
    if (absl::Status s = socket->WaitReadable(*stop_); !s.ok()) return broken(s);
  }
  FrameHeader a;
  if (absl::Status s = socket->ReadFrameHead(&a, &meta_, kMaxAnswerPayloadBytes); !s.ok()) {
    return broken(s);
  }
  if (a.code != 0) {
    // An error carries none, but read what came.
    if (absl::Status s = socket->ReadSized(&payload_, a.payload_size); !s.ok()) {
      return broken(s);
    }
    return grpc::Status(static_cast<grpc::StatusCode>(a.code), meta_);
  }
  // Parsing clears resp, and clearing a proto3 message deletes its
  // sub-messages, strings and all: keep the last answer's buffer aside and
  // read the payload into it, so that no call allocates (and faults in)
  // megabytes.
  if (!call.resp_bytes) {
    // An answer without a bytes field carries no payload.
    if (!call.resp->ParseFromString(meta_)) {
      return grpc::Status(grpc::INTERNAL, "cannot parse the data plane's answer");
    }
    if (absl::Status s = socket->ReadSized(&payload_, a.payload_size); !s.ok()) {
      return broken(s);
    }
    return grpc::Status::OK;
  }
  std::string spare;
  spare.swap(*call.resp_bytes(call.resp));
  if (!call.resp->ParseFromString(meta_)) {
    return grpc::Status(grpc::INTERNAL, "cannot parse the data plane's answer");
  }
  std::string* payload = call.resp_bytes(call.resp);
  payload->swap(spare);
  uint64_t to_size = 0;
  for (absl::Span<char> run : call.runs.to) to_size += run.size();
  const bool in_place = !call.runs.to.empty() && a.payload_size == to_size;
  if (in_place) {
    // Straight into the caller's memory, the field left empty (its
    // buffer kept for the next answer that needs it).
    payload->clear();
    if (call.runs.scattered != nullptr) *call.runs.scattered = true;
  } else if (call.sink.arrived) {
    // The sink is promised the field at its full size before any byte.
    payload->resize(a.payload_size);
  }
  // Bytes [from, to) of the payload, into place or into the field.
  auto read = [&](size_t from, size_t to) -> absl::Status {
    if (!in_place) return socket->Read(payload->data() + from, to - from);
    std::vector<absl::Span<char>> part;
    size_t at = 0;
    for (absl::Span<char> run : call.runs.to) {
      const size_t b = std::max(from, at), e = std::min(to, at + run.size());
      if (b < e) part.push_back(run.subspan(b - at, e - b));
      at += run.size();
    }
    return socket->Read(absl::MakeConstSpan(part));
  };
  if (!call.sink.arrived) {
    // Into the field, taken as the bytes come (the length may lie).
    const absl::Status s =
        in_place ? read(0, a.payload_size) : socket->ReadSized(payload, a.payload_size);
    if (!s.ok()) return broken(s);
    return grpc::Status::OK;
  }
  // Reported in pieces small enough that a layer's weights are used soon
  // after their last byte is in.
  constexpr size_t kPiece = size_t{1} << 18;
  if (absl::Status s = call.sink.arrived(0); !s.ok()) return broken(s);
  for (size_t have = 0; have < a.payload_size;) {
    const size_t n = std::min<size_t>(kPiece, a.payload_size - have);
    if (absl::Status s = read(have, have + n); !s.ok()) return broken(s);
    have += n;
    if (absl::Status s = call.sink.arrived(have); !s.ok()) return broken(s);
  }
  return grpc::Status::OK;
}

}  // namespace pscluster
