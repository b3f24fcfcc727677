#include "worker/ring_allreduce.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/security.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

// Sends in flight per direction: enough to keep a link busy while the
// receiver's answers come back, few enough that a slow neighbour does not
// pile up gRPC streams.
constexpr int kWindow = 8;
// Waits before a chunk refused with UNAVAILABLE (the neighbour has not
// installed the ring yet, or a connection broke) is sent again.
constexpr absl::Duration kFirstRetry = absl::Milliseconds(10);
constexpr absl::Duration kMaxRetry = absl::Milliseconds(200);
// Room for a RingChunk's fields besides its values, and fp16's scale.
constexpr int64_t kChunkOverhead = 256;

int Mod(int64_t a, int p) { return static_cast<int>(((a % p) + p) % p); }
int Sign(int direction) { return direction == RING_CLOCKWISE ? 1 : -1; }
const char* DirectionName(int direction) {
  return direction == RING_CLOCKWISE ? "clockwise" : "counter-clockwise";
}
const char* PhaseName(int phase) {
  return phase == RING_REDUCE_SCATTER ? "reduce-scatter" : "all-gather";
}

struct Range {
  int64_t begin = 0;
  int64_t size = 0;
};

// The header's layout: the direction's range, its P segments, their chunks.
class Layout {
 public:
  Layout(int64_t n, int members, int64_t chunk_values, bool bidirectional)
      : members_(members), chunk_values_(chunk_values) {
    const int64_t clockwise = bidirectional ? n - n / 2 : n;
    range_[0] = {0, clockwise};
    range_[1] = {clockwise, n - clockwise};
  }

  Range Segment(int direction, int s) const {
    const Range& r = range_[direction];
    const int64_t begin = r.size * s / members_;
    const int64_t end = r.size * (s + 1) / members_;
    return {r.begin + begin, end - begin};
  }
  int64_t Chunks(int direction, int s) const {
    return (Segment(direction, s).size + chunk_values_ - 1) / chunk_values_;
  }
  Range Chunk(int direction, int s, int64_t c) const {
    const Range seg = Segment(direction, s);
    const int64_t begin = seg.begin + c * chunk_values_;
    return {begin, std::min(chunk_values_, seg.begin + seg.size - begin)};
  }

 private:
  const int members_;
  const int64_t chunk_values_;
  Range range_[2];
};

}  // namespace

// ---- RingService -----------------------------------------------------------

grpc::ServerUnaryReactor* RingService::Send(grpc::CallbackServerContext* ctx,
                                            const RingChunk* chunk, RingAck*) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(File(ctx, *chunk));
  return reactor;
}

grpc::Status RingService::File(const grpc::ServerContextBase* ctx, const RingChunk& chunk) {
  if (grpc::Status s = CheckAuth(ctx, Rpc::kRingSend); !s.ok()) return s;
  if (chunk.direction() != RING_CLOCKWISE && chunk.direction() != RING_COUNTER_CLOCKWISE) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("RingChunk.direction ", chunk.direction(),
                                     " is neither 0 (clockwise) nor 1 (counter-clockwise)"));
  }
  if (chunk.phase() != RING_REDUCE_SCATTER && chunk.phase() != RING_ALL_GATHER) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("RingChunk.phase ", chunk.phase(),
                                     " is neither 0 (reduce-scatter) nor 1 (all-gather)"));
  }
  if (chunk.round() < 0 || chunk.chunk() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("RingChunk.round ", chunk.round(), " or .chunk ",
                                     chunk.chunk(), " is negative"));
  }
  const Key key{chunk.step(), chunk.direction(), chunk.phase(), chunk.round(), chunk.chunk()};
  // Copied before the lock is taken: the values are most of the message.
  RingChunk copy(chunk);
  absl::MutexLock lock(&mu_);
  if (ring_id_ < 0 || chunk.ring_id() > ring_id_) {
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat(
            "the chunk is of ring ", chunk.ring_id(), " but this worker is ",
            ring_id_ < 0 ? std::string("in no ring yet") : absl::StrCat("still in ring ", ring_id_),
            ": try again once it has joined"));
  }
  if (chunk.ring_id() < ring_id_) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("the chunk is of ring ", chunk.ring_id(),
                                     " but this worker has moved on to ring ", ring_id_));
  }
  // A resend of a chunk already used, or held: acknowledged, dropped.
  if (has_step_ && chunk.step() < step_) return grpc::Status::OK;
  if (taken_.count(key) > 0 || held_.count(key) > 0) return grpc::Status::OK;
  held_.emplace(key, std::move(copy));
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* RingService::Abort(grpc::CallbackServerContext* ctx,
                                             const RingAbortRequest* request, RingAck*) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  grpc::Status s = CheckAuth(ctx, Rpc::kRingAbort);
  if (s.ok()) {
    absl::MutexLock lock(&reducer_mu_);
    if (reducer_ != nullptr) reducer_->Abort(request->ring_id());
  }
  reactor->Finish(s);
  return reactor;
}

grpc::ServerUnaryReactor* RingService::GetReplica(grpc::CallbackServerContext* ctx,
                                                  const ReplicaRequest* request,
                                                  ShardState* state) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  grpc::Status s = CheckAuth(ctx, Rpc::kRingGetReplica);
  if (s.ok() && replica_ == nullptr) {
    s = grpc::Status(grpc::StatusCode::UNAVAILABLE, "this worker holds no replica");
  }
  if (s.ok()) {
    absl::StatusOr<ShardState> got = replica_->State(*request);
    if (got.ok()) {
      *state = *std::move(got);
    } else {
      s = ToGrpcStatus(got.status());
    }
  }
  reactor->Finish(s);
  return reactor;
}

void RingService::SetReducer(RingAllReducer* reducer) {
  absl::MutexLock lock(&reducer_mu_);
  reducer_ = reducer;
}

int64_t RingService::held() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(held_.size());
}

void RingService::Reset(int64_t ring_id) {
  absl::MutexLock lock(&mu_);
  ring_id_ = ring_id;
  has_step_ = false;
  held_.clear();
  taken_.clear();
}

void RingService::BeginStep(int64_t step) {
  absl::MutexLock lock(&mu_);
  has_step_ = true;
  step_ = step;
  held_.erase(held_.begin(), held_.lower_bound(Key{step, 0, 0, 0, 0}));
  taken_.clear();
}

RingService::Event RingService::Take(int64_t step, absl::Time deadline, RingChunk* chunk) {
  absl::MutexLock lock(&mu_);
  const Key first{step, 0, 0, 0, 0};
  auto has_chunk = [this, &first]() {
    mu_.AssertReaderHeld();
    auto it = held_.lower_bound(first);
    return it != held_.end() && std::get<0>(it->first) == std::get<0>(first);
  };
  auto ready = [this, &has_chunk]() {
    mu_.AssertReaderHeld();
    return woken_ || has_chunk();
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (has_chunk()) {
    auto node = held_.extract(held_.lower_bound(first));
    taken_.insert(node.key());
    *chunk = std::move(node.mapped());
    return Event::kChunk;
  }
  if (woken_) {
    woken_ = false;
    return Event::kWoken;
  }
  return Event::kTimedOut;
}

void RingService::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

// ---- One all-reduce --------------------------------------------------------

// The state of one AllReduce, on the training loop's thread but for the
// send callbacks, which only hand their outcome over (done_mu_) and wake
// the loop through the inbox. The destructor cancels every send still in
// flight and waits for its callback, so nothing outlives the call.
class RingAllReducer::Pass {
 public:
  Pass(RingAllReducer* owner, int64_t step, float* x, int64_t n)
      : owner_(owner),
        step_(step),
        x_(x),
        n_(n),
        members_(static_cast<int>(owner->addresses_.size())),
        rank_(owner->rank_),
        layout_(n, members_, owner->chunk_values_, owner->options_.bidirectional) {}

  ~Pass() {
    for (auto& [raw, send] : flying_) send->ctx->TryCancel();
    absl::MutexLock lock(&done_mu_);
    done_mu_.Await(absl::Condition(
        +[](int64_t* outstanding) { return *outstanding == 0; }, &outstanding_));
  }

  absl::Status Run();
  const Stats& stats() const { return stats_; }

 private:
  // One chunk on its way to a neighbour.
  struct Outgoing {
    int direction = 0;
    RingChunk chunk;
    RingAck ack;
    std::unique_ptr<grpc::ClientContext> ctx;     // the attempt in flight
    grpc::Status status;                          // its outcome
    absl::Time give_up = absl::InfiniteFuture();  // set by the first attempt
    absl::Time retry_at;
    absl::Duration backoff = kFirstRetry;
  };
  struct Way {
    int64_t due = 0;       // chunks still to receive
    int64_t expected = 0;  // chunks to receive in all
    int in_flight = 0;
    std::deque<std::unique_ptr<Outgoing>> queued;  // ready, not sent yet
  };

  int Upstream(int d) const { return Mod(rank_ - Sign(d), members_); }
  int Downstream(int d) const { return Mod(rank_ + Sign(d), members_); }
  std::string Member(int rank) const {
    return absl::StrCat(owner_->addresses_[rank], " (rank ", rank, ")");
  }
  std::string Where() const { return absl::StrCat("ring ", owner_->ring_id_, ", step ", step_); }

  // A chunk with this member's header fields; the caller adds the values.
  std::unique_ptr<Outgoing> Make(int d, RingPhase phase, int round, int64_t c) const;
  void Queue(std::unique_ptr<Outgoing> send) {
    way_[send->direction].queued.push_back(std::move(send));
  }
  // Uses a chunk from the upstream neighbour and queues what it makes ready.
  absl::Status Receive(RingChunk chunk);
  // Starts queued sends (and retries now due) while the window has room.
  void Issue();
  void Start(std::unique_ptr<Outgoing> send);
  // Takes the outcomes of finished sends: retries refusals, fails on errors.
  absl::Status Collect();
  absl::Status SendError(const Outgoing& send) const;
  // Unavailable naming the neighbours still owing chunks.
  absl::Status Silence() const;
  bool Done() const {
    return way_[0].due == 0 && way_[1].due == 0 && way_[0].queued.empty() &&
           way_[1].queued.empty() && retries_.empty() && flying_.empty();
  }

  RingAllReducer* const owner_;
  const int64_t step_;
  float* const x_;
  const int64_t n_;
  const int members_;
  const int rank_;
  const Layout layout_;

  Way way_[2];
  std::vector<std::unique_ptr<Outgoing>> retries_;  // waiting for retry_at
  std::unordered_map<Outgoing*, std::unique_ptr<Outgoing>> flying_;
  Stats stats_;

  absl::Mutex done_mu_;
  std::vector<Outgoing*> done_ ABSL_GUARDED_BY(done_mu_);  // callbacks' outcomes
  int64_t outstanding_ ABSL_GUARDED_BY(done_mu_) = 0;      // callbacks still due
};

std::unique_ptr<RingAllReducer::Pass::Outgoing> RingAllReducer::Pass::Make(int d, RingPhase phase,
                                                                           int round,
                                                                           int64_t c) const {
  auto send = std::make_unique<Outgoing>();
  send->direction = d;
  RingChunk& m = send->chunk;
  m.set_ring_id(owner_->ring_id_);
  m.set_step(step_);
  m.set_sender(rank_);
  m.set_direction(static_cast<RingDirection>(d));
  m.set_phase(phase);
  m.set_round(round);
  m.set_chunk(static_cast<int32_t>(c));
  m.set_buffer_length(n_);
  m.set_chunk_values(owner_->chunk_values_);
  return send;
}

absl::Status RingAllReducer::Pass::Run() {
  const CodecOptions& wire = owner_->options_.wire;
  for (int d = 0; d < 2; ++d) {
    const int sign = Sign(d);
    for (int k = 0; k + 1 < members_; ++k) {
      way_[d].expected += layout_.Chunks(d, Mod(rank_ - sign * (k + 1), members_)) +
                          layout_.Chunks(d, Mod(rank_ - sign * k, members_));
    }
    way_[d].due = way_[d].expected;
    // Reduce-scatter round 0: this member's own segment, as it is.
    for (int64_t c = 0; c < layout_.Chunks(d, rank_); ++c) {
      const Range r = layout_.Chunk(d, rank_, c);
      std::unique_ptr<Outgoing> send = Make(d, RING_REDUCE_SCATTER, 0, c);
      Encode(wire, x_ + r.begin, r.size, send->chunk.mutable_data());
      Queue(std::move(send));
    }
  }
  absl::Time heard = absl::Now();  // the last chunk received
  RingChunk chunk;
  while (true) {
    if (owner_->aborted()) {
      return absl::AbortedError(
          absl::StrCat(Where(), ": aborted (the chief is forming a new ring)"));
    }
    PSCLUSTER_RETURN_IF_ERROR(Collect());
    Issue();
    if (Done()) return absl::OkStatus();
    const bool waiting = way_[0].due > 0 || way_[1].due > 0;
    // Sends end by their own deadlines; only receiving needs a clock here.
    const absl::Time silent_at =
        waiting ? heard + owner_->options_.timeout : absl::InfiniteFuture();
    absl::Time wake = silent_at;
    for (const auto& r : retries_) wake = std::min(wake, r->retry_at);
    switch (owner_->inbox_->Take(step_, wake, &chunk)) {
      case RingService::Event::kChunk:
        heard = absl::Now();
        PSCLUSTER_RETURN_IF_ERROR(Receive(std::move(chunk)));
        break;
      case RingService::Event::kWoken:
        break;
      case RingService::Event::kTimedOut:
        if (absl::Now() >= silent_at) return Silence();
        break;
    }
  }
}

absl::Status RingAllReducer::Pass::Receive(RingChunk chunk) {
  const CodecOptions& wire = owner_->options_.wire;
  // The service checked direction and phase, and that round and chunk are
  // not negative.
  const int d = chunk.direction();
  const int k = chunk.round();
  const bool scatter = chunk.phase() == RING_REDUCE_SCATTER;
  const int from = Upstream(d);
  const std::string what =
      absl::StrCat(Where(), ": ", PhaseName(chunk.phase()), " chunk (round ", k, ", chunk ",
                   chunk.chunk(), ", ", DirectionName(d), ") from ", Member(from));
  if (chunk.sender() != from) {
    return absl::InvalidArgumentError(absl::StrCat(what, " says it is from rank ", chunk.sender()));
  }
  if (chunk.buffer_length() != n_ || chunk.chunk_values() != owner_->chunk_values_) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is of a buffer of ", chunk.buffer_length(), " values in chunks of ",
                     chunk.chunk_values(), "; this member reduces ", n_, " values in chunks of ",
                     owner_->chunk_values_,
                     ": every member must reduce the same buffer with the same "
                     "chunk_bytes"));
  }
  if (k > members_ - 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the ring of ", members_, " has rounds 0 to ", members_ - 2));
  }
  const int sign = Sign(d);
  const int s = Mod(scatter ? rank_ - sign * (k + 1) : rank_ - sign * k, members_);
  if (chunk.chunk() >= layout_.Chunks(d, s)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": segment ", s, " has ", layout_.Chunks(d, s), " chunks"));
  }
  const Range r = layout_.Chunk(d, s, chunk.chunk());
  const int64_t expect = EncodedBytes(wire, r.size);
  if (static_cast<int64_t>(chunk.data().size()) != expect) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " carries ", chunk.data().size(), " bytes; ", r.size, " values in ",
                     CodecName(EffectiveCodec(wire, r.size)), " are ", expect,
                     ": every member must use the same wire codec"));
  }
  stats_.bytes_received += static_cast<int64_t>(chunk.ByteSizeLong());
  stats_.payload_bytes_received += static_cast<int64_t>(chunk.data().size());
  ++stats_.messages_received;
  --way_[d].due;
  absl::string_view in(chunk.data());
  float* values = x_ + r.begin;
  if (scatter) {
    // values = received partial sum + own values (one float32 addition).
    if (absl::Status st = DecodeAdd(wire, &in, r.size, values); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", st.message()));
    }
    if (k < members_ - 2) {
      std::unique_ptr<Outgoing> send = Make(d, RING_REDUCE_SCATTER, k + 1, chunk.chunk());
      Encode(wire, values, r.size, send->chunk.mutable_data());
      Queue(std::move(send));
    } else {
      // The whole sum: kept as every other member will decode it.
      std::unique_ptr<Outgoing> send = Make(d, RING_ALL_GATHER, 0, chunk.chunk());
      EncodeSeen(wire, values, r.size, send->chunk.mutable_data(), values);
      Queue(std::move(send));
    }
    return absl::OkStatus();
  }
  if (absl::Status st = Decode(wire, &in, r.size, values); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", st.message()));
  }
  if (k < members_ - 2) {
    // Forwarded as received: the next member decodes the same bytes.
    auto send = std::make_unique<Outgoing>();
    send->direction = d;
    send->chunk = std::move(chunk);
    send->chunk.set_sender(rank_);
    send->chunk.set_round(k + 1);
    Queue(std::move(send));
  }
  return absl::OkStatus();
}

void RingAllReducer::Pass::Issue() {
  const absl::Time now = absl::Now();
  // Due retries go first, in the order they were made.
  for (auto it = retries_.rbegin(); it != retries_.rend(); ++it) {
    if ((*it)->retry_at <= now) {
      way_[(*it)->direction].queued.push_front(std::move(*it));
    }
  }
  retries_.erase(std::remove(retries_.begin(), retries_.end(), nullptr), retries_.end());
  for (Way& way : way_) {
    while (way.in_flight < kWindow && !way.queued.empty()) {
      std::unique_ptr<Outgoing> send = std::move(way.queued.front());
      way.queued.pop_front();
      Start(std::move(send));
    }
  }
}

void RingAllReducer::Pass::Start(std::unique_ptr<Outgoing> send) {
  if (send->give_up == absl::InfiniteFuture()) {
    send->give_up = absl::Now() + owner_->options_.timeout;
  }
  send->ctx = std::make_unique<grpc::ClientContext>();
  // A neighbour not connected yet is waited for, up to the deadline.
  send->ctx->set_wait_for_ready(true);
  send->ctx->set_deadline(absl::ToChronoTime(send->give_up));
  stats_.bytes_sent += static_cast<int64_t>(send->chunk.ByteSizeLong());
  stats_.payload_bytes_sent += static_cast<int64_t>(send->chunk.data().size());
  ++stats_.messages_sent;
  ++way_[send->direction].in_flight;
  {
    absl::MutexLock lock(&done_mu_);
    ++outstanding_;
  }
  Outgoing* raw = send.get();
  flying_.emplace(raw, std::move(send));
  RingService* const inbox = owner_->inbox_;
  owner_->stubs_[raw->direction]->async()->Send(raw->ctx.get(), &raw->chunk, &raw->ack,
                                                [this, raw, inbox](grpc::Status s) {
                                                  {
                                                    absl::MutexLock lock(&done_mu_);
                                                    raw->status = std::move(s);
                                                    done_.push_back(raw);
                                                    --outstanding_;
                                                  }
                                                  // `this` may be gone from here on (~Pass waits
                                                  // for outstanding_ only); the service outlives
                                                  // every reducer.
                                                  inbox->Wake();
                                                });
}

absl::Status RingAllReducer::Pass::Collect() {
  std::vector<Outgoing*> done;
  {
    absl::MutexLock lock(&done_mu_);
    done.swap(done_);
  }
  const absl::Time now = absl::Now();
  for (Outgoing* raw : done) {
    auto it = flying_.find(raw);
    std::unique_ptr<Outgoing> send = std::move(it->second);
    flying_.erase(it);
    --way_[send->direction].in_flight;
    if (send->status.ok()) continue;
    // Not installed the ring yet, or a connection broke: again, within the
    // chunk's deadline (the receiver ignores a chunk it already has).
    if (send->status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        now + send->backoff < send->give_up && !owner_->aborted()) {
      send->retry_at = now + send->backoff;
      send->backoff = std::min(2 * send->backoff, kMaxRetry);
      retries_.push_back(std::move(send));
      continue;
    }
    return SendError(*send);
  }
  return absl::OkStatus();
}

absl::Status RingAllReducer::Pass::SendError(const Outgoing& send) const {
  const RingChunk& m = send.chunk;
  const std::string what = absl::StrCat(
      Where(), ": sending ", PhaseName(m.phase()), " chunk (round ", m.round(), ", chunk ",
      m.chunk(), ") ", DirectionName(send.direction), " to ", Member(Downstream(send.direction)));
  const grpc::Status& s = send.status;
  switch (s.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::UnavailableError(absl::StrCat(what, ": not delivered within ",
                                                 absl::FormatDuration(owner_->options_.timeout),
                                                 " (", s.error_message(), ")"));
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:
      return absl::UnavailableError(absl::StrCat(what, ": ", s.error_message()));
    case grpc::StatusCode::FAILED_PRECONDITION:
      // The neighbour is in a newer ring: this one is being replaced.
      return absl::AbortedError(absl::StrCat(what, ": ", s.error_message()));
    default:
      return FromGrpcStatus(s, what);
  }
}

absl::Status RingAllReducer::Pass::Silence() const {
  std::vector<std::string> owing;
  for (int d = 0; d < 2; ++d) {
    if (way_[d].due == 0) continue;
    owing.push_back(absl::StrCat(Member(Upstream(d)), ", ", DirectionName(d), ": ",
                                 way_[d].expected - way_[d].due, " of ", way_[d].expected,
                                 " chunks in"));
  }
  return absl::UnavailableError(absl::StrCat(Where(), ": no chunk for ",
                                             absl::FormatDuration(owner_->options_.timeout),
                                             " from ", absl::StrJoin(owing, " nor from ")));
}

// ---- RingAllReducer --------------------------------------------------------

absl::StatusOr<std::unique_ptr<RingAllReducer>> RingAllReducer::Create(RingService* inbox,
                                                                       RingOptions options) {
  if (inbox == nullptr) {
    return absl::InvalidArgumentError("RingAllReducer: no RingService given");
  }
  switch (options.wire.codec) {
    case Codec::kFloat32:
    case Codec::kBfloat16:
    case Codec::kFloat16:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("RingOptions.wire: codec ", CodecName(options.wire.codec),
                       " cannot carry partial sums round a ring; use fp32, bf16 or fp16"));
  }
  if (options.chunk_bytes < 4) {
    return absl::InvalidArgumentError(absl::StrCat("RingOptions.chunk_bytes ", options.chunk_bytes,
                                                   " is below 4 (one fp32 value)"));
  }
  if (options.chunk_bytes > options.rpc.max_message_bytes - kChunkOverhead) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RingOptions.chunk_bytes ", options.chunk_bytes, " does not fit a message of at most ",
        options.rpc.max_message_bytes, " bytes (RpcOptions.max_message_bytes)"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RingOptions.timeout ", absl::FormatDuration(options.timeout), " is not positive"));
  }
  return std::unique_ptr<RingAllReducer>(new RingAllReducer(inbox, std::move(options)));
}

RingAllReducer::RingAllReducer(RingService* inbox, RingOptions options)
    : inbox_(inbox), options_(std::move(options)), chunk_values_(options_.chunk_bytes / 4) {}

RingAllReducer::~RingAllReducer() = default;

absl::Status RingAllReducer::SetRing(int64_t ring_id, std::vector<std::string> addresses,
                                     int rank) {
  if (ring_id <= ring_id_) {
    return absl::InvalidArgumentError(absl::StrCat("ring_id ", ring_id, " is not above ", ring_id_,
                                                   ", the ring installed before"));
  }
  if (addresses.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("ring ", ring_id, " has no members"));
  }
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ring ", ring_id, ": member ", i, " has an empty address"));
    }
  }
  if (rank < 0 || rank >= static_cast<int>(addresses.size())) {
    return absl::InvalidArgumentError(absl::StrCat("ring ", ring_id, ": rank ", rank,
                                                   " is out of range: the ring has ",
                                                   addresses.size(), " members"));
  }
  const int members = static_cast<int>(addresses.size());
  ring_id_ = ring_id;
  addresses_ = std::move(addresses);
  rank_ = rank;
  has_step_ = false;
  for (int d = 0; d < 2; ++d) {
    stubs_[d].reset();
    if (members == 1) continue;
    const std::string& address = addresses_[Mod(rank + Sign(d), members)];
    std::shared_ptr<grpc::Channel>& channel = channels_[address];
    if (channel == nullptr) channel = MakeChannel(address, options_.rpc);
    stubs_[d] = Ring::NewStub(channel);
  }
  inbox_->Reset(ring_id);
  installed_ = ring_id;
  return absl::OkStatus();
}

absl::Status RingAllReducer::AllReduce(int64_t step, float* x, int64_t n) {
  const absl::Time start = absl::Now();
  Stats stats;
  auto finish = [&](absl::Status s) {
    stats.wall = absl::Now() - start;
    absl::MutexLock lock(&stats_mu_);
    stats_ = stats;
    return s;
  };
  if (ring_id_ >= 0 && aborted()) {
    return finish(absl::AbortedError(absl::StrCat(
        "ring ", ring_id_, ": aborted (the chief is forming a new ring; SetRing installs it)")));
  }
  if (ring_id_ < 0) {
    return finish(absl::FailedPreconditionError("no ring installed: SetRing first"));
  }
  if (n < 0 || (n > 0 && x == nullptr)) {
    return finish(absl::InvalidArgumentError(
        absl::StrCat("step ", step, ": a buffer of ", n, " values at ",
                     x == nullptr ? "null" : "an address", " cannot be reduced")));
  }
  if (has_step_ && step <= last_step_) {
    return finish(absl::InvalidArgumentError(absl::StrCat(
        "step ", step, " is not above ", last_step_, ", the last all-reduce on ring ", ring_id_,
        ": a step is reduced once per ring (after an error, SetRing a new ring)")));
  }
  has_step_ = true;
  last_step_ = step;
  const int members = static_cast<int>(addresses_.size());
  if (members == 1) return finish(absl::OkStatus());
  if ((n + chunk_values_ - 1) / chunk_values_ > std::numeric_limits<int32_t>::max()) {
    return finish(absl::InvalidArgumentError(
        absl::StrCat("step ", step, ": ", n, " values in chunks of ", chunk_values_,
                     " are more chunks than RingChunk.chunk counts; raise chunk_bytes")));
  }
  inbox_->BeginStep(step);
  absl::Status s;
  {
    Pass pass(this, step, x, n);
    s = pass.Run();
    stats = pass.stats();
  }  // ~Pass: every send finished or cancelled
  return finish(s);
}

void RingAllReducer::Abort(int64_t ring_id) {
  int64_t through = aborted_through_.load();
  while (through < ring_id && !aborted_through_.compare_exchange_weak(through, ring_id)) {
  }
  inbox_->Wake();
}

void RingAllReducer::Abort() { Abort(installed_.load()); }

RingAllReducer::Stats RingAllReducer::last_stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

}  // namespace pscluster
