#include "wire/ring_client.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/status_macros.h"

namespace pscluster {

RingClient::RingClient(const ClusterSpec& cluster, const std::atomic<bool>* stop)
    : stop_(stop) {
  for (int index : cluster.task_indices(kWorkerJob)) {
    addresses_.push_back(*cluster.address(kWorkerJob, index));
    stubs_.push_back(Ring::NewStub(MakeChannel(addresses_.back())));
  }
}

absl::Status RingClient::CheckRank(int rank) const {
  if (rank >= 0 && rank < num_workers()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("worker rank ", rank, " is not in this cluster of ", num_workers()));
}

absl::StatusOr<ShardState> RingClient::Fetch(int rank, const ReplicaRequest& request,
                                                absl::Duration timeout) {
  PSCLUSTER_RETURN_IF_ERROR(CheckRank(rank));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  ShardState state;
  grpc::Status s = stubs_[rank]->GetReplica(&ctx, request, &state);
  if (!s.ok()) {
    return FromGrpcStatus(s, absl::StrCat("reading the replica of worker ", rank, " (",
                                          addresses_[rank], ")"));
  }
  return state;
}

absl::Status RingClient::Abort(int rank, int64_t ring_id, absl::Duration timeout) {
  PSCLUSTER_RETURN_IF_ERROR(CheckRank(rank));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  RingAbortRequest request;
  request.set_ring_id(ring_id);
  RingAck ack;
  return FromGrpcStatus(stubs_[rank]->Abort(&ctx, request, &ack),
                        absl::StrCat("aborting ring ", ring_id, " at worker ", rank, " (",
                                     addresses_[rank], ")"));
}

absl::Status RingClient::ReadWeights(int64_t min_step, absl::Duration timeout,
                                        std::vector<float>* params, int64_t* step) {
  ReplicaRequest request;
  request.set_step(min_step);
  request.set_at_least(true);
  request.set_values_only(true);
  const absl::Time give_up = absl::Now() + timeout;
  absl::Status last = absl::UnavailableError("no worker asked yet");
  while (true) {
    for (int rank = 0; rank < num_workers(); ++rank) {
      if (stop_ != nullptr && *stop_) return absl::CancelledError("stop requested");
      absl::StatusOr<ShardState> state = Fetch(rank, request, absl::Seconds(30));
      if (!state.ok()) {
        last = state.status();
        continue;
      }
      if (state->values().size() != params->size() * sizeof(float)) {
        return absl::DataLossError(absl::StrCat("worker ", rank, "'s replica holds ",
                                                state->values().size() / sizeof(float),
                                                " values; the model has ", params->size()));
      }
      std::memcpy(params->data(), state->values().data(), state->values().size());
      *step = state->version();
      return absl::OkStatus();
    }
    if (absl::Now() >= give_up) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return absl::DeadlineExceededError(absl::StrCat("no worker's replica reached step ", min_step,
                                                  " within ", absl::FormatDuration(timeout),
                                                  " (last: ", last.message(), ")"));
}

}  // namespace pscluster
