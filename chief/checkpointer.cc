#include "chief/checkpointer.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chief/work_queue.h"
#include "common/parallel_for.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"
#include "spdlog/spdlog.h"

namespace pscluster {

Checkpointer::Checkpointer(const CheckpointerOptions& options, const ModelSpec* spec,
                           const Placement* placement, PsFleet* fleet, Dispatcher* dispatcher,
                           const std::atomic<bool>* stop, absl::Time run_started)
    : options_(options),
      spec_(spec),
      placement_(placement),
      fleet_(fleet),
      dispatcher_(dispatcher),
      stop_(*stop),
      run_started_(run_started),
      last_time_(absl::Now()) {
  for (const VariableSpec& v : spec->variables) has_tables_ |= v.table_rows != 0;
}

bool Checkpointer::Due(absl::Time now, int64_t highest_version) const {
  const bool steps_due =
      options_.every_steps > 0 && highest_version - last_step_ >= options_.every_steps;
  const bool time_due = options_.every > absl::ZeroDuration() && now - last_time_ >= options_.every;
  return steps_due || time_due;
}

absl::StatusOr<Snapshot> Checkpointer::TakeSnapshot(bool workers_idle, absl::Duration* paused) {
  // Each ps's bytes of state: its shards' values and slots (3x the floats
  // for Adam), and the rows of its sparse tables, as many as it holds by
  // now (asked before the pause).
  std::vector<double> bytes(fleet_->num_ps());
  for (int i = 0; i < fleet_->num_ps(); ++i) {
    bytes[i] = 3.0 * placement_->floats_of_ps[i] * 4;
    if (has_tables_) {
      absl::StatusOr<PsStatsResponse> stats = fleet_->Stats(i, absl::Seconds(2));
      if (!stats.ok()) return stats.status();
      bytes[i] += static_cast<double>(stats->sparse_bytes());
    }
  }
  Snapshot snap;
  const absl::Time pause_start = absl::Now();
  {
    PausedWorkers pause(dispatcher_);
    absl::Status s = CaptureWhilePaused(workers_idle, bytes, &snap);
    *paused = absl::Now() - pause_start;
    if (!s.ok()) return s;
  }
  // The workers train on while each ps sends the state it set aside, all
  // at once.
  const int n = fleet_->num_ps();
  std::vector<absl::Status> status(n);
  auto fetch = [&](int i) -> absl::Status {
    // Each byte copied about three times (into the message, onto the
    // wire, out of it) at 100 MB/s or better.
    const absl::Duration timeout = absl::Seconds(2) + absl::Seconds(3 * bytes[i] / 100e6);
    absl::StatusOr<ShardState> state = fleet_->FetchCapturedSnapshot(i, timeout);
    if (!state.ok()) return state.status();
    const ShardState& header = snap.ps[i];
    if (state->version() != header.version() || state->generation() != header.generation()) {
      // Another capture (a second chief?) replaced this one.
      return absl::AbortedError(absl::StrCat(
          "ps:", i, " sent a state of version ", state->version(), " generation ",
          state->generation(), ", not the one captured (version ", header.version(),
          " generation ", header.generation(), ")"));
    }
    snap.ps[i] = *std::move(state);
    return absl::OkStatus();
  };
  ParallelFor(n, /*min_range=*/1, /*threads=*/n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) status[i] = fetch(static_cast<int>(i));
  });
  for (const absl::Status& s : status) PSCLUSTER_RETURN_IF_ERROR(s);
  return snap;
}

absl::Status Checkpointer::CaptureWhilePaused(bool workers_idle, const std::vector<double>& bytes,
                                              Snapshot* snap) {
  // Async: wait until no worker is in the middle of a step. Sync: a step
  // completes on every ps or on none, so equal versions suffice.
  // A worker whose push waits on a lost ps never parks: each ps is asked
  // every 200 ms, and a lost one ends the wait at once (the checkpoint is
  // skipped; the ps checks take over), not after 10 s of training paused.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  absl::Time next_probe = absl::Now() + absl::Milliseconds(200);
  while (!workers_idle && options_.mode == ASYNC && !dispatcher_->AllParked()) {
    if (absl::Now() >= give_up || stop_) {
      return absl::DeadlineExceededError("workers did not pause within 10 s");
    }
    if (absl::Now() >= next_probe) {
      for (int i = 0; i < fleet_->num_ps(); ++i) {
        absl::StatusOr<PsStatsResponse> st = fleet_->Stats(i, absl::Milliseconds(200));
        if (!st.ok() || !st->initialized()) {
          return absl::UnavailableError(absl::StrCat(
              "ps:", i, " is lost while the workers pause: ",
              st.ok() ? "it restarted" : std::string(st.status().message())));
        }
      }
      next_probe = absl::Now() + absl::Milliseconds(200);
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  // Sync: a step completes on every ps or on none, but not at the same
  // instant (a worker pushes to one ps, then to the next). Wait until the
  // versions agree, asking for them (cheap) rather than for the shards, for
  // up to settle_timeout (a second): far longer than a worker takes between two pushes, also
  // on a loaded machine, and short enough not to hold up the chief's checks
  // of the workers when one died between its pushes (the ps then disagree
  // until its chunk is trained again, and this checkpoint is skipped).
  const absl::Time settle_by = absl::Now() + options_.settle_timeout;
  for (;;) {
    std::string apart;
    PSCLUSTER_RETURN_IF_ERROR(WaitForOneVersion(settle_by, &apart));
    if (!apart.empty()) {
      return absl::DeadlineExceededError(
          absl::StrCat("the ps did not settle on one version within ",
                       absl::FormatDuration(options_.settle_timeout), " (", apart, ")"));
    }
    *snap = Snapshot();
    snap->run_started_unix_ms = absl::ToUnixMillis(run_started_);
    snap->generation = dispatcher_->generation();
    snap->done_chunks = dispatcher_->SaveDone();
    snap->chunks_per_epoch = dispatcher_->chunks_per_epoch();
    snap->placement_max_ps = placement_->max_ps;
    bool consistent = true;
    for (int i = 0; i < fleet_->num_ps(); ++i) {
      // Each ps copies its state aside in memory (the values, slots and
      // rows once: about a GB/s) and answers its version: the workers wait
      // for that copy, not for the transfer. Short: an unreachable ps must
      // not hold the chief (and the paused workers) here; the checkpoint is
      // skipped and the ps checks notice.
      const absl::Duration timeout = absl::Seconds(2) + absl::Seconds(bytes[i] / 1e9);
      absl::StatusOr<ShardState> header = fleet_->CaptureSnapshot(i, timeout);
      if (!header.ok()) return header.status();
      if (header->generation() != snap->generation ||
          (i > 0 && options_.mode == SYNC && header->version() != snap->ps[0].version())) {
        consistent = false;
      }
      snap->ps.push_back(*std::move(header));
    }
    if (consistent) {
      snap->step = snap->ps[0].version();
      for (const ShardState& s : snap->ps) snap->step = std::min(snap->step, s.version());
      if (options_.mode == SYNC) {
        // A worker reports its chunk done when it next asks for work, so the
        // done set read above may lack chunks of the last steps the ps took
        // (the worker between its push's answer and that request): restored,
        // they would be trained again, a step more than the run has. Each
        // ps names the chunks of its last steps; in sync every ps took the
        // same ones, and any of them holds all of a step's. (Async waited
        // above until every worker asked.)
        std::vector<int64_t> applied;
        for (const ShardState& s : snap->ps) {
          applied.insert(applied.end(), s.recent_chunks().begin(), s.recent_chunks().end());
        }
        absl::StatusOr<std::string> done = WorkQueue::AddDone(snap->done_chunks, applied);
        if (!done.ok()) return done.status();
        snap->done_chunks = *std::move(done);
      }
      return absl::OkStatus();
    }
    // A step completed on some ps between the two looks: look again.
  }
}

absl::Status Checkpointer::WaitForOneVersion(absl::Time deadline, std::string* apart) {
  for (;;) {
    const int64_t generation = dispatcher_->generation();
    std::string where;  // "ps:0 at version 325 generation 0, ps:1 at ..."
    bool agree = true;
    int64_t version0 = 0;
    for (int i = 0; i < fleet_->num_ps(); ++i) {
      absl::StatusOr<PsStatsResponse> st = fleet_->Stats(i, absl::Seconds(2));
      if (!st.ok()) return st.status();
      if (i == 0) version0 = st->version();
      agree = agree && st->generation() == generation &&
              (options_.mode != SYNC || st->version() == version0);
      absl::StrAppend(&where, i == 0 ? "" : ", ", "ps:", i, " at version ", st->version(),
                      " generation ", st->generation());
    }
    apart->clear();
    if (agree) return absl::OkStatus();
    *apart = absl::StrCat(where, "; the run is at generation ", generation);
    if (absl::Now() >= deadline || stop_) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::Status Checkpointer::Take(const char* why, int64_t highest_version, bool workers_idle,
                                bool required, bool to_disk) {
  absl::Duration paused;
  absl::StatusOr<Snapshot> snap = TakeSnapshot(workers_idle, &paused);
  if (!snap.ok() && required) return snap.status();
  if (!snap.ok()) {
    spdlog::warn("checkpoint ({}) skipped: {}", why, std::string(snap.status().message()));
    // Try again after another interval, not at once.
    last_step_ = highest_version;
    last_time_ = absl::Now();
    return absl::OkStatus();
  }
  latest_ = *std::move(snap);
  last_step_ = latest_->step;
  last_time_ = absl::Now();
  const std::string pause_note =
      absl::StrFormat("workers paused %.1f ms", absl::ToDoubleMilliseconds(paused));
  if (options_.dir.empty() || !to_disk) {
    spdlog::info("checkpoint ({}) at step {} kept in memory{} ({})", why, latest_->step,
                 options_.dir.empty() ? "" : " until training goes on", pause_note);
    return absl::OkStatus();
  }
  return WriteToDisk(why, pause_note);
}

absl::Status Checkpointer::WriteLatest(const char* why) {
  if (options_.dir.empty() || !latest_) return absl::OkStatus();
  return WriteToDisk(why, "training went on meanwhile");
}

absl::Status Checkpointer::WriteToDisk(const char* why, const std::string& note) {
  const absl::Time t0 = absl::Now();
  PSCLUSTER_RETURN_IF_ERROR(
      WriteCheckpoint(options_.dir, ToCheckpoint(*latest_, *spec_, options_.mode), options_.keep));
  spdlog::info("checkpoint ({}) at step {} written to {} in {:.1f} ms ({})", why, latest_->step,
               options_.dir, absl::ToDoubleMilliseconds(absl::Now() - t0), note);
  return absl::OkStatus();
}

absl::StatusOr<const Snapshot*> Checkpointer::ReadNewestFromDisk() {
  if (options_.dir.empty()) return absl::NotFoundError("no checkpoint directory");
  absl::StatusOr<Checkpoint> c = ReadLatestCheckpoint(options_.dir);
  if (!c.ok()) return c.status();
  absl::StatusOr<Snapshot> snap =
      FromCheckpointFor(*c, *spec_, options_.min_shard_bytes, *placement_);
  if (!snap.ok()) return snap.status();
  latest_ = *std::move(snap);
  last_step_ = latest_->step;
  return &*latest_;
}

}  // namespace pscluster
