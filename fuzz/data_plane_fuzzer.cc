// Fuzz target for the tcp data plane's frame reader (wire/data_plane.h),
// both sides, fed from a socketpair whose far end holds the input and is
// then closed: a peer that stops mid-frame reaches end of stream, never a
// wait. The first byte picks the side, the second how the payload is read
// into pieces; the rest is the stream as it arrives:
//   side even  the ps (ps_server/data_plane_server.cc Serve): a hello
//              (kind, token) read with no payload allowed, then up to
//              kMaxFrames request frames: header, meta parsed as a
//              PushRequest, StepCommitRequest or ReplicateRequest, the
//              payload read into pieces (fp32 gradients) or taken as it
//              comes;
//   side odd   the worker (DataChannel::Connect and Run): the hello's
//              answer, then answers: error frames, PushPullResponse metas,
//              payloads up to kMaxAnswerPayloadBytes claimed, read into
//              runs when their size matches, else into the field.
// Lengths that lie must fail the read, never allocate what they claim
// (the fuzzer's malloc limit catches that) nor read past a buffer.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "common/security.h"
#include "fuzz/fuzz_input.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/ps.pb.h"
#include "wire/data_plane.h"

namespace pscluster {
namespace {

constexpr int kMaxFrames = 16;
// The ps's payload limit in the fuzzer (the daemon's is its flag's).
constexpr uint64_t kPsMaxPayload = uint64_t{1} << 20;

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "data_plane_fuzzer: contract broken: %s\n", what);
  std::abort();
}

// n bytes read into pieces whose sizes come from `split`.
absl::Status ReadPieces(DataSocket& socket, uint64_t n, uint8_t split, std::vector<char>* buf) {
  buf->assign(static_cast<size_t>(n), 0);
  std::vector<absl::Span<char>> pieces;
  const size_t step = 1 + split % 64;
  for (size_t at = 0; at < n; at += step) {
    pieces.push_back(absl::MakeSpan(buf->data() + at, std::min<size_t>(step, n - at)));
  }
  return socket.Read(absl::MakeConstSpan(pieces));
}

void PsSide(DataSocket& socket, uint8_t split) {
  FrameHeader h;
  std::string meta, payload;
  if (!socket.ReadFrame(&h, &meta, &payload, 0).ok()) return;
  Require(payload.empty() && meta.size() == h.meta_size, "hello sizes");
  if (h.kind != static_cast<uint32_t>(DataKind::kHello) || !ConstantTimeEquals(meta, "token")) {
    return;
  }
  std::vector<char> grads;
  for (int i = 0; i < kMaxFrames; ++i) {
    const absl::Status r = socket.ReadFrameHead(&h, &meta, kPsMaxPayload);
    if (!r.ok()) return;
    Require(h.magic == kFrameMagic && h.meta_size <= kMaxMetaBytes &&
                h.payload_size <= kPsMaxPayload && meta.size() == h.meta_size,
            "a header beyond the limits was accepted");
    if (h.kind == static_cast<uint32_t>(DataKind::kCommit)) {
      StepCommitRequest req;
      (void)req.ParseFromString(meta);
      if (!socket.ReadSized(&payload, h.payload_size).ok()) return;
      continue;
    }
    if (h.kind == static_cast<uint32_t>(DataKind::kReplicate)) {
      ReplicateRequest req;
      (void)req.ParseFromString(meta);
      if (!socket.ReadSized(&payload, h.payload_size).ok()) return;
      Require(payload.size() == h.payload_size, "replicate payload size");
      continue;
    }
    PushRequest req;
    if (h.kind == static_cast<uint32_t>(DataKind::kPushPull) && req.ParseFromString(meta) &&
        h.payload_size % sizeof(float) == 0) {
      if (!ReadPieces(socket, h.payload_size, split, &grads).ok()) return;
    } else {
      if (!socket.ReadSized(&payload, h.payload_size).ok()) return;
      Require(payload.size() == h.payload_size, "payload size");
    }
  }
}

void WorkerSide(DataSocket& socket, uint8_t split) {
  FrameHeader a;
  std::string meta, payload;
  if (!socket.ReadFrame(&a, &meta, &payload, 0).ok() || a.code != 0) return;
  std::vector<char> runs;
  for (int i = 0; i < kMaxFrames; ++i) {
    if (!socket.ReadFrameHead(&a, &meta, kMaxAnswerPayloadBytes).ok()) return;
    if (a.code != 0) {
      if (!socket.ReadSized(&payload, a.payload_size).ok()) return;
      continue;
    }
    PushPullResponse resp;
    if (!resp.ParseFromString(meta)) {
      if (!socket.ReadSized(&payload, a.payload_size).ok()) return;
      continue;
    }
    // Runs of the caller's size (split * 4 bytes) take a payload of that
    // size in place; any other goes into the field.
    if (a.payload_size == uint64_t{split} * 4) {
      if (!ReadPieces(socket, a.payload_size, split, &runs).ok()) return;
    } else {
      if (!socket.ReadSized(resp.mutable_pull()->mutable_values(), a.payload_size).ok()) return;
      Require(resp.pull().values().size() == a.payload_size, "answer payload size");
    }
  }
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  // Metas often hold invalid UTF-8 in string fields; protobuf logs each,
  // which only slows the run (the parse's result says it all).
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  // The whole stream must fit in the socketpair's buffer: it is written
  // before the reader starts.
  if (size > 64 * 1024) return 0;
  FuzzInput in(data, size);
  const uint8_t side = in.Byte();
  const uint8_t split = in.Byte();
  const std::string_view stream = in.Rest();
  int fds[2];
  Require(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0, "socketpair");
  const int buffer = 1 << 20;
  setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  for (size_t at = 0; at < stream.size();) {
    const ssize_t w = write(fds[1], stream.data() + at, stream.size() - at);
    Require(w > 0, "socketpair write");
    at += static_cast<size_t>(w);
  }
  close(fds[1]);  // the peer stops here, mid-frame or not
  absl::StatusOr<std::unique_ptr<DataSocket>> socket =
      DataSocket::Accept(fds[0], nullptr, absl::Now() + absl::Seconds(5));
  if (!socket.ok()) return 0;
  if (side % 2 == 0) {
    PsSide(**socket, split);
  } else {
    WorkerSide(**socket, split);
  }
  return 0;
}
