// Benchmark (not a test): images/s of the built-in CNN on one GPU, at each
// batch size, compute only (ComputeBackend::TrainStep on real MNIST
// batches, the next batch prefetched) and inside a 1-ps/1-worker cluster of
// the real binaries (worker --device=cuda), with the step-time split:
// pull, host->device, compute, device->host, push (pull and push of a step
// travel in one fused RPC and are reported together).
//
//   bazel run //tests/bench:gpu_throughput -- [--device=cuda]
//   [--batches=128,1024]
//       [--seconds=5] [--epochs=1] [--mode=sync] [--no_cluster]
//
// --device=cpu runs the same measurement on the CPU backend, for comparison.
// Without a usable GPU it prints "SKIPPED: <why>" and exits 0. MNIST from
// $PSCLUSTER_DATA_DIR or ../shared/data/mnist.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "compute/backend_factory.h"
#include "compute/kernels/blas_env.h"
#include "model/idx_dataset.h"
#include "model/model_spec.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace {

struct Flags {
  std::string device = "cuda";
  std::vector<int> batches = {128, 1024};
  double seconds = 5;
  int epochs = 1;
  std::string mode = "sync";
  bool cluster = true;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    bool ok = true;
    if (name == "--device") {
      f->device = value;
      ok = ParseDevice(value).ok();
    } else if (name == "--batches") {
      f->batches.clear();
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        int b = 0;
        ok = ok && absl::SimpleAtoi(part, &b) && b > 0;
        f->batches.push_back(b);
      }
    } else if (name == "--seconds") {
      ok = absl::SimpleAtod(value, &f->seconds) && f->seconds > 0;
    } else if (name == "--epochs") {
      ok = absl::SimpleAtoi(value, &f->epochs) && f->epochs > 0;
    } else if (name == "--mode") {
      ok = (f->mode = value) == "sync" || value == "async";
    } else if (name == "--no_cluster") {
      f->cluster = false;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(
          stderr,
          "bad flag %s (flags: --device --batches --seconds --epochs --mode "
          "--no_cluster)\n",
          arg.c_str());
      return false;
    }
  }
  return true;
}

struct ComputeFigures {
  double images_per_s = 0;
  StepTimes per_step;  // mean seconds
  std::string backend;
};

// TrainStep over consecutive real batches for `seconds`, the next batch
// prefetched as the trainer does; false on a failed step.
bool ComputeOnly(const Flags& flags, int batch, const Dataset& data,
                 ComputeFigures* out) {
  const ModelSpec spec = *ModelByName("cnn");
  BackendOptions o;
  o.device = *ParseDevice(flags.device);
  o.max_batch = batch;
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend =
      CreateBackend(spec, o);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(backend.status().message()).c_str());
    return false;
  }
  out->backend = (*backend)->name();
  std::vector<float> params = InitialParameters(spec, 1);
  std::vector<float> grads(spec.num_parameters);
  const int pixels = data.height * data.width;
  const int batches = data.count / batch;
  std::vector<float> images[2];
  std::vector<uint8_t> labels[2];
  auto fill = [&](int b, int buf) {
    const size_t first = size_t(b % batches) * batch;
    images[buf].assign(&data.images[first * pixels],
                       &data.images[(first + batch) * pixels]);
    labels[buf].assign(&data.labels[first], &data.labels[first + batch]);
  };
  int cur = 0;
  fill(0, cur);
  int done = 0;
  StepTimes sum;
  auto step = [&]() {
    fill(done + 1, 1 - cur);
    float loss;
    int correct;
    absl::Status s = (*backend)->TrainStep(
        params.data(), Batch{images[cur].data(), labels[cur].data(), batch},
        Batch{images[1 - cur].data(), labels[1 - cur].data(), batch},
        grads.data(), &loss, &correct);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return false;
    }
    cur = 1 - cur;
    ++done;
    return true;
  };
  for (int i = 0; i < 5; ++i) {  // warm-up: lazy loading, clocks
    if (!step()) return false;
  }
  done = 0;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(flags.seconds)) {
    if (!step()) return false;
    const StepTimes t = (*backend)->last_step_times();
    sum.h2d_s += t.h2d_s;
    sum.compute_s += t.compute_s;
    sum.d2h_s += t.d2h_s;
  }
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  out->images_per_s = done * batch / wall;
  out->per_step.h2d_s = sum.h2d_s / done;
  out->per_step.compute_s = sum.compute_s / done;
  out->per_step.d2h_s = sum.d2h_s / done;
  return true;
}

// The number after "key=" in the worker's done: line, as a double.
double DoneFigure(const std::string& log, const std::string& key) {
  const size_t line = log.rfind("done:");
  if (line == std::string::npos) return -1;
  const size_t at = log.find(" " + key + "=", line);
  if (at == std::string::npos) return -1;
  double v = -1;
  const size_t begin = at + key.size() + 2;
  const size_t end = log.find_first_of(" \n", begin);
  return absl::SimpleAtod(log.substr(begin, end - begin), &v) ? v : -1;
}

int Run(const Flags& flags) {
  const DeviceChoice device = *ParseDevice(flags.device);
  absl::StatusOr<ResolvedDevice> resolved = ResolveDevice(device);
  if (!resolved.ok()) {
    std::printf("SKIPPED: --device=%s: %s\n", flags.device.c_str(),
                std::string(resolved.status().message()).c_str());
    return 0;
  }
  const std::string dir = testing::TestDataDir();
  if (dir.empty()) {
    std::printf("SKIPPED: no MNIST: set PSCLUSTER_DATA_DIR\n");
    return 0;
  }
  absl::StatusOr<Dataset> data = LoadMnist(dir, Split::kTrain);
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  std::printf("cnn on %s, MNIST from %s\n", resolved->device.ToString().c_str(),
              dir.c_str());
  std::printf("%-22s %6s %12s %10s %10s %10s %10s %10s\n", "", "batch",
              "images/s", "pull ms", "h2d ms", "compute ms", "d2h ms",
              "push ms");
  for (int batch : flags.batches) {
    ComputeFigures c;
    if (!ComputeOnly(flags, batch, *data, &c)) return 1;
    std::printf("%-22s %6d %12.0f %10s %10.3f %10.3f %10.3f %10s   per step\n",
                "compute only", batch, c.images_per_s, "-",
                c.per_step.h2d_s * 1e3, c.per_step.compute_s * 1e3,
                c.per_step.d2h_s * 1e3, "-");
    std::fflush(stdout);
    if (!flags.cluster) continue;

    testing::ClusterOptions o;
    o.num_ps = 1;
    o.num_workers = 1;
    o.evaluator = false;
    o.data_dir = dir;
    o.chief_args = {absl::StrCat("--epochs=", flags.epochs),
                    absl::StrCat("--batch_size=", batch),
                    "--mode=" + flags.mode};
    o.worker_args = {"--device=" + resolved->device.ToString()};
    absl::StatusOr<std::unique_ptr<testing::LocalCluster>> cluster =
        testing::LocalCluster::Start(o);
    if (!cluster.ok()) {
      std::fprintf(stderr, "%s\n",
                   std::string(cluster.status().message()).c_str());
      return 1;
    }
    std::map<std::string, int> codes = (*cluster)->Wait(absl::Minutes(30));
    const std::string log = (*cluster)->Log("worker:0");
    const double rate = DoneFigure(log, "images_per_s");
    if (rate < 0 || codes["chief:0"] != 0) {
      std::fprintf(stderr, "the cluster run failed:\n%s\n",
                   (*cluster)->AllLogs().c_str());
      return 1;
    }
    // "done: N steps": the step count comes before the first "=".
    long n_steps = 0;
    {
      const size_t at = log.rfind("done: ");
      if (at != std::string::npos)
        n_steps = std::strtol(log.c_str() + at + 6, nullptr, 10);
    }
    const double per = n_steps > 0 ? 1e3 / n_steps : 0;
    std::printf(
        "%-22s %6d %12.0f %10.3f %10.3f %10.3f %10.3f %10.3f   per step (%s; "
        "pull = "
        "the initial pull, push = push+pull RPC)\n",
        absl::StrCat("1 ps + 1 worker (", flags.mode, ")").c_str(), batch, rate,
        DoneFigure(log, "pull_s") * 1e3, DoneFigure(log, "h2d_s") * per,
        DoneFigure(log, "device_compute_s") * per,
        DoneFigure(log, "d2h_s") * per, DoneFigure(log, "push_pull_s") * per,
        absl::StrCat(n_steps, " steps").c_str());
    std::printf("%-22s %6d %12.2f\n", "ratio cluster/compute", batch,
                rate / c.images_per_s);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) {
  pscluster::Flags flags;
  if (!pscluster::ParseFlags(argc, argv, &flags)) return 2;
  // OpenBLAS must see the right environment before it loads (blas_env.h);
  // the cluster's processes inherit it.
  (void)pscluster::kernels::ReexecWithBlasEnvironment(argv);
  return pscluster::Run(flags);
}
