#include "update/model_replica.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/status_macros.h"
#include "update/store_state.h"

namespace pscluster {

absl::StatusOr<ShardState> ModelReplica::InitialState(const InitRequest& setup,
                                                 const std::vector<float>& values) {
  absl::StatusOr<StoreConfig> config =
      StoreConfigFromInit(setup, static_cast<int64_t>(values.size()), StepRole::kDecide);
  if (!config.ok()) return config.status();
  ParameterStore store(1);
  bool already = false;
  PSCLUSTER_RETURN_IF_ERROR(store.Init(*config, values.data(), &already));
  StoreState snap;
  PSCLUSTER_RETURN_IF_ERROR(store.Snapshot(setup.layout_fingerprint(), &snap));
  ShardState state;
  state.set_layout_fingerprint(setup.layout_fingerprint());
  *state.mutable_shards() = setup.shards();
  StoreStateToProto(snap, &state);
  return state;
}

absl::Status ModelReplica::Restore(const InitRequest& setup, const ShardState& state) {
  if (state.layout_fingerprint() != setup.layout_fingerprint()) {
    return absl::InvalidArgumentError(absl::StrCat("the state's layout ", state.layout_fingerprint(),
                                                   " differs from the plan's replica layout ",
                                                   setup.layout_fingerprint()));
  }
  absl::StatusOr<StoreState> snap = StoreStateFromProto(state);
  if (!snap.ok()) return snap.status();
  absl::StatusOr<StoreConfig> config = StoreConfigFromInit(
      setup, static_cast<int64_t>(snap->values.size()), StepRole::kDecide);
  if (!config.ok()) return config.status();
  if (config->rule != UpdateRule::kAsync || config->num_workers != 1) {
    return absl::InvalidArgumentError(
        "a replica's setup must be the async rule with one writer (TrainingPlan.replica)");
  }
  absl::MutexLock l(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(store_.Restore(*config, *snap));
  setup_ = setup;
  setup_.clear_values();
  generation_ = snap->generation;
  num_floats_ = static_cast<int64_t>(snap->values.size());
  has_state_ = true;
  return absl::OkStatus();
}

bool ModelReplica::has_state() const {
  absl::MutexLock l(&mu_);
  return has_state_;
}

int64_t ModelReplica::step() const {
  if (!has_state()) return -1;
  return store_.stats().version;
}

absl::Status ModelReplica::Apply(float* sum, int64_t total_examples, float* params,
                                 const GradientClipping& clipping,
                                 const std::vector<GradientRange>& ranges) {
  uint64_t fingerprint;
  int64_t generation, count;
  {
    absl::MutexLock l(&mu_);
    if (!has_state_) return absl::UnavailableError("the replica holds no state yet");
    fingerprint = setup_.layout_fingerprint();
    generation = generation_;
    count = num_floats_;
  }
  if (total_examples <= 0 || total_examples > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("a step of ", total_examples, " examples: not a gradient to apply"));
  }
  const float inv = 1.0f / static_cast<float>(total_examples);
  for (int64_t i = 0; i < count; ++i) sum[i] *= inv;
  if (clipping.enabled()) ClipGradient(clipping, ranges, sum);
  PushArgs args;
  args.layout_fingerprint = fingerprint;
  args.worker = 0;
  args.version = store_.stats().version;
  args.num_examples = static_cast<int>(total_examples);
  args.gradients = sum;
  args.num_floats = count;
  args.generation = generation;
  absl::StatusOr<PushResult> pushed = store_.Push(args);
  if (!pushed.ok()) return pushed.status();
  return CopyWeights(params);
}

absl::Status ModelReplica::CopyWeights(float* params) {
  uint64_t fingerprint;
  {
    absl::MutexLock l(&mu_);
    fingerprint = setup_.layout_fingerprint();
  }
  int64_t version = 0;
  if (absl::Status s = store_.Pull(fingerprint, 0, absl::Now(), &pulled_, &version); !s.ok()) {
    return s;
  }
  std::memcpy(params, pulled_.data(), pulled_.size());
  return absl::OkStatus();
}

absl::StatusOr<ShardState> ModelReplica::State(const ReplicaRequest& request) const {
  InitRequest setup;
  {
    absl::MutexLock l(&mu_);
    if (!has_state_) return absl::UnavailableError("the replica holds no state yet");
    setup = setup_;
  }
  StoreState snap;
  PSCLUSTER_RETURN_IF_ERROR(store_.Snapshot(setup.layout_fingerprint(), &snap));
  if (snap.version != request.step() && !(request.at_least() && snap.version > request.step())) {
    return absl::FailedPreconditionError(absl::StrCat("the replica is at step ", snap.version,
                                                      ", not ", request.at_least() ? "at least " : "",
                                                      request.step()));
  }
  if (request.values_only()) snap.optimizer.slots.clear();
  ShardState state;
  state.set_layout_fingerprint(setup.layout_fingerprint());
  *state.mutable_shards() = setup.shards();
  StoreStateToProto(snap, &state);
  return state;
}

uint32_t ModelReplica::Digest() const {
  InitRequest setup;
  {
    absl::MutexLock l(&mu_);
    if (!has_state_) return 0;
    setup = setup_;
  }
  StoreState snap;
  if (!store_.Snapshot(setup.layout_fingerprint(), &snap).ok()) return 0;
  return crc32c::Value(snap.values.data(), snap.values.size() * sizeof(float));
}

}  // namespace pscluster
