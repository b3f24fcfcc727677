// Ring all-reduce between workers (--strategy=multi_worker_mirrored, after
// TensorFlow's MultiWorkerMirroredStrategy): every worker holds the whole
// model, and each step's gradients are summed over the workers by passing
// chunks round a ring of them over gRPC (proto/ring.proto).
//
// The ring. The chief names its members in order (their addresses) and a
// ring id, ring_id, that rises with every new membership. Rank r sends
// clockwise to rank r + 1 and counter-clockwise to rank r - 1 (mod P, the
// ring's size). With `bidirectional`, values [0, n - n/2) go clockwise and
// [n - n/2, n) counter-clockwise, at once, so both ways of every link carry
// half; without, all of [0, n) goes clockwise.
//
// Layout. A direction's range of L values is cut into P segments, segment
// s = [L*s/P, L*(s+1)/P) (sizes differ by at most one value; some are empty
// when L < P), and each segment into chunks of chunk_values =
// chunk_bytes / 4 values (the last one shorter). A chunk travels alone:
// it is sent on as soon as it is ready, so rounds overlap (pipelining).
//
// Summation order (the contract that makes results deterministic). Going
// in direction d (sign +1 clockwise, -1 counter-clockwise), segment s of
// d's range is summed starting at rank s and then along d's direction:
//     sum_s = (...((x_s + x_{s+sign}) + x_{s+2 sign}) + ...) + x_{s+(P-1) sign}
// (ranks mod P, each + one float32 addition). In reduce-scatter round k
// (0 .. P-2) rank r sends segment r - sign*k and receives segment
// r - sign*(k+1), adding its own values to the received partial sum; rank
// s - sign ends with the whole sum_s. In all-gather round k it sends segment
// r + sign - sign*k and receives segment r - sign*k: final sums are copied
// (the received bytes are forwarded as they are), never summed again, so
// every member ends with the same bits.
//
// Wire codecs (wire/codec.h): fp32 (exact), bf16, or fp16 with a scale
// per chunk. Partial sums are kept in float32 and encoded for each hop, so
// with bf16/fp16 each of the P - 1 hops of reduce-scatter and the final
// sum round to the codec once. The owner of a segment keeps exactly what
// the others decode of its final sum (EncodeSeen), so replicas stay
// bit-identical whatever the codec.
//
// Faults: nothing waits without a bound. A neighbour that cannot be reached,
// or from which no chunk arrives for options.timeout while some are due,
// fails the all-reduce with Unavailable naming it; Abort() makes it return
// Aborted at once. A member of a newer ring refuses our chunks
// (FAILED_PRECONDITION), which fails the all-reduce with Aborted: the chief
// is forming a new ring. After any error, x is unspecified and the caller
// installs a new ring (SetRing) before reducing that step again.
//
// Thread-safety: SetRing and AllReduce are called by one thread (the
// training loop); Abort and last_stats from any thread. RingService is
// thread-safe; it is borrowed by one RingAllReducer at a time and must
// outlive it.
#ifndef PSCLUSTER_WORKER_RING_ALLREDUCE_H_
#define PSCLUSTER_WORKER_RING_ALLREDUCE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "wire/codec.h"
#include "common/rpc.h"
#include "proto/ring.grpc.pb.h"
#include "update/model_replica.h"

namespace pscluster {

class RingAllReducer;

struct RingOptions {
  // Codec::kFloat32, kBfloat16 or kFloat16 (min_elements applies per chunk).
  CodecOptions wire;
  // Pipelining granularity, in bytes of fp32 payload (a multiple of 4 is
  // best); at least 4, and below rpc.max_message_bytes.
  int64_t chunk_bytes = 1 << 20;
  // Half the buffer goes each way round the ring.
  bool bidirectional = true;
  // A neighbour silent this long, or a chunk not delivered within it,
  // fails the all-reduce.
  absl::Duration timeout = absl::Seconds(30);
  // Channels to the neighbours: limits, TLS and the cluster token.
  RpcOptions rpc;
};

// The gRPC side every worker adds to its TaskServer: files the chunks its
// neighbours send into a mailbox keyed by (step, direction, phase, round,
// chunk), for its RingAllReducer. Each call's token is checked first
// (CheckAuth). A chunk of an older ring is refused with
// FAILED_PRECONDITION, one of a ring not installed yet with UNAVAILABLE
// (the sender tries again); a chunk of a step older than the all-reduce
// under way, or one already held or used, is acknowledged and dropped.
// Abort calls (the chief's) reach the reducer set with SetReducer.
// A callback service: Send files the chunk and answers at once on gRPC's
// threads, never waiting for the reducer.
class RingService final : public Ring::CallbackService {
 public:
  // `replica` (borrowed, may be null: GetReplica then answers UNAVAILABLE)
  // is what GetReplica hands out.
  explicit RingService(const ModelReplica* replica = nullptr) : replica_(replica) {}
  RingService(const RingService&) = delete;
  RingService& operator=(const RingService&) = delete;

  grpc::ServerUnaryReactor* Send(grpc::CallbackServerContext* ctx, const RingChunk* chunk,
                                 RingAck* ack) override;
  // RingAllReducer::Abort(ring_id) on the reducer set, if any.
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const RingAbortRequest* request,
                                  RingAck* ack) override;

  grpc::ServerUnaryReactor* GetReplica(grpc::CallbackServerContext* ctx,
                                       const ReplicaRequest* request, ShardState* state) override;

  // The reducer that Abort calls reach: borrowed; null (the default) when
  // there is none, and then an Abort call does nothing. Set it back to
  // null before that reducer is destroyed (this waits for an Abort call
  // under way).
  void SetReducer(RingAllReducer* reducer);

  // Chunks held now, of any step (for tests).
  int64_t held() const;

 private:
  friend class RingAllReducer;
  // (step, direction, phase, round, chunk).
  using Key = std::tuple<int64_t, int, int, int, int>;
  enum class Event { kChunk, kWoken, kTimedOut };

  const ModelReplica* const replica_;
  // Send's work: files the chunk, or says why not.
  grpc::Status File(const grpc::ServerContextBase* ctx, const RingChunk& chunk);

  // The reducer's side. Accept chunks of `ring_id` only, from now on, and
  // forget every chunk held.
  void Reset(int64_t ring_id);
  // The all-reduce of `step` starts: chunks of earlier steps are dropped.
  void BeginStep(int64_t step);
  // Waits until a chunk of `step` is held (moves it to *chunk), Wake() was
  // called since the last Take returned kWoken, or `deadline` passes.
  Event Take(int64_t step, absl::Time deadline, RingChunk* chunk);
  // Makes the Take under way (or the next) return kWoken.
  void Wake();

  mutable absl::Mutex mu_;
  int64_t ring_id_ ABSL_GUARDED_BY(mu_) = -1;  // -1: no ring yet
  int64_t step_ ABSL_GUARDED_BY(mu_);          // the all-reduce under way
  bool has_step_ ABSL_GUARDED_BY(mu_) = false;
  std::map<Key, RingChunk> held_ ABSL_GUARDED_BY(mu_);
  std::set<Key> taken_ ABSL_GUARDED_BY(mu_);  // chunks of step_ used
  bool woken_ ABSL_GUARDED_BY(mu_) = false;

  // Apart from mu_: the reducer's Abort wakes Take, which takes mu_.
  absl::Mutex reducer_mu_;
  RingAllReducer* reducer_ ABSL_GUARDED_BY(reducer_mu_) = nullptr;  // borrowed
};

class RingAllReducer {
 public:
  // `inbox` is borrowed: the service this worker serves, which must
  // outlive the reducer. InvalidArgument naming the option when the codec
  // is not fp32, bf16 or fp16, or chunk_bytes or timeout is out of range.
  static absl::StatusOr<std::unique_ptr<RingAllReducer>> Create(RingService* inbox,
                                                                RingOptions options);
  ~RingAllReducer();
  RingAllReducer(const RingAllReducer&) = delete;
  RingAllReducer& operator=(const RingAllReducer&) = delete;

  // Installs a ring: its id (above every earlier one), the
  // members' addresses in ring order, this worker's rank; aborts of older
  // rings do not apply to it. InvalidArgument naming the value when the
  // ring_id does not rise, the list is empty or holds an empty address, or
  // the rank is out of range.
  absl::Status SetRing(int64_t ring_id, std::vector<std::string> addresses, int rank);

  // Sums x[0, n) over every member in place; every member calls it with
  // the same step and n. Steps rise from call to call on one ring. On OK
  // every member holds the same bits, each segment summed in the order
  // above; a ring of one returns x unchanged and sends nothing. Errors:
  // Unavailable naming the neighbour that cannot be reached or stays
  // silent for options.timeout; Aborted after Abort() or when a neighbour
  // is in a newer ring; InvalidArgument for a bad argument or a chunk that
  // disagrees with this member's n or chunk size (naming both);
  // FailedPrecondition before SetRing. x is then unspecified.
  absl::Status AllReduce(int64_t step, float* x, int64_t n);

  // From any thread: the AllReduce under way on ring `ring_id` or an
  // older one, and every later one until a newer ring is installed,
  // returns Aborted at once (the chief is forming a new ring). An abort
  // that arrives after SetRing of a newer ring leaves that ring alone.
  // Chunks on their way are cancelled.
  void Abort(int64_t ring_id);
  // Abort(the ring installed now).
  void Abort();

  struct Stats {
    int64_t bytes_sent = 0;          // serialized RingChunks, every attempt
    int64_t bytes_received = 0;      // serialized RingChunks used
    int64_t payload_bytes_sent = 0;  // their encoded values only
    int64_t payload_bytes_received = 0;
    int64_t messages_sent = 0;  // Send calls made (attempts)
    int64_t messages_received = 0;
    absl::Duration wall;  // the whole AllReduce
  };
  // Of the last AllReduce, whatever its outcome.
  Stats last_stats() const;

 private:
  class Pass;  // one AllReduce's state (ring_allreduce.cc)

  RingAllReducer(RingService* inbox, RingOptions options);

  RingService* const inbox_;  // borrowed
  const RingOptions options_;
  const int64_t chunk_values_;

  // The ring: SetRing and AllReduce only (the training loop's thread).
  int64_t ring_id_ = -1;
  std::vector<std::string> addresses_;
  int rank_ = 0;
  bool has_step_ = false;
  int64_t last_step_ = 0;  // the last AllReduce's step on this ring
  // [0]: to the right neighbour (clockwise), [1]: to the left one.
  std::unique_ptr<Ring::Stub> stubs_[2];
  // Kept across rings: a new ring usually has the same neighbours.
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;

  // Rings up to this id are aborted; ring_id_ as other threads see it.
  std::atomic<int64_t> aborted_through_{-1};
  std::atomic<int64_t> installed_{-1};
  bool aborted() const { return ring_id_ <= aborted_through_.load(); }

  mutable absl::Mutex stats_mu_;
  Stats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_RING_ALLREDUCE_H_
