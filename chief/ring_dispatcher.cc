#include "chief/ring_dispatcher.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

// Steps and rings count up from 0 one at a time: a value from
// 2^62 up (a step below -1, a negative ring id) is no worker's or
// checkpoint's, and the ring's numbering (the next step, the next
// ring id) must not overflow on it.
constexpr int64_t kMaxCount = int64_t{1} << 62;

}  // namespace

RingDispatcher::RingDispatcher(int num_workers, int epochs, absl::Time now)
    : queue_(num_workers, epochs), liveness_(num_workers, now), workers_(num_workers) {}

absl::Status RingDispatcher::SetBase(int64_t step, int chunks_per_epoch,
                                     const std::string& done_ranges, ShardState state) {
  if (step < 0 || step >= kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("the base step ", step, " is out of range [0, 2^62)"));
  }
  if (chunks_per_epoch > 0) {
    PSCLUSTER_RETURN_IF_ERROR(queue_.SetChunksPerEpoch(chunks_per_epoch));
  }
  {
    absl::MutexLock lock(&mu_);
    if (ring_id_ == 0 && chunks_per_epoch > 0) {
      // Before the first ring the base is where the run starts.
      PSCLUSTER_RETURN_IF_ERROR(queue_.RestoreDone(done_ranges));
    }
    base_step_ = step;
    base_done_ = done_ranges;
    highest_step_ = std::max(highest_step_, step);
    if (ring_id_ == 0) opened_ = step;
  }
  absl::MutexLock lock(&base_mu_);
  base_state_ = std::move(state);
  return absl::OkStatus();
}

absl::StatusOr<ShardState> RingDispatcher::GetReplica(const ReplicaRequest& request) {
  absl::MutexLock lock(&base_mu_);
  if (!base_state_.has_value()) return absl::UnavailableError("the chief holds no state yet");
  if (base_state_->version() != request.step() &&
      !(request.at_least() && base_state_->version() > request.step())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the chief holds the state of step ", base_state_->version(), ", not ", request.step()));
  }
  ShardState out = *base_state_;
  if (request.values_only()) out.clear_slots();
  return out;
}

int64_t RingDispatcher::base_step() const {
  absl::MutexLock lock(&mu_);
  return base_step_;
}

void RingDispatcher::ResetContact(absl::Time now) {
  absl::MutexLock lock(&mu_);
  liveness_.ResetContact(now);
}

bool RingDispatcher::InRing(int w) const {
  return std::find(members_.begin(), members_.end(), w) != members_.end();
}

void RingDispatcher::Break(const std::string& why) {
  if (!broken_ && ring_id_ > 0) {
    events_.push_back(absl::StrCat("ring ", ring_id_, " broke: ", why,
                                   "; forming a new one from the workers left"));
    abort_taken_ = false;
  }
  broken_ = ring_id_ > 0;
  if (!reform_) {
    reform_ = true;
    for (Worker& w : workers_) w.asked = false;
  }
}

void RingDispatcher::Touch(int w, uint64_t incarnation, absl::Time now) {
  // Restarted faster than the heartbeat timeout: its replica is gone.
  if (liveness_.Touch(w, incarnation, now) && InRing(w)) {
    Break(absl::StrCat("worker ", w, " restarted (a new process answers)"));
  }
}

void RingDispatcher::CompleteThrough(int64_t step) {
  highest_step_ = std::max(highest_step_, step);
  while (!open_chunks_.empty() && open_chunks_.begin()->first <= step) {
    const std::vector<int64_t>& chunks = open_chunks_.begin()->second;
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (chunks[i] >= 0) queue_.Complete(members_[i], chunks[i]);
    }
    open_chunks_.erase(open_chunks_.begin());
  }
}

bool RingDispatcher::ReadyToForm() const {
  int candidates = 0;
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (!liveness_.running(static_cast<int>(w))) continue;
    if (!workers_[w].asked) return false;
    ++candidates;
  }
  // The first ring waits for every worker; later ones for those alive.
  if (ring_id_ == 0) return candidates == static_cast<int>(workers_.size());
  return candidates > 0;
}

void RingDispatcher::Form() {
  std::vector<int> members;
  int64_t newest = -1;
  int holder = -1;
  for (size_t w = 0; w < workers_.size(); ++w) {
    const Worker& worker = workers_[w];
    if (!liveness_.running(static_cast<int>(w)) || !worker.asked) continue;
    members.push_back(static_cast<int>(w));
    if (worker.trusted && worker.completed > newest) {
      newest = worker.completed;
      holder = static_cast<int>(w);
    }
  }
  // Steps opened that no survivor completed: their chunks are to do again.
  for (const auto& [step, chunks] : open_chunks_) {
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (chunks[i] >= 0) queue_.Return(members_[i], chunks[i]);
    }
  }
  open_chunks_.clear();
  std::string from;
  if (holder < 0 || newest < base_step_) {
    // No live replica is as new as the chief's base: every one starts
    // from it, and the data from its position.
    source_ = -1;
    start_step_ = base_step_ + 1;
    if (queue_.chunks_per_epoch() > 0) (void)queue_.RestoreDone(base_done_);
    from = ring_id_ == 0 && base_step_ == 0 ? "the initial weights"
                                               : absl::StrCat("the chief's checkpoint of step ",
                                                              base_step_);
  } else {
    source_ = holder;
    start_step_ = newest + 1;
    from = absl::StrCat("worker ", holder, "'s replica");
  }
  // Above every ring id a worker reports: a restarted chief must not
  // number a ring as one the workers were in before.
  ring_id_ = std::max(ring_id_, highest_reported_) + 1;
  members_ = std::move(members);
  opened_ = start_step_ - 1;
  int fetching = 0;
  for (int w : members_) {
    Worker& worker = workers_[w];
    worker.fetch = !worker.trusted || worker.completed != start_step_ - 1 || source_ < 0;
    worker.trusted = worker.trusted && !worker.fetch;
    fetching += worker.fetch ? 1 : 0;
    worker.asked = false;
  }
  reform_ = false;
  broken_ = false;
  events_.push_back(absl::StrCat("ring ", ring_id_, ": workers [",
                                 absl::StrJoin(members_, ", "), "] from step ", start_step_,
                                 "; ", fetching, " take the state of step ", start_step_ - 1,
                                 " from ", from));
}

bool RingDispatcher::OpenNext() {
  std::vector<int64_t> chunks;
  bool any = false;
  for (int w : members_) {
    std::optional<int64_t> k = queue_.Lease(w);
    chunks.push_back(k.value_or(-1));
    any = any || k.has_value();
  }
  if (!any) return false;
  ++opened_;
  open_chunks_[opened_] = std::move(chunks);
  return true;
}

absl::StatusOr<RingWorkResponse> RingDispatcher::RingWork(const RingWorkRequest& req,
                                                         absl::Time now) {
  const int w = req.worker_index();
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(queue_.CheckWorker(w));
  if (req.completed_step() < -1 || req.completed_step() >= kMaxCount ||
      req.state_ring_id() < 0 || req.state_ring_id() >= kMaxCount ||
      req.failed_ring_id() < 0 || req.failed_ring_id() >= kMaxCount) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", w, ": completed_step ", req.completed_step(), ", state_ring_id ",
        req.state_ring_id(), " or failed_ring_id ", req.failed_ring_id(),
        " is out of range (steps from -1, ring ids from 0, both below 2^62)"));
  }
  PSCLUSTER_RETURN_IF_ERROR(queue_.SetChunksPerEpoch(req.chunks_per_epoch()));
  Touch(w, req.incarnation(), now);
  Worker& worker = workers_[w];
  if (!liveness_.alive(w)) {
    // Back after it was lost: whatever its replica holds is of a ring that
    // went on without it.
    liveness_.MarkBack(w);
    worker.trusted = false;
    events_.push_back(absl::StrCat("worker ", w, " is back"));
  }
  worker.completed = req.completed_step();
  highest_reported_ = std::max(highest_reported_, req.state_ring_id());
  const bool member = InRing(w);
  if (member && worker.fetch && req.state_ring_id() == ring_id_) {
    worker.fetch = false;  // it holds the state it took
    worker.trusted = true;
  }
  if (member && !worker.fetch) CompleteThrough(worker.completed);
  if (member && req.failed_ring_id() == ring_id_) {
    Break(absl::StrCat("worker ", w, "'s all-reduce failed"));
  }
  if (!member && !liveness_.finished(w) && ring_id_ > 0 && !reform_) {
    // A ring is formed again once its open step is done, with this worker.
    reform_ = true;
    for (Worker& other : workers_) other.asked = false;
    events_.push_back(absl::StrCat("worker ", w, " joins the ring after step ", opened_));
  }
  RingWorkResponse resp;
  resp.set_ring_id(ring_id_);
  if (queue_.AllDone() && open_chunks_.empty()) {
    liveness_.MarkFinished(w);
    resp.set_kind(RingWorkResponse::DONE);
    return resp;
  }
  if (member && !broken_) {
    // Its next step, or the ring's first when it must take the state.
    const int64_t step = worker.fetch ? start_step_ : worker.completed + 1;
    if (step == opened_ + 1 && pauses_ == 0 && !reform_) OpenNext();
    auto it = open_chunks_.find(step);
    if (it != open_chunks_.end()) {
      resp.set_kind(RingWorkResponse::STEP);
      resp.set_step(step);
      for (int m : members_) resp.add_members(m);
      resp.set_rank(static_cast<int>(std::find(members_.begin(), members_.end(), w) -
                                     members_.begin()));
      for (int64_t k : it->second) resp.add_chunks(k);
      if (worker.fetch) {
        resp.set_fetch_state(true);
        resp.set_state_from(source_);
      }
      return resp;
    }
  }
  // No step for it now: it waits, in none.
  worker.asked = true;
  if (reform_ && ReadyToForm()) Form();
  resp.set_kind(RingWorkResponse::WAIT);
  return resp;
}

absl::Status RingDispatcher::Heartbeat(const HeartbeatRequest& req, absl::Time now) {
  const int w = req.worker_index();
  absl::MutexLock lock(&mu_);
  PSCLUSTER_RETURN_IF_ERROR(queue_.CheckWorker(w));
  Touch(w, req.incarnation(), now);
  return absl::OkStatus();
}

std::vector<int> RingDispatcher::FindLost(absl::Time now, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  std::vector<int> lost;
  for (const WorkerLiveness::Silent& s : liveness_.FindSilent(now, timeout)) {
    lost.push_back(s.worker);
    events_.push_back(absl::StrCat("worker ", s.worker, " lost: no heartbeat for ",
                                   absl::FormatDuration(s.silent_for)));
    if (InRing(s.worker)) Break(absl::StrCat("worker ", s.worker, " was lost"));
  }
  // A ring waiting to be formed may now be ready (the lost one was the
  // last it waited for); the next request forms it.
  return lost;
}

std::optional<RingDispatcher::Abort> RingDispatcher::TakeAbort() {
  absl::MutexLock lock(&mu_);
  if (!broken_ || abort_taken_) return std::nullopt;
  abort_taken_ = true;
  return Abort{ring_id_, members_};
}

void RingDispatcher::Pause() {
  absl::MutexLock lock(&mu_);
  ++pauses_;
  for (Worker& w : workers_) w.asked = false;
}

void RingDispatcher::Resume() {
  absl::MutexLock lock(&mu_);
  if (pauses_ > 0) --pauses_;
}

bool RingDispatcher::AllParked(int64_t* step, int* source, std::string* done_ranges) const {
  absl::MutexLock lock(&mu_);
  if (pauses_ == 0 || reform_ || ring_id_ == 0 || members_.empty()) return false;
  for (int w : members_) {
    const Worker& worker = workers_[w];
    if (!liveness_.alive(w) || !worker.asked || worker.completed != opened_) return false;
  }
  *step = opened_;
  *source = members_.front();
  *done_ranges = queue_.SaveDone();
  return true;
}

bool RingDispatcher::Settled() const {
  absl::MutexLock lock(&mu_);
  if (ring_id_ == 0 || reform_) return false;
  for (int w : members_) {
    if (workers_[w].fetch) return false;
  }
  return true;
}

bool RingDispatcher::AllFinished() const {
  absl::MutexLock lock(&mu_);
  return queue_.AllDone() && queue_.total() > 0 && !liveness_.AnyRunning();
}

int64_t RingDispatcher::ring_id() const {
  absl::MutexLock lock(&mu_);
  return ring_id_;
}

std::vector<int> RingDispatcher::members() const {
  absl::MutexLock lock(&mu_);
  return members_;
}

int64_t RingDispatcher::highest_step() const {
  absl::MutexLock lock(&mu_);
  return highest_step_;
}

std::vector<std::string> RingDispatcher::TakeEvents() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  out.swap(events_);
  return out;
}

}  // namespace pscluster
