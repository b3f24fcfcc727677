#include "update/store_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace pscluster {

absl::Status BytesToFloats(absl::string_view bytes, const char* what, std::vector<float>* out) {
  if (bytes.size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", bytes.size(), " bytes, not a whole number of float32s"));
  }
  out->resize(bytes.size() / sizeof(float));
  if (!bytes.empty()) std::memcpy(out->data(), bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::StatusOr<StoreConfig> StoreConfigFromInit(const InitRequest& init, int64_t num_floats,
                                                StepRole role) {
  StoreConfig c;
  c.step_role = role;
  c.layout_fingerprint = init.layout_fingerprint();
  c.num_floats = num_floats;
  int64_t expected = 0;
  for (const ShardSpec& s : init.shards()) {
    if (s.size() < 0 || s.size() > c.num_floats - expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard ", s.variable(), " has size ", s.size(), ": the shards must add up to the ",
          c.num_floats, " values"));
    }
    if (s.moving_statistic()) {
      c.moving_statistics.push_back({expected, s.size(), s.momentum()});
    }
    expected += s.size();
  }
  if (expected != c.num_floats) {
    return absl::InvalidArgumentError(absl::StrCat("shards add up to ", expected,
                                                   " floats but values hold ", c.num_floats));
  }
  switch (init.mode()) {
    case SYNC: c.rule = UpdateRule::kSync; break;
    case ASYNC: c.rule = UpdateRule::kAsync; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown update mode ", init.mode()));
  }
  c.num_workers = init.num_workers();
  c.replicas_to_aggregate = init.replicas_to_aggregate();
  const OptimizerConfig& o = init.optimizer();
  c.optimizer.name = o.name();
  c.optimizer.learning_rate = o.learning_rate();
  c.optimizer.momentum = o.momentum();
  c.optimizer.beta1 = o.beta1();
  c.optimizer.beta2 = o.beta2();
  c.optimizer.epsilon = o.epsilon();
  c.optimizer.decay_rate = o.decay_steps() > 0 ? o.decay_rate() : 1.0f;
  c.optimizer.decay_steps = o.decay_steps();
  switch (init.nonfinite()) {
    case NONFINITE_REJECT: c.skip_nonfinite = false; break;
    case NONFINITE_SKIP_STEP: c.skip_nonfinite = true; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown non-finite policy ", init.nonfinite()));
  }
  c.generation = init.generation();
  return c;
}

absl::StatusOr<StoreSnapshot> StoreSnapshotFromState(const ShardState& state) {
  StoreSnapshot snap;
  if (absl::Status s = BytesToFloats(state.values(), "values", &snap.values); !s.ok()) return s;
  snap.version = state.version();
  snap.generation = state.generation();
  snap.applied_digest = state.applied_digest();
  snap.pushes_applied = state.pushes_applied();
  snap.steps_applied = state.steps_applied();
  snap.optimizer.iterations = state.optimizer_iterations();
  for (const AnsweredPush& a : state.answered()) {
    StoreSnapshot::Answered x;
    x.worker = a.worker();
    x.request_id = a.request_id();
    x.result.applied = a.applied();
    x.result.version = a.version();
    x.result.staleness = a.staleness();
    snap.answered.push_back(x);
  }
  for (const SyncOutcome& o : state.outcomes()) snap.outcomes.push_back({o.version(), o.applied()});
  for (const SlotValues& v : state.slots()) {
    OptimizerSlot slot;
    slot.name = v.name();
    if (absl::Status s = BytesToFloats(v.values(), "slot values", &slot.values); !s.ok()) return s;
    snap.optimizer.slots.push_back(std::move(slot));
  }
  return snap;
}

void StoreSnapshotToState(const StoreSnapshot& snap, ShardState* out) {
  out->set_version(snap.version);
  out->set_generation(snap.generation);
  out->set_applied_digest(snap.applied_digest);
  out->set_pushes_applied(snap.pushes_applied);
  out->set_steps_applied(snap.steps_applied);
  out->set_values(snap.values.data(), snap.values.size() * sizeof(float));
  out->clear_slots();
  for (const OptimizerSlot& slot : snap.optimizer.slots) {
    SlotValues* v = out->add_slots();
    v->set_name(slot.name);
    v->set_values(slot.values.data(), slot.values.size() * sizeof(float));
  }
  out->set_optimizer_iterations(snap.optimizer.iterations);
  out->clear_answered();
  for (const StoreSnapshot::Answered& a : snap.answered) {
    AnsweredPush* x = out->add_answered();
    x->set_worker(a.worker);
    x->set_request_id(a.request_id);
    x->set_applied(a.result.applied);
    x->set_version(a.result.version);
    x->set_staleness(a.result.staleness);
  }
  out->clear_outcomes();
  for (const auto& [version, applied] : snap.outcomes) {
    SyncOutcome* o = out->add_outcomes();
    o->set_version(version);
    o->set_applied(applied);
  }
}

}  // namespace pscluster
