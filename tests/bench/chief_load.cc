// Benchmark (not a test): W light fake workers against a real chief and
// real ps_server processes (issue 57, "the chief at scale"). Each fake
// speaks the worker's protocol of --strategy=parameter_server as
// worker/ps_loop.cc does, without a model or data: it asks for the plan
// (GetPlan), pulls once from every ps, then loops GetWork -> a PushPull of
// a fixed gradient to every ps, in parallel (the plan's placement, fp32
// over gRPC) -> the chunk reported done (or abandoned, when a ps dropped the
// gradient) in its next GetWork; PAUSE and IDLE are asked again after
// 20 ms, BOUND after 1 to 16 ms (the worker's back-off); a ProgressReport
// every report_interval_s and a Heartbeat every heartbeat_interval_s of
// the plan, on a clock of their own; DONE ends it with a final report.
//
// Light: no thread per fake. Every call is a gRPC callback call; a small
// timer thread runs the waits. Each fake has its own channel (its own TCP
// connection) to the chief, as separate worker processes would; the
// fakes share one channel per ps (the ps are not what is measured).
// The chief checks that every worker task answers (health) and tells them
// to exit at the end: the fakes' TF_CONFIG addresses may all be one port
// on distinct loopback hosts (127.0.x.y:PORT), which this process serves.
//
//   chief_load --tf_config=FILE --chunks_per_epoch=N [--chief_pid=PID]
//              [--push=true|false] [--serve_port=PORT]
//
// It prints one line of figures, key=value, measured from the first chunk
// handed out to the last fake told DONE:
//   workers chunks wall_s chief_cpu_s (utime+stime of --chief_pid, from
//   /proc) chief_cpu_ms_per_chunk getwork_calls getwork_p50_us
//   getwork_p99_us (round trip as a fake sees it, every answer)
//   chunk_p50_us chunk_p99_us (the answers CHUNK: the wait for work; a
//   PAUSE may be held by the chief until the pause ends) answers of each
//   kind, heartbeats heartbeats_per_s reports pushpulls abandoned errors
//   load_cpu_s (this process's own CPU)
// Exit status: 0 when every fake was told DONE, 1 otherwise, 2 for a bad
// flag.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/task_server.h"
#include "model/keras_model.h"
#include "model/placement.h"
#include "proto/coordination.grpc.pb.h"
#include "proto/ps.grpc.pb.h"

namespace pscluster {
namespace {

constexpr char kUsage[] =
    "chief_load: W light fake workers against a real chief and real ps (issue 57).\n"
    "\n"
    "  chief_load --tf_config=FILE --chunks_per_epoch=N [flags]\n"
    "\n"
    "  --tf_config=FILE       the cluster's TF_CONFIG (its task is ignored); one fake per\n"
    "                         cluster.worker entry\n"
    "  --chunks_per_epoch=N   what the fakes tell the chief an epoch holds (1..1000000)\n"
    "  --chief_pid=PID        the chief's process: its CPU time is read from /proc/PID/stat\n"
    "  --push=true|false      push a fixed gradient to every ps per chunk (default true)\n"
    "  --serve_port=PORT      serve health and Shutdown for the workers' addresses here\n"
    "                         (default: worker 0's port; 0: do not serve)\n"
    "  --timeout_s=S          give up after S seconds (default 600)\n"
    "  --help\n";

struct Flags {
  std::string tf_config;
  int chunks_per_epoch = 0;
  int chief_pid = 0;
  bool push = true;
  int serve_port = -1;
  double timeout_s = 600;
};

[[noreturn]] void BadFlag(const std::string& arg, const std::string& want) {
  std::fprintf(stderr, "chief_load: %s: %s\n", arg.c_str(), want.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      BadFlag(arg, "flags look like --name=value (try --help)");
    }
    const std::string name = arg.substr(0, eq);
    const std::string value = arg.substr(eq + 1);
    if (name == "--tf_config") {
      if (value.empty()) BadFlag(arg, "must name a file");
      f.tf_config = value;
    } else if (name == "--chunks_per_epoch") {
      if (!absl::SimpleAtoi(value, &f.chunks_per_epoch) || f.chunks_per_epoch < 1 ||
          f.chunks_per_epoch > 1000000) {
        BadFlag(arg, "must be an integer in [1, 1000000]");
      }
    } else if (name == "--chief_pid") {
      if (!absl::SimpleAtoi(value, &f.chief_pid) || f.chief_pid < 1) {
        BadFlag(arg, "must be a process id (a positive integer)");
      }
    } else if (name == "--push") {
      if (value != "true" && value != "false") BadFlag(arg, "must be true or false");
      f.push = value == "true";
    } else if (name == "--serve_port") {
      if (!absl::SimpleAtoi(value, &f.serve_port) || f.serve_port < 0 || f.serve_port > 65535) {
        BadFlag(arg, "must be a port in [0, 65535]");
      }
    } else if (name == "--timeout_s") {
      if (!absl::SimpleAtod(value, &f.timeout_s) || !(f.timeout_s > 0)) {
        BadFlag(arg, "must be a number of seconds > 0");
      }
    } else {
      BadFlag(arg, "unknown flag (try --help)");
    }
  }
  if (f.tf_config.empty()) BadFlag("--tf_config", "is required (try --help)");
  if (f.chunks_per_epoch == 0) BadFlag("--chunks_per_epoch", "is required (try --help)");
  return f;
}

// utime + stime of `pid` in seconds (/proc/PID/stat fields 14 and 15);
// -1 when it cannot be read.
double ProcessCpuSeconds(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the name may hold spaces
  if (paren == std::string::npos) return -1;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ');
  // fields[0] is field 3 (state): utime is field 14, stime 15.
  int64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return -1;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Runs functions at given times on one thread of its own.
class Timer {
 public:
  Timer() : thread_([this] { Loop(); }) {}
  ~Timer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void After(absl::Duration d, std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push(Entry{absl::Now() + d, seq_++, std::move(fn)});
    }
    cv_.notify_one();
  }

 private:
  struct Entry {
    absl::Time at;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Entry& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (queue_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const absl::Time at = queue_.top().at;
      if (absl::Now() < at) {
        cv_.wait_until(lock, absl::ToChronoTime(at));
        continue;
      }
      std::function<void()> fn = queue_.top().fn;
      queue_.pop();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue_;
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

// What every fake shares: the plan, the ps, the clock, the counts.
struct Fleet {
  Flags flags;
  TrainingPlan plan;
  Placement placement;
  std::vector<std::unique_ptr<ParameterServer::Stub>> ps;
  std::vector<std::string> gradient;  // per ps: the fixed fp32 gradient
  Timer timer;
  std::atomic<bool> stopping{false};
  std::atomic<bool> ready{false};  // plan, placement and gradients set
  std::atomic<int64_t> in_flight{0};  // calls not yet answered

  std::mutex mu;
  std::vector<int64_t> getwork_ns;  // round trips, in the window
  std::vector<int64_t> chunk_ns;    // those answered CHUNK
  bool window_open = false;
  absl::Time window_start, window_end;
  double cpu_start = -1, cpu_end = -1;
  double load_cpu_start = 0, load_cpu_end = 0;  // this process's
  int64_t kinds[5] = {0, 0, 0, 0, 0};  // WorkResponse::Kind
  int64_t heartbeats = 0, heartbeats_in_window = 0;
  int64_t reports = 0, pushpulls = 0, abandoned = 0, errors = 0;
  int done = 0;
  std::condition_variable all_done;
  std::string first_error;

  void Error(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (done == plan.num_workers()) return;  // the chief ends the run meanwhile
    if (first_error.empty()) first_error = what;
    ++errors;
  }
};

// One fake worker: a chain of callback calls, one at a time but for its
// heartbeats and the PushPull to each ps.
class FakeWorker {
 public:
  FakeWorker(Fleet* fleet, int index, std::shared_ptr<grpc::Channel> chief)
      : fleet_(*fleet), index_(index), chief_(Coordinator::NewStub(chief)) {
    std::mt19937_64 rng(std::random_device{}());
    incarnation_ = rng() | 1;
    request_id_ = rng();
    request_.set_worker_index(index_);
    request_.set_incarnation(incarnation_);
    request_.set_chunks_per_epoch(fleet_.flags.chunks_per_epoch);
  }

  void Start() { AskPlan(); }

 private:
  template <typename Resp>
  struct Call {
    grpc::ClientContext ctx;
    Resp resp;
  };
  // A call of ours is out: the fleet waits for its answer before it ends.
  template <typename Resp>
  std::unique_ptr<Call<Resp>> NewCall(absl::Duration timeout) {
    auto c = std::make_unique<Call<Resp>>();
    c->ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    ++fleet_.in_flight;
    return c;
  }
  void Later(absl::Duration d, void (FakeWorker::*step)()) {
    if (fleet_.stopping) return;
    fleet_.timer.After(d, [this, step] { (this->*step)(); });
  }

  // Polls for the plan as ChiefClient::WaitForPlan does (100 ms, doubling
  // to 1 s); from the fleet's start, before the chief hands one out.
  void AskPlan() {
    GetPlanRequest req;
    req.set_task_type("worker");
    req.set_task_index(index_);
    auto c = NewCall<GetPlanResponse>(absl::Seconds(10));
    auto* raw = c.release();
    chief_->async()->GetPlan(&raw->ctx, &req, &raw->resp, [this, raw](grpc::Status s) {
      std::unique_ptr<Call<GetPlanResponse>> c(raw);
      if (s.ok() && c->resp.ready() && fleet_.ready) {
        Beat();  // from the plan on, as worker/trainer.cc's Heartbeat
        PullFirst();
      } else if (s.ok() && c->resp.ready()) {
        Later(absl::Milliseconds(20), &FakeWorker::AskPlan);  // the fleet reads the plan
      } else {
        plan_wait_ = std::min(absl::Seconds(1), std::max(absl::Milliseconds(100), plan_wait_ * 2));
        Later(plan_wait_, &FakeWorker::AskPlan);
      }
      --fleet_.in_flight;
    });
  }

  // The worker's first pull from every ps (PsClient::PullAll).
  void PullFirst() {
    const int n = static_cast<int>(fleet_.ps.size());
    versions_.assign(n, 0);
    pending_ = n;
    for (int i = 0; i < n; ++i) {
      PullRequest req;
      req.set_layout_fingerprint(fleet_.placement.fingerprint);
      req.set_worker_index(index_);
      req.set_generation(-1);
      auto c = NewCall<PullResponse>(absl::Seconds(60));
      auto* raw = c.release();
      fleet_.ps[i]->async()->Pull(&raw->ctx, &req, &raw->resp, [this, raw, i](grpc::Status s) {
        std::unique_ptr<Call<PullResponse>> c(raw);
        if (s.ok()) {
          versions_[i] = c->resp.version();
          if (i == 0) generation_ = c->resp.generation();
        } else {
          fleet_.Error(absl::StrCat("worker ", index_, ": Pull from ps ", i, ": ",
                                    s.error_message()));
        }
        if (--pending_ == 0) {
          next_report_ = absl::Now() + absl::Seconds(fleet_.plan.report_interval_s());
          AskWork();
        }
        --fleet_.in_flight;
      });
    }
  }

  void Beat() {
    HeartbeatRequest req;
    req.set_worker_index(index_);
    req.set_incarnation(incarnation_);
    req.set_done(finished_);
    auto c = NewCall<HeartbeatResponse>(absl::Seconds(2));
    auto* raw = c.release();
    chief_->async()->Heartbeat(&raw->ctx, &req, &raw->resp, [this, raw](grpc::Status s) {
      std::unique_ptr<Call<HeartbeatResponse>> c(raw);
      if (!s.ok()) fleet_.Error(absl::StrCat("Heartbeat: ", s.error_message()));
      --fleet_.in_flight;
    });
    {
      std::lock_guard<std::mutex> lock(fleet_.mu);
      ++fleet_.heartbeats;
      if (fleet_.window_open) ++fleet_.heartbeats_in_window;
    }
    Later(absl::Seconds(fleet_.plan.heartbeat_interval_s()), &FakeWorker::Beat);
  }

  void AskWork() {
    request_.set_completed_generation(generation_);
    auto c = NewCall<WorkResponse>(absl::Seconds(30));
    auto* raw = c.release();
    const absl::Time sent = absl::Now();
    chief_->async()->GetWork(&raw->ctx, &request_, &raw->resp, [this, raw,
                                                                sent](grpc::Status s) {
      std::unique_ptr<Call<WorkResponse>> c(raw);
      const absl::Time now = absl::Now();
      if (!s.ok()) {
        fleet_.Error(absl::StrCat("GetWork: ", s.error_message()));
        Later(absl::Milliseconds(100), &FakeWorker::AskWork);
      } else {
        request_.clear_completed();
        request_.clear_abandoned();
        Follow(c->resp, now - sent);
      }
      --fleet_.in_flight;
    });
  }

  void Follow(const WorkResponse& work, absl::Duration took) {
    {
      std::lock_guard<std::mutex> lock(fleet_.mu);
      if (work.kind() == WorkResponse::CHUNK && !fleet_.window_open &&
          fleet_.window_start == absl::Time()) {
        fleet_.window_open = true;
        fleet_.window_start = absl::Now();
        if (fleet_.flags.chief_pid > 0) {
          fleet_.cpu_start = ProcessCpuSeconds(fleet_.flags.chief_pid);
        }
        fleet_.load_cpu_start = ProcessCpuSeconds(getpid());
      }
      if (fleet_.window_open) {
        fleet_.getwork_ns.push_back(absl::ToInt64Nanoseconds(took));
        if (work.kind() == WorkResponse::CHUNK) {
          fleet_.chunk_ns.push_back(absl::ToInt64Nanoseconds(took));
        }
        if (work.kind() >= 0 && work.kind() < 5) ++fleet_.kinds[work.kind()];
      }
    }
    generation_ = work.generation();
    if (work.kind() != WorkResponse::BOUND) bound_wait_ = absl::ZeroDuration();
    switch (work.kind()) {
      case WorkResponse::CHUNK:
        chunk_ = work.chunk();
        if (fleet_.flags.push) {
          Push();
        } else {
          StepDone(/*applied=*/true);
        }
        return;
      case WorkResponse::BOUND:
        // worker/ps_loop.cc BoundPollPolicy: 1 ms, doubling to 16 ms.
        bound_wait_ = std::min(absl::Milliseconds(16),
                               std::max(absl::Milliseconds(1), bound_wait_ * 2));
        Later(bound_wait_, &FakeWorker::AskWork);
        return;
      case WorkResponse::DONE:
        Finish();
        return;
      default:  // PAUSE, IDLE
        Later(absl::Milliseconds(20), &FakeWorker::AskWork);
        return;
    }
  }

  // The step's PushPull to every ps in parallel (PsClient::PushPullAll
  // over gRPC, fp32).
  void Push() {
    const int n = static_cast<int>(fleet_.ps.size());
    pending_ = n;
    all_applied_ = true;
    push_failed_ = false;
    const bool sync = fleet_.plan.mode() == SYNC;
    const int64_t step = *std::min_element(versions_.begin(), versions_.end());
    ++request_id_;
    for (int i = 0; i < n; ++i) {
      PushRequest req;
      req.set_layout_fingerprint(fleet_.placement.fingerprint);
      req.set_worker_index(index_);
      req.set_version(sync ? step : versions_[i]);
      req.set_generation(generation_);
      req.set_request_id(request_id_);
      req.set_num_examples(fleet_.plan.batch_size());
      req.set_chunk(chunk_);
      req.set_gradients(fleet_.gradient[i]);
      auto c = NewCall<PushPullResponse>(absl::Seconds(120));
      auto* raw = c.release();
      fleet_.ps[i]->async()->PushPull(
          &raw->ctx, &req, &raw->resp, [this, raw, i](grpc::Status s) {
            std::unique_ptr<Call<PushPullResponse>> c(raw);
            if (s.ok()) {
              versions_[i] = c->resp.pull().version();
              if (!c->resp.push().applied()) all_applied_ = false;
            } else {
              push_failed_ = true;
              if (s.error_code() != grpc::StatusCode::ABORTED) {
                fleet_.Error(absl::StrCat("PushPull to ps ", i, ": ", s.error_message()));
              }
            }
            if (--pending_ == 0) StepDone(all_applied_ && !push_failed_);
            --fleet_.in_flight;
          });
    }
    std::lock_guard<std::mutex> lock(fleet_.mu);
    fleet_.pushpulls += n;
  }

  void StepDone(bool applied) {
    if (applied) {
      request_.add_completed(chunk_);
    } else {
      request_.add_abandoned(chunk_);
      std::lock_guard<std::mutex> lock(fleet_.mu);
      ++fleet_.abandoned;
    }
    ++steps_;
    const absl::Time now = absl::Now();
    if (now >= next_report_) {
      next_report_ = now + absl::Seconds(fleet_.plan.report_interval_s());
      Report(/*done=*/false);
    }
    AskWork();
  }

  // A ProgressReport (StepReport::Report), answered on its own.
  void Report(bool done) {
    ProgressReport r;
    r.set_worker_index(index_);
    r.set_epoch(static_cast<int>(chunk_ / fleet_.flags.chunks_per_epoch));
    r.set_step(steps_);
    r.set_examples(steps_ * fleet_.plan.batch_size());
    r.set_loss(0.5f);
    r.set_accuracy(0.5f);
    r.set_global_version(versions_.empty() ? 0 : versions_[0]);
    r.set_done(done);
    r.set_steps_per_epoch(fleet_.flags.chunks_per_epoch);
    r.set_epoch_examples(int64_t{fleet_.flags.chunks_per_epoch} * fleet_.plan.batch_size());
    auto c = NewCall<ProgressAck>(absl::Seconds(10));
    auto* raw = c.release();
    chief_->async()->ReportProgress(&raw->ctx, &r, &raw->resp, [this, raw](grpc::Status s) {
      std::unique_ptr<Call<ProgressAck>> c(raw);
      if (!s.ok()) fleet_.Error(absl::StrCat("ReportProgress: ", s.error_message()));
      --fleet_.in_flight;
    });
    std::lock_guard<std::mutex> lock(fleet_.mu);
    ++fleet_.reports;
  }

  void Finish() {
    finished_ = true;
    Report(/*done=*/true);
    std::lock_guard<std::mutex> lock(fleet_.mu);
    if (++fleet_.done == static_cast<int>(fleet_.plan.num_workers())) {
      fleet_.window_open = false;
      fleet_.window_end = absl::Now();
      if (fleet_.flags.chief_pid > 0) fleet_.cpu_end = ProcessCpuSeconds(fleet_.flags.chief_pid);
      fleet_.load_cpu_end = ProcessCpuSeconds(getpid());
      fleet_.all_done.notify_all();
    }
  }

  Fleet& fleet_;
  const int index_;
  std::unique_ptr<Coordinator::Stub> chief_;
  uint64_t incarnation_ = 0;
  uint64_t request_id_ = 0;
  WorkRequest request_;  // carries the chunks done since the last one
  int64_t generation_ = 0;
  int64_t chunk_ = -1;
  int64_t steps_ = 0;
  std::vector<int64_t> versions_;  // per ps, from its last answer
  std::atomic<int> pending_{0};    // PushPull or Pull calls not answered
  std::atomic<bool> all_applied_{true};
  std::atomic<bool> push_failed_{false};
  absl::Duration bound_wait_;
  absl::Duration plan_wait_;
  absl::Time next_report_;
  std::atomic<bool> finished_{false};
};

int64_t Percentile(std::vector<int64_t>* v, double q) {
  if (v->empty()) return 0;
  const size_t k = std::min(v->size() - 1, static_cast<size_t>(q * (v->size() - 1) + 0.5));
  std::nth_element(v->begin(), v->begin() + k, v->end());
  return (*v)[k];
}

int Main(int argc, char** argv) {
  Fleet fleet;
  fleet.flags = ParseFlags(argc, argv);
  const Flags& f = fleet.flags;
  std::ifstream in(f.tf_config);
  if (!in) BadFlag("--tf_config=" + f.tf_config, "cannot be read");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<TfConfig> config = ParseTfConfig(text, f.tf_config);
  if (!config.ok()) BadFlag("--tf_config=" + f.tf_config, std::string(config.status().message()));
  const ClusterSpec& cluster = config->cluster;
  const int workers = cluster.num_tasks(kWorkerJob);
  if (workers < 1 || cluster.num_tasks(kChiefJob) != 1 || cluster.num_tasks(kPsJob) < 1) {
    BadFlag("--tf_config=" + f.tf_config, "must list one chief, a ps and a worker");
  }
  const std::string chief = *cluster.address(kChiefJob, 0);

  // The workers' addresses answer health checks and Shutdown here.
  std::unique_ptr<TaskServer> served;
  int port = f.serve_port;
  if (port < 0) {
    absl::StatusOr<HostPort> hp = ParseHostPort(*cluster.address(kWorkerJob, 0), "worker 0");
    port = hp.ok() ? hp->port : 0;
  }
  if (port > 0) {
    absl::StatusOr<std::unique_ptr<TaskServer>> s = TaskServer::Start(port, {});
    if (!s.ok()) {
      std::fprintf(stderr, "chief_load: %s\n", std::string(s.status().message()).c_str());
      return 1;
    }
    served = *std::move(s);
    served->SetReady(true);
  }

  // The fakes start as workers do, polling for the plan; the fleet reads
  // it once the chief hands it out.
  std::vector<std::unique_ptr<FakeWorker>> fakes;
  for (int w = 0; w < workers; ++w) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    fakes.push_back(std::make_unique<FakeWorker>(
        &fleet, w, grpc::CreateCustomChannel(chief, grpc::InsecureChannelCredentials(), args)));
  }
  for (auto& fake : fakes) fake->Start();
  auto plan_stub =
      Coordinator::NewStub(grpc::CreateChannel(chief, grpc::InsecureChannelCredentials()));
  const absl::Time give_up = absl::Now() + absl::Seconds(f.timeout_s);
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    GetPlanRequest req;
    req.set_task_type("worker");
    req.set_task_index(0);
    GetPlanResponse resp;
    if (plan_stub->GetPlan(&ctx, req, &resp).ok() && resp.ready()) {
      fleet.plan = resp.plan();
      break;
    }
    if (absl::Now() > give_up) {
      std::fprintf(stderr, "chief_load: the chief at %s handed out no plan\n", chief.c_str());
      std::_Exit(1);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (fleet.plan.num_workers() != workers || fleet.plan.strategy() != PARAMETER_SERVER) {
    std::fprintf(stderr,
                 "chief_load: the chief's plan (%d workers, strategy %d) is not this "
                 "cluster's parameter-server run\n",
                 fleet.plan.num_workers(), fleet.plan.strategy());
    std::_Exit(1);
  }
  absl::StatusOr<ModelSpec> spec =
      PlanModelSpec(fleet.plan.model(), fleet.plan.model_json(), fleet.plan.loss());
  if (!spec.ok()) {
    std::fprintf(stderr, "chief_load: %s\n", std::string(spec.status().message()).c_str());
    std::_Exit(1);
  }
  PlacementOptions popt;
  popt.min_shard_bytes = fleet.plan.min_shard_bytes();
  fleet.placement = PlaceVariables(*spec, fleet.plan.num_ps(), popt);
  for (int i = 0; i < fleet.plan.num_ps(); ++i) {
    fleet.ps.push_back(ParameterServer::NewStub(
        grpc::CreateChannel(*cluster.address(kPsJob, i), grpc::InsecureChannelCredentials())));
    // Small and finite: the ps apply it for real.
    std::vector<float> g(fleet.placement.floats_of_ps[i], 1e-6f);
    fleet.gradient.emplace_back(reinterpret_cast<const char*>(g.data()), g.size() * sizeof(float));
  }
  fleet.ready = true;

  bool all = false;
  {
    std::unique_lock<std::mutex> lock(fleet.mu);
    all = fleet.all_done.wait_until(lock, absl::ToChronoTime(give_up),
                                    [&] { return fleet.done == workers; });
  }
  // Last heartbeats (done) go out; then no new call, and the ones out end.
  absl::SleepFor(absl::Seconds(std::min(1.0f, fleet.plan.heartbeat_interval_s()) + 0.1));
  fleet.stopping = true;
  const absl::Time drain = absl::Now() + absl::Seconds(10);
  while (fleet.in_flight > 0 && absl::Now() < drain) absl::SleepFor(absl::Milliseconds(10));

  std::lock_guard<std::mutex> lock(fleet.mu);
  const double wall = absl::ToDoubleSeconds(fleet.window_end - fleet.window_start);
  const int64_t chunks = int64_t{f.chunks_per_epoch} * fleet.plan.epochs();
  const double cpu = fleet.cpu_start >= 0 && fleet.cpu_end >= 0 ? fleet.cpu_end - fleet.cpu_start
                                                                 : -1;
  const int64_t calls = static_cast<int64_t>(fleet.getwork_ns.size());
  std::printf(
      "workers=%d ps=%d mode=%s chunks=%lld wall_s=%.2f chief_cpu_s=%.2f "
      "chief_cpu_ms_per_chunk=%.3f getwork_calls=%lld getwork_p50_us=%.0f getwork_p99_us=%.0f "
      "chunk_p50_us=%.0f chunk_p99_us=%.0f "
      "chunk=%lld idle=%lld pause=%lld done=%lld bound=%lld heartbeats=%lld heartbeats_per_s=%.0f "
      "reports=%lld pushpulls=%lld abandoned=%lld errors=%lld load_cpu_s=%.2f\n",
      workers, fleet.plan.num_ps(), fleet.plan.mode() == SYNC ? "sync" : "async",
      static_cast<long long>(chunks), all ? wall : -1.0, cpu,
      cpu >= 0 ? 1e3 * cpu / static_cast<double>(chunks) : -1.0, static_cast<long long>(calls),
      Percentile(&fleet.getwork_ns, 0.5) / 1e3, Percentile(&fleet.getwork_ns, 0.99) / 1e3,
      Percentile(&fleet.chunk_ns, 0.5) / 1e3, Percentile(&fleet.chunk_ns, 0.99) / 1e3,
      static_cast<long long>(fleet.kinds[WorkResponse::CHUNK]),
      static_cast<long long>(fleet.kinds[WorkResponse::IDLE]),
      static_cast<long long>(fleet.kinds[WorkResponse::PAUSE]),
      static_cast<long long>(fleet.kinds[WorkResponse::DONE]),
      static_cast<long long>(fleet.kinds[WorkResponse::BOUND]),
      static_cast<long long>(fleet.heartbeats),
      wall > 0 ? static_cast<double>(fleet.heartbeats_in_window) / wall : 0.0,
      static_cast<long long>(fleet.reports), static_cast<long long>(fleet.pushpulls),
      static_cast<long long>(fleet.abandoned), static_cast<long long>(fleet.errors),
      fleet.load_cpu_end - fleet.load_cpu_start);
  if (!fleet.first_error.empty()) {
    std::fprintf(stderr, "chief_load: first error: %s\n", fleet.first_error.c_str());
  }
  if (!all) {
    std::fprintf(stderr, "chief_load: %d of %d fakes were told DONE within %.0f s\n", fleet.done,
                 workers, f.timeout_s);
  }
  std::fflush(stdout);
  // The fakes' objects may still be named by a late callback's closure
  // after the drain's limit: leave without tearing them down.
  std::_Exit(all ? 0 : 1);
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
