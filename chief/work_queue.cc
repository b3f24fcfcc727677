#include "chief/work_queue.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pscluster {

WorkQueue::WorkQueue(int num_workers, int epochs)
    : num_workers_(num_workers), epochs_(epochs), leases_(std::max(num_workers, 0)) {}

absl::Status WorkQueue::CheckWorker(int worker) const {
  if (worker >= 0 && worker < num_workers_) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("worker index ", worker, " is not in this cluster of ", num_workers_));
}

absl::Status WorkQueue::SetChunksPerEpoch(int chunks_per_epoch) {
  absl::MutexLock lock(&mu_);
  if (chunks_per_epoch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunks per epoch must be at least 1, got ", chunks_per_epoch));
  }
  if (int64_t{chunks_per_epoch} * epochs_ > kMaxChunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        chunks_per_epoch, " chunks per epoch over ", epochs_, " epochs exceed the chief's limit of ",
        kMaxChunks, " chunks"));
  }
  if (chunks_per_epoch_ != 0 && chunks_per_epoch_ != chunks_per_epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a worker counts ", chunks_per_epoch, " batches per epoch but another counted ",
        chunks_per_epoch_, ": their training data differ"));
  }
  chunks_per_epoch_ = chunks_per_epoch;
  EnsureSized();
  return absl::OkStatus();
}

void WorkQueue::EnsureSized() {
  const size_t total = static_cast<size_t>(chunks_per_epoch_) * epochs_;
  if (state_.size() != total) {
    state_.assign(total, State::kTodo);
    owner_.assign(total, -1);
    ForgetLeases();
    first_todo_ = 0;
    first_undone_ = 0;
    done_ = 0;
  }
}

int WorkQueue::chunks_per_epoch() const {
  absl::MutexLock lock(&mu_);
  return chunks_per_epoch_;
}

int64_t WorkQueue::total() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(state_.size());
}

std::optional<int64_t> WorkQueue::Lease(int worker, int64_t window, bool* bounded) {
  absl::MutexLock lock(&mu_);
  if (bounded != nullptr) *bounded = false;
  if (!SkipToTodo() || worker < 0 || worker >= num_workers_) return std::nullopt;
  if (PastWindow(first_todo_, window)) {
    if (bounded != nullptr) *bounded = true;
    return std::nullopt;
  }
  const int64_t k = first_todo_++;
  LeaseLocked(worker, k);
  return k;
}

void WorkQueue::LeaseLocked(int worker, int64_t chunk) {
  state_[chunk] = State::kLeased;
  owner_[chunk] = worker;
  leases_[worker].push_back(chunk);
}

void WorkQueue::EndLease(int worker, int64_t chunk, State to) {
  state_[chunk] = to;
  owner_[chunk] = -1;
  if (to == State::kTodo) first_todo_ = std::min(first_todo_, chunk);
  // A worker holds a chunk or two (its step's, a reserved next one).
  std::vector<int64_t>& held = leases_[worker];
  auto it = std::find(held.begin(), held.end(), chunk);
  if (it != held.end()) {
    *it = held.back();
    held.pop_back();
  }
}

void WorkQueue::ForgetLeases() {
  for (std::vector<int64_t>& held : leases_) held.clear();
}

bool WorkQueue::SkipToTodo() {
  const int64_t n = static_cast<int64_t>(state_.size());
  while (first_todo_ < n && state_[first_todo_] != State::kTodo) ++first_todo_;
  return first_todo_ < n;
}

bool WorkQueue::PastWindow(int64_t chunk, int64_t window) {
  const int64_t n = static_cast<int64_t>(state_.size());
  while (first_undone_ < n && state_[first_undone_] == State::kDone) ++first_undone_;
  return window > 0 && chunk - first_undone_ >= window;
}

bool WorkQueue::LeasedTo(int worker, int64_t chunk) const {
  return chunk >= 0 && chunk < static_cast<int64_t>(state_.size()) &&
         state_[chunk] == State::kLeased && owner_[chunk] == worker;
}

bool WorkQueue::LeaseTo(int worker, int64_t chunk) {
  absl::MutexLock lock(&mu_);
  if (worker < 0 || worker >= num_workers_ || chunk < 0 ||
      chunk >= static_cast<int64_t>(state_.size()) || state_[chunk] != State::kTodo) {
    return false;
  }
  LeaseLocked(worker, chunk);
  return true;
}

bool WorkQueue::Reserve(int worker, int64_t chunk, int64_t window) {
  absl::MutexLock lock(&mu_);
  const int64_t n = static_cast<int64_t>(state_.size());
  if (worker < 0 || worker >= num_workers_ || chunk < 0 || chunk >= n ||
      state_[chunk] != State::kTodo) {
    return false;
  }
  if (PastWindow(chunk, window)) return false;
  LeaseLocked(worker, chunk);
  return true;
}

bool WorkQueue::Holds(int worker, int64_t chunk) const {
  absl::MutexLock lock(&mu_);
  return LeasedTo(worker, chunk);
}

void WorkQueue::Unreserve(int worker, int64_t chunk) {
  absl::MutexLock lock(&mu_);
  if (!LeasedTo(worker, chunk)) return;
  EndLease(worker, chunk, State::kTodo);
}

std::optional<int64_t> WorkQueue::LowestTodo() {
  absl::MutexLock lock(&mu_);
  if (!SkipToTodo()) return std::nullopt;
  return first_todo_;
}

void WorkQueue::Complete(int worker, int64_t chunk) {
  absl::MutexLock lock(&mu_);
  if (!LeasedTo(worker, chunk)) return;
  EndLease(worker, chunk, State::kDone);
  ++done_;
}

void WorkQueue::Return(int worker, int64_t chunk) {
  absl::MutexLock lock(&mu_);
  if (!LeasedTo(worker, chunk)) return;
  ++returned_;
  EndLease(worker, chunk, State::kTodo);
}

int WorkQueue::Release(int worker) {
  absl::MutexLock lock(&mu_);
  if (worker < 0 || worker >= num_workers_) return 0;
  std::vector<int64_t> held;
  held.swap(leases_[worker]);
  for (int64_t k : held) {
    state_[k] = State::kTodo;
    owner_[k] = -1;
    first_todo_ = std::min(first_todo_, k);
  }
  return static_cast<int>(held.size());
}

std::vector<int64_t> WorkQueue::LeasedTo(int worker) const {
  absl::MutexLock lock(&mu_);
  if (worker < 0 || worker >= num_workers_) return {};
  return leases_[worker];
}

void WorkQueue::ReleaseAll() {
  absl::MutexLock lock(&mu_);
  for (size_t k = 0; k < state_.size(); ++k) {
    if (state_[k] == State::kLeased) {
      state_[k] = State::kTodo;
      owner_[k] = -1;
      first_todo_ = std::min<int64_t>(first_todo_, k);
    }
  }
  ForgetLeases();
}

bool WorkQueue::AllDone() const {
  absl::MutexLock lock(&mu_);
  return !state_.empty() && done_ == static_cast<int64_t>(state_.size());
}

int64_t WorkQueue::returned_count() const {
  absl::MutexLock lock(&mu_);
  return returned_;
}

int64_t WorkQueue::done_count() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

std::string WorkQueue::SaveDone() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  const int64_t n = static_cast<int64_t>(state_.size());
  for (int64_t k = 0; k < n;) {
    if (state_[k] != State::kDone) {
      ++k;
      continue;
    }
    int64_t end = k;
    while (end + 1 < n && state_[end + 1] == State::kDone) ++end;
    absl::StrAppend(&out, out.empty() ? "" : ",", k, "-", end);
    k = end + 1;
  }
  return out;
}

namespace {

// SaveDone's "0-99,120-130" as [first, last] pairs, each below `n`.
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> ParseRanges(const std::string& ranges,
                                                                    int64_t n) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (absl::string_view range : absl::StrSplit(ranges, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> ends = absl::StrSplit(range, '-');
    int64_t first = 0, last = 0;
    if (ends.size() != 2 || !absl::SimpleAtoi(ends[0], &first) ||
        !absl::SimpleAtoi(ends[1], &last) || first < 0 || last < first || last >= n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "done-chunk range '", range, "' is malformed or beyond the run's ", n, " chunks"));
    }
    out.emplace_back(first, last);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> WorkQueue::AddDone(const std::string& ranges,
                                               absl::Span<const int64_t> chunks) {
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> parsed =
      ParseRanges(ranges, std::numeric_limits<int64_t>::max());
  if (!parsed.ok()) return parsed.status();
  for (int64_t k : chunks) {
    if (k < 0) return absl::InvalidArgumentError(absl::StrCat("chunk ", k, " is negative"));
    parsed->emplace_back(k, k);
  }
  std::sort(parsed->begin(), parsed->end());
  std::string out;
  for (size_t i = 0; i < parsed->size();) {
    const int64_t first = (*parsed)[i].first;
    int64_t last = (*parsed)[i].second;
    // Overlapping or adjacent ranges join.
    for (++i; i < parsed->size() && (*parsed)[i].first <= last + 1; ++i) {
      last = std::max(last, (*parsed)[i].second);
    }
    absl::StrAppend(&out, out.empty() ? "" : ",", first, "-", last);
  }
  return out;
}

absl::Status WorkQueue::RestoreDone(const std::string& ranges) {
  absl::MutexLock lock(&mu_);
  const int64_t n = static_cast<int64_t>(state_.size());
  std::vector<State> state(n, State::kTodo);
  int64_t done = 0;
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> parsed = ParseRanges(ranges, n);
  if (!parsed.ok()) return parsed.status();
  for (const auto& [first, last] : *parsed) {
    for (int64_t k = first; k <= last; ++k) {
      if (state[k] != State::kDone) ++done;
      state[k] = State::kDone;
    }
  }
  state_ = std::move(state);
  owner_.assign(n, -1);
  ForgetLeases();
  first_todo_ = 0;
  first_undone_ = 0;
  done_ = done;
  return absl::OkStatus();
}

}  // namespace pscluster
