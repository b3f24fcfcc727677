// AnsweredPushes: the answers a store gave to each worker's recent pushes,
// by request id, so that a push sent again (its answer was lost, or the
// worker does not know whether the ps it sent it to applied it before it
// was lost) is answered as the first time and never applied twice.
//
// Not thread-safe: its owner (ParameterStore) calls it under its lock.
#ifndef PSCLUSTER_UPDATE_ANSWERED_PUSHES_H_
#define PSCLUSTER_UPDATE_ANSWERED_PUSHES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace pscluster {

struct PushResult {
  // Async: applied. Sync: taken into the step being gathered (whether it
  // ends up among the step's members is StepOutcome's answer); false when
  // dropped at once.
  bool applied = false;
  int64_t version = 0;    // the store's version after the push
  int64_t staleness = 0;  // versions between the gradient and the store
};

class AnsweredPushes {
 public:
  struct Answer {
    uint64_t request_id;
    PushResult result;
  };
  // The answers kept per worker, the newest.
  static constexpr size_t kWindow = 256;

  // `num_workers` workers, no answer remembered.
  void Reset(int num_workers) { answers_.assign(num_workers, {}); }

  // The answer to worker w's push `request_id` when remembered, else null.
  const PushResult* Find(int w, uint64_t request_id) const {
    for (const Answer& a : answers_[w]) {
      if (a.request_id == request_id) return &a.result;
    }
    return nullptr;
  }

  // Remembers worker w's answer to push `request_id` (0: a push without an
  // id, never remembered).
  void Remember(int w, uint64_t request_id, const PushResult& result) {
    if (request_id == 0) return;
    std::deque<Answer>& mine = answers_[w];
    mine.push_back({request_id, result});
    if (mine.size() > kWindow) mine.pop_front();
  }

  int num_workers() const { return static_cast<int>(answers_.size()); }
  // Worker w's answers, oldest first.
  const std::deque<Answer>& of(int w) const { return answers_[w]; }

 private:
  std::vector<std::deque<Answer>> answers_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_ANSWERED_PUSHES_H_
