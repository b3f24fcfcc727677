// The tcp data plane: PushPull's tensor bytes over a TCP connection of our
// own (TLS when the cluster uses TLS), beside gRPC, which keeps every
// other call.
//
// Why: on loopback a gRPC unary call moves 0.4-0.5x of what one TCP stream
// moves (tests/bench:ps_throughput prints both), because gRPC copies a
// message's bytes several times (serialization, HTTP/2 framing and flow
// control, slices) and a request waits for window updates. Here a call is
// one frame each way:
//
//   header (FrameHeader, 32 bytes) | meta | payload
//
// meta is the protobuf message without its one large bytes field
// (PushRequest.gradients, PushPullResponse.pull.values), and payload is
// that field's bytes, written from and read into the message's own string
// (the ps writes an fp32 answer's straight from the store's weights):
// the kernel's copies are the only ones between the two processes' memory.
//
// A connection starts with a hello frame carrying the cluster token (empty
// when there is none); the ps answers OK or UNAUTHENTICATED and hangs up.
// Then the client sends one request at a time and the ps answers each.
// Errors travel as a grpc::StatusCode and a message, so the client treats a
// data-plane call exactly like the gRPC call it replaces (retries, exactly
// once). Any broken connection is closed; the next attempt dials again.
//
// DataSocket: one connection, either end. DataChannel: a client's
// connection to one ps, with its own thread so that a call to every ps runs
// at once. The ps's listener is ps_server/data_plane_server.h.
#ifndef PSCLUSTER_WIRE_DATA_PLANE_H_
#define PSCLUSTER_WIRE_DATA_PLANE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <sys/uio.h>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/security.h"
#include "google/protobuf/message.h"
#include "proto/ps.grpc.pb.h"
#include "proto/ps.pb.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace pscluster {

enum class DataKind : uint32_t {
  kHello = 1,     // meta: the cluster token; answer: a code
  kPushPull = 2,  // meta: PushRequest; answer: PushPullResponse
  kCommit = 3,    // ps 0 to another ps: meta: StepCommitRequest; answer: StepCommitResponse
  kReplicate = 4,  // a primary to its backup: meta: ReplicateRequest, the records'
                   // gradients as the payload; answer: ReplicateResponse
};

inline constexpr uint32_t kFrameMagic = 0x31445350;  // "PSD1"

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint32_t kind = 0;          // DataKind
  uint32_t code = 0;          // answers: a grpc::StatusCode; requests: 0
  uint32_t meta_size = 0;     // answers with code != 0: the error message
  uint64_t payload_size = 0;
  int64_t timeout_us = 0;     // requests: how long the caller waits
};
static_assert(sizeof(FrameHeader) == 32, "FrameHeader is the wire format");

// The largest meta accepted; a peer that claims more is not ours. A push's
// sparse rows (PushRequest.sparse) ride in its meta: a batch of 1024
// examples of 26 ids of 16 floats is 2 MB.
inline constexpr uint32_t kMaxMetaBytes = 16 << 20;
// The largest answer payload a client accepts. A payload's memory is taken
// as its bytes arrive (DataSocket::ReadSized), so a length that lies costs
// only what the peer really sends.
inline constexpr uint64_t kMaxAnswerPayloadBytes = uint64_t{1} << 40;

// TLS contexts from a SecurityConfig: a server's (its certificate; with a
// CA, clients must present one it signed) and a client's (with a CA, its
// certificate, and servers checked against the CA; else against the
// system's roots). Null when the config has no TLS.
using SslCtxPtr = std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)>;
absl::StatusOr<SslCtxPtr> MakeServerSslCtx(const SecurityConfig& config);
absl::StatusOr<SslCtxPtr> MakeClientSslCtx(const SecurityConfig& config);

// The TLS context of one side (server or client) for new connections under
// `security`: made from its material, and made anew when `security` is the
// process's and the process's certificates changed since (ReloadSecurity).
// Connections hold their context, so the open ones keep theirs.
// Thread-safe.
class TlsContexts {
 public:
  enum Side { kServer, kClient };
  TlsContexts(Side side, std::shared_ptr<const SecurityConfig> security)
      : side_(side), security_(std::move(security)) {}
  // Null without TLS; an error when the material does not make a context.
  absl::StatusOr<std::shared_ptr<SSL_CTX>> Get();

 private:
  const Side side_;
  const std::shared_ptr<const SecurityConfig> security_;
  std::mutex mu_;
  std::shared_ptr<const SecurityConfig> made_from_;  // guarded by mu_
  std::shared_ptr<SSL_CTX> ctx_;                     // guarded by mu_
};

class DataSocket {
 public:
  // Dials host:port within `deadline`, TLS when `tls` is set: the server's
  // certificate must name `server_name` (a host name or IP address).
  static absl::StatusOr<std::unique_ptr<DataSocket>> Dial(const std::string& host, int port,
                                                          SSL_CTX* tls,
                                                          const std::string& server_name,
                                                          absl::Time deadline);
  // Takes an accepted connection (owns `fd`); TLS handshake as the server
  // when `tls` is set.
  static absl::StatusOr<std::unique_ptr<DataSocket>> Accept(int fd, SSL_CTX* tls,
                                                            absl::Time deadline);
  ~DataSocket();
  DataSocket(const DataSocket&) = delete;
  DataSocket& operator=(const DataSocket&) = delete;

  // Reads and writes fail with DeadlineExceeded after `deadline`
  // (InfiniteFuture: never).
  void SetDeadline(absl::Time deadline);
  absl::Status WriteFrame(const FrameHeader& header, absl::string_view meta,
                          absl::string_view payload);
  // The same with the payload in pieces, written in order (one sendmsg
  // for all of them without TLS).
  absl::Status WriteFrameGathered(const FrameHeader& header, absl::string_view meta,
                                  absl::Span<const absl::string_view> payload);
  // Fills *header, *meta and *payload (resized to the frame's; its
  // capacity is reused). A payload larger than `max_payload` is refused.
  absl::Status ReadFrame(FrameHeader* header, std::string* meta, std::string* payload,
                         uint64_t max_payload);
  // ReadFrame's first half: the header and meta; the caller then reads
  // header->payload_size bytes with Read.
  absl::Status ReadFrameHead(FrameHeader* header, std::string* meta, uint64_t max_payload);
  absl::Status Read(char* data, size_t n) { return ReadFull(data, n); }
  // Reads n bytes into *out (resized to n; its capacity is reused), growing
  // it as they arrive rather than all at once: a peer that claims a length
  // and then sends less (or hangs up) makes it fail without the memory of
  // the claim having been taken.
  absl::Status ReadSized(std::string* out, uint64_t n);
  // Fills `pieces` in order from the stream (one recvmsg for all of them
  // at a time without TLS).
  absl::Status Read(absl::Span<const absl::Span<char>> pieces);
  // Blocks until there is something to read, or `stop` turns true
  // (Cancelled; looked at every 100 ms), or the deadline passes.
  absl::Status WaitReadable(const std::atomic<bool>& stop);
  // Writes `data` as it is: the rest of a frame whose header and meta went
  // with an empty payload argument.
  absl::Status Write(absl::string_view data) { return WriteFull(data.data(), data.size()); }
  // From any thread: reads and writes blocked now or later fail.
  void Shutdown();
  // The peer's certificate (PEM) under TLS when it sent one, else "".
  std::string PeerCertificatePem() const;
  // The peer's address for logs, "tcp:127.0.0.1:5000" ("tcp:?" if unknown).
  std::string PeerName() const;

 private:
  DataSocket(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  // sendmsg of v[0, count) whole (plaintext only).
  absl::Status WriteV(iovec* v, int count);
  absl::Status ReadFull(char* data, size_t n);
  absl::Status WriteFull(const char* data, size_t n);
  absl::Status IoError(const char* what, int ret);

  const int fd_;
  SSL* const ssl_;  // null: plaintext
  absl::Time deadline_ = absl::InfiniteFuture();  // SetDeadline's
};

// A request payload sent while it is still being produced (a gradient
// during backprop): `size` bytes in all; more(have, deadline) blocks until
// the payload string holds more than `have` bytes (or all of them) and
// returns how many it holds, or an error that fails the call. It runs on
// the channel's thread, may append to the payload string, and is asked
// again from 0 when a call is resent.
struct PayloadSource {
  uint64_t size = 0;
  std::function<absl::StatusOr<size_t>(size_t have, absl::Time deadline)> more;
};

// An answer's payload used while it is still arriving (the next step's
// weights, layer by layer): arrived(have) is called on the thread making
// the call once the answer's meta is parsed into the response and its
// bytes field sized to the whole payload (have = 0), then each time more
// of the payload has been read into that field (or into PayloadRuns::to,
// which then holds it), the last time with all of it. An error fails the
// call. A call that breaks off midway is resent and its answer reported
// from 0 again.
struct PayloadSink {
  std::function<absl::Status(size_t have)> arrived;
};

// Where a PushPull's fp32 payloads lie in the caller's memory (a ps's
// shards in the flat vectors), so that they move without a gather or
// scatter copy. The request's payload is `from`, in order (req's bytes
// field is then not sent, and may be empty). The answer's is read into
// `to`, in order, when it has their size: *scattered is then set (before
// a PayloadSink hears of it) and resp's bytes field stays empty; otherwise
// it is read into that field. An answer broken off midway has written
// part of `to`.
struct PayloadRuns {
  std::vector<absl::string_view> from;
  std::vector<absl::Span<char>> to;
  bool* scattered = nullptr;
};

// A DataChannel's port_of for the ps (or backup store) at `address`: asks
// it over gRPC, through `stub` (borrowed, outliving the function), for the
// data port GetStats gives; Unimplemented when it serves none.
std::function<absl::StatusOr<int>(absl::Time deadline)> DataPortFromStats(
    ParameterServer::Stub* stub, std::string address);

class DataChannel {
 public:
  // The ps at `address` ("host:port" of its gRPC server). `port_of` asks
  // the ps, over gRPC, for its data port (before every dial: a restarted
  // ps may listen elsewhere). TLS and the token come from `security`.
  // `stop` (borrowed, may be null): once it turns true, a call waiting for
  // its answer fails with CANCELLED within 100 ms.
  DataChannel(std::string address,
              std::function<absl::StatusOr<int>(absl::Time deadline)> port_of,
              std::shared_ptr<const SecurityConfig> security,
              const std::atomic<bool>* stop = nullptr);
  ~DataChannel();
  DataChannel(const DataChannel&) = delete;
  DataChannel& operator=(const DataChannel&) = delete;

  // Starts a call on this channel's thread and returns; done(status) is
  // called there once `resp` holds the answer. `bytes` is req's large bytes
  // field (sent as the payload, left as it was); `resp_bytes(resp)` names
  // resp's, which receives the answer's payload. One call at a time.
  // With `source.more` set, the payload is streamed from it (PayloadSource);
  // with `sink.arrived` set, the answer's is reported as it arrives.
  void Start(DataKind kind, google::protobuf::Message* req, std::string* bytes,
             google::protobuf::Message* resp,
             std::function<std::string*(google::protobuf::Message*)> resp_bytes,
             absl::Time deadline, std::function<void(grpc::Status)> done,
             PayloadSource source = {}, PayloadSink sink = {});
  // Start for a PushPull: req's gradients go as the payload (streamed from
  // `source` when it is set, sent from `runs.from` when that is set), the
  // answer's pulled values come back as one (reported to `sink` as they
  // arrive when it is set; read into `runs.to` when that is set).
  void StartPushPull(PushRequest* req, PushPullResponse* resp, absl::Time deadline,
                     std::function<void(grpc::Status)> done, PayloadSource source = {},
                     PayloadSink sink = {}, PayloadRuns runs = {});
  // StartPushPull made on the calling thread, without the hand-off to the
  // channel's thread and back: returns once `resp` holds the answer. Not
  // while a started call is in flight.
  grpc::Status PushPull(PushRequest* req, PushPullResponse* resp, absl::Time deadline,
                        PayloadSource source = {}, PayloadSink sink = {},
                        PayloadRuns runs = {});
  // A call of a message without a bytes field either way (kCommit), made
  // on the calling thread; `payload`, where given, is sent after the
  // message, gathered from where it lies (kReplicate's gradients). Not
  // while a started call is in flight.
  grpc::Status Unary(DataKind kind, google::protobuf::Message* req,
                     google::protobuf::Message* resp, absl::Time deadline,
                     std::vector<absl::string_view> payload = {});
  // Fails the call in flight now (the connection is closed).
  void Cancel();

 private:
  struct Call {
    DataKind kind;
    google::protobuf::Message* req;
    std::string* bytes;
    google::protobuf::Message* resp;
    std::function<std::string*(google::protobuf::Message*)> resp_bytes;
    absl::Time deadline;
    std::function<void(grpc::Status)> done;
    PayloadSource source;
    PayloadSink sink;
    PayloadRuns runs;
  };
  // The Call of a PushPull.
  static Call PushPullCall(PushRequest* req, PushPullResponse* resp, absl::Time deadline,
                           std::function<void(grpc::Status)> done, PayloadSource source,
                           PayloadSink sink, PayloadRuns runs);
  void Loop();
  grpc::Status Run(Call& call);
  absl::Status Connect(absl::Time deadline);

  const std::string address_;
  std::string host_;
  const std::function<absl::StatusOr<int>(absl::Time)> port_of_;
  const std::shared_ptr<const SecurityConfig> security_;
  const std::atomic<bool>* const stop_;  // borrowed; may be null
  TlsContexts tls_;
  std::string meta_, payload_;  // scratch, reused

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::unique_ptr<Call> pending_;       // guarded by mu_
  std::shared_ptr<DataSocket> socket_;  // guarded by mu_ (Cancel reads it)
  std::thread thread_;
};

// How PushPull's bytes travel (proto/ps.proto Transport; the chief's
// --transport): "grpc" (or empty) and "tcp"; InvalidArgument naming the
// text otherwise.
absl::StatusOr<Transport> ParseTransport(absl::string_view name);
// "grpc" or "tcp".
const char* TransportName(Transport t);

// "host" of "host:port" and "[v6]:port"; the address itself when it has no
// port.
std::string HostOf(const std::string& address);

}  // namespace pscluster

#endif  // PSCLUSTER_WIRE_DATA_PLANE_H_
