// Dispatcher: the parameter-server run's view of its workers and the work
// it hands them: its WorkSource (GetWork and Heartbeat, through
// CoordinatorService). It leases chunks from a WorkQueue, notices lost
// workers (WorkerLiveness: no heartbeat within a timeout, or a new process
// in their place) and gives their unfinished chunks back, re-admits them
// when they return, and pauses every worker between steps while the chief
// takes a checkpoint or restores one.
//
// The sync worker set (whom a step waits for) follows liveness; the chief
// pushes it to the ps (SetWorkers) and a re-admitted worker gets work only
// once the ps know it is back.
//
// Pure logic, no RPC. Thread-safe.
#ifndef PSCLUSTER_CHIEF_DISPATCHER_H_
#define PSCLUSTER_CHIEF_DISPATCHER_H_

#include <cstdint>
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

namespace pscluster {

class Dispatcher final : public WorkSource {
 public:
  // Every worker counts as alive from `now` (a restarted chief does not
  // know better; a worker that is gone is noticed after the timeout).
  // `lease_window` > 0 (async): chunk k is handed out only while
  // k < m + lease_window, m the lowest chunk not done; otherwise GetWork
  // answers BOUND (see WorkQueue::Lease). `reserve_next`: with each chunk
  // k, worker w is also leased the chunk it gets next, named in
  // WorkResponse.next_chunk and handed to w at its next asking unless a
  // lower chunk is to do by then (a lost worker's): without a window
  // (sync) k + num_workers when it is to do, so that each step still takes
  // the next num_workers chunks whichever worker asks first; with one
  // (async) the lowest chunk to do, when within the window.
  // `hold_paused` > 0: a GetWork that finds the workers paused (Pause) is
  // answered PAUSE at the pause's end (Resume) or after `hold_paused`,
  // whichever comes first, instead of at once; its gRPC thread waits
  // meanwhile. A paused worker then asks about once per hold instead of
  // every 20 ms: a thousand of them through a checkpoint's pause were most
  // of the chief's calls (docs/benchmarks/chief-scale.md).
  Dispatcher(int num_workers, int epochs, absl::Time now, int64_t lease_window = 0,
             bool reserve_next = false, absl::Duration hold_paused = absl::ZeroDuration());

  // Counts every worker as heard from at `now` (when the plan goes out).
  void ResetContact(absl::Time now);

  // WorkSource. InvalidArgument for a worker index out of range;
  // FailedPrecondition when workers disagree about the data.
  absl::StatusOr<WorkResponse> GetWork(const WorkRequest& request, absl::Time now) override;
  absl::Status Heartbeat(const HeartbeatRequest& request, absl::Time now) override;
  // Where each ps's shards are served, as last set (every ps's own
  // address until a backup is promoted); each SetPlacement raises the
  // epoch.
  absl::StatusOr<PlacementResponse> GetPlacement() override;
  void SetPlacement(const std::vector<std::string>& ps_addresses);

  struct Lost {
    int worker;
    int chunks_released;
    absl::Duration silent_for;
    // hold_chunks: the chunks still leased to it, for SettleLost.
    std::vector<int64_t> held;
  };
  // Workers alive and not finished whose last word is older than
  // `timeout`: marked lost, their leases released. With `hold_chunks` the
  // leases stay (handed to no one) until SettleLost: the caller first asks
  // the ps which of them they applied, since a worker can die after its
  // gradient was applied and before it reported its chunk done.
  std::vector<Lost> FindLost(absl::Time now, absl::Duration timeout, bool hold_chunks = false);
  // A lost worker's held chunks (Lost.held): those in `applied` (sorted;
  // taken by every ps) are done, the others to do again. A chunk `w` no
  // longer holds is left alone (in neither count).
  struct Settled {
    int returned = 0;  // back to the queue
    int done = 0;      // counted done
  };
  Settled SettleLost(int w, const std::vector<int64_t>& held, const std::vector<int64_t>& applied);

  // Worker `w` did not answer at the start (ClusterTasks::absent_workers):
  // out of the sync set, as a lost worker is, until it first asks; then
  // it joins as a lost worker comes back. Ignored out of range.
  void MarkAbsent(int w);

  // The sync worker set (alive, not finished, not idle), with a number that grows
  // at every change; MembershipApplied(n) says the ps hold set n.
  std::vector<bool> Membership(int64_t* number) const;
  // The number alone: the chief's loop asks it on every tick and reads the
  // set (O(workers)) only when it changed.
  int64_t membership_number() const;
  void MembershipApplied(int64_t number);

  // Between Pause and Resume every GetWork answers PAUSE. Pauses nest (a
  // checkpoint or a membership change inside a ps recovery or the
  // start-up): work is handed out again only once every Pause has had its
  // Resume. A Resume without a Pause is ignored. AllParked: every live,
  // unfinished worker has asked since the outermost Pause (so none of them
  // is in the middle of a step).
  void Pause();
  void Resume();
  bool AllParked() const;

  int64_t generation() const;
  // A restore: leases are forgotten, the done set becomes `done_ranges`
  // (WorkQueue::SaveDone's form) and the generation `generation`.
  absl::Status Rewind(int chunks_per_epoch, const std::string& done_ranges,
                      int64_t generation);
  // A restarted chief: each {worker, chunk} is leased to that worker, which
  // holds it already (its gradient waits in a step on the ps), so that it
  // is not handed out again; the worker reports it done or is found lost.
  // Returns how many were to do and are leased now.
  int LeaseInFlight(const std::vector<std::pair<int, int64_t>>& held);
  void set_generation(int64_t generation);

  bool AllFinished() const;
  int chunks_per_epoch() const { return queue_.chunks_per_epoch(); }
  std::string SaveDone() const { return queue_.SaveDone(); }
  int64_t done_chunks() const { return queue_.done_count(); }
  // Chunks handed out again because a ps dropped their gradient.
  int64_t returned_chunks() const { return queue_.returned_count(); }
  // GetWork answers of BOUND so far.
  int64_t bound_answers() const;
  int64_t total_chunks() const { return queue_.total(); }
  // Log lines about workers lost and back, taken by the chief's loop.
  std::vector<std::string> TakeEvents();

 private:
  // What the dispatcher adds to liveness_'s view of a worker.
  struct Worker {
    bool idle = false;  // nothing to hand it lately; not in the sync set
    int64_t admitted_at = 0;  // membership number it is part of
    int64_t excluded_at = 0;  // membership number it was last taken out by
    bool parked = false;
    int64_t reserved = -1;  // the chunk leased to it ahead (reserve_next), -1: none
    bool joining = false;   // absent at the start and not yet in the set
  };
  // The chunks `w` reports done and given back in `req`, unless trained
  // in a generation before the current one.
  void TakeReports(int w, const WorkRequest& req) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker's last request (WorkRequest.leaving): its chunks reported,
  // the rest of its leases released, out of the set at once.
  WorkResponse Leave(int w, const WorkRequest& req) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records contact; a new incarnation means the old process died.
  void Touch(int w, uint64_t incarnation, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChangeMembership() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // reserve_next: worker w's reserved chunk, given back to the queue
  // (nullopt) when it no longer holds it or a lower chunk is to do; and
  // the reservation of the chunk it gets after `k`, named in *resp.
  std::optional<int64_t> TakeReserved(int w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReserveNext(int w, int64_t k, WorkResponse* resp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  WorkQueue queue_;
  const int num_workers_;
  const int64_t lease_window_;
  const bool reserve_next_;
  const absl::Duration hold_paused_;
  mutable absl::Mutex mu_;
  absl::CondVar unpaused_;  // signalled when pauses_ falls to 0
  int64_t bound_answers_ ABSL_GUARDED_BY(mu_) = 0;
  WorkerLiveness liveness_ ABSL_GUARDED_BY(mu_);
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  int64_t membership_number_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t membership_applied_ ABSL_GUARDED_BY(mu_) = 0;
  int pauses_ ABSL_GUARDED_BY(mu_) = 0;  // Pause calls not yet resumed
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // The generation when the outermost pause began: what paused workers are
  // told, so that none follows a restore (or a new placement) before it is
  // complete and the pause ends.
  int64_t generation_at_pause_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  PlacementResponse placement_ ABSL_GUARDED_BY(mu_);
};

// Workers get no new step while one of these lives; it nests with other
// pauses. The dispatcher is borrowed and must outlive it.
class PausedWorkers {
 public:
  explicit PausedWorkers(Dispatcher* dispatcher) : dispatcher_(dispatcher) {
    dispatcher_->Pause();
  }
  ~PausedWorkers() { dispatcher_->Resume(); }
  PausedWorkers(const PausedWorkers&) = delete;
  PausedWorkers& operator=(const PausedWorkers&) = delete;

 private:
  Dispatcher* const dispatcher_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_DISPATCHER_H_
