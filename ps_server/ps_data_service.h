// PsDataService: the workers' data path of a ps (proto/ps.proto's
// ParameterServer service): pulls of the weights and of sparse rows, pushes
// of gradients, the push-pull of a step, and the ps's stats (which tell a
// worker where the tcp data plane listens). It converts messages and
// statuses, encodes and decodes the wire codecs, keeps each worker's base
// for change pulls, and counts refused pushes (one counter for every
// reason, in GetStats and /metrics); every rule lives in the store.
// Thread-safe; the shard (ps_shard.h) is borrowed and must outlive it.
#ifndef PSCLUSTER_PS_SERVER_PS_DATA_SERVICE_H_
#define PSCLUSTER_PS_SERVER_PS_DATA_SERVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/ps_shard.h"
#include "update/parameter_store.h"
#include "wire/codec.h"

namespace pscluster {

class PsDataService final : public ParameterServer::Service {
 public:
  explicit PsDataService(PsShard* shard) : shard_(shard) {}

  grpc::Status Pull(grpc::ServerContext*, const PullRequest*, PullResponse*) override;
  grpc::Status Push(grpc::ServerContext*, const PushRequest*, PushResponse*) override;
  // Rows of the sparse tables this ps holds (ParameterStore::PullRows).
  grpc::Status PullRows(grpc::ServerContext*, const PullRowsRequest*, PullRowsResponse*) override;
  grpc::Status PushPull(grpc::ServerContext*, const PushRequest*, PushPullResponse*) override;
  grpc::Status GetStats(grpc::ServerContext*, const PsStatsRequest*, PsStatsResponse*) override;

  // Sets /metrics' gauges of each sparse table's rows and bytes (every
  // kTableGaugeEvery versions).
  void SetTableGauges();
  static constexpr int64_t kTableGaugeEvery = 64;

  // PushPull without gRPC: the tcp data plane's (ps_server/data_plane_server.h)
  // handler, after its own token check. The pull waits until `deadline`.
  // What the data plane knows beyond the request, and what it takes back
  // beside the response.
  struct DataPlaneCall {
    // In: whether req.gradients are all finite, when they are fp32 in the
    // store's order (GradientsAsSent) and were checked as they arrived.
    std::optional<bool> gradients_finite;
    // In: fp32 gradients in the store's order read here instead of into
    // req.gradients (then empty), so that a sync store takes them without
    // a copy (PushArgs::owned); it may leave another buffer, of any size
    // and contents, in their place. Null: the gradients are req's.
    std::vector<float>* gradients = nullptr;
    // Out: an fp32 answer's values, not copied into resp but shared with
    // the store (ParameterStore::PullShared), to be sent as
    // resp.pull.values and then let go of.
    ParameterStore::SharedValues weights;
  };
  grpc::Status DoPushPull(const PushRequest& req, absl::Time deadline, PushPullResponse* resp,
                          DataPlaneCall* call = nullptr);
  // The sparse rows req.next_rows names into resp->next_rows, at version
  // >= min_version of the push's generation; none when the store cannot
  // give them (the push already stands: the worker pulls them itself).
  void PullNextRows(const PushRequest& req, int64_t min_version, absl::Time deadline,
                    PushPullResponse* resp);
  // The rows `ids` names (ids only, per table) into *out, in their order,
  // at the store's version once it is at least min_version
  // (ParameterStore::PullRows, whose errors it returns), counting the
  // bytes pulled. PullRows and PullNextRows read rows through it.
  absl::Status ReadRows(uint64_t layout_fingerprint,
                        const google::protobuf::RepeatedPtrField<SparseRows>& ids,
                        int64_t min_version, absl::Time deadline, int64_t generation,
                        google::protobuf::RepeatedPtrField<SparseRows>* out, int64_t* version,
                        int64_t* out_generation = nullptr);
  // Whether req's gradients are fp32 in this ps's shard order: used where
  // they lie, not decoded.
  static bool GradientsAsSent(const PushRequest& req);
  // For fp32 gradients sent last shard first (a push streamed during
  // backprop, shards_reversed): where each shard's values go in this ps's
  // order, as (offset, size) in floats, in the order they are sent, so
  // that they can be read into place as they arrive. Empty when req's
  // gradients are not fp32 shards sent reversed or `payload_bytes` is not
  // their size.
  std::vector<std::pair<int64_t, int64_t>> ReversedRuns(const PushRequest& req,
                                                        uint64_t payload_bytes);

 private:
  // `finite` and `owned`: DataPlaneCall::gradients_finite and ::gradients.
  grpc::Status DoPush(const PushRequest& req, PushResponse* resp,
                      std::optional<bool> finite = std::nullopt,
                      std::vector<float>* owned = nullptr);
  // How a pull's answer is encoded (PullRequest / PushRequest fields).
  struct PullEncoding {
    std::string dtype;  // empty: fp32
    int64_t min_elements = 0;
    int worker = -1;     // -1: not a worker (no change pulls)
    bool reset = false;  // PullRequest.delta_reset
    int64_t base = 0;    // PushRequest.pull_base
  };
  // The weights into resp, encoded as `enc` says, waiting for min_version
  // until `deadline`; fp32 weights into *weights instead when it is set
  // (DoPushPull's).
  grpc::Status DoPull(absl::Time deadline, uint64_t fingerprint, int64_t min_version,
                      int64_t generation, const PullEncoding& enc, PullResponse* resp,
                      ParameterStore::SharedValues* weights = nullptr);
  // Change pulls: the change from the weights `enc.worker` holds to `w`
  // (n values) into resp, keeping what it will hold (a shadow of its
  // weights) and the answer, for a resend. False when there is no common
  // base: the shadow is then `w`, and the answer must be `w` in fp32.
  bool EncodeChange(const PullEncoding& enc, const CodecOptions& codec, const float* w, int64_t n,
                    PullResponse* resp);

  PsShard* const shard_;
  ParameterStore* const store_ = shard_->store();
  Metrics* const metrics_ = shard_->metrics();

  // Per worker that pulls changes: the weights it holds once it applied
  // answer `seq`, and that answer.
  struct ChangeState {
    absl::Mutex mu;
    int64_t seq ABSL_GUARDED_BY(mu) = 0;
    std::vector<float> shadow ABSL_GUARDED_BY(mu);
    std::string last ABSL_GUARDED_BY(mu);  // answer `seq`'s values, when a change
    int64_t last_version ABSL_GUARDED_BY(mu) = 0;
    int64_t last_generation ABSL_GUARDED_BY(mu) = 0;
    std::vector<float> scratch ABSL_GUARDED_BY(mu);  // EncodeChange's
  };
  ChangeState* Changes(int worker);
  absl::Mutex changes_mu_;
  std::map<int, std::unique_ptr<ChangeState>> changes_ ABSL_GUARDED_BY(changes_mu_);

  // Buffers that encoded or reordered pushes are decoded into, reused from
  // push to push (a fresh one is faulted in page by page every time: 80 MB
  // is 20,000 pages). A push takes one, hands it to the store, which swaps
  // it with the one it held (PushArgs::owned), and gives back what it got.
  // As many are kept as pushes were decoded at once, up to kKeptBuffers.
  std::vector<float> TakeBuffer();
  void GiveBuffer(std::vector<float> buffer);
  static constexpr size_t kKeptBuffers = 4;
  absl::Mutex buffers_mu_;
  std::vector<std::vector<float>> buffers_ ABSL_GUARDED_BY(buffers_mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVER_PS_DATA_SERVICE_H_
