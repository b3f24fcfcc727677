#include "ps_server/data_plane_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace pscluster {
namespace {

// How long a new connection may take to finish its TLS handshake and
// hello; a peer that says nothing is dropped.
constexpr absl::Duration kHelloTimeout = absl::Seconds(10);

// Gradients are read and checked in pieces this large: a few of them fit
// in a core's cache (a multiple of sizeof(float)).
constexpr size_t kCheckedPiece = size_t{256} << 10;

}  // namespace

absl::StatusOr<std::unique_ptr<DataPlaneServer>> DataPlaneServer::Start(
    int port, PsService* service, std::shared_ptr<const SecurityConfig> security,
    uint64_t max_payload_bytes, const std::vector<int>& avoid) {
  std::unique_ptr<DataPlaneServer> s(
      new DataPlaneServer(security != nullptr ? std::move(security) : ProcessSecurity()));
  s->service_ = service;
  s->max_payload_ = max_payload_bytes;
  // The material makes a context (checked now rather than at the first
  // connection).
  if (absl::StatusOr<std::shared_ptr<SSL_CTX>> tls = s->tls_.Get(); !tls.ok()) return tls.status();
  // A port the kernel picked that is in `avoid` stays bound (so that it is
  // not picked again) until a good one is found, then is closed.
  std::vector<int> refused;
  const absl::Cleanup close_refused = [&refused] {
    for (int r : refused) close(r);
  };
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("data plane: socket: ", strerror(errno)));
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      const int err = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat("data plane: cannot listen on 0.0.0.0:", port,
                                                 ": ", strerror(err)));
    }
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    const int got = ntohs(addr.sin_port);
    if (port == 0 && std::find(avoid.begin(), avoid.end(), got) != avoid.end() &&
        refused.size() < 64) {
      refused.push_back(fd);
      continue;
    }
    if (listen(fd, 64) != 0) {
      const int err = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat("data plane: cannot listen on 0.0.0.0:", got,
                                                 ": ", strerror(err)));
    }
    s->listen_fd_ = fd;
    s->port_ = got;
    break;
  }
  if (pipe2(s->wake_fd_, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("data plane: pipe: ", strerror(errno)));
  }
  s->acceptor_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

DataPlaneServer::~DataPlaneServer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    for (auto& c : connections_) c->Shutdown();
  }
  if (wake_fd_[1] >= 0) {
    const char byte = 0;
    (void)!write(wake_fd_[1], &byte, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  {
    // The connections' threads end once their sockets are shut down (a
    // call waiting in the store ends when the store is cancelled).
    std::unique_lock<std::mutex> l(mu_);
    threads_done_.wait(l, [this] { return serving_ == 0; });
  }
  for (int fd : {listen_fd_, wake_fd_[0], wake_fd_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void DataPlaneServer::AcceptLoop() {
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("data plane: poll: {}", strerror(errno));
      return;
    }
    if (p[1].revents != 0) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the peer gave up already, or out of descriptors
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) {
      close(fd);
      return;
    }
    // Detached: a connection's thread ends with it, and the destructor
    // waits for serving_ to reach 0.
    ++serving_;
    std::thread([this, fd] {
      absl::StatusOr<std::shared_ptr<SSL_CTX>> tls = tls_.Get();
      if (!tls.ok()) close(fd);
      absl::StatusOr<std::unique_ptr<DataSocket>> s =
          tls.ok() ? DataSocket::Accept(fd, tls->get(), absl::Now() + kHelloTimeout)  // owns fd
                   : absl::StatusOr<std::unique_ptr<DataSocket>>(tls.status());
      std::shared_ptr<DataSocket> socket;
      if (!s.ok()) {
        spdlog::warn("data plane: refused a connection: {}", std::string(s.status().message()));
      } else {
        socket = std::move(*s);
        std::lock_guard<std::mutex> l(mu_);
        if (!stopping_) connections_.push_back(socket);
      }
      if (socket != nullptr) {
        Serve(socket);
        std::lock_guard<std::mutex> l(mu_);
        connections_.remove(socket);
      }
      std::lock_guard<std::mutex> l(mu_);
      if (--serving_ == 0) threads_done_.notify_all();
    }).detach();
  }
}

namespace {

// The answer to a call whose answer has no payload: `status`'s error, or
// `resp` (serialized through `meta`). False when the connection broke.
bool WriteAnswer(DataSocket& socket, uint32_t kind, const grpc::Status& status,
                 const google::protobuf::Message& resp, std::string* meta) {
  FrameHeader answer;
  answer.kind = kind;
  if (!status.ok()) {
    answer.code = static_cast<uint32_t>(status.error_code());
    answer.meta_size = static_cast<uint32_t>(status.error_message().size());
    return socket.WriteFrame(answer, status.error_message(), {}).ok();
  }
  resp.SerializeToString(meta);
  answer.meta_size = static_cast<uint32_t>(meta->size());
  return socket.WriteFrame(answer, *meta, {}).ok();
}

}  // namespace

bool DataPlaneServer::Hello(DataSocket& socket, const std::string& peer,
                            std::shared_ptr<const SecurityConfig>* security,
                            std::optional<TaskIdentity>* caller) {
  FrameHeader h;
  std::string meta, payload;
  socket.SetDeadline(absl::Now() + kHelloTimeout);
  if (!socket.ReadFrame(&h, &meta, &payload, 0).ok()) return false;
  // The process's current config: a reloaded token or identities list
  // holds for connections from then on.
  *security = security_->process ? ProcessSecurity() : security_;
  grpc::Status hello = grpc::Status::OK;
  if (h.kind != static_cast<uint32_t>(DataKind::kHello)) {
    hello = grpc::Status(grpc::INVALID_ARGUMENT, "a data-plane connection must start with a hello");
  } else if ((*security)->token.empty() && !meta.empty()) {
    // A token where the cluster has none: the peer is configured for
    // another cluster.
    hello = grpc::Status(grpc::UNAUTHENTICATED, "missing or wrong cluster token");
  } else {
    // The token (and with --authorize the certificate) as a gRPC call's.
    hello =
        IdentifyCaller(**security, meta.empty() ? std::nullopt : std::optional<std::string>(meta),
                       (*security)->authorize ? socket.PeerCertificatePem() : std::string(), peer,
                       "pscluster.DataPlane/Hello", caller);
    if (hello.error_code() == grpc::UNAUTHENTICATED) {
      hello = grpc::Status(grpc::UNAUTHENTICATED, "missing or wrong cluster token");
    }
  }
  // The answer: the refusal, or an empty hello.
  return WriteAnswer(socket, static_cast<uint32_t>(DataKind::kHello), hello, PushPullResponse(),
                     &meta) &&
         hello.ok();
}

void DataPlaneServer::Serve(std::shared_ptr<DataSocket> socket) {
  // One connection's life: the hello (Hello), then each frame by its kind
  // (push-pull, step decision, records) until the peer goes; read as the
  // protocol does.
  // The caller's identity, from the hello; each frame is then authorized
  // by it (with the process's config as it was at the hello).
  const std::string peer = socket->PeerName();
  std::shared_ptr<const SecurityConfig> security;
  std::optional<TaskIdentity> caller;
  if (!Hello(*socket, peer, &security, &caller)) return;
  FrameHeader h, answer;
  std::string meta, payload, out;
  socket->SetDeadline(absl::InfiniteFuture());
  // Reused from call to call, with their strings' capacity; `grads`
  // trades places with the store's buffer of the step before (sync).
  PushRequest req;
  PushPullResponse resp;
  std::vector<float> grads;
  // The gradients' check for NaN/Inf and the answer's weights
  // (PsDataService::DataPlaneCall).
  PsDataService::DataPlaneCall call;
  // The process's config last seen to trust what `security` trusts.
  std::shared_ptr<const SecurityConfig> trusted = security;
  while (true) {
    absl::Status r = socket->ReadFrameHead(&h, &meta, max_payload_);
    if (!r.ok()) {
      if (absl::IsResourceExhausted(r) || absl::IsInvalidArgument(r)) {
        spdlog::warn("data plane: dropped a connection: {}", std::string(r.message()));
      }
      return;  // the client hung up, or the server stops
    }
    if (security->process) {
      // A CA reloaded since the handshake: the connection ends, as gRPC's
      // do, and the peer connects again under the CA of now.
      std::shared_ptr<const SecurityConfig> now = ProcessSecurity();
      if (now != trusted) {
        if (now->ca_pem != security->ca_pem) {
          spdlog::info("data plane: closed the connection of {}: the CA changed since", peer);
          return;
        }
        trusted = std::move(now);
      }
    }
    // Each frame kind is the gRPC method it stands for, in the table.
    const Rpc rpc = h.kind == static_cast<uint32_t>(DataKind::kCommit) ? Rpc::kControlCommitStep
                    : h.kind == static_cast<uint32_t>(DataKind::kReplicate) ? Rpc::kControlReplicate
                                                                            : Rpc::kPsPushPull;
    // A refused frame: nothing of it is used; read and answered. False when
    // the connection broke.
    auto refuse = [&](const grpc::Status& why) {
      return socket->ReadSized(&payload, h.payload_size).ok() &&
             WriteAnswer(*socket, h.kind, why, PushPullResponse(), &out);
    };
    if (grpc::Status denied = AuthorizeCaller(*security, rpc, caller, peer); !denied.ok()) {
      if (!refuse(denied)) return;
      continue;
    }
    if (h.kind == static_cast<uint32_t>(DataKind::kCommit)) {
      if (!ServeCommit(*socket, h, &meta, &payload)) return;
      continue;
    }
    if (h.kind == static_cast<uint32_t>(DataKind::kReplicate)) {
      if (!ServeReplicate(*socket, h, &meta, &payload)) return;
      continue;
    }
    const bool is_push_pull = h.kind == static_cast<uint32_t>(DataKind::kPushPull);
    const bool parsed = is_push_pull && req.ParseFromString(meta);
    // A worker pushes as itself only.
    if (parsed) {
      grpc::Status as_itself =
          CheckActsAsItself(peer, caller, Rpc::kPsPushPull, Role::kWorker, req.worker_index());
      if (!as_itself.ok()) {
        if (!refuse(as_itself)) return;
        continue;
      }
    }
    // fp32 gradients in the store's order land in `grads`, which the
    // store can keep as it is; sent last shard first (streamed during
    // backprop), each shard is read into its place, so that they are then
    // in the store's order. Either way they are checked for NaN/Inf a
    // piece at a time as they arrive, while in cache and the rest still on
    // its way, rather than in one more pass after.
    std::vector<std::pair<int64_t, int64_t>> runs;  // (offset, floats), in payload order
    if (parsed && PsDataService::GradientsAsSent(req) && h.payload_size % sizeof(float) == 0) {
      runs.emplace_back(0, static_cast<int64_t>(h.payload_size / sizeof(float)));
    } else if (parsed) {
      runs = service_->data().ReversedRuns(req, h.payload_size);
    }
    const bool check = !runs.empty();
    bool finite = true;
    if (check) {
      grads.resize(h.payload_size / sizeof(float));
      for (const auto& [offset, floats] : runs) {
        char* in = reinterpret_cast<char*>(grads.data() + offset);
        const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
        for (size_t have = 0; have < bytes;) {
          const size_t n = std::min<size_t>(kCheckedPiece, bytes - have);
          if (!socket->Read(in + have, n).ok()) return;
          if (finite) {
            finite = AllFinite(reinterpret_cast<const float*>(in + have),
                               static_cast<int64_t>(n / sizeof(float)));
          }
          have += n;
        }
      }
      req.set_shards_reversed(false);  // placed in the store's order
    } else if (!socket->ReadSized(&payload, h.payload_size).ok()) {
      return;
    }
    grpc::Status status;
    if (!is_push_pull) {
      status = grpc::Status(grpc::INVALID_ARGUMENT,
                            absl::StrCat("unknown data-plane call ", h.kind));
    } else if (!parsed) {
      status = grpc::Status(grpc::INVALID_ARGUMENT, "cannot parse the PushRequest");
    } else {
      if (!check) req.mutable_gradients()->swap(payload);
      resp.Clear();
      call.gradients_finite = check ? std::optional<bool>(finite) : std::nullopt;
      call.gradients = check ? &grads : nullptr;
      status = service_->data().DoPushPull(
          req, absl::Now() + absl::Microseconds(std::max<int64_t>(h.timeout_us, 0)), &resp,
          &call);
      if (!check) req.mutable_gradients()->swap(payload);
    }
    answer = FrameHeader();
    answer.kind = h.kind;
    bool written;
    if (!status.ok()) {
      answer.code = static_cast<uint32_t>(status.error_code());
      answer.meta_size = static_cast<uint32_t>(status.error_message().size());
      written = socket->WriteFrame(answer, status.error_message(), {}).ok();
    } else {
      // The payload: the shared weights, or the encoded answer taken out
      // of the message.
      out.clear();
      out.swap(*resp.mutable_pull()->mutable_values());
      const absl::string_view values =
          call.weights != nullptr
              ? absl::string_view(reinterpret_cast<const char*>(call.weights->data()),
                                  call.weights->size() * sizeof(float))
              : absl::string_view(out);
      resp.SerializeToString(&meta);
      answer.meta_size = static_cast<uint32_t>(meta.size());
      answer.payload_size = values.size();
      written = socket->WriteFrame(answer, meta, values).ok();
    }
    call.weights.reset();
    if (!written) return;
  }
}

bool DataPlaneServer::ServeCommit(DataSocket& socket, const FrameHeader& h, std::string* meta,
                                  std::string* payload) {
  // None is sent; read what came.
  if (!socket.ReadSized(payload, h.payload_size).ok()) return false;
  StepCommitRequest req;
  StepCommitResponse resp;
  grpc::Status status = req.ParseFromString(*meta)
                            ? service_->control().DoCommitStep(req, &resp)
                            : grpc::Status(grpc::INVALID_ARGUMENT,
                                           "cannot parse the StepCommitRequest");
  return WriteAnswer(socket, h.kind, status, resp, meta);
}

bool DataPlaneServer::ServeReplicate(DataSocket& socket, const FrameHeader& h, std::string* meta,
                                     std::string* payload) {
  if (!socket.ReadSized(payload, h.payload_size).ok()) return false;
  ReplicateRequest req;
  ReplicateResponse resp;
  grpc::Status status = req.ParseFromString(*meta)
                            ? service_->control().DoReplicate(req, *payload, &resp)
                            : grpc::Status(grpc::INVALID_ARGUMENT,
                                           "cannot parse the ReplicateRequest");
  return WriteAnswer(socket, h.kind, status, resp, meta);
}

}  // namespace pscluster
