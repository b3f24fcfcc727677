// PsSetup: what every ps of the run is set up with (its shards of the
// placement, the optimizer, the sync/async rule and its parameters), as the
// InitRequest that Init and Restore carry; and InitialiseAll, the start-up
// step that gives every ps its part of the initial weights, or finds it
// initialised already (a restarted chief keeps the ps's parameters).
//
// Plain data and functions; InitialiseAll makes its calls through the fleet
// one ps after the other.
#ifndef PSCLUSTER_CHIEF_PS_SETUP_H_
#define PSCLUSTER_CHIEF_PS_SETUP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chief/ps_fleet.h"
#include "model/placement.h"
#include "proto/ps.pb.h"

namespace pscluster {

struct PsSetup {
  const Placement* placement = nullptr;  // borrowed
  OptimizerConfig optimizer;
  UpdateMode mode = SYNC;
  int num_workers = 0;
  int replicas_to_aggregate = 0;  // sync: gradients per step
  NonFinitePolicy nonfinite = NONFINITE_REJECT;
  std::vector<SparseTableConfig> sparse_tables;  // the same for every ps
  // Sync: the clipping every ps takes part in (ClippingConfig; its
  // num_trainable and num_ps are filled in here).
  double clipnorm = 0;
  double global_clipnorm = 0;
  // The chief adds and drains ps (--min_ps): a ps stopped waits to be
  // drained (InitRequest.drain_on_stop).
  bool drain_on_stop = false;
};

// The InitRequest of ps `ps` without values (RestoreRequest.init as is).
InitRequest MakeInitRequest(const PsSetup& setup, int ps);

// What InitialiseAll found.
struct PsStart {
  bool resumed = false;                // some ps was initialised already
  int64_t generation = 0;              // the highest any ps holds
  int64_t highest_version = 0;         // the highest any ps is at
  std::vector<uint64_t> incarnations;  // each ps's process identity
};

// Sends every ps its Init with its part of `initial` (the flat vector),
// each retried for up to `timeout`, and logs what each holds.
absl::StatusOr<PsStart> InitialiseAll(PsFleet* fleet, const PsSetup& setup,
                                      const std::vector<float>& initial, absl::Duration timeout);

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_PS_SETUP_H_
