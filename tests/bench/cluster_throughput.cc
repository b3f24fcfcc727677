// Benchmark (not a test): the worker's images/s on the built-in CNN alone
// (compute only: CpuNetwork::TrainStep on real MNIST batches) and inside a
// 1-ps/1-worker cluster of the real binaries (pull, compute, push), and
// their ratio.
//
//   bazel run //tests/bench:cluster_throughput -- [--threads=2] [--batch=128]
//       [--epochs=1] [--seconds=5] [--mode=sync]
//
// MNIST from $PSCLUSTER_DATA_DIR or ../shared/data/mnist.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "compute/cpu_network.h"
#include "compute/kernels/blas_env.h"
#include "model/idx_dataset.h"
#include "model/model_spec.h"
#include "tests/bench/bench_flags.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace {

struct Flags {
  int threads = 2;
  int batch = 128;
  int epochs = 1;
  double seconds = 5;
  std::string mode = "sync";
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  const std::optional<std::string> bad =
      FirstBadFlag(argc, argv, [&](const std::string& name, const std::string& value) {
        if (name == "--threads") return absl::SimpleAtoi(value, &f->threads) && f->threads > 0;
        if (name == "--batch") return absl::SimpleAtoi(value, &f->batch) && f->batch > 0;
        if (name == "--epochs") return absl::SimpleAtoi(value, &f->epochs) && f->epochs > 0;
        if (name == "--seconds") return absl::SimpleAtod(value, &f->seconds) && f->seconds > 0;
        if (name == "--mode") return (f->mode = value) == "sync" || value == "async";
        return false;
      });
  if (!bad) return true;
  std::fprintf(stderr, "bad flag %s (flags: --threads --batch --epochs --seconds --mode)\n",
               bad->c_str());
  return false;
}

// Compute only: TrainStep over consecutive real batches for `seconds`.
double ComputeOnly(const Flags& flags, const Dataset& data) {
  ModelSpec spec = *ModelByName("cnn");
  CpuNetworkOptions o;
  o.max_batch = flags.batch;
  o.num_threads = flags.threads;
  auto net = CpuNetwork::Create(spec, o);
  if (!net.ok()) {
    std::fprintf(stderr, "%s\n", std::string(net.status().message()).c_str());
    return 0;
  }
  std::vector<float> params = InitialParameters(spec, 1);
  std::vector<float> grads(spec.num_parameters);
  const int pixels = data.height * data.width;
  const int batches = data.count / flags.batch;
  float loss;
  int correct;
  auto step = [&](int b) {
    const size_t first = size_t(b % batches) * flags.batch;
    (void)(*net)->TrainStep(params.data(), &data.images[first * pixels], &data.targets[first],
                            flags.batch, grads.data(), &loss, &correct);
  };
  for (int i = 0; i < 5; ++i) step(i);  // warm-up
  int n = 0;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(flags.seconds)) step(n++);
  return n * flags.batch / absl::ToDoubleSeconds(absl::Now() - start);
}

int Run(const Flags& flags) {
  const std::string dir = testing::TestDataDir();
  if (dir.empty()) {
    std::fprintf(stderr, "no MNIST: set PSCLUSTER_DATA_DIR\n");
    return 1;
  }
  absl::StatusOr<Dataset> data = LoadMnist(dir, Split::kTrain);
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  std::printf("cnn, batch %d, %d threads, MNIST from %s\n", flags.batch, flags.threads,
              dir.c_str());
  const double compute = ComputeOnly(flags, *data);
  std::printf("compute only:            %8.0f images/s\n", compute);
  std::fflush(stdout);

  testing::ClusterOptions o;
  o.num_ps = 1;
  o.num_workers = 1;
  o.evaluator = false;
  o.data_dir = dir;
  o.chief_args = {absl::StrCat("--epochs=", flags.epochs),
                  absl::StrCat("--batch_size=", flags.batch), "--mode=" + flags.mode};
  o.worker_args = {absl::StrCat("--threads=", flags.threads)};
  auto cluster = testing::LocalCluster::Start(o);
  if (!cluster.ok()) {
    std::fprintf(stderr, "%s\n", std::string(cluster.status().message()).c_str());
    return 1;
  }
  std::map<std::string, int> codes = (*cluster)->Wait(absl::Minutes(30));
  const std::string log = (*cluster)->Log("worker:0");
  std::optional<long> rate = testing::FindCounter(log, "done:", "images_per_s");
  if (!rate.has_value() || codes["chief:0"] != 0) {
    std::fprintf(stderr, "the cluster run failed:\n%s\n", (*cluster)->AllLogs().c_str());
    return 1;
  }
  std::optional<long> steps = testing::FindCounter(log, "done:", "steps");
  const size_t at = log.find("compute_s=");
  std::printf("1 ps + 1 worker (%s):  %8ld images/s   (%s)\n", flags.mode.c_str(), *rate,
              at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at).c_str());
  std::printf("ratio cluster / compute-only: %.2f\n", *rate / compute);
  (void)steps;
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
