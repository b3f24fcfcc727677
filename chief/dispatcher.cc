#include "chief/dispatcher.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pscluster {

Dispatcher::Dispatcher(int num_workers, int epochs, absl::Time now, int64_t lease_window,
                       bool reserve_next, absl::Duration hold_paused)
    : queue_(num_workers, epochs),
      num_workers_(num_workers),
      lease_window_(lease_window),
      reserve_next_(reserve_next),
      hold_paused_(hold_paused),
      liveness_(num_workers, now),
      workers_(num_workers) {}

void Dispatcher::ResetContact(absl::Time now) {
  absl::MutexLock lock(&mu_);
  liveness_.ResetContact(now);
}

void Dispatcher::ChangeMembership() { ++membership_number_; }

std::optional<int64_t> Dispatcher::TakeReserved(int w) {
  Worker& worker = workers_[w];
  const int64_t reserved = worker.reserved;
  worker.reserved = -1;
  if (reserved < 0 || !queue_.Holds(w, reserved)) return std::nullopt;
  // A lower chunk to do (a lost worker's) goes first: epochs stay in order.
  const std::optional<int64_t> lowest = queue_.LowestTodo();
  if (lowest && *lowest < reserved) {
    queue_.Unreserve(w, reserved);
    return std::nullopt;
  }
  return reserved;
}

void Dispatcher::ReserveNext(int w, int64_t k, WorkResponse* resp) {
  // Sync: k + num_workers, as if the workers took turns, so that each step
  // takes the next num_workers chunks whoever asks first. Async (a lease
  // window): the lowest chunk to do, which it would get next if it asked
  // now.
  const std::optional<int64_t> next =
      lease_window_ > 0 ? queue_.LowestTodo() : std::optional<int64_t>(k + num_workers_);
  if (next && queue_.Reserve(w, *next, lease_window_)) {
    workers_[w].reserved = *next;
    resp->set_next_chunk(*next);
  }
}

void Dispatcher::Touch(int w, uint64_t incarnation, absl::Time now) {
  if (liveness_.Touch(w, incarnation, now)) {
    // Restarted faster than the heartbeat timeout: the old process's
    // leases are void all the same.
    const int released = queue_.Release(w);
    events_.push_back(absl::StrCat("worker ", w, " restarted (a new process answers); ",
                                   released, " unfinished chunk(s) of its previous run go "
                                   "back to the queue"));
    ChangeMembership();
    workers_[w].excluded_at = membership_number_;
  }
}

absl::StatusOr<WorkResponse> Dispatcher::GetWork(const WorkRequest& req, absl::Time now) {
  const int w = req.worker_index();
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(queue_.CheckWorker(w));
  PSCLUSTER_RETURN_IF_ERROR(queue_.SetChunksPerEpoch(req.chunks_per_epoch()));
  Touch(w, req.incarnation(), now);
  Worker& worker = workers_[w];
  if (req.leaving()) return Leave(w, req);
  WorkResponse resp;
  // While paused, the generation the pause began with: no worker follows a
  // restore (or a new placement) before it has reached every ps.
  resp.set_generation(pauses_ > 0 ? generation_at_pause_ : generation_);
  if (!liveness_.alive(w) && membership_applied_ < worker.excluded_at) {
    // The ps must first drop what its previous life left half done (a
    // gradient for the current step), or that gradient would count and
    // this life's first one would be dropped as a second for the step.
    resp.set_kind(WorkResponse::PAUSE);
    return resp;
  }
  if (!liveness_.alive(w)) {
    liveness_.MarkBack(w);
    worker.idle = false;
    ChangeMembership();
    worker.admitted_at = membership_number_;
    events_.push_back(worker.joining ? absl::StrCat("worker ", w,
                                                    " joins the run and gets work from the "
                                                    "next step")
                                     : absl::StrCat("worker ", w, " is back and gets work again"));
    worker.joining = false;
  }
  TakeReports(w, req);
  if (pauses_ > 0) {
    worker.parked = true;
    // Held: answered at the pause's end, or after hold_paused_. A condition
    // variable, not Mutex::Await: a thousand waiters' conditions would be
    // evaluated at every unlock.
    if (hold_paused_ > absl::ZeroDuration()) {
      const absl::Time until = absl::Now() + hold_paused_;
      while (pauses_ > 0 && !unpaused_.WaitWithDeadline(&mu_, until)) {
      }
    }
    resp.set_generation(pauses_ > 0 ? generation_at_pause_ : generation_);
    resp.set_kind(WorkResponse::PAUSE);
    return resp;
  }
  if (membership_applied_ < worker.admitted_at) {
    resp.set_kind(WorkResponse::PAUSE);  // the ps do not wait for it yet
    return resp;
  }
  if (queue_.AllDone()) {
    if (liveness_.MarkFinished(w)) ChangeMembership();
    resp.set_kind(WorkResponse::DONE);
    return resp;
  }
  bool bounded = false;
  std::optional<int64_t> k = TakeReserved(w);
  if (!k) k = queue_.Lease(w, lease_window_, &bounded);
  if (k) {
    if (worker.idle) {
      // Back from idling: the ps must wait for it again before it pushes.
      queue_.Release(w);
      worker.idle = false;
      ChangeMembership();
      worker.admitted_at = membership_number_;
      resp.set_kind(WorkResponse::PAUSE);
      return resp;
    }
    resp.set_kind(WorkResponse::CHUNK);
    resp.set_chunk(*k);
    if (reserve_next_) ReserveNext(w, *k, &resp);
  } else if (bounded) {
    // Async: the slowest chunk is too far behind; this worker waits (and
    // stays in the set: it is not out of work).
    ++bound_answers_;
    resp.set_kind(WorkResponse::BOUND);
  } else {
    // Nothing to hand out until others finish (or fail): sync steps stop
    // waiting for this worker meanwhile.
    if (!worker.idle) {
      worker.idle = true;
      ChangeMembership();
    }
    resp.set_kind(WorkResponse::IDLE);
  }
  return resp;
}

absl::Status Dispatcher::Heartbeat(const HeartbeatRequest& req, absl::Time now) {
  const int w = req.worker_index();
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(queue_.CheckWorker(w));
  Touch(w, req.incarnation(), now);
  if (req.done() && liveness_.MarkFinished(w)) ChangeMembership();
  return absl::OkStatus();
}

std::vector<Dispatcher::Lost> Dispatcher::FindLost(absl::Time now, absl::Duration timeout,
                                                   bool hold_chunks) {
  absl::MutexLock lock(&mu_);
  std::vector<Lost> lost;
  for (const WorkerLiveness::Silent& s : liveness_.FindSilent(now, timeout)) {
    ChangeMembership();
    workers_[s.worker].excluded_at = membership_number_;
    workers_[s.worker].reserved = -1;
    if (hold_chunks) {
      std::vector<int64_t> held = queue_.LeasedTo(s.worker);
      const int n = static_cast<int>(held.size());
      lost.push_back({s.worker, n, s.silent_for, std::move(held)});
    } else {
      lost.push_back({s.worker, queue_.Release(s.worker), s.silent_for, {}});
    }
  }
  return lost;
}

Dispatcher::Settled Dispatcher::SettleLost(int w, const std::vector<int64_t>& held,
                                           const std::vector<int64_t>& applied) {
  absl::MutexLock lock(&mu_);
  Settled settled;
  for (int64_t k : held) {
    if (!queue_.Holds(w, k)) continue;
    if (std::binary_search(applied.begin(), applied.end(), k)) {
      queue_.Complete(w, k);
      ++settled.done;
    } else {
      queue_.Unreserve(w, k);
      ++settled.returned;
    }
  }
  return settled;
}

void Dispatcher::TakeReports(int w, const WorkRequest& req) {
  if (req.completed_generation() != generation_) return;  // of a life before a restore
  for (int64_t k : req.completed()) queue_.Complete(w, k);
  for (int64_t k : req.abandoned()) queue_.Return(w, k);
}

WorkResponse Dispatcher::Leave(int w, const WorkRequest& req) {
  Worker& worker = workers_[w];
  if (liveness_.alive(w)) TakeReports(w, req);
  worker.reserved = -1;
  const int released = queue_.Release(w);
  if (liveness_.alive(w) && !liveness_.finished(w)) {
    liveness_.MarkLost(w);
    worker.idle = false;
    ChangeMembership();
    worker.excluded_at = membership_number_;
    events_.push_back(absl::StrCat("worker ", w, " leaves the run (it stops)",
                                   released > 0 ? absl::StrCat("; ", released,
                                                               " chunk(s) it held go back to "
                                                               "the queue")
                                                : std::string()));
  }
  WorkResponse resp;
  resp.set_generation(generation_);
  resp.set_kind(WorkResponse::DONE);
  return resp;
}

void Dispatcher::MarkAbsent(int w) {
  absl::MutexLock lock(&mu_);
  if (w < 0 || w >= num_workers_ || !liveness_.alive(w)) return;
  liveness_.MarkLost(w);
  ChangeMembership();
  workers_[w].excluded_at = membership_number_;
  workers_[w].joining = true;
}

std::vector<bool> Dispatcher::Membership(int64_t* number) const {
  absl::MutexLock lock(&mu_);
  std::vector<bool> active;
  for (int w = 0; w < static_cast<int>(workers_.size()); ++w) {
    active.push_back(liveness_.running(w) && !workers_[w].idle);
  }
  *number = membership_number_;
  return active;
}

int64_t Dispatcher::membership_number() const {
  absl::MutexLock lock(&mu_);
  return membership_number_;
}

void Dispatcher::MembershipApplied(int64_t number) {
  absl::MutexLock lock(&mu_);
  membership_applied_ = std::max(membership_applied_, number);
}

void Dispatcher::Pause() {
  absl::MutexLock lock(&mu_);
  // A worker parked under an outer pause has started no step since.
  if (pauses_++ == 0) {
    for (Worker& w : workers_) w.parked = false;
    generation_at_pause_ = generation_;
  }
}

void Dispatcher::Resume() {
  absl::MutexLock lock(&mu_);
  if (pauses_ > 0 && --pauses_ == 0) unpaused_.SignalAll();
}

bool Dispatcher::AllParked() const {
  absl::MutexLock lock(&mu_);
  for (int w = 0; w < static_cast<int>(workers_.size()); ++w) {
    if (liveness_.running(w) && !workers_[w].parked) return false;
  }
  return true;
}

int64_t Dispatcher::bound_answers() const {
  absl::MutexLock lock(&mu_);
  return bound_answers_;
}

int64_t Dispatcher::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

void Dispatcher::set_generation(int64_t generation) {
  absl::MutexLock lock(&mu_);
  generation_ = generation;
}

absl::Status Dispatcher::Rewind(int chunks_per_epoch, const std::string& done_ranges,
                                int64_t generation) {
  absl::MutexLock lock(&mu_);
  if (chunks_per_epoch > 0) {
    PSCLUSTER_RETURN_IF_ERROR(queue_.SetChunksPerEpoch(chunks_per_epoch));
  }
  if (queue_.chunks_per_epoch() > 0) {
    PSCLUSTER_RETURN_IF_ERROR(queue_.RestoreDone(done_ranges));
  }
  generation_ = generation;
  return absl::OkStatus();
}

int Dispatcher::LeaseInFlight(const std::vector<std::pair<int, int64_t>>& held) {
  absl::MutexLock lock(&mu_);
  int leased = 0;
  for (const auto& [worker, chunk] : held) leased += queue_.LeaseTo(worker, chunk) ? 1 : 0;
  return leased;
}

bool Dispatcher::AllFinished() const {
  absl::MutexLock lock(&mu_);
  // A worker lost for good does not hold up the end: its chunks were done
  // by the others.
  return queue_.AllDone() && !liveness_.AnyRunning();
}

std::vector<std::string> Dispatcher::TakeEvents() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  out.swap(events_);
  return out;
}

absl::StatusOr<PlacementResponse> Dispatcher::GetPlacement() {
  absl::MutexLock lock(&mu_);
  return placement_;
}

void Dispatcher::SetPlacement(const std::vector<std::string>& ps_addresses) {
  absl::MutexLock lock(&mu_);
  const int64_t epoch = placement_.epoch();
  placement_.Clear();
  for (const std::string& a : ps_addresses) placement_.add_ps_addresses(a);
  placement_.set_epoch(epoch + 1);
}

}  // namespace pscluster
