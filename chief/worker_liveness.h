// WorkerLiveness: which workers are alive, judged by their contacts (work
// requests and heartbeats) and their process identities. A worker silent
// for longer than a timeout is lost, and a new process answering in place
// of a live one means the old one died; a lost worker that asks again is
// alive again. A finished worker (told the run is done) is no longer
// watched. Dispatcher and RingDispatcher share it; each reacts to a loss in
// its own way (leases given back, or the ring broken).
//
// Not thread-safe: its owner calls it under its own lock.
#ifndef PSCLUSTER_CHIEF_WORKER_LIVENESS_H_
#define PSCLUSTER_CHIEF_WORKER_LIVENESS_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace pscluster {

class WorkerLiveness {
 public:
  // Every worker counts as alive and heard from at `now` (a restarted
  // chief does not know better; a worker that is gone is noticed after the
  // timeout).
  WorkerLiveness(int num_workers, absl::Time now);

  // Counts every worker as heard from at `now` (when the plan goes out).
  void ResetContact(absl::Time now);

  // Records contact from process `incarnation` of worker `w` at `now`
  // (`w` in range). True when another process answers in place of a live
  // one (restarted faster than the timeout): `w` is then lost, and what the
  // old process held is void.
  bool Touch(int w, uint64_t incarnation, absl::Time now);

  struct Silent {
    int worker;
    absl::Duration silent_for;
  };
  // Workers alive and not finished whose last contact is older than
  // `timeout` at `now`: marked lost, in index order.
  std::vector<Silent> FindSilent(absl::Time now, absl::Duration timeout);

  bool alive(int w) const { return workers_[w].alive; }
  bool finished(int w) const { return workers_[w].finished; }
  // Alive and not finished: a worker the run still waits for.
  bool running(int w) const { return alive(w) && !finished(w); }
  // Whether any worker is running.
  bool AnyRunning() const;

  // A lost worker asked again: alive and not finished.
  void MarkBack(int w);
  // A worker that has not answered yet (absent at the start): lost until
  // it asks.
  void MarkLost(int w) { workers_[w].alive = false; }
  // The worker is done with the run; false when it was already.
  bool MarkFinished(int w);

 private:
  struct Worker {
    bool alive = true;
    bool finished = false;
    uint64_t incarnation = 0;  // 0: not heard from yet
    absl::Time last_contact;
  };
  std::vector<Worker> workers_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_WORKER_LIVENESS_H_
