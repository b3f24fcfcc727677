#include "worker/worker_main.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/bad_input.h"
#include "common/daemon.h"
#include "common/logging.h"
#include "common/task_server.h"
#include "common/usable_cores.h"
#include "compute/backend_factory.h"
#include "compute/device_choice.h"
#include "compute/device_flag.h"
#include "compute/kernels/blas_env.h"
#include "model/dataset.h"
#include "model/idx_dataset.h"
#include "model/keras_model.h"
#include "spdlog/spdlog.h"
#include "update/model_replica.h"
#include "worker/ring_allreduce.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, data_dir, "",
          "The data (required): a folder of MNIST-style IDX files, a folder of "
          "x_train.npy, y_train.npy, x_test.npy, y_test.npy, an .npz holding them, a "
          "folder of TFRecord shards with a tfrecord_schema.json (docs/models-and-data.md: Your data: TFRecord), "
          "or a folder of Criteo logs train.txt and test.txt[.gz] (docs/criteo.md)");
ABSL_FLAG(int, threads, 0,
          "Compute threads for forward and backward; 0: 1 on a GPU, else every core this "
          "process may use (its CPU affinity, capped by a cgroup CPU limit). Several workers on "
          "one host: give each its share (deploy/local/train.sh does)");
ABSL_FLAG(std::string, device, "auto",
          "Where to compute: auto (a CUDA GPU when the driver reports one, else the CPU), "
          "cpu, cuda (= cuda:0) or cuda:N");
ABSL_FLAG(int, startup_timeout_s, 120,
          "How long to wait for the chief's plan and the parameter servers");
ABSL_FLAG(double, ring_timeout_s, 30,
          "multi_worker_mirrored: a ring neighbour silent this long fails the all-reduce "
          "(the chief then forms a new ring)");
ABSL_FLAG(bool, log_replica_digests, false,
          "multi_worker_mirrored: log the replica's CRC-32C after every step (tests compare "
          "them across workers)");
ABSL_FLAG(int, linger_s, 600,
          "After training, how long to wait for the chief's shutdown before exiting");
ABSL_FLAG(std::string, check_model, "",
          "Only say whether a GPU runs the model FILE (a Keras .json or .keras file, or a "
          "built-in model's name), in one line 'check_model: ...', and exit 0 either way; 2 "
          "when FILE cannot be read. Needs no GPU; deploy/local/train.sh asks it under "
          "--device=auto");

namespace pscluster {

namespace {
constexpr int kMaxThreads = 256;
// How long a signalled worker may take to leave the run before it stops.
constexpr absl::Duration kLeaveGrace = absl::Seconds(10);

// SIGTERM or SIGINT (a scale-down, a drain): the worker leaves the run
// after the step in flight, telling the chief (Trainer::RequestLeave), and
// stops outright if it has not within kLeaveGrace (a second signal: at
// once). Returns the thread that stops training on a shutdown (from the
// chief, or a leave that took too long); the caller joins it after its
// own RequestShutdown.
std::thread StopTrainingOnShutdown(TaskServer* server, Trainer* trainer) {
  // 0: no signal yet. Shared: the signal thread outlives the caller.
  auto stop_at_ns = std::make_shared<std::atomic<int64_t>>(0);
  HandleTerminationSignals([server, trainer, stop_at_ns](const std::string& s) {
    if (!trainer->RequestLeave()) {
      server->RequestShutdown(s);  // not training: nothing to leave
      return;
    }
    spdlog::info("{}: leaving the run after the step in flight", s);
    *stop_at_ns = absl::ToUnixNanos(absl::Now() + kLeaveGrace);
  });
  return std::thread([server, trainer, stop_at_ns] {
    while (!server->shutdown_requested()) {
      const int64_t at = *stop_at_ns;
      if (at != 0 && absl::Now() >= absl::FromUnixNanos(at)) {
        server->RequestShutdown(
            absl::StrCat("no leave within ", absl::FormatDuration(kLeaveGrace)));
        break;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    trainer->RequestStop();
  });
}

// --check_model: whether a GPU runs `model`, in one line on stdout.
int CheckModel(const std::string& model) {
  absl::StatusOr<std::string> json = ReadModelFile(model);
  absl::StatusOr<ModelSpec> spec = json.ok() ? ParseKerasModel(*json, model) : json.status();
  if (!spec.ok()) {
    ExitWithUsageError(absl::StrCat("--check_model=", model, ": ", spec.status().message()));
  }
  const absl::Status s = CheckGpuRunsModel(*spec);
  if (s.ok()) {
    std::printf("check_model: %s: a GPU runs it\n", model.c_str());
  } else {
    std::printf("check_model: %s: the GPU does not run it: %s\n", model.c_str(),
                std::string(s.message()).c_str());
  }
  return 0;
}
}  // namespace

int WorkerMain(int argc, char** argv, const std::function<WorkerFaults()>& faults) {
  // OpenBLAS reads its environment when it loads; a preset core type or
  // thread count would slow the kernels (compute/kernels/blas_env.h).
  if (absl::Status s = kernels::ReexecWithBlasEnvironment(argv); !s.ok()) {
    std::fprintf(stderr, "warning: %s\n", std::string(s.message()).c_str());
  }
  const TfConfig config = StartDaemonOrExit(
      argc, argv, std::getenv("TF_CONFIG"), kWorkerJob,
      "Worker task. Usage: TF_CONFIG='{...\"task\":{\"type\":\"worker\",\"index\":0}}' "
      "worker --data_dir=DIR [--device=auto|cpu|cuda|cuda:N] [--threads=N]");
  if (const std::string model = absl::GetFlag(FLAGS_check_model); !model.empty()) {
    return CheckModel(model);
  }
  TrainerOptions opt;
  opt.config = config;
  opt.data_dir = absl::GetFlag(FLAGS_data_dir);
  opt.threads = absl::GetFlag(FLAGS_threads);
  if (opt.data_dir.empty()) ExitWithUsageError("--data_dir is required");
  if (opt.threads < 0 || opt.threads > kMaxThreads) {
    ExitWithUsageError("--threads must be in [0, 256], got " + std::to_string(opt.threads));
  }
  const int startup = absl::GetFlag(FLAGS_startup_timeout_s);
  if (startup < 1) ExitWithUsageError("--startup_timeout_s must be >= 1, got " + std::to_string(startup));
  opt.startup_timeout = absl::Seconds(startup);
  if (faults) opt.faults = faults();  // the tests' worker only
  const double ring_timeout = absl::GetFlag(FLAGS_ring_timeout_s);
  if (!(ring_timeout >= 0.1 && ring_timeout <= 3600)) {
    ExitWithUsageError(absl::StrCat("--ring_timeout_s must be in [0.1, 3600], got ", ring_timeout));
  }
  opt.ring_timeout = absl::Seconds(ring_timeout);
  opt.log_replica_digests = absl::GetFlag(FLAGS_log_replica_digests);
  const ResolvedDevice resolved = ResolveDeviceFlagOrExit(absl::GetFlag(FLAGS_device));
  opt.device = resolved.device;
  // --threads=0: the GPU computes, or the process has the host's cores to
  // itself; a launcher sharing a host between workers passes their share.
  std::string threads_why = "--threads";
  if (opt.threads == 0) {
    const bool on_gpu = resolved.device.kind == DeviceChoice::Kind::kCuda;
    opt.threads = on_gpu ? 1 : std::min(UsableCores(), kMaxThreads);
    threads_why = on_gpu ? "default on a GPU" : "default: the cores this process may use";
  }
  std::unique_ptr<Metrics> metrics = StartLoggingAndMetricsOrExit(config);
  spdlog::info("compute device: {} ({})", resolved.device.ToString(), resolved.reason);
  spdlog::info("compute threads: {} ({})", opt.threads, threads_why);
  // The data last: every flag and TF_CONFIG check comes first (exit 2).
  if (absl::Status s = CheckDataFiles(opt.data_dir, Split::kTrain); !s.ok()) {
    ExitWithDataError(absl::StrCat("--data_dir=", opt.data_dir, ": ", s.message()));
  }
  opt.metrics = metrics.get();

  // multi_worker_mirrored: this worker's replica of the model and the Ring
  // service that receives its neighbours' chunks and hands the replica to
  // peers, the chief and the evaluator (idle under parameter_server).
  ModelReplica replica(opt.threads);
  RingService ring(&replica);
  opt.replica = &replica;
  opt.ring = &ring;
  absl::StatusOr<std::unique_ptr<TaskServer>> server =
      TaskServer::Start(config.own_port(), {&ring});
  if (!server.ok()) {
    spdlog::error("{}", std::string(server.status().message()));
    return 1;
  }
  // Ready for its role once the chief's plan has arrived.
  opt.on_plan = [&server] { (*server)->SetReady(true); };
  Trainer trainer(opt);
  std::thread watcher = StopTrainingOnShutdown(server->get(), &trainer);
  absl::Status s = trainer.Run();
  int code = 0;
  if (s.ok()) {
    // Wait for the chief to end the run, so the evaluator and the chief can
    // still reach every task; give up after --linger_s.
    const absl::Time give_up = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_linger_s));
    while (!(*server)->shutdown_requested() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (!(*server)->shutdown_requested()) {
      spdlog::warn("no shutdown from the chief within --linger_s; exiting");
    }
  } else if (absl::IsCancelled(s) || (*server)->shutdown_requested()) {
    // Asked to stop: the ps may be gone already, so a failed push or pull
    // is part of stopping, not an error.
    spdlog::info("training stopped: {}", std::string(s.message()));
  } else {
    // Data that does not fit the model (4) and a model the device cannot
    // run (2) are final: starting again changes nothing.
    spdlog::error("{}", std::string(s.message()));
    code = ExitCodeOfFailure(s);
  }
  (*server)->RequestShutdown("worker exiting");
  watcher.join();
  // Stopped by a chief that gave the run up: the failure shows here too.
  if (code == kExitOk && (*server)->run_failed()) code = kExitRunFailed;
  (*server)->Stop();
  return code;
}

}  // namespace pscluster
