// Fuzz target for the ring all-reduce's chunks as a member receives them
// (worker/ring_allreduce.h): a real RingService on a gRPC server in this
// process takes the input's RingChunks through its Send call (so each is
// serialized, parsed and filed as from a peer), then a real RingAllReducer
// of that member runs the step and uses them: header fields (ring_id,
// step, sender, direction, phase, round, chunk index), buffer_length and
// chunk_values that lie, and values in the ring's codec (fp32, bf16,
// fp16) of the right size or not. Its neighbours are a sink that takes
// every chunk it sends. Once every chunk filed is used (or the step has
// failed), the reducer is aborted, as the chief would: no input waits out
// a timeout. A chunk must fail the step with InvalidArgument naming it, or
// be used, or dropped; never crash, read or write past the buffer.
// The input: codec, direction mode, chunk size, ring size and rank, the
// buffer's values, then chunks (header fields, then values).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "fuzz/fuzz_input.h"
#include "proto/ring.grpc.pb.h"
#include "wire/codec.h"
#include "worker/ring_allreduce.h"

namespace pscluster {
namespace {

constexpr int kMaxChunks = 24;
constexpr int64_t kMaxValues = 48;

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "ring_fuzzer: contract broken: %s\n", what);
  std::abort();
}

// The neighbours: every chunk is taken.
class Sink final : public Ring::CallbackService {
  grpc::ServerUnaryReactor* Send(grpc::CallbackServerContext* ctx, const RingChunk*,
                                 RingAck*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// The member under test and its neighbours' sink, each on a server of its
// own; built once, kept for the process's life.
struct Servers {
  RingService inbox;
  Sink sink;
  std::unique_ptr<grpc::Server> member_server, sink_server;
  std::string member, neighbour;
  std::unique_ptr<Ring::Stub> to_member;
};

std::unique_ptr<grpc::Server> Serve(grpc::Service* service, std::string* address) {
  grpc::ServerBuilder builder;
  ConfigureServer(builder);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", ListeningCredentials(), &port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  Require(server != nullptr && port != 0, "cannot start a server");
  *address = absl::StrCat("127.0.0.1:", port);
  return server;
}

Servers& TheServers() {
  static Servers* s = [] {
    auto* servers = new Servers;  // lives as long as the process, on purpose
    servers->member_server = Serve(&servers->inbox, &servers->member);
    servers->sink_server = Serve(&servers->sink, &servers->neighbour);
    servers->to_member = Ring::NewStub(MakeChannel(servers->member));
    return servers;
  }();
  return *s;
}

// A chunk as a (possibly lying) peer sends it.
RingChunk MakeChunk(FuzzInput& in, const CodecOptions& wire, int64_t ring_id, int64_t step,
                    int members, int64_t n, int64_t chunk_values) {
  RingChunk c;
  static constexpr int64_t kRingDelta[] = {0, 0, 0, -1, 1};
  c.set_ring_id(ring_id + in.Pick(kRingDelta));
  c.set_step(step - (in.Byte() % 4 == 3 ? 1 : 0));  // an older step: dropped
  c.set_sender(static_cast<int32_t>(in.IntInRange(-1, members)));
  c.set_direction(static_cast<RingDirection>(in.IntInRange(-1, 2)));
  c.set_phase(static_cast<RingPhase>(in.IntInRange(-1, 2)));
  c.set_round(static_cast<int32_t>(in.IntInRange(-1, members)));
  c.set_chunk(static_cast<int32_t>(in.IntInRange(-1, 8)));
  c.set_buffer_length(in.Bool() ? n : in.Int64());
  c.set_chunk_values(in.Bool() ? chunk_values : in.Int64());
  if (in.Bool()) {
    // Values in the codec, of a size that may or may not be the chunk's.
    std::vector<float> values(static_cast<size_t>(in.IntInRange(0, 16)));
    for (float& v : values) v = in.Float();
    Encode(wire, values.data(), static_cast<int64_t>(values.size()), c.mutable_data());
  } else {
    c.set_data(std::string(in.LengthPrefixed(80)));
  }
  return c;
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  Servers& servers = TheServers();
  static int64_t ring_id = 0;  // a new ring for every input
  ++ring_id;
  FuzzInput in(data, size);
  static constexpr Codec kCodecs[] = {Codec::kFloat32, Codec::kBfloat16, Codec::kFloat16};
  static constexpr int64_t kChunkBytes[] = {4, 8, 12, 64};
  RingOptions options;
  options.wire.codec = in.Pick(kCodecs);
  options.bidirectional = in.Bool();
  options.chunk_bytes = in.Pick(kChunkBytes);
  options.timeout = absl::Seconds(5);
  const int members = static_cast<int>(in.IntInRange(2, 4));
  const int rank = static_cast<int>(in.IntInRange(0, members - 1));
  const int64_t step = in.IntInRange(0, 3);
  std::vector<float> x(static_cast<size_t>(in.IntInRange(0, kMaxValues)));
  for (float& v : x) v = in.Float();
  const int64_t n = static_cast<int64_t>(x.size());

  // One reducer per set of options, kept: its channels to the neighbours
  // stay connected, as a worker's do from ring to ring.
  static std::map<std::tuple<Codec, bool, int64_t>, std::unique_ptr<RingAllReducer>> reducers;
  std::unique_ptr<RingAllReducer>& reducer =
      reducers[{options.wire.codec, options.bidirectional, options.chunk_bytes}];
  if (reducer == nullptr) {
    absl::StatusOr<std::unique_ptr<RingAllReducer>> made =
        RingAllReducer::Create(&servers.inbox, options);
    Require(made.ok(), "the reducer's options were refused");
    reducer = *std::move(made);
  }
  std::vector<std::string> addresses(members, servers.neighbour);
  addresses[rank] = servers.member;
  Require(reducer->SetRing(ring_id, addresses, rank).ok(), "the ring was refused");

  const int count = static_cast<int>(in.IntInRange(0, kMaxChunks));
  for (int i = 0; i < count; ++i) {
    const RingChunk chunk =
        MakeChunk(in, options.wire, ring_id, step, members, n, options.chunk_bytes / 4);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    RingAck ack;
    const grpc::Status s = servers.to_member->Send(&ctx, chunk, &ack);
    Require(s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED, "Send did not answer");
  }

  // The chief's abort once every chunk filed is used (chunks of the older
  // step are dropped when the step begins).
  std::atomic<bool> done{false};
  std::thread chief([&] {
    while (!done.load() && servers.inbox.held() > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    reducer->Abort(ring_id);
  });
  const absl::Status s = reducer->AllReduce(step, x.data(), n);
  done = true;
  chief.join();
  Require(s.ok() || absl::IsAborted(s) || absl::IsInvalidArgument(s),
          "the step failed with neither InvalidArgument nor Aborted");
  if (absl::IsInvalidArgument(s)) {
    Require(s.message().find(absl::StrCat("ring ", ring_id, ", step ", step)) == 0,
            "a refused chunk's error does not name the ring and step");
  }
  return 0;
}
