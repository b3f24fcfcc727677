// Fuzz target for the chief's coordination requests (chief/
// coordinator_service.h) as workers and the evaluator send them, called
// directly with a null ServerContext (no gRPC in between), over the real
// ProgressTracker and the strategy's WorkSource: the parameter-server
// Dispatcher (first byte even) or the ring's RingDispatcher (odd). Then
// up to kMaxOps operations, each a byte that picks:
//   0-6  an RPC (GetPlan, ReportProgress, ReportEval, GetWork, Heartbeat,
//        RingWork, GetReplica), its request either parsed from
//        length-prefixed bytes or built from fuzzed fields near the run's
//        sizes (worker indices around num_workers, chunk numbers around
//        the total, generations and ring ids, incarnations);
//   7    the chief's own loop: FindLost, Pause / Resume, TakeEvents or
//        TakeAbort, Membership, AllFinished;
//   8    a restore: Rewind (ps) or SetBase (ring) with fuzzed done ranges
//        (WorkQueue::SaveDone's text, read back from a checkpoint).
// Time moves forward by fuzzed amounts. Requests out of range must be
// refused with a status, never crash, hang or leave the work queue
// inconsistent (the chief's accounting is checked with its own queries).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "chief/coordinator_service.h"
#include "chief/dispatcher.h"
#include "chief/progress_tracker.h"
#include "chief/ring_dispatcher.h"
#include "fuzz/fuzz_input.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/coordination.pb.h"

namespace pscluster {
namespace {

constexpr int kMaxOps = 64;
constexpr size_t kMaxMessageBytes = 512;

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "chief_fuzzer: contract broken: %s\n", what);
  std::abort();
}

template <typename Message>
bool Raw(FuzzInput& in, Message* m) {
  const std::string_view bytes = in.LengthPrefixed(kMaxMessageBytes);
  return m->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

class Harness {
 public:
  explicit Harness(FuzzInput& in) : in_(in) {
    ring_ = in_.Bool();
    workers_ = static_cast<int>(in_.IntInRange(1, 4));
    epochs_ = static_cast<int>(in_.IntInRange(1, 3));
    chunks_per_epoch_ = static_cast<int>(in_.IntInRange(1, 8));
    now_ = absl::FromUnixSeconds(1700000000);
    tracker_ = std::make_unique<ProgressTracker>(workers_, epochs_, now_);
    if (ring_) {
      ring_source_ = std::make_unique<RingDispatcher>(workers_, epochs_, now_);
    } else {
      ps_source_ = std::make_unique<Dispatcher>(workers_, epochs_, now_,
                                                in_.Bool() ? in_.IntInRange(1, 16) : 0);
    }
    service_ = std::make_unique<CoordinatorService>(
        tracker_.get(), ring_ ? static_cast<WorkSource*>(ring_source_.get()) : ps_source_.get());
    if (in_.Bool()) {
      TrainingPlan plan;
      plan.set_epochs(epochs_);
      service_->SetPlan(plan);
    }
  }

  void Run() {
    for (int op = 0; op < kMaxOps && !in_.empty(); ++op) Step();
  }

 private:
  int32_t WorkerIndex() { return static_cast<int32_t>(in_.IntInRange(-2, workers_ + 1)); }
  int64_t Chunk() {
    const int64_t total = int64_t{epochs_} * chunks_per_epoch_;
    return in_.IntInRange(0, 7) == 0 ? in_.Int64() : in_.IntInRange(-1, total + 1);
  }
  int32_t ChunksPerEpoch() {
    return in_.IntInRange(0, 7) == 0 ? static_cast<int32_t>(in_.Int64())
                                     : chunks_per_epoch_ + static_cast<int32_t>(in_.IntInRange(-1, 1)) * in_.Bool();
  }
  uint64_t Incarnation() { return in_.IntInRange(0, 3) + 1; }
  std::string Ranges() {
    if (in_.Bool()) return std::string(in_.LengthPrefixed(64));
    std::string r;
    for (int i = static_cast<int>(in_.IntInRange(0, 3)); i > 0; --i) {
      const int64_t a = Chunk(), b = Chunk();
      r += (r.empty() ? "" : ",") + std::to_string(a);
      if (in_.Bool()) r += "-" + std::to_string(b);
    }
    return r;
  }

  void Step() {
    // One fuzzed action per case of the switch (108 lines): the cases are
    // the chief's request kinds.
    now_ += absl::Milliseconds(in_.IntInRange(0, 3) == 0 ? in_.IntInRange(0, 120000)
                                                        : in_.IntInRange(0, 50));
    const bool raw = in_.IntInRange(0, 3) == 0;
    switch (in_.IntInRange(0, 8)) {
      case 0: {
        GetPlanRequest req;
        if (raw ? !Raw(in_, &req) : false) return;
        if (!raw) {
          static const char* const kTypes[] = {"worker", "evaluator", "chief", "", "ps"};
          req.set_task_type(in_.Pick(kTypes));
          req.set_task_index(WorkerIndex());
        }
        GetPlanResponse resp;
        (void)service_->GetPlan(nullptr, &req, &resp);
        return;
      }
      case 1: {
        ProgressReport req;
        if (raw ? !Raw(in_, &req) : false) return;
        if (!raw) {
          req.set_worker_index(WorkerIndex());
          req.set_epoch(static_cast<int32_t>(in_.IntInRange(-1, epochs_ + 1)));
          req.set_step(Chunk());
          req.set_examples(in_.Int64());
          req.set_loss(in_.Float());
          req.set_accuracy(in_.Float());
          req.set_global_version(in_.Int64());
          req.set_done(in_.Bool());
          req.set_compute_s(in_.Float());
          req.set_comm_s(in_.Float());
          req.set_steps_per_epoch(ChunksPerEpoch());
          req.set_epoch_examples(in_.Int64());
        }
        ProgressAck ack;
        (void)service_->ReportProgress(nullptr, &req, &ack);
        (void)tracker_->Snapshot(now_);
        return;
      }
      case 2: {
        EvalReport req;
        if (!Raw(in_, &req)) return;
        EvalAck ack;
        (void)service_->ReportEval(nullptr, &req, &ack);
        return;
      }
      case 3: {
        WorkRequest req;
        if (raw ? !Raw(in_, &req) : false) return;
        if (!raw) {
          req.set_worker_index(WorkerIndex());
          req.set_incarnation(Incarnation());
          for (int i = static_cast<int>(in_.IntInRange(0, 3)); i > 0; --i) req.add_completed(Chunk());
          req.set_completed_generation(in_.IntInRange(-1, 3));
          req.set_chunks_per_epoch(ChunksPerEpoch());
          for (int i = static_cast<int>(in_.IntInRange(0, 1)); i > 0; --i) req.add_abandoned(Chunk());
        }
        WorkResponse resp;
        (void)service_->GetWork(nullptr, &req, &resp);
        return;
      }
      case 4: {
        HeartbeatRequest req;
        if (raw ? !Raw(in_, &req) : false) return;
        if (!raw) {
          req.set_worker_index(WorkerIndex());
          req.set_incarnation(Incarnation());
          req.set_done(in_.Bool());
        }
        HeartbeatResponse resp;
        (void)service_->Heartbeat(nullptr, &req, &resp);
        return;
      }
      case 5: {
        RingWorkRequest req;
        if (raw ? !Raw(in_, &req) : false) return;
        if (!raw) {
          req.set_worker_index(WorkerIndex());
          req.set_incarnation(Incarnation());
          req.set_completed_step(Chunk());
          req.set_failed_ring_id(in_.IntInRange(0, 3) == 0 ? in_.Int64() : in_.IntInRange(0, 4));
          req.set_chunks_per_epoch(ChunksPerEpoch());
          req.set_state_ring_id(in_.IntInRange(0, 3) == 0 ? in_.Int64() : in_.IntInRange(0, 4));
        }
        RingWorkResponse resp;
        (void)service_->RingWork(nullptr, &req, &resp);
        return;
      }
      case 6: {
        ReplicaRequest req;
        if (raw ? !Raw(in_, &req) : false) return;
        if (!raw) {
          req.set_step(Chunk());
          req.set_at_least(in_.Bool());
          req.set_values_only(in_.Bool());
        }
        ShardState resp;
        (void)service_->GetReplica(nullptr, &req, &resp);
        return;
      }
      case 7:
        ChiefLoop();
        return;
      default:
        Restore();
        return;
    }
  }

  void ChiefLoop() {
    const absl::Duration timeout = absl::Seconds(in_.IntInRange(1, 60));
    switch (in_.IntInRange(0, 4)) {
      case 0:
        if (ring_) {
          (void)ring_source_->FindLost(now_, timeout);
        } else {
          (void)ps_source_->FindLost(now_, timeout);
        }
        return;
      case 1:
        if (pauses_ < 4) {
          ++pauses_;
          ring_ ? ring_source_->Pause() : ps_source_->Pause();
        }
        return;
      case 2:
        if (pauses_ > 0) {
          --pauses_;
          ring_ ? ring_source_->Resume() : ps_source_->Resume();
        }
        return;
      case 3:
        if (ring_) {
          (void)ring_source_->TakeAbort();
          int64_t step;
          int source;
          std::string done;
          (void)ring_source_->AllParked(&step, &source, &done);
          (void)ring_source_->Settled();
        } else {
          (void)ps_source_->TakeEvents();
          int64_t number;
          (void)ps_source_->Membership(&number);
          (void)ps_source_->AllParked();
          Require(ps_source_->done_chunks() <= ps_source_->total_chunks(),
                  "more chunks done than there are");
        }
        return;
      default:
        (void)(ring_ ? ring_source_->AllFinished() : ps_source_->AllFinished());
        return;
    }
  }

  void Restore() {
    const int cpe = in_.IntInRange(0, 7) == 0 ? static_cast<int>(in_.Int64())
                                              : static_cast<int>(in_.IntInRange(0, 9));
    const std::string ranges = Ranges();
    if (ring_) {
      ShardState state;
      (void)ring_source_->SetBase(Chunk(), cpe, ranges, state);
    } else {
      if (ps_source_->Rewind(cpe, ranges, in_.IntInRange(0, 5)).ok()) {
        Require(ps_source_->done_chunks() <= ps_source_->total_chunks(),
                "a rewind marked more chunks done than there are");
      }
    }
  }

  FuzzInput& in_;
  bool ring_ = false;
  int workers_ = 1, epochs_ = 1, chunks_per_epoch_ = 1;
  int pauses_ = 0;
  absl::Time now_;
  std::unique_ptr<ProgressTracker> tracker_;
  std::unique_ptr<Dispatcher> ps_source_;
  std::unique_ptr<RingDispatcher> ring_source_;
  std::unique_ptr<CoordinatorService> service_;
};

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  pscluster::FuzzInput in(data, size);
  pscluster::Harness harness(in);
  harness.Run();
  return 0;
}
