// PsClient: talks to every parameter server at once. One RPC per ps per
// call, all in flight together (gRPC's callback API); each carries all of
// that ps's shards as raw float32 bytes, gathered from and scattered into
// the model's flat parameter vector by the shared placement.
//
// Every call retries a ps that is down or slow (UNAVAILABLE, an attempt's
// deadline) with back-off and jitter, resending the same request: a push
// keeps its request id, so a ps that already applied it answers with the
// first answer instead of applying it twice (exactly once). The total wait
// is bounded; the error then names the ps.
//
// Shared by the daemons that read or train the model's weights: the worker
// (pull, push-pull), the evaluator and the chief's export (pull only).
//
// Not thread-safe: one training loop (or the evaluator, or the chief's
// export) owns it. Message buffers are reused from call to call.
#ifndef PSCLUSTER_WIRE_PS_CLIENT_H_
#define PSCLUSTER_WIRE_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/retry.h"
#include "common/rpc.h"
#include "model/gradient_watermark.h"
#include "model/params_watermark.h"
#include "model/placement.h"
#include "proto/ps.grpc.pb.h"
#include "wire/codec.h"
#include "wire/data_plane.h"

namespace pscluster {

// The test seam for exactly-once updates: asked once per push what goes
// wrong with it. Tests install one (tests/faults/); nothing else does.
// Called from the thread that calls PushPullAll.
class PushFaults {
 public:
  enum class Fault {
    kNone,
    kLoseReply,  // the first answer is thrown away as if lost on the way back
    kDuplicate,  // the push is sent a second time (a duplicated packet)
  };
  virtual ~PushFaults() = default;
  // `push` counts this client's pushes from 1.
  virtual Fault ForPush(int64_t push) = 0;
};

struct PsClientOptions {
  RpcOptions rpc;
  // attempt_timeout bounds one RPC; the timeout given to each call bounds
  // the whole call.
  RetryPolicy retry;
  // Tests only (borrowed; outlives the client): faults to inject.
  PushFaults* faults = nullptr;
  // When set and turned true (the worker is told to stop), calls in flight
  // are cancelled and return Cancelled instead of retrying on.
  const std::atomic<bool>* stop = nullptr;
  // Sync: every ps's push is tagged with version() (the global step the
  // weights belong to), so that every ps judges a gradient computed on
  // weights of mixed versions alike: as stale.
  bool sync = false;
  // Wire encodings (wire/codec.h) of PushPullAll's gradients and of the
  // weights it pulls back; PullAll always pulls exact fp32. topk and sign
  // pushes carry error feedback: what a push left out is added to the
  // next one.
  // pull_codec int8, topk or sign: each PushPullAll pulls the change since
  // the weights this worker holds (the ps keeps a copy of them and the
  // change's error exactly), after a PullAll of the whole weights.
  CodecOptions push_codec;
  CodecOptions pull_codec;
  // The worker's index, for change pulls; -1 for readers that do not push.
  int worker_index = -1;
  // Where ps i's shards are served now: a backup promoted in a lost ps's
  // place serves them from its own address (docs/replication.md). Asked
  // for a ps that does not answer, before each retry and every 100 ms
  // while waiting to retry; an address other than the one in use moves
  // the ps's calls there at once ("" keeps it). Called from the thread
  // that makes the calls. Unset: always the cluster's addresses, and a
  // pull waits for a ps that is down to come back.
  std::function<std::string(int ps)> locate;
  // kTcp: PushPullAll's calls go over the ps's tcp data plane
  // (wire/data_plane.h), with the same retries and answers; every other
  // call stays on gRPC.
  Transport transport = TRANSPORT_GRPC;
};

class PsClient {
 public:
  // `placement` is borrowed and must outlive the client. InvalidArgument
  // when the cluster's ps count differs from the placement's.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      const ClusterSpec& cluster, const Placement* placement,
      const PsClientOptions& options = {});

  // Fills `params` (the flat vector) from every ps once each is at version
  // >= min_version and, when `generation` >= 0, holds that generation (a ps
  // not restored yet is asked again). Retries while a ps is unreachable or
  // not initialised, up to `timeout`; the error then names the ps.
  absl::Status PullAll(int64_t min_version, float* params, absl::Duration timeout,
                       int64_t generation = -1);

  // Pushes `grads` (flat), computed on the weights of versions(), to every
  // ps and fetches the weights of the next step into `params`. Sync: waits
  // until the step is applied. Aborted when a ps was restored from a
  // checkpoint meanwhile: the gradient is void and the caller pulls again.
  // last_push_applied() then tells whether the gradient was applied.
  //
  // With `overlap`, the gradient leaves while backprop still produces it:
  // over the tcp data plane each ps's shards are encoded and sent last
  // first as overlap->ready finds them final (model/gradient_watermark.h);
  // over gRPC the call waits for the whole gradient. The answer's weights
  // are written into `params` only once overlap->params_free is notified
  // (the step that reads them is done). A gradient that fails to become
  // final (GradientWatermark::Fail) fails the call with FailedPrecondition.
  //
  // Priority pulls (P3): with `arrived`, over the tcp data plane, the
  // answer's weights are written into `params` shard by shard as their
  // bytes arrive, first layers first, and each is marked in *arrived, so
  // that the next step's forward pass can start before the rest is in
  // (change pulls, which add to the weights held, are written once whole
  // and then marked). *arrived is failed when the call fails. `answered`,
  // when set, is called once (on the calling thread or one of the data
  // plane's) as soon
  // as every ps has answered, before its weights are in, with what
  // last_push_applied() will say. A weight written from an answer that was
  // then thrown away (a reply broken off or lost, and sent again) makes
  // last_pull_torn() true: a step that read the weights while they
  // arrived must be done again.
  struct Overlap {
    const GradientWatermark* ready = nullptr;
    const absl::Notification* params_free = nullptr;
    ParamsWatermark* arrived = nullptr;
    std::function<void(bool applied)> answered;
  };
  //
  // `chunk`, when >= 0, is the chunk of the epoch plan the gradient was
  // computed on: a sync step sums its gradients in chunk order
  // (PushRequest.chunk).
  absl::Status PushPullAll(int worker, int num_examples, const float* grads, float* params,
                           absl::Duration timeout, const Overlap* overlap = nullptr,
                           int64_t chunk = -1);

  // Sparse embedding tables (docs/sparse_embeddings.md): fills
  // (*rows)[i]'s values, for each ps i, from the ids it names, once ps i is
  // at version >= min_version (of `generation` when >= 0: Aborted for
  // another). Retries as PullAll does. The versions the rows are of go to
  // *row_versions.
  absl::Status PullRowsAll(int64_t min_version, int64_t generation,
                           std::vector<std::vector<SparseRows>>* rows, absl::Duration timeout,
                           std::vector<int64_t>* row_versions);
  // The sparse gradient rows every PushPullAll from now on carries to ps
  // i: (*rows)[i] (borrowed; null: none). Float32 whatever the push codec.
  void set_sparse_push(const std::vector<std::vector<SparseRows>>* rows) { sparse_push_ = rows; }
  // The ids of the rows every PushPullAll from now on asks ps i to send
  // with its answer: (*ids)[i] (borrowed; null: none), the next batch's
  // (SparseBatch::pull_ids). After a PushPullAll, TakeNextRows moves the
  // rows into (*rows)[i]'s values (rows as the ids were given) when every
  // ps sent all it was asked for; false otherwise (an older ps, or one
  // that could not read them), and then the caller pulls them itself.
  void set_sparse_next(const std::vector<std::vector<SparseRows>>* ids) { sparse_next_ = ids; }
  bool TakeNextRows(std::vector<std::vector<SparseRows>>* rows);

  // Forgets the error-feedback residual (after a restore from a checkpoint:
  // the gradients it belongs to are void).
  void ResetErrorFeedback();

  // Version of each ps's shards in `params` after the last call.
  const std::vector<int64_t>& versions() const { return versions_; }
  // The smallest of versions(): the global step the weights belong to.
  int64_t version() const;
  // The generation of `params` when every ps's agrees; -1 otherwise.
  int64_t generation() const;
  // Whether the last push's gradient was applied: ps 0's answer. In sync
  // mode every ps answers the same (ps 0 decides each step for all), but
  // for a step torn by a lost worker.
  bool last_push_applied() const { return last_push_applied_; }
  // See Overlap.
  bool last_pull_torn() const { return pull_torn_; }
  // Pushes dropped (by ps 0), and pushes the ps answered differently.
  int64_t pushes_dropped() const { return pushes_dropped_; }
  int64_t pushes_disputed() const { return pushes_disputed_; }
  // Attempts sent again (retries and injected faults), over all calls.
  int64_t resends() const { return resends_; }

  // What the last PullAll or PushPullAll cost, over every ps, whatever its
  // outcome: for the worker's metrics.
  struct CallStats {
    int64_t bytes_sent = 0;      // serialized requests, every attempt
    int64_t bytes_received = 0;  // serialized responses taken
    absl::Duration duration;     // the whole call, retries included
    // PushPullAll: the largest PushResponse.staleness over the ps.
    int64_t staleness = 0;
  };
  const CallStats& last_call() const { return last_call_; }

 private:
  PsClient() = default;
  struct PerPs;
  // Points ps i's calls at `address` (a new stub and data channel).
  void Connect(PerPs& p, const std::string& address);
  // Asks options_.locate where ps i is served now; true when it moved
  // (and its calls with it).
  bool Relocate(int i);
  struct PerPs {
    std::unique_ptr<ParameterServer::Stub> stub;
    std::string address;
    PullRequest pull_req;
    PullResponse pull_resp;
    PushRequest push_req;
    PushPullResponse push_resp;
    PullRowsRequest rows_req;
    PullRowsResponse rows_resp;
    std::unique_ptr<DataChannel> data;  // transport kTcp
    // Over the data plane, fp32 without overlap: this ps's shards as runs
    // of the flat vectors (adjacent shards merged), sent from the gradient
    // and read into the weights where they lie; and whether the last
    // answer was read into the weights so.
    std::vector<std::pair<int64_t, int64_t>> runs;  // (offset, floats)
    bool scattered = false;
    // A push streamed while backprop runs: its payload's size, and the
    // shards encoded so far (last first).
    uint64_t stream_size = 0;
    size_t shards_streamed = 0;
    TopKScratch topk;
    // The answer's shards written into the weights so far and their bytes
    // (WritePulledShards), and the first answer's `applied`.
    size_t shards_pulled = 0;
    int64_t pulled_bytes = 0;
    bool answered = false;
    bool first_applied = false;
  };
  // One PushPullAll call: its arguments and what follows from them, fixed
  // at its start, and the answers taken from each ps so far.
  struct PushCall {
    int worker = 0;
    int num_examples = 0;
    const float* grads = nullptr;
    float* params = nullptr;
    const Overlap* overlap = nullptr;
    bool streamed = false;    // over the tcp data plane while backprop runs
    bool in_place = false;    // over the tcp data plane from and into the flat vectors
    bool pull_early = false;  // priority pulls: weights written as they arrive
    bool sink = false;        // the data plane reports the answer's progress
    PushFaults::Fault fault = PushFaults::Fault::kNone;
    int64_t step = 0;     // version() when the call started
    int64_t chunk = -1;   // PushRequest.chunk; -1: none
    int64_t framing = 0;  // bytes of the data plane's frame header
    std::vector<int> answers;  // per ps
  };
  // Fills ps i's PushRequest: the gradient gathered or encoded (or, when
  // streamed, only sized), the versions, codecs and change-pull base.
  void PreparePush(int i, const PushCall& c, uint64_t request_id);
  // One attempt of one ps's call in CallAll: its deadline, its gRPC
  // context (made by Context(), for gRPC calls only), and whether it is
  // the last one issued in its round (a data-plane call may then be made
  // on the calling thread, done before issue returns).
  struct Attempt {
    absl::Time deadline;
    bool last = false;
    std::unique_ptr<grpc::ClientContext> ctx;
    DataChannel* channel = nullptr;  // set by issue for a data-plane call
    grpc::ClientContext* Context();
  };
  using IssueFn = std::function<void(int, Attempt&, std::function<void(grpc::Status)>)>;
  // Sends ps i's push (CallAll's issue): over gRPC, or the data plane,
  // streamed while backprop runs when c.streamed.
  void IssuePush(int i, const PushCall& c, Attempt& a, std::function<void(grpc::Status)> done);
  // Takes ps i's answer (CallAll's finish): its weights written into
  // c.params once the step is done with them, its versions kept;
  // Unavailable to send again (an injected fault).
  absl::Status TakePushAnswer(int i, PushCall& c);
  // After every ps answered: whether the gradient was applied, and whether
  // the ps agreed on it.
  void TallyPushOutcome(int64_t step);
  // The size of ps i's encoded push: its shards in the push codec, moving
  // statistics in fp32.
  int64_t EncodedPushBytes(int i) const;
  // The PayloadSource of ps i's streamed push.
  absl::StatusOr<size_t> StreamGradient(int i, const float* grads, const Overlap& overlap,
                                        size_t have, absl::Time deadline);
  // The PayloadSink of ps i's answer: `have` bytes of its weights are in;
  // writes the shards now whole into `params` when `write`.
  absl::Status PullArrived(int i, float* params, const Overlap& overlap, bool write,
                           size_t have);
  // Writes ps i's pulled shards, from the shards_pulled-th on, into
  // `params` while their bytes lie within `values` (the answer's so far):
  // decoded in the pull codec (moving statistics exact), added to the
  // weights held when the answer is a change (`delta`) but for shards
  // sent as fp32 values; each marked in *arrived when set.
  absl::Status WritePulledShards(int i, absl::string_view values, bool delta, float* params,
                                 ParamsWatermark* arrived);

  // Runs `issue(i, ctx, done)` for every ps at once and `finish(i)` for
  // each answer; retries the ps whose attempt failed in a retryable way or
  // whose finish() asks for it (returns Unavailable), until `timeout`.
  // `what` names the call in errors ("push to"). Starts last_call_ afresh
  // and times the whole call into it; issue() and finish() add the bytes.
  absl::Status CallAll(const std::string& what, absl::Duration timeout, const IssueFn& issue,
                       const std::function<absl::Status(int)>& finish);
  // CallAll's attempts and retries, from `start`.
  absl::Status CallAllRetrying(const std::string& what, absl::Time start,
                               absl::Duration timeout, const IssueFn& issue,
                               const std::function<absl::Status(int)>& finish);

  PsClientOptions options_;
  const Placement* placement_ = nullptr;  // borrowed
  std::vector<PerPs> ps_;
  std::vector<int64_t> versions_;
  std::vector<int64_t> generations_;
  std::vector<float> wire_;  // gather/scatter scratch
  std::unique_ptr<ErrorFeedback> feedback_;  // topk and sign pushes
  bool change_pulls_ = false;
  std::vector<int64_t> pull_base_;  // change pulls: per ps, delta_seq held
  uint64_t next_request_id_ = 0;
  bool last_push_applied_ = false;
  std::atomic<int> answered_{0};       // ps that answered this call
  std::atomic<bool> pull_torn_{false};
  int64_t pushes_dropped_ = 0;
  int64_t pushes_disputed_ = 0;
  int64_t resends_ = 0;
  int64_t pushes_sent_ = 0;
  CallStats last_call_;
  const std::vector<std::vector<SparseRows>>* sparse_push_ = nullptr;  // borrowed
  const std::vector<std::vector<SparseRows>>* sparse_next_ = nullptr;  // borrowed
};

}  // namespace pscluster

#endif  // PSCLUSTER_WIRE_PS_CLIENT_H_
