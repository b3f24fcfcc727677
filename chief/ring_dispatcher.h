// RingDispatcher: the chief's side of multi_worker_mirrored
// (docs/strategies.md). Every worker holds a replica of the whole model; each
// step the ring's members train one chunk each, sum their gradients with a
// ring all-reduce (worker/ring_allreduce.h) and apply the same update. The
// chief does not see gradients: it decides who is in the ring, which step
// comes next and which chunks it trains, and from where a replica that is
// behind takes its state.
//
// Steps are numbered by the updates a replica holds (update/model_replica.h):
// step t takes every member from the state of t - 1 to that of t. A ring
// has an id (rising with every new ring); members ask for each step (RingWork) and the chief
// hands step t out once it is "opened": one chunk leased per member, in
// ring order (-1 for a member when none is left), recorded until a member
// says it completed the step.
//
// Forming a ring. The first ring waits for every worker. A ring is formed
// again when it breaks (a member is lost: no heartbeat, a new process in its
// place; or a member reports its all-reduce failed) or when a worker joins
// (back from a failure). No new step is opened from then on; a broken ring
// hands out nothing, and the chief aborts its members' all-reduces
// (TakeAbort). Once every live worker has asked again (none is inside a
// step), the new ring is the live workers in index order, starting at step
// s = 1 + the newest step any of them completed; the state of s - 1 comes
// from the lowest-indexed member holding it (members behind fetch it), or
// from the chief's base (the initial weights or the newest checkpoint) when
// no live replica is as new, in which case the done chunks rewind to the
// base's. Chunks of steps opened but completed by no survivor go back to
// the queue: every epoch still covers each example once.
//
// Pauses (a checkpoint): no step is opened; AllParked() once every member
// has completed the last opened step and asked again.
//
// It is the ring run's WorkSource (RingWork, Heartbeat and GetReplica,
// through CoordinatorService); who is alive is WorkerLiveness's judgement.
//
// Pure logic, no RPC. Thread-safe.
#ifndef PSCLUSTER_CHIEF_RING_DISPATCHER_H_
#define PSCLUSTER_CHIEF_RING_DISPATCHER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "chief/work_queue.h"
#include "chief/work_source.h"
#include "chief/worker_liveness.h"
#include "proto/coordination.pb.h"
#include "proto/ps.pb.h"

namespace pscluster {

class RingDispatcher final : public WorkSource {
 public:
  // Every worker counts as alive from `now`.
  RingDispatcher(int num_workers, int epochs, absl::Time now);

  // The base: the state the chief itself hands out (GetReplica), `state`
  // of `step`, with the done chunks at it (WorkQueue::SaveDone's form;
  // empty: none). Set before the first ring (the initial weights, step 0,
  // or a resumed checkpoint's) and after every checkpoint. InvalidArgument
  // for malformed ranges.
  absl::Status SetBase(int64_t step, int chunks_per_epoch, const std::string& done_ranges,
                       ShardState state);
  int64_t base_step() const;

  // WorkSource. InvalidArgument for a worker index out of range;
  // FailedPrecondition when workers disagree about the data.
  absl::StatusOr<RingWorkResponse> RingWork(const RingWorkRequest& request,
                                            absl::Time now) override;
  absl::Status Heartbeat(const HeartbeatRequest& request, absl::Time now) override;
  // The base state, if it is of request.step() (or newer, with
  // at_least()); its slots left out with values_only(). Unavailable before
  // the first SetBase; FailedPrecondition naming the step the chief holds.
  absl::StatusOr<ShardState> GetReplica(const ReplicaRequest& request) override;

  // Live, unfinished workers silent for `timeout`: marked lost (the ring
  // breaks if they were in it). Returns their indices.
  std::vector<int> FindLost(absl::Time now, absl::Duration timeout);
  // Counts every worker as heard from at `now` (when the plan goes out).
  void ResetContact(absl::Time now);

  // A broken ring whose members the chief has not yet told to abort: its
  // id and members (then not again for that ring).
  struct Abort {
    int64_t ring_id = 0;
    std::vector<int> members;
  };
  std::optional<Abort> TakeAbort();

  // Checkpoints: between Pause and Resume no step is opened. Nested.
  void Pause();
  void Resume();
  // Paused, the ring formed, and every member has completed the last
  // opened step and asked again: *step is that step, *source a member
  // holding it, *done_ranges the done chunks at it.
  bool AllParked(int64_t* step, int* source, std::string* done_ranges) const;

  // A ring is formed and running: not being formed again, and every
  // member holds the ring's state (none is still to fetch it). Checkpoints
  // wait for it.
  bool Settled() const;

  // Every chunk is trained and every live worker was told DONE.
  bool AllFinished() const;
  int64_t ring_id() const;
  std::vector<int> members() const;
  int chunks_per_epoch() const { return queue_.chunks_per_epoch(); }
  int64_t done_chunks() const { return queue_.done_count(); }
  // The done chunks, WorkQueue::SaveDone's form.
  std::string done_ranges() const { return queue_.SaveDone(); }
  int64_t total_chunks() const { return queue_.total(); }
  // The newest step any replica completed.
  int64_t highest_step() const;
  // Log lines about rings formed and workers lost and back.
  std::vector<std::string> TakeEvents();

 private:
  // What the ring adds to liveness_'s view of a worker.
  struct Worker {
    int64_t completed = -1;  // the step its replica holds; -1: none
    bool asked = false;      // asked since the ring began to be re-formed
    bool fetch = false;      // must take the state of start_step_ - 1 first
    // Its replica is of the current timeline: it was in every ring since
    // it took its state (a lost worker's may hold steps the ring redid).
    bool trusted = false;
  };

  // Records contact; a new process in a member's place breaks the ring.
  void Touch(int w, uint64_t incarnation, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Break(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool InRing(int w) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Steps up to `step` are complete: their chunks are done.
  void CompleteThrough(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadyToForm() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Form() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens step opened_ + 1; false when no chunk is left to lease.
  bool OpenNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  WorkQueue queue_;
  mutable absl::Mutex mu_;
  WorkerLiveness liveness_ ABSL_GUARDED_BY(mu_);
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  int64_t ring_id_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no ring yet
  int64_t highest_reported_ ABSL_GUARDED_BY(mu_) = 0;  // RingWorkRequest.state_ring_id
  std::vector<int> members_ ABSL_GUARDED_BY(mu_);
  int64_t start_step_ ABSL_GUARDED_BY(mu_) = 0;
  int source_ ABSL_GUARDED_BY(mu_) = -1;  // of start_step_ - 1; -1: the chief
  int64_t opened_ ABSL_GUARDED_BY(mu_) = 0;  // the newest step opened
  // Opened steps not yet complete: the chunk of each member, ring order.
  std::map<int64_t, std::vector<int64_t>> open_chunks_ ABSL_GUARDED_BY(mu_);
  bool reform_ ABSL_GUARDED_BY(mu_) = true;  // a ring is to be formed
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // ... because this one broke
  bool abort_taken_ ABSL_GUARDED_BY(mu_) = false;
  int pauses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t base_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::string base_done_ ABSL_GUARDED_BY(mu_);
  int64_t highest_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  // The base state apart from mu_: copying it for GetReplica does not hold
  // up the ring's requests.
  mutable absl::Mutex base_mu_;
  std::optional<ShardState> base_state_ ABSL_GUARDED_BY(base_mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_RING_DISPATCHER_H_
