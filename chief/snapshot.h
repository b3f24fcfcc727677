// Snapshot: what the chief keeps of a checkpoint (every ps's state at one
// consistent cut, the data position and the generation), and its encoding
// as a checkpoint file's tensors and metadata (model/checkpoint.h):
//
//   tensors   ps<i>/values, ps<i>/slot/<name>   (float32, flat)
//             ps<i>/sparse<t>/ids                (int64 [n], increasing)
//             ps<i>/sparse<t>/rows               (float32 [n, floats_per_row]:
//                                                 each row's values, then slots)
//             ps<i>/sparse<t>/last_update        (int64 [n], one per id)
//   metadata  model, mode, generation, done_chunks, chunks_per_epoch,
//             num_ps, run_started_unix_ms, ps<i>/version,
//             ps<i>/optimizer_iterations, ps<i>/layout,
//             ps<i>/sparse_tables (how many: t in [0, it)),
//             ps<i>/sparse<t>/table (the SparseTableState's table number)
//
// The sparse tensors are ShardState.sparse, the rows of the model's sparse
// embedding tables that ps i holds (docs/sparse_embeddings.md).
//
// Pure functions, no I/O: thread-safe.
#ifndef PSCLUSTER_CHIEF_SNAPSHOT_H_
#define PSCLUSTER_CHIEF_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/model_spec.h"
#include "model/placement.h"
#include "proto/ps.pb.h"

namespace pscluster {

struct Snapshot {
  int64_t step = 0;            // the smallest ps version
  std::vector<ShardState> ps;  // indexed by ps task index
  std::string done_chunks;     // WorkQueue::SaveDone's form
  int chunks_per_epoch = 0;
  int64_t generation = 0;
  int64_t run_started_unix_ms = 0;  // when the run's first chief started
  int placement_max_ps = 0;         // the placement's max_ps (model/placement.h)
};

// `snap` as checkpoint tensors and metadata; `spec` and `mode` are recorded
// for people reading the file.
Checkpoint ToCheckpoint(const Snapshot& snap, const ModelSpec& spec, UpdateMode mode);

// The inverse of ToCheckpoint for a cluster placed as `placement`:
// DataLoss naming the key when metadata is missing or not a number, when
// a ps's values have another size, or when a sparse table's tensor is
// missing, of another dtype or of a size its ids disagree with;
// FailedPrecondition when the checkpoint holds another number of ps or
// another variable layout. A checkpoint without ps<i>/sparse_tables (written
// before sparse tables) gives ps i none. Every ShardState gets the
// placement's fingerprint and the checkpoint's generation.
absl::StatusOr<Snapshot> FromCheckpoint(const Checkpoint& c, const Placement& placement);

// `snap`, laid out for `from`, laid out for `to` instead (the same model
// over another number of ps): the values and every optimizer slot gathered
// whole and split again; every state gets the snapshot's step as its
// version and ps 0's optimizer iterations (a consistent cut: every ps
// applied the same updates). The sparse tables' rows are gathered from
// every ps and split again by RowOwner(table, id, to.num_ps): each ps of
// `to` holds every table, in table order, ids increasing, floats_per_row
// kept. InvalidArgument when the sizes or the slot names do not match the
// placements, or a sparse table's sizes disagree, its rows have two widths
// or a row is on two ps.
absl::StatusOr<Snapshot> ReshardSnapshot(const Snapshot& snap, const Placement& from,
                                         const Placement& to);

// A move's restore of ps `ps` of `to`, which `from` placed some of the
// same floats on already: those ranges go into req->kept (the ps keeps
// them in place; RestoreRequest), and req->state's values and slots, of
// `to`'s layout, keep only the other floats. Returns the bytes left out.
int64_t KeepInPlace(const Placement& from, const Placement& to, int ps, RestoreRequest* req);

// FromCheckpoint for a run placed as `placement`, also when the checkpoint
// was written for another number of ps or another placement max_ps (the
// same model, placed with `min_shard_bytes`): that layout is read and
// resharded. This is how a run
// resumes under the other strategy (a multi_worker_mirrored checkpoint
// holds the whole model as one ps's shards).
absl::StatusOr<Snapshot> FromCheckpointFor(const Checkpoint& c, const ModelSpec& spec,
                                           int64_t min_shard_bytes, const Placement& placement);

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_SNAPSHOT_H_
