#include "chief/ps_setup.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace pscluster {

InitRequest MakeInitRequest(const PsSetup& setup, int ps) {
  const Placement& placement = *setup.placement;
  InitRequest req;
  req.set_layout_fingerprint(placement.fingerprint);
  // Each trainable variable's index, in model order (its parts share it).
  std::map<std::string, int> trainable;
  for (const Shard& sh : placement.shards) {
    if (!sh.moving_statistic) trainable.emplace(sh.variable, static_cast<int>(trainable.size()));
  }
  for (int s : placement.shards_of_ps[ps]) {
    const Shard& sh = placement.shards[s];
    ShardSpec* spec = req.add_shards();
    if (!sh.moving_statistic) spec->set_trainable_index(trainable.at(sh.variable));
    spec->set_variable(sh.variable);
    spec->set_part(sh.part);
    spec->set_offset(sh.offset);
    spec->set_size(sh.size);
    spec->set_moving_statistic(sh.moving_statistic);
    spec->set_momentum(sh.momentum);
  }
  *req.mutable_optimizer() = setup.optimizer;
  req.set_mode(setup.mode);
  req.set_num_workers(setup.num_workers);
  req.set_replicas_to_aggregate(setup.replicas_to_aggregate);
  req.set_nonfinite(setup.nonfinite);
  req.set_drain_on_stop(setup.drain_on_stop);
  for (const SparseTableConfig& t : setup.sparse_tables) *req.add_sparse_tables() = t;
  if (setup.mode == SYNC && (setup.clipnorm > 0 || setup.global_clipnorm > 0)) {
    ClippingConfig* c = req.mutable_clipping();
    c->set_clipnorm(setup.clipnorm);
    c->set_global_clipnorm(setup.global_clipnorm);
    c->set_num_trainable(static_cast<int>(trainable.size()));
    c->set_num_ps(placement.num_ps);
  }
  return req;
}

absl::StatusOr<PsStart> InitialiseAll(PsFleet* fleet, const PsSetup& setup,
                                      const std::vector<float>& initial, absl::Duration timeout) {
  const Placement& placement = *setup.placement;
  PsStart start;
  for (int i = 0; i < fleet->num_ps(); ++i) {
    InitRequest req = MakeInitRequest(setup, i);
    std::vector<float> wire(placement.floats_of_ps[i]);
    GatherForPs(placement, i, initial.data(), wire.data());
    req.set_values(wire.data(), wire.size() * sizeof(float));
    absl::StatusOr<InitResponse> resp = fleet->Init(i, req, timeout);
    if (!resp.ok()) return resp.status();
    start.resumed |= resp->already_initialized();
    start.generation = std::max(start.generation, resp->generation());
    start.highest_version = std::max(start.highest_version, resp->version());
    spdlog::info("ps:{} holds {} shards, {} parameters{}", i, placement.shards_of_ps[i].size(),
                 placement.floats_of_ps[i],
                 resp->already_initialized() ? absl::StrCat(" (already initialised, at version ",
                                                            resp->version(), ": kept)")
                                             : "");
    absl::StatusOr<PsStatsResponse> st = fleet->Stats(i, absl::Seconds(10));
    if (!st.ok()) return st.status();
    start.incarnations.push_back(st->incarnation());
  }
  return start;
}

}  // namespace pscluster
