// Conversions between the wire's forms of a store (InitRequest, ShardState
// in proto/ps.proto) and ParameterStore's own (StoreConfig, StoreState).
// A ps's service uses them for Init, Snapshot and Restore; a worker under
// multi_worker_mirrored uses them for the replica it keeps of the whole
// model (update/model_replica.h). Plain functions: thread-safe.
#ifndef PSCLUSTER_UPDATE_STORE_STATE_H_
#define PSCLUSTER_UPDATE_STORE_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/ps.pb.h"
#include "update/parameter_store.h"

namespace pscluster {

// Float32 values from protobuf bytes (which may not be float-aligned).
// InvalidArgument naming `what` when the bytes are not whole float32s.
absl::Status BytesToFloats(absl::string_view bytes, const char* what, std::vector<float>* out);

// The dense optimizer `o` describes, as update/optimizer.h takes it (a
// decay_rate without decay_steps counts as none); unchecked: Optimizer::
// Create checks it.
OptimizerOptions OptimizerFromConfig(const OptimizerConfig& o);

// The store configuration `init` asks for, for `num_floats` values (its
// shards must add up to them). InvalidArgument naming the bad field.
absl::StatusOr<StoreConfig> StoreConfigFromInit(const InitRequest& init, int64_t num_floats,
                                                StepRole role);

// A ShardState's values, slots, version and generation as a StoreState.
// InvalidArgument naming the field whose bytes are not float32s.
absl::StatusOr<StoreState> StoreStateFromProto(const ShardState& state);

// A move's restore that keeps some of the store's floats in place
// (RestoreRequest.kept): `state` holds only the others, in order, for the
// values and each slot; `own` is the store's state now. Puts the two
// together in `state`, `num_floats` floats each. InvalidArgument when the
// ranges overlap, run out of order or past either end, when a slot of
// `state` is not in `own`, or when the floats do not add up.
absl::Status MergeKept(const StoreState& own,
                       const google::protobuf::RepeatedPtrField<KeptRange>& kept,
                       int64_t num_floats, StoreState* state);

// The reverse: fills out's version, generation, values, slots and
// optimizer iterations (not its layout or shards).
void StoreStateToProto(const StoreState& snap, ShardState* out);

// Sparse rows between the wire and the store. InvalidArgument when the
// values are not whole float32s.
absl::Status SparseRowsFromProto(const SparseRows& rows, SparseRowsData* out);
void SparseRowsToProto(const SparseRowsData& rows, SparseRows* out);

// A sync step decision between the wire (StepCommitRequest: sent to a
// following ps, and the answer to GetDecision) and the store.
StepDecision DecisionFromRequest(const StepCommitRequest& req);
void DecisionToRequest(const StepDecision& d, StepCommitRequest* out);

// A sparse table's configuration between the wire and the store.
SparseTableOptions SparseTableFromConfig(const SparseTableConfig& config);
void SparseTableToConfig(const SparseTableOptions& options, SparseTableConfig* out);

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_STORE_STATE_H_
