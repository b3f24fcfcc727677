#include "chief/cluster_tasks.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/retry.h"
#include "common/rpc.h"
#include "proto/coordination.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace pscluster {

ClusterTasks::ClusterTasks(const ClusterSpec& cluster, const std::atomic<bool>* stop)
    : stop_(stop),
      num_ps_(cluster.num_tasks(kPsJob)),
      num_workers_(cluster.num_tasks(kWorkerJob)),
      num_evaluators_(cluster.num_tasks(kEvaluatorJob)) {
  for (const char* job : {kPsJob, kWorkerJob, kEvaluatorJob}) {
    for (int index : cluster.task_indices(job)) {
      Task t;
      t.id = {job, index};
      t.address = *cluster.address(job, index);
      t.channel = MakeChannel(t.address);
      tasks_.push_back(std::move(t));
    }
  }
}

std::string ClusterTasks::Name(const Task& t) {
  return absl::StrCat(t.id.type, ":", t.id.index, " (", t.address, ")");
}

std::vector<std::shared_ptr<grpc::Channel>> ClusterTasks::ps_channels() const {
  std::vector<std::shared_ptr<grpc::Channel>> out;
  for (const Task& t : tasks_) {
    if (t.id.type == kPsJob) out.push_back(t.channel);
  }
  return out;
}

absl::Status ClusterTasks::WaitUntilServing(absl::Duration timeout, int min_workers, int min_ps) {
  const int needed_workers = min_workers > 0 ? min_workers : num_workers_;
  const int needed_ps = min_ps > 0 ? min_ps : num_ps_;
  spdlog::info(
      "waiting for {} tasks: {} ps{}, {} workers{}, {} evaluator", tasks_.size(), num_ps_,
      needed_ps < num_ps_ ? absl::StrCat(" (the first ", needed_ps, " to start)") : std::string(),
      num_workers_,
      needed_workers < num_workers_ ? absl::StrCat(" (", needed_workers, " to start)")
                                    : std::string(),
      num_evaluators_);
  const absl::Time give_up = absl::Now() + timeout;
  std::vector<bool> up(tasks_.size(), false);
  while (true) {
    std::vector<std::string> missing, missing_later;
    int workers_up = 0, ps_seen = 0;
    for (size_t i = 0; i < tasks_.size(); ++i) {
      if (!up[i]) up[i] = IsServing(*tasks_[i].channel, std::chrono::milliseconds(500));
      const bool worker = tasks_[i].id.type == kWorkerJob;
      // Ps past the first min_ps, and workers, may come later.
      const bool later = worker || (tasks_[i].id.type == kPsJob && ps_seen++ >= needed_ps);
      if (up[i] && worker) ++workers_up;
      if (!up[i]) (later ? missing_later : missing).push_back(Name(tasks_[i]));
    }
    if (missing.empty() && workers_up >= needed_workers) break;
    if (*stop_) return absl::CancelledError("stopped while waiting for the cluster");
    if (absl::Now() >= give_up) {
      missing.insert(missing.end(), missing_later.begin(), missing_later.end());
      return absl::DeadlineExceededError(absl::StrCat(
          "these tasks did not answer within ", absl::FormatDuration(timeout), ": ",
          absl::StrJoin(missing, ", "),
          needed_workers < num_workers_ ? absl::StrCat(" (", workers_up, " of the ", needed_workers,
                                                       " workers of --min_workers answer)")
                                        : ""));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  // The ps in use: the first min_ps, and each next one that answers too.
  ps_serving_ = 0;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (tasks_[i].id.type != kPsJob) continue;
    if (!up[i]) break;
    ++ps_serving_;
  }
  if (ps_serving_ < num_ps_) {
    spdlog::info("starting on {} of {} ps (--min_ps={}); the others are added when they answer",
                 ps_serving_, num_ps_, min_ps);
  }
  absent_workers_.clear();
  std::vector<std::string> absent;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (up[i] || tasks_[i].id.type != kWorkerJob) continue;
    absent_workers_.push_back(tasks_[i].id.index);
    absent.push_back(Name(tasks_[i]));
  }
  if (absent.empty()) {
    spdlog::info("all tasks answer");
  } else {
    spdlog::info(
        "starting with {} of {} workers (--min_workers={}); these join when they answer: {}",
        num_workers_ - static_cast<int>(absent.size()), num_workers_, min_workers,
        absl::StrJoin(absent, ", "));
  }
  return absl::OkStatus();
}

std::vector<int> ClusterTasks::absent_workers() const { return absent_workers_; }

bool ClusterTasks::has_evaluator() const { return num_evaluators_ > 0; }

absl::StatusOr<EvalReport> ClusterTasks::Evaluate(int64_t min_version, absl::Duration timeout) {
  for (const Task& t : tasks_) {
    if (t.id.type != kEvaluatorJob) continue;
    auto stub = TaskControl::NewStub(t.channel);
    EvaluateRequest req;
    req.set_min_version(min_version);
    EvalReport r;
    RetryPolicy policy;
    policy.attempt_timeout = timeout;
    policy.total_timeout = timeout;
    absl::Status s = RetryRpc(
        absl::StrCat("final evaluation by ", Name(t)), policy,
        [&](absl::Time d) {
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(d));
          return stub->Evaluate(&ctx, req, &r);
        },
        stop_);
    if (!s.ok()) return s;
    return r;
  }
  return absl::NotFoundError("the cluster lists no evaluator");
}

namespace {

// Whether a failed call says that no process is there to tell: its port
// refused, or (Compose, Kubernetes) its name no longer resolves.
bool Gone(const absl::Status& s) {
  return Refused(s) || (absl::IsUnavailable(s) && absl::StrContains(s.message(), "DNS"));
}

}  // namespace

void ClusterTasks::ShutdownAll(const std::string& reason, bool run_failed) {
  ShutdownRequest req;
  req.set_reason(reason);
  req.set_run_failed(run_failed);
  // Told once each, 5 s at most. A task that is not there (its port
  // refused) needs no telling; one that timed out or could not be reached
  // may be cut off from the chief and would otherwise wait for ever: it is
  // told again until kShutdownReach has passed, waiting for its channel to
  // connect.
  const absl::Time give_up = absl::Now() + kShutdownReach;
  std::vector<const Task*> unreached;
  for (const Task& t : tasks_) {
    const absl::Status s = Shutdown(t, req, absl::Seconds(5), /*wait_for_ready=*/false);
    if (s.ok() || Gone(s)) continue;
    spdlog::warn("could not tell {} to exit: {}; trying again until {}", Name(t),
                 std::string(s.message()), absl::FormatTime("%H:%M:%S", give_up,
                                                            absl::LocalTimeZone()));
    unreached.push_back(&t);
  }
  while (!unreached.empty() && absl::Now() < give_up) {
    absl::SleepFor(absl::Seconds(1));
    std::vector<const Task*> still;
    for (const Task* t : unreached) {
      const absl::Duration left = give_up - absl::Now();
      const absl::Status s = Shutdown(*t, req, std::max(absl::Milliseconds(100),
                                                        std::min(left, absl::Seconds(2))),
                                      /*wait_for_ready=*/true);
      if (s.ok()) {
        spdlog::info("{} was told to exit", Name(*t));
      } else if (!Gone(s)) {
        still.push_back(t);
      }
    }
    unreached = std::move(still);
  }
  for (const Task* t : unreached) {
    spdlog::warn("{} could not be told to exit within {}: it is left running",
                 Name(*t), absl::FormatDuration(kShutdownReach));
  }
}

absl::Status ClusterTasks::Shutdown(const Task& t, const ShutdownRequest& req,
                                    absl::Duration timeout, bool wait_for_ready) {
  auto stub = TaskControl::NewStub(t.channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  ctx.set_wait_for_ready(wait_for_ready);
  ShutdownResponse resp;
  return FromGrpcStatus(stub->Shutdown(&ctx, req, &resp), "Shutdown");
}

}  // namespace pscluster
