#include "update/store_state.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

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

OptimizerOptions OptimizerFromConfig(const OptimizerConfig& o) {
  OptimizerOptions out;
  out.name = o.name();
  out.learning_rate = o.learning_rate();
  out.momentum = o.momentum();
  out.beta1 = o.beta1();
  out.beta2 = o.beta2();
  out.epsilon = o.epsilon();
  out.decay_rate = o.decay_steps() > 0 ? o.decay_rate() : 1.0f;
  out.decay_steps = o.decay_steps();
  out.weight_decay = o.weight_decay();
  out.rho = o.rho();
  out.centered = o.centered();
  out.initial_accumulator_value = o.initial_accumulator_value();
  out.learning_rate_power = o.learning_rate_power();
  out.l1 = o.l1();
  out.l2 = o.l2();
  out.l2_shrinkage = o.l2_shrinkage();
  out.beta = o.beta();
  return out;
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
    } else {
      c.clipping.ranges.push_back({expected, s.size(), s.trainable_index()});
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
  c.optimizer = OptimizerFromConfig(init.optimizer());
  switch (init.nonfinite()) {
    case NONFINITE_REJECT: c.skip_nonfinite = false; break;
    case NONFINITE_SKIP_STEP: c.skip_nonfinite = true; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown non-finite policy ", init.nonfinite()));
  }
  c.generation = init.generation();
  for (const SparseTableConfig& t : init.sparse_tables()) {
    c.sparse_tables.push_back(SparseTableFromConfig(t));
  }
  const ClippingConfig& clipping = init.clipping();
  if (!(clipping.clipnorm() >= 0 && clipping.global_clipnorm() >= 0) ||
      (clipping.clipnorm() > 0 && clipping.global_clipnorm() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clipnorm ", clipping.clipnorm(), " and global_clipnorm ",
                     clipping.global_clipnorm(), ": at most one, and not negative"));
  }
  c.clipping.clipping = {clipping.clipnorm(), clipping.global_clipnorm()};
  c.clipping.num_trainable = clipping.num_trainable();
  c.clipping.num_ps = clipping.num_ps();
  if (!c.clipping.enabled()) c.clipping = StepClippingConfig();
  return c;
}

absl::Status SparseRowsFromProto(const SparseRows& rows, SparseRowsData* out) {
  out->table = rows.table();
  out->ids.assign(rows.ids().begin(), rows.ids().end());
  return BytesToFloats(rows.values(), "sparse rows", &out->values);
}

void SparseRowsToProto(const SparseRowsData& rows, SparseRows* out) {
  out->set_table(rows.table);
  out->mutable_ids()->Assign(rows.ids.begin(), rows.ids.end());
  out->set_values(rows.values.data(), rows.values.size() * sizeof(float));
}

StepDecision DecisionFromRequest(const StepCommitRequest& req) {
  StepDecision d;
  d.layout_fingerprint = req.layout_fingerprint();
  d.generation = req.generation();
  d.version = req.version();
  d.members.assign(req.members().begin(), req.members().end());
  d.skip = req.skip();
  d.decider_epoch = req.decider_epoch();
  d.clipped = req.clipped();
  d.clip_scales.assign(req.clip_scales().begin(), req.clip_scales().end());
  return d;
}

void DecisionToRequest(const StepDecision& d, StepCommitRequest* out) {
  out->set_layout_fingerprint(d.layout_fingerprint);
  out->set_generation(d.generation);
  out->set_version(d.version);
  for (bool m : d.members) out->add_members(m);
  out->set_skip(d.skip);
  out->set_decider_epoch(d.decider_epoch);
  out->set_clipped(d.clipped);
  out->mutable_clip_scales()->Assign(d.clip_scales.begin(), d.clip_scales.end());
}

SparseTableOptions SparseTableFromConfig(const SparseTableConfig& t) {
  SparseTableOptions o;
  o.name = t.variable();
  o.table = t.table();
  o.width = t.width();
  o.input_dim = t.input_dim();
  const InitializerConfig& i = t.initializer();
  o.initializer.kind = static_cast<Initializer::Kind>(i.kind());
  o.initializer.value = i.value();
  o.initializer.scale = i.scale();
  o.initializer.mode = static_cast<Initializer::Mode>(i.mode());
  o.initializer.distribution = static_cast<Initializer::Distribution>(i.distribution());
  o.initializer.mean = i.mean();
  o.initializer.stddev = i.stddev();
  o.initializer.minval = i.minval();
  o.initializer.maxval = i.maxval();
  o.fan_in = t.fan_in();
  o.fan_out = t.fan_out();
  o.seed = t.seed();
  const SparseOptimizerConfig& p = t.optimizer();
  o.optimizer.name = p.name();
  o.optimizer.learning_rate = p.learning_rate();
  o.optimizer.epsilon = p.epsilon();
  o.optimizer.initial_accumulator_value = p.initial_accumulator_value();
  o.optimizer.beta1 = p.beta1();
  o.optimizer.beta2 = p.beta2();
  o.optimizer.learning_rate_power = p.learning_rate_power();
  o.optimizer.l1_regularization_strength = p.l1_regularization_strength();
  o.optimizer.l2_regularization_strength = p.l2_regularization_strength();
  o.optimizer.l2_shrinkage_regularization_strength = p.l2_shrinkage_regularization_strength();
  o.optimizer.beta = p.beta();
  o.optimizer.decay_rate = p.decay_steps() > 0 ? p.decay_rate() : 1.0f;
  o.optimizer.decay_steps = p.decay_steps();
  o.admit_after = t.admit_after();
  o.evict_after = t.evict_after();
  return o;
}

void SparseTableToConfig(const SparseTableOptions& o, SparseTableConfig* t) {
  t->set_variable(o.name);
  t->set_table(o.table);
  t->set_width(o.width);
  t->set_input_dim(o.input_dim);
  InitializerConfig* i = t->mutable_initializer();
  i->set_kind(static_cast<int>(o.initializer.kind));
  i->set_value(o.initializer.value);
  i->set_scale(o.initializer.scale);
  i->set_mode(static_cast<int>(o.initializer.mode));
  i->set_distribution(static_cast<int>(o.initializer.distribution));
  i->set_mean(o.initializer.mean);
  i->set_stddev(o.initializer.stddev);
  i->set_minval(o.initializer.minval);
  i->set_maxval(o.initializer.maxval);
  t->set_fan_in(o.fan_in);
  t->set_fan_out(o.fan_out);
  t->set_seed(o.seed);
  SparseOptimizerConfig* p = t->mutable_optimizer();
  p->set_name(o.optimizer.name);
  p->set_learning_rate(o.optimizer.learning_rate);
  p->set_epsilon(o.optimizer.epsilon);
  p->set_initial_accumulator_value(o.optimizer.initial_accumulator_value);
  p->set_beta1(o.optimizer.beta1);
  p->set_beta2(o.optimizer.beta2);
  p->set_learning_rate_power(o.optimizer.learning_rate_power);
  p->set_l1_regularization_strength(o.optimizer.l1_regularization_strength);
  p->set_l2_regularization_strength(o.optimizer.l2_regularization_strength);
  p->set_l2_shrinkage_regularization_strength(o.optimizer.l2_shrinkage_regularization_strength);
  p->set_beta(o.optimizer.beta);
  p->set_decay_rate(o.optimizer.decay_rate);
  p->set_decay_steps(o.optimizer.decay_steps);
  t->set_admit_after(o.admit_after);
  t->set_evict_after(o.evict_after);
}

namespace {

// `given` (the floats not kept, in order) and the kept ranges of `own`,
// as `num_floats` floats.
absl::Status MergeOne(const std::vector<float>& own,
                      const google::protobuf::RepeatedPtrField<KeptRange>& kept, int64_t num_floats,
                      const char* what, std::vector<float>* given) {
  std::vector<float> out(num_floats);
  int64_t at = 0, next = 0;  // in `out`, and in `given`
  auto take_given = [&](int64_t upto) -> absl::Status {
    const int64_t n = upto - at;
    if (next + n > static_cast<int64_t>(given->size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", given->size(), " floats sent; the layout needs more"));
    }
    std::copy(given->begin() + next, given->begin() + next + n, out.begin() + at);
    next += n;
    at = upto;
    return absl::OkStatus();
  };
  for (const KeptRange& r : kept) {
    if (r.size() <= 0 || r.to() < at || r.to() + r.size() > num_floats || r.from() < 0 ||
        r.from() + r.size() > static_cast<int64_t>(own.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": kept range [", r.from(), ", +", r.size(), ") to ", r.to(),
                       " is out of order or past the ", own.size(), " floats held or the ",
                       num_floats, " of the layout"));
    }
    PSCLUSTER_RETURN_IF_ERROR(take_given(r.to()));
    std::copy(own.begin() + r.from(), own.begin() + r.from() + r.size(), out.begin() + at);
    at += r.size();
  }
  PSCLUSTER_RETURN_IF_ERROR(take_given(num_floats));
  if (next != static_cast<int64_t>(given->size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", given->size(), " floats sent; the layout takes ", next));
  }
  *given = std::move(out);
  return absl::OkStatus();
}

}  // namespace

absl::Status MergeKept(const StoreState& own,
                       const google::protobuf::RepeatedPtrField<KeptRange>& kept,
                       int64_t num_floats, StoreState* state) {
  PSCLUSTER_RETURN_IF_ERROR(MergeOne(own.values, kept, num_floats, "values", &state->values));
  for (OptimizerSlot& slot : state->optimizer.slots) {
    auto mine = std::find_if(own.optimizer.slots.begin(), own.optimizer.slots.end(),
                             [&](const OptimizerSlot& o) { return o.name == slot.name; });
    if (mine == own.optimizer.slots.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot \"", slot.name, "\": this ps's optimizer has no such slot"));
    }
    const std::string what = absl::StrCat("slot \"", slot.name, "\"");
    PSCLUSTER_RETURN_IF_ERROR(MergeOne(mine->values, kept, num_floats, what.c_str(), &slot.values));
  }
  return absl::OkStatus();
}

absl::StatusOr<StoreState> StoreStateFromProto(const ShardState& state) {
  StoreState snap;
  PSCLUSTER_RETURN_IF_ERROR(BytesToFloats(state.values(), "values", &snap.values));
  snap.version = state.version();
  snap.generation = state.generation();
  snap.applied_digest = state.applied_digest();
  snap.pushes_applied = state.pushes_applied();
  snap.steps_applied = state.steps_applied();
  snap.optimizer.iterations = state.optimizer_iterations();
  for (const AnsweredPush& a : state.answered()) {
    StoreState::Answered x;
    x.worker = a.worker();
    x.request_id = a.request_id();
    x.result.applied = a.applied();
    x.result.version = a.version();
    x.result.staleness = a.staleness();
    snap.answered.push_back(x);
  }
  for (const SyncOutcome& o : state.outcomes()) snap.outcomes.push_back({o.version(), o.applied()});
  snap.recent_chunks.assign(state.recent_chunks().begin(), state.recent_chunks().end());
  snap.recent_chunks_since = state.recent_chunks_since();
  snap.decider_epoch = state.decider_epoch();
  snap.primary_term = state.primary_term();
  for (const SlotValues& v : state.slots()) {
    OptimizerSlot slot;
    slot.name = v.name();
    PSCLUSTER_RETURN_IF_ERROR(BytesToFloats(v.values(), "slot values", &slot.values));
    snap.optimizer.slots.push_back(std::move(slot));
  }
  for (const SparseTableState& t : state.sparse()) {
    SparseTable::Rows rows;
    rows.ids.assign(t.ids().begin(), t.ids().end());
    rows.last_update.assign(t.last_update().begin(), t.last_update().end());
    if (absl::Status s = BytesToFloats(t.rows(), "sparse table rows", &rows.rows); !s.ok()) {
      return s;
    }
    snap.sparse.push_back(std::move(rows));
  }
  return snap;
}

void StoreStateToProto(const StoreState& snap, ShardState* out) {
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
  for (const StoreState::Answered& a : snap.answered) {
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
  out->mutable_recent_chunks()->Assign(snap.recent_chunks.begin(), snap.recent_chunks.end());
  out->set_recent_chunks_since(snap.recent_chunks_since);
  out->set_decider_epoch(snap.decider_epoch);
  out->set_primary_term(snap.primary_term);
  out->clear_sparse();
  for (size_t t = 0; t < snap.sparse.size(); ++t) {
    const SparseTable::Rows& rows = snap.sparse[t];
    SparseTableState* x = out->add_sparse();
    x->set_table(static_cast<int>(t));
    x->mutable_ids()->Assign(rows.ids.begin(), rows.ids.end());
    x->mutable_last_update()->Assign(rows.last_update.begin(), rows.last_update.end());
    x->set_rows(rows.rows.data(), rows.rows.size() * sizeof(float));
    if (!rows.ids.empty()) {
      x->set_floats_per_row(static_cast<int64_t>(rows.rows.size() / rows.ids.size()));
    }
  }
}

}  // namespace pscluster
