// evaluator: side-car that periodically evaluates the newest weights on the
// test set and, at the end, runs the final evaluation the chief asks for.
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/bad_input.h"
#include "common/daemon.h"
#include "common/logging.h"
#include "common/rpc.h"
#include "common/task_server.h"
#include "compute/backend_factory.h"
#include "compute/device_choice.h"
#include "compute/device_flag.h"
#include "compute/kernels/blas_env.h"
#include "evaluator/evaluator.h"
#include "model/dataset.h"
#include "model/idx_dataset.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, data_dir, "",
          "The data (required): a folder of MNIST-style IDX files, a folder of "
          "x_train.npy, y_train.npy, x_test.npy, y_test.npy, an .npz holding them, a "
          "folder of TFRecord shards with a tfrecord_schema.json (docs/models-and-data.md: Your data: TFRecord), "
          "or a folder of Criteo logs train.txt and test.txt[.gz] (docs/criteo.md)");
ABSL_FLAG(int, threads, 1, "Compute threads");
ABSL_FLAG(std::string, device, "auto",
          "Where to compute: auto (a CUDA GPU when the driver reports one, else the CPU), "
          "cpu, cuda (= cuda:0) or cuda:N");
ABSL_FLAG(double, eval_interval_s, 30, "Seconds between periodic evaluations");
ABSL_FLAG(std::string, logdir, "", "Write TensorBoard event files (eval/accuracy, eval/loss) here");
ABSL_FLAG(int, startup_timeout_s, 120, "How long to wait for the chief's plan");

int main(int argc, char** argv) {
  using namespace pscluster;
  // OpenBLAS reads its environment when it loads; a preset core type or
  // thread count would slow the kernels (compute/kernels/blas_env.h).
  if (absl::Status s = kernels::ReexecWithBlasEnvironment(argv); !s.ok()) {
    std::fprintf(stderr, "warning: %s\n", std::string(s.message()).c_str());
  }
  const TfConfig config = StartDaemonOrExit(
      argc, argv, std::getenv("TF_CONFIG"), kEvaluatorJob,
      "Evaluator task. Usage: TF_CONFIG='{...\"task\":{\"type\":\"evaluator\","
      "\"index\":0}}' evaluator --data_dir=DIR [--device=auto|cpu|cuda|cuda:N] "
      "[--eval_interval_s=S]");
  EvaluatorOptions opt;
  opt.config = config;
  opt.data_dir = absl::GetFlag(FLAGS_data_dir);
  opt.threads = absl::GetFlag(FLAGS_threads);
  const double interval = absl::GetFlag(FLAGS_eval_interval_s);
  if (opt.data_dir.empty()) ExitWithUsageError("--data_dir is required");
  if (opt.threads < 1 || opt.threads > 256) {
    ExitWithUsageError("--threads must be in [1, 256], got " + std::to_string(opt.threads));
  }
  if (!(interval > 0)) {
    ExitWithUsageError("--eval_interval_s must be > 0, got " + std::to_string(interval));
  }
  opt.interval = absl::Seconds(interval);
  opt.logdir = absl::GetFlag(FLAGS_logdir);
  opt.startup_timeout = absl::Seconds(std::max(1, absl::GetFlag(FLAGS_startup_timeout_s)));
  // Not listed in cluster.evaluator (TensorFlow's and the Kubeflow
  // operator's way): no server; evaluate until the chief is gone.
  opt.stop_when_chief_gone = !config.has_own_address();
  const ResolvedDevice resolved = ResolveDeviceFlagOrExit(absl::GetFlag(FLAGS_device));
  opt.device = resolved.device;
  std::unique_ptr<Metrics> metrics = StartLoggingAndMetricsOrExit(config);
  spdlog::info("compute device: {} ({})", resolved.device.ToString(), resolved.reason);
  // The data last: every flag and TF_CONFIG check comes first (exit 2).
  if (absl::Status s = CheckDataFiles(opt.data_dir, Split::kTest); !s.ok()) {
    ExitWithDataError(absl::StrCat("--data_dir=", opt.data_dir, ": ", s.message()));
  }
  opt.metrics = metrics.get();

  Evaluator evaluator(opt);
  auto evaluate = [&](const EvaluateRequest& req, EvalReport* resp) {
    absl::StatusOr<EvalReport> r = evaluator.Evaluate(req.min_version(), /*final=*/true);
    if (!r.ok()) return ToGrpcStatus(r.status());
    *resp = *r;
    return grpc::Status::OK;
  };
  std::atomic<bool> stop{false};
  if (!config.has_own_address()) {
    spdlog::info("not listed in cluster.evaluator: evaluating without a server until the chief "
                 "is gone");
    HandleTerminationSignals([&](const std::string&) { stop = true; });
    absl::Status s = evaluator.Prepare(&stop);
    if (s.ok()) evaluator.RunPeriodic(&stop);
    if (!s.ok() && !absl::IsCancelled(s)) {
      spdlog::error("{}", std::string(s.message()));
      return ExitCodeOfFailure(s);
    }
    return 0;
  }
  absl::StatusOr<std::unique_ptr<TaskServer>> server =
      TaskServer::Start(config.own_port(), {}, evaluate);
  if (!server.ok()) {
    spdlog::error("{}", std::string(server.status().message()));
    return 1;
  }
  HandleTerminationSignals([&](const std::string& s) { (*server)->RequestShutdown(s); });
  std::thread watcher([&] {
    (*server)->WaitForShutdownRequest();
    stop = true;
  });
  int code = 0;
  absl::Status s = evaluator.Prepare(&stop);
  if (s.ok()) {
    // Ready for its role: it has the chief's plan and the test set, and
    // answers Evaluate.
    (*server)->SetReady(true);
    evaluator.RunPeriodic(&stop);
  } else if (!absl::IsCancelled(s) && !(*server)->shutdown_requested()) {
    spdlog::error("{}", std::string(s.message()));
    code = ExitCodeOfFailure(s);
    (*server)->RequestShutdown("evaluator failed");
  }
  watcher.join();
  // Stopped by a chief that gave the run up: the failure shows here too.
  if (code == 0 && (*server)->run_failed()) code = kExitRunFailed;
  (*server)->Stop();
  return code;
}
