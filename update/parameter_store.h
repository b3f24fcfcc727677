// ParameterStore: the shards one parameter server holds, their optimizer
// state, and the rule that turns pushed gradients into updates.
//
//   sync:  gradients tagged with the current version are kept per worker
//          until the step closes; the step's members are then averaged in
//          worker-index order, weighted by their example counts (bitwise
//          reproducible whatever the arrival order), applied once, and the
//          version advances. Gradients for an older version, and those left
//          out of the step, are dropped and counted (backup workers); a
//          newer version is an error.
//          Who closes a step: with several ps, one decides for all, so that
//          a gradient is applied on every ps or on none. The deciding store
//          (StepRole::kDecide: ps 0, or the only ps) closes a step once
//          `replicas_to_aggregate` of the active workers' gradients are in,
//          and records the members as a StepDecision; the ps service sends
//          it to the others (StepRole::kFollow), which Commit it: they apply
//          exactly those members' gradients, waiting for any still on its
//          way, and drop the rest.
//   async: each gradient is applied on arrival, however stale: every ps
//          applies every push, so a gradient is applied on every ps or on
//          none (the worker resends a push until each ps has it; request
//          ids keep it from being applied twice). Staleness is bounded
//          before the gradient is computed, by the chief (bounded delay:
//          WorkResponse.BOUND), not by dropping work already done.
//
// A push whose request id the store has seen from that worker recently is
// answered with the first answer and not applied again.
//
// Fault tolerance: the chief sets which workers a sync step waits for
// (SetActiveWorkers) when one dies or comes back, and takes and restores
// checkpoints (Snapshot, Restore). Every restore raises the generation;
// pushes and waiting pulls of another generation are Aborted, so no
// gradient computed on weights from before a restore is ever applied.
//
// Backups: a primary store reports every update it makes, in order, to
// its update listener (AppliedUpdate); a backup store (StoreRole::kBackup)
// takes no pushes or step decisions (Unavailable: the sender asks where
// the primary is) and applies those records instead (ApplyReplicated), so
// that it holds what the primary holds, bit for bit, and knows which pushes
// the primary applied. Promote makes a backup the primary.
//
// Fencing with several backups: every store has a primary term, raised by
// each promotion, carried by every record and seed. A primary cut off from
// the chief and from the backup promoted in its place may still reach
// another backup after the new primary seeded it: that backup refuses the
// old primary's records and seeds (a lower term: AlreadyExists) under the
// lock it applies them with, so it never applies an update the new primary
// did not make; a record of a higher term than its own asks for a seed.
//
// The pieces, each under the store's lock but the decisions: the values
// and their optimizer state (shard_values.h), a sync step's gathered
// gradients (pending_step.h), the step decisions made or taken
// (decision_log.h, a lock of its own), the answers to recent pushes
// (answered_pushes.h) and the sparse tables' rows (sparse_shards.h). The
// methods are in three files: the core (configuration, pulls, async
// pushes), the sync step protocol (parameter_store_sync.cc) and the copies
// of a store (parameter_store_copies.cc: snapshots, restores, records,
// promotion).
//
// Thread-safe: every method may be called from any thread. Knows nothing
// about gRPC; ps_service.h adapts it.
#ifndef PSCLUSTER_UPDATE_PARAMETER_STORE_H_
#define PSCLUSTER_UPDATE_PARAMETER_STORE_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/parallel_for.h"
#include "update/answered_pushes.h"
#include "update/decision_log.h"
#include "update/optimizer.h"
#include "update/pending_step.h"
#include "update/recent_chunks.h"
#include "update/shard_values.h"
#include "update/sparse_shards.h"
#include "update/sparse_table.h"
#include "update/step_clipping.h"

namespace pscluster {

enum class UpdateRule { kSync, kAsync };

// Sync, several ps: whether this store closes steps itself or applies the
// steps another store closed (see the top of this file).
enum class StepRole { kDecide, kFollow };

// Whether a store takes workers' pushes (the primary of its shards) or
// applies a primary's updates (a backup: see the top of this file).
enum class StoreRole { kPrimary, kBackup };

struct StoreConfig {
  uint64_t layout_fingerprint = 0;
  int64_t num_floats = 0;
  UpdateRule rule = UpdateRule::kSync;
  int num_workers = 1;
  int replicas_to_aggregate = 1;  // sync
  OptimizerOptions optimizer;
  // NaN/Inf gradients: false = reject the push (InvalidArgument, counted);
  // true = accept it and skip the update it belongs to (counted).
  bool skip_nonfinite = false;
  int64_t generation = 0;  // of the initial values
  StepRole step_role = StepRole::kDecide;  // sync only
  StoreRole store_role = StoreRole::kPrimary;
  std::vector<MovingStatistic> moving_statistics;  // disjoint, in range
  // The model's sparse embedding tables (docs/sparse_embeddings.md), in
  // table order: this store holds the rows of each that RowOwner gives
  // its ps, and updates them with the dense values, in the same steps.
  std::vector<SparseTableOptions> sparse_tables;
  // Sync: the optimizer's clipnorm / global_clipnorm of each step's whole
  // gradient (update/step_clipping.h); async workers clip their own.
  StepClippingConfig clipping;
};

struct PushArgs {
  uint64_t layout_fingerprint = 0;
  int worker = 0;
  int64_t version = 0;
  uint64_t request_id = 0;  // 0: no id, never treated as a duplicate
  int num_examples = 0;
  const float* gradients = nullptr;
  int64_t num_floats = 0;
  // Optional: the buffer that holds the gradient (gradients ==
  // owned->data(), num_floats == owned->size()). A sync store then keeps
  // it by swapping instead of copying it, and leaves in its place a buffer
  // of any size and contents, for the caller's next push.
  std::vector<float>* owned = nullptr;
  int64_t generation = 0;  // of the weights the gradient was computed on
  // Optional: whether the gradient is all finite, when the caller checked
  // it already (AllFinite, as it arrived); the store then does not scan
  // it again.
  std::optional<bool> finite;
  // Sync: the chunk whose examples gave the gradient (PushRequest.chunk), or
  // -1. A step's gradients are summed in (chunk, worker) order.
  int64_t chunk = -1;
  // Optional: the gradient's rows of the sparse tables this store holds
  // (each table at most once). A sync store keeps them by swapping.
  std::vector<SparseRowsData>* sparse = nullptr;
};

// Whether none of x[0, n) is NaN or Inf.
bool AllFinite(const float* x, int64_t n);

// Refused pushes are not counted here: the ps service counts them, the
// ones it refuses itself (bytes, dtype) and the store's alike.
struct StoreStats {
  int64_t version = 0;
  // Sync: gradients that were members of an applied (or skipped) step;
  // async: gradients applied.
  int64_t pushes_applied = 0;
  // Sync: too stale, a backup worker's left out of its step, or a lost
  // worker's. Async: none.
  int64_t pushes_dropped_stale = 0;
  int64_t pushes_duplicate = 0;
  int64_t steps_applied = 0;
  // Sum and maximum of the staleness of every push applied (sync: taken
  // into a step): with pushes_applied, the mean staleness.
  int64_t staleness_sum = 0;
  int64_t staleness_max = 0;
  int64_t steps_skipped_nonfinite = 0;
  // Sync, following store: steps applied without a member's gradient
  // because the member was taken out (lost) before it arrived here.
  int64_t steps_torn = 0;
  // Sync, following store: steps whose update was computed ahead, before
  // their decision came (the rest were computed when it came).
  int64_t steps_ahead = 0;
  // Sum of a hash over every gradient applied (sync: every step member, by
  // (version, worker); async: by chunk, or (request id, worker) for a push
  // without one): ps that applied the same gradients (async: a gradient of
  // the same chunks) agree on it.
  uint64_t applied_digest = 0;
  int64_t generation = 0;
  bool initialized = false;
  bool backup = false;  // StoreRole::kBackup
  bool decides = false;  // a sync primary that decides its steps
  // A deciding store's epoch, stamped on its decisions; a following
  // store's: the lowest it takes (StepDecision::decider_epoch).
  int64_t decider_epoch = 0;
  // The term of the primary this store is or follows: raised by every
  // promotion (Promote), taken from a seed by a backup, never lowered. A
  // backup refuses a seed or records of a lower term (a primary replaced
  // while it was cut off, which may still send them; docs/replication.md).
  int64_t primary_term = 0;
  uint64_t layout_fingerprint = 0;
  std::vector<bool> active_workers;  // sync: whom a step waits for
  std::vector<SparseTableStats> sparse_tables;  // per table, this store's rows
};

// One update a primary store made, from `version` to version + 1. A backup
// that started from the primary's state (Snapshot/Restore) and applies the
// primary's records in order holds the same values, optimizer state,
// version and applied digest, bit for bit.
struct AppliedUpdate {
  int64_t generation = 0;
  int64_t version = 0;
  // What the optimizer took: a sync step's weighted sum of its members'
  // gradients, or an async push. Empty when the values did not change: a
  // sync step skipped for a NaN or Inf (skipped), or one whose members
  // were all taken out before their gradients came (torn).
  std::vector<float> gradient;
  bool skipped = false;
  // Sync: the step's members, one per worker (their pushes count as
  // applied), the request ids of their pushes (0: none), so that a
  // promoted backup answers a member's resent push as applied, and their
  // chunks (StoreState::recent_chunks). Async: members empty; the push
  // was `worker`'s with `request_id`, of chunk member_chunks[0].
  std::vector<bool> members;
  std::vector<uint64_t> member_request_ids;
  std::vector<int64_t> member_chunks;  // sync: per worker, -1: none
  int worker = -1;
  uint64_t request_id = 0;
  int64_t staleness = 0;  // async: of the push
  // The sparse tables' gradient rows the update applied (a sync step's
  // weighted sums per id; an async push's rows).
  std::vector<SparseRowsData> sparse;
  // Not an update: the store's whole state was replaced (Restore) by
  // `version` of `generation`. A backup can follow only from a fresh seed.
  bool restored = false;
  // The term of the primary that made it (StoreStats::primary_term): a
  // backup refuses the records of a replaced primary's lower term.
  int64_t primary_term = 0;
  // Sync clipping: the step's scales (StepDecision::clip_scales);
  // `gradient` is the clipped one.
  std::vector<float> clip_scales;
};

// Called, under the store's lock and in the order the updates were made,
// with each update a primary store makes, which it may keep (it is the
// listener's: the gradient is not copied again under the lock). It must
// not call the store.
using UpdateListener = std::function<void(AppliedUpdate)>;

// A store's state at one version: its values and optimizer state, and
// what a store that continues it needs. Snapshot takes it, Restore
// installs it, a checkpoint holds it; on the wire it is a ShardState
// (update/store_state.h converts).
struct StoreState {
  int64_t version = 0;
  int64_t generation = 0;
  std::vector<float> values;
  OptimizerState optimizer;
  // The store's counters of what it applied (StoreStats): a backup
  // restored from the snapshot takes them over; any other restore keeps
  // its own.
  uint64_t applied_digest = 0;
  int64_t pushes_applied = 0;
  int64_t steps_applied = 0;
  // The answers to recent pushes, oldest first per worker, and the fate of
  // each worker's newest sync gradient ({version, taken}; version -1:
  // none): a store that continues this one answers resent pushes alike.
  struct Answered {
    int worker = 0;
    uint64_t request_id = 0;
    PushResult result;
  };
  std::vector<Answered> answered;
  std::vector<std::pair<int64_t, bool>> outcomes;
  // The rows of each sparse table this store holds, in table order.
  std::vector<SparseTable::Rows> sparse;
  // The chunks (PushArgs::chunk) of the gradients the last updates took,
  // oldest first (at most ParameterStore::RecentChunksKept()), and the
  // version from which on they are all there (update/recent_chunks.h). A
  // checkpoint counts them done: their workers may not have told the chief
  // yet (WorkRequest.completed). A rollback forgets them; a store that
  // continues this one takes them.
  std::vector<int64_t> recent_chunks;
  int64_t recent_chunks_since = 0;
  // StoreStats::decider_epoch. Every restore keeps the higher of the
  // store's own and this one: an epoch is never lowered.
  int64_t decider_epoch = 0;
  // StoreStats::primary_term. A backup seeded with it takes it (it refuses
  // one below its own); every other restore keeps the higher.
  int64_t primary_term = 0;
  // RecentChunksOf, sync: per worker, the chunk of its push taken into the
  // step being gathered (-1: none). Not part of a snapshot's state.
  std::vector<int64_t> pending_chunks;
};

// What a Restore is: a rollback to a checkpoint (the store's own counters
// and answers stay, the old ones' pushes are refused by generation), or a
// continuation of the store the state was taken from (a backup's seed, or
// a restarted primary restored from its backup: counters and answers come
// with the state), or the shards placed again over more or fewer stores
// (a ps added or drained live): the layout may change, and the counters
// and answers come with the state, as of the stores the shards came from.
enum class RestoreKind { kRollback, kContinue, kMove };

class ParameterStore {
 public:
  // `update_threads`: the cores a step's passes over the values (the
  // finiteness check, sync's weighted sum, the optimizer) may use when the
  // shard is large (common/parallel_for.h); results do not depend on it.
  explicit ParameterStore(int update_threads = HardwareThreads())
      : threads_(std::max(1, update_threads)), values_(threads_) {}
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  // Sets the initial values. Returns true in *already when the store was
  // initialised before with the same layout (the call then changes
  // nothing); FailedPrecondition for another layout.
  absl::Status Init(const StoreConfig& config, const float* values, bool* already);

  // Copies the values into *out once the version is at least min_version.
  // Unavailable when not initialised by `deadline`; DeadlineExceeded when
  // the version is not reached by then; Unavailable after Cancel() (the ps
  // is going away: callers retry, as with any ps that is down); Aborted
  // when `generation` >= 0 and the store's generation is another (a
  // restore happened).
  absl::Status Pull(uint64_t layout_fingerprint, int64_t min_version,
                    absl::Time deadline, std::string* out, int64_t* version,
                    int64_t generation = -1, int64_t* out_generation = nullptr);

  // Pull without the copy: *out shares the store's values at that version.
  // The store never writes a buffer while a reader holds it: an update
  // made meanwhile first copies the values into a buffer no one holds
  // (and otherwise runs in place). Hold it only as long as needed (while
  // the answer is encoded or sent): every update made while it is held
  // pays that copy.
  using SharedValues = std::shared_ptr<const std::vector<float>>;
  absl::Status PullShared(uint64_t layout_fingerprint, int64_t min_version,
                          absl::Time deadline, SharedValues* out, int64_t* version,
                          int64_t generation = -1, int64_t* out_generation = nullptr);

  // Rows of the sparse tables at the store's version, once it is at least
  // min_version: rows[i].values is filled from rows[i].ids (held rows, or
  // the rows as they would be made). Waits and fails as PullShared does;
  // InvalidArgument for an unknown table or an id out of its range.
  absl::Status PullRows(uint64_t layout_fingerprint, int64_t min_version, absl::Time deadline,
                        std::vector<SparseRowsData>* rows, int64_t* version,
                        int64_t generation = -1, int64_t* out_generation = nullptr);

  // Validates and takes one gradient. InvalidArgument or
  // FailedPrecondition (nothing changed) for a push that is not valid;
  // Aborted for another generation; Unavailable before Init.
  absl::StatusOr<PushResult> Push(const PushArgs& args);

  // Sync: the fate of `worker`'s gradient for `version`, once its step is
  // decided (true: a member, applied with the step; false: dropped).
  // Unknown (nullopt) while undecided or when the store no longer knows.
  std::optional<bool> StepOutcome(int worker, int64_t version) const;

  // Deciding store: the oldest decision with a sequence above
  // `after_sequence`, waiting for one until `deadline`. False on the
  // deadline or after Cancel(). Decisions are kept until newer ones push
  // them out (a follower needs each one, and cannot fall behind by more
  // than one: its workers would wait for it).
  bool NextDecision(int64_t after_sequence, absl::Time deadline, StepDecision* out);

  // Following store: applies the step `decision` closed, now or as soon as
  // the members' gradients are here. OK when applied, queued, or already
  // applied (a resent decision); Aborted for another generation;
  // Unavailable when this store is behind (not initialised, or not yet at
  // that version: try again); InvalidArgument for a malformed decision or
  // FailedPrecondition for a store that decides itself, and for a decision
  // of a decider epoch below this store's (its decider was replaced).
  //
  // A clipped decision without scales (update/step_clipping.h) is answered
  // with this store's squared norms of the step's gradient in *clip_norms
  // (not null), once its members' gradients are here: the call waits for
  // them until `deadline`, then is Unavailable (ask again). For a step
  // applied already, the norms while kept (the last few steps'), else
  // none.
  absl::Status Commit(uint64_t layout_fingerprint, const StepDecision& decision,
                      std::vector<double>* clip_norms = nullptr,
                      absl::Time deadline = absl::InfinitePast());

  // Deciding store, clipped steps: ps `ps`'s squared norms of the step
  // from `version` of `generation` (its answer to the decision); the step
  // is applied once every ps's are in. A step closed already, or of
  // another generation, ignores them; InvalidArgument for a ps or a count
  // that does not fit.
  absl::Status AddClipNorms(uint64_t layout_fingerprint, int ps, int64_t generation,
                            int64_t version, std::vector<double> norms);

  // Following store: refuses decisions of a decider epoch below `epoch`
  // from now on (a backup is about to decide in place of a decider that
  // may still be alive). Never lowers the epoch. FailedPrecondition on a
  // store that decides.
  absl::Status FenceDecisions(uint64_t layout_fingerprint, int64_t epoch);

  StoreStats stats() const;
  bool is_sync() const;

  // Sync: the workers a step waits for (one entry per worker). Deciding
  // store: a worker taken out has its gradient for the current step
  // dropped, and the step may then close. Following store: a step member
  // taken out before its gradient arrived is applied without it (a torn
  // step, counted). Pushes from a worker that is out are dropped.
  // InvalidArgument for a wrong count.
  absl::Status SetActiveWorkers(uint64_t layout_fingerprint, const std::vector<bool>& active);

  // A copy of the values and optimizer state at the current version.
  absl::Status Snapshot(uint64_t layout_fingerprint, StoreState* out) const;

  // Replaces the whole state with `state` under `config` (initialising an
  // empty store). FailedPrecondition for another layout on an initialised
  // store; InvalidArgument (and no change) for a state that does not fit.
  // A backup's restore (config.store_role) is always a continuation and takes
  // the state's primary term; AlreadyExists on an initialised primary and
  // for a state of a lower term than the backup's (a replaced primary's
  // seed: its replicator stops answering), FailedPrecondition for one of
  // an older generation. Any other restore keeps the higher of the two
  // terms.
  // `state`'s values and slots are moved in (a caller done with its own
  // moves it: a large model's restore copies nothing).
  absl::Status Restore(const StoreConfig& config, StoreState state,
                       RestoreKind kind = RestoreKind::kRollback);

  // Its kept decision for the step from `version`: a deciding store's own
  // (a follower restored from its backup needs it again), a following
  // store's as it came, applied or waiting (a backup promoted to decide in
  // a lost decider's place needs the one in flight). NotFound when not made
  // or taken yet, or no longer kept; FailedPrecondition for another layout.
  absl::StatusOr<StepDecision> DecisionFor(uint64_t layout_fingerprint, int64_t version) const;

  // Primary: `listener` is told of every update from now on, and of every
  // Restore (AppliedUpdate::restored), (null: none).
  void SetUpdateListener(UpdateListener listener);

  // Backup: applies the primary's update `u`. OK when applied, or applied
  // already (a resent record); Aborted for another generation;
  // FailedPrecondition on a primary, when `u` is not the next update
  // (this backup is behind or was seeded from another state: seed it again
  // with Restore), and for a record of a higher primary term than the
  // backup's (a new primary that has not seeded it yet); AlreadyExists for
  // one of a lower term (a replaced primary's); InvalidArgument for a
  // malformed record; Unavailable before Init or Restore. The term is
  // checked before the rest of the record, so that a replaced primary
  // learns so whatever else its record says. Counters of pushes as they
  // arrived (refused, dropped, duplicate, a sync push's staleness, an async
  // push skipped for a NaN or Inf, which changes nothing and makes no
  // record) stay the primary's.
  absl::Status ApplyReplicated(uint64_t layout_fingerprint, const AppliedUpdate& u);

  // Backup: becomes the primary of its shards, deciding or following sync
  // steps as `step_role` says, under `generation` (the store's own, when
  // the fail-over rolls nothing back and the workers' pushes in flight
  // stand, or above it): pushes and pulls of older generations are
  // Aborted from then on, but for pushes the old primary applied, which
  // are answered as it did. FailedPrecondition on a primary;
  // InvalidArgument for a generation below the store's.
  //
  // Deciding: `in_flight`, when set, is the old decider's decision for the
  // step at the store's version, which a follower took (the backup never
  // saw it): that step closes with exactly its members, as a follower's
  // would, and the decision is sent on again (NextDecision) to the
  // followers that lack it. One for an older version is a step the backup
  // holds already, and is ignored. InvalidArgument when it is not for the
  // store's generation, is for a later version, or names another worker
  // count. The decisions of the steps the backup applied from its
  // primary's records are sent again too, first (a follower may lack the
  // newest: the old decider applied a step and was lost before it sent
  // the decision on).
  //
  // `decider_epoch` raises the store's (StoreStats::decider_epoch):
  // deciding, the epoch of its decisions from now on, those sent again
  // included; following, the lowest it takes.
  //
  // `primary_term` becomes the store's (StoreStats::primary_term): the
  // caller gives one above every term a copy of these shards had, so that
  // the backups this store seeds refuse the records of the primary it
  // replaces; 0: one above its own. FailedPrecondition for one at or below
  // its own (it would fence nothing).
  absl::Status Promote(uint64_t layout_fingerprint, int64_t generation, StepRole step_role,
                       const std::optional<StepDecision>& in_flight = std::nullopt,
                       int64_t decider_epoch = 0, int64_t primary_term = 0);

  // Primary: becomes a backup (a backup was promoted in its place), to be
  // seeded (Restore as a backup). Keeps its primary term: the new
  // primary's seed is of a higher one. Unavailable before Init or Restore.
  absl::Status Demote(uint64_t layout_fingerprint);

  // Wakes every waiting Pull with Unavailable (shutdown).
  void Cancel();

  // Blocks until the store is initialised (Init or Restore): true; or
  // until Cancel(): false. The ps is ready for its role from then on.
  bool AwaitInitialized() const;

  // Only the version, the generation and the recent chunks of a Snapshot,
  // and (sync) the chunks of the pushes taken into the step being gathered
  // (StoreState::pending_chunks).
  absl::Status RecentChunksOf(uint64_t layout_fingerprint, StoreState* out) const;

  // How many chunks StoreState::recent_chunks holds at most: 4,096, or
  // the members of 16 steps of `num_workers` when that is more. A worker
  // tells the chief of its chunk when it next asks for work, long before
  // that many more chunks are taken.
  static size_t RecentChunksKept(int num_workers);

 private:
  // Mixes (what names a gradient, worker) into 64 bits, for the
  // applied-gradients digest: sync names a gradient by its version, async
  // by its request id.
  static uint64_t GradientHash(uint64_t name, int worker);
  // An async gradient's: by its chunk when it has one (>= 0), else by
  // (request id, worker).
  static uint64_t AsyncGradientHash(int64_t chunk, uint64_t request_id, int worker);
  static absl::Status GenerationMismatch(int64_t theirs, int64_t ours, int64_t version);
  // Unavailable before Init or Restore; FailedPrecondition when
  // `fingerprint` is not the layout the store holds.
  // `generation`: the caller's (-1: none); a call of an older generation
  // with another layout is ABORTED, not refused.
  absl::Status CheckReady(uint64_t fingerprint, int64_t generation = -1) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pulls' wait: until the version is at least min_version (of
  // `generation` when >= 0), failing as PullShared says.
  absl::Status AwaitVersion(uint64_t layout_fingerprint, int64_t min_version,
                            absl::Time deadline, int64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Validates `config` and installs it with fresh per-worker state.
  absl::Status Configure(const StoreConfig& config, std::unique_ptr<Optimizer> optimizer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::unique_ptr<Optimizer>> CheckConfig(const StoreConfig& config) const;
  // Restore's checks of a backup's seed against what the store holds
  // (fencing: see Restore).
  absl::Status CheckSeed(const StoreState& state) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<PushResult> PushSync(const PushArgs& args, bool finite)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<PushResult> PushAsync(const PushArgs& args, bool finite)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes (deciding store) or applies (following store) the step being
  // gathered, if it can be now.
  void MaybeFinishStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deciding store: closes the step once enough gradients have arrived.
  void MaybeCloseStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Following store: applies commit_ once its members' gradients are here
  // (or their workers were taken out).
  void MaybeApplyCommit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the step made of `members`' pending gradients (skips it when
  // `skip` or when one of them holds NaN/Inf: returns whether it skipped),
  // drops the others' and advances the version.
  // `clip_scales`: the clipped step's scales (empty: not clipped).
  bool ApplyStep(const std::vector<bool>& members, bool skip,
                 const std::vector<float>& clip_scales = {}) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // commit_, clipped and without scales: keeps this store's squared norms
  // of the step (members' gradients all here) and, deciding, makes the
  // scales once every ps's are in and sends them on. Whether commit_ has
  // its scales now.
  bool GatherClipNorms(const std::vector<bool>& members) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ApplyStep's end, once the update is made: the members' and the
  // others' fates, the pending gradients let go, the version advanced.
  void CloseStep(const std::vector<bool>& members) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Following store, no decision yet: computes ahead_ when the workers
  // the step waits for have pushed (see ahead_).
  void MaybeComputeAhead() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops worker w's pending gradient (its fate: dropped).
  void DropPending(int w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the listener, if any, of the update from version_ to version_ + 1
  // (`grad` null: the values did not change; `chunk`: an async push's).
  void Report(const float* grad, bool skipped, const std::vector<bool>& members, int worker,
              uint64_t request_id, int64_t staleness, int64_t chunk = -1,
              const std::vector<float>& clip_scales = {}) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Backup: ApplyReplicated's check that `u` fits this store.
  absl::Status CheckRecord(const AppliedUpdate& u) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Promote's check of the decision in flight (see Promote).
  absl::Status CheckInFlight(const StepDecision& in_flight, int64_t generation,
                             StepRole step_role) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Promoted to decide: sends again the decisions of the steps it applied,
  // then the one in flight, which it closes as a follower would.
  void ResendDecisions(int64_t generation, const std::optional<StepDecision>& in_flight)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Bounds that keep every counter far from overflow and the per-worker
  // state small whatever a request says.
  static constexpr int kMaxWorkers = 1 << 16;
  static constexpr int64_t kMaxVersion = int64_t{1} << 60;

  const int threads_;
  mutable absl::Mutex mu_;
  absl::CondVar version_advanced_;  // signalled on Init, apply, Cancel
  bool initialized_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  StoreConfig config_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  StoreStats stats_ ABSL_GUARDED_BY(mu_);
  ShardValues values_ ABSL_GUARDED_BY(mu_);
  SparseShards sparse_ ABSL_GUARDED_BY(mu_);
  AnsweredPushes answered_ ABSL_GUARDED_BY(mu_);
  UpdateListener listener_ ABSL_GUARDED_BY(mu_);
  // The chunks of the last updates (StoreState::recent_chunks).
  RecentChunks recent_chunks_ ABSL_GUARDED_BY(mu_);

  // Sync: the gradients gathered for the current version, whom a step
  // waits for, and the fate of each worker's newest gradient: {version,
  // applied}.
  PendingStep pending_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> active_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, bool>> outcome_ ABSL_GUARDED_BY(mu_);
  // The newest decisions: a deciding store's own, a following store's as
  // they came (a lock of their own, taken inside mu_).
  DecisionLog decisions_;
  int64_t decider_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // StoreStats::decider_epoch
  int64_t primary_term_ ABSL_GUARDED_BY(mu_) = 0;   // StoreStats::primary_term
  // Backup of a deciding store: the decisions of the last steps it applied
  // from its primary's records (their members), oldest first, which it
  // sends again once promoted to decide (Promote).
  std::deque<StepDecision> replicated_decisions_ ABSL_GUARDED_BY(mu_);
  // Following store: the decision for the current version, once it came.
  // Deciding store: the lost decider's decision in flight it adopted when
  // promoted (Promote), until that step closes.
  std::optional<StepDecision> commit_ ABSL_GUARDED_BY(mu_);
  // Following store: the step's update computed ahead, while ps 0's
  // decision is on its way, once this store holds as many gradients as
  // ps 0 closes a step with (the same ones, as a rule): the next version's
  // values, and the optimizer's next state aside (Optimizer::ApplyAside).
  // A decision that names these members takes them as they are, instead
  // of computing the update then; any other drops them.
  struct Ahead {
    int64_t version = -1;
    int64_t generation = -1;
    std::vector<bool> members;
    std::shared_ptr<std::vector<float>> values;  // null: none
  };
  Ahead ahead_ ABSL_GUARDED_BY(mu_);
  // Sync clipping: the ps's squared norms of the last steps, and a clipped
  // step's gradient scaled (the pending gradients stay as they came).
  StepClipping clipping_ ABSL_GUARDED_BY(mu_);
  std::vector<float> clipped_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_PARAMETER_STORE_H_
