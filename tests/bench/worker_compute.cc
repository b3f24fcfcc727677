// Benchmark (not a test): images/s of CpuNetwork::TrainStep on synthetic data.
//
//   bazel run //tests/bench:worker_compute -- [--model=cnn|NAME|FILE]
//       [--batch=128] [--threads=1,2] [--seconds=3] [--runs=5]
//       [--keep_blas_env] [--peer=torch]
//
// --model takes a built-in model or a Keras model file (common/
// keras_model.h). --peer=torch runs tests/bench/torch_compute.py (Debian's
// python3-torch) on the same model file, batch and threads right after each
// of our measurements and prints the ratio.
//
// For each thread count: warm-up, then --runs timed runs of about --seconds
// each; prints the median and the range of images/s. Unless --keep_blas_env,
// first re-executes itself without OPENBLAS_CORETYPE and with
// OPENBLAS_NUM_THREADS=1 (see compute/kernels/blas_env.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compute/cpu_network.h"
#include "compute/kernels/blas_env.h"
#include "compute/kernels/cpu_blas.h"
#include "model/keras_model.h"
#include "model/model_spec.h"
#include "tests/bench/bench_flags.h"

namespace pscluster {
namespace {

struct Flags {
  std::string model = "cnn";
  int batch = 128;
  std::vector<int> threads = {1, 2};
  double seconds = 3.0;
  int runs = 5;
  bool keep_blas_env = false;
  std::string peer;  // "" or "torch"
};

bool ParseFlags(int argc, char** argv, Flags* flags) {
  const std::optional<std::string> bad =
      FirstBadFlag(argc, argv, [&](const std::string& name, const std::string& value) {
        bool ok = true;
        if (name == "--model") {
          flags->model = value;
        } else if (name == "--batch") {
          ok = absl::SimpleAtoi(value, &flags->batch) && flags->batch > 0;
        } else if (name == "--threads") {
          flags->threads.clear();
          for (absl::string_view part : absl::StrSplit(value, ',')) {
            int t = 0;
            ok = ok && absl::SimpleAtoi(part, &t) && t > 0;
            flags->threads.push_back(t);
          }
        } else if (name == "--seconds") {
          ok = absl::SimpleAtod(value, &flags->seconds) && flags->seconds > 0;
        } else if (name == "--runs") {
          ok = absl::SimpleAtoi(value, &flags->runs) && flags->runs > 0;
        } else if (name == "--peer") {
          flags->peer = value;
          ok = value == "torch";
        } else if (name == "--keep_blas_env") {
          flags->keep_blas_env = true;
        } else {
          ok = false;
        }
        return ok;
      });
  if (!bad) return true;
  std::fprintf(stderr, "bad flag %s\n", bad->c_str());
  return false;
}

// Times TrainStep at one thread count; returns 1 on a failed step.
int Measure(const ModelSpec& spec, const Flags& flags, int threads, double* median) {
  CpuNetworkOptions options;
  options.max_batch = flags.batch;
  options.num_threads = threads;
  auto net = CpuNetwork::Create(spec, options);
  if (!net.ok()) {
    std::fprintf(stderr, "%s\n", net.status().ToString().c_str());
    return 1;
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  const int64_t image_size =
      int64_t{spec.input_height} * spec.input_width * spec.input_channels;
  std::vector<float> images(flags.batch * image_size);
  for (float& v : images) v = pixel(rng);
  // Targets that fit the model's loss: class indices, else values in [0, 1).
  const int per = TargetsOf(spec);
  std::vector<float> labels(static_cast<size_t>(flags.batch) * per);
  for (float& l : labels) {
    l = per == 1 && spec.loss == LossKind::kSparseCategoricalCrossentropy
            ? static_cast<float>(rng() % spec.num_classes)
            : static_cast<float>(rng() % 1000) / 1000.0f;
  }
  std::vector<float> params = InitialParameters(spec, 1);
  std::vector<float> grads(spec.num_parameters);
  float loss = 0;
  int correct = 0;
  uint64_t key = 0;
  auto step = [&] {
    absl::Status st =
        (*net)->TrainStep(params.data(), images.data(), labels.data(),
                          flags.batch, grads.data(), &loss, &correct, ++key);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      std::exit(1);
    }
  };
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const Clock::time_point warm = Clock::now();
  while (seconds_since(warm) < std::min(1.0, flags.seconds)) step();
  std::vector<double> rates;
  for (int r = 0; r < flags.runs; ++r) {
    int steps = 0;
    const Clock::time_point t0 = Clock::now();
    double elapsed = 0;
    do {
      step();
      ++steps;
      elapsed = seconds_since(t0);
    } while (elapsed < flags.seconds);
    rates.push_back(steps * flags.batch / elapsed);
  }
  std::sort(rates.begin(), rates.end());
  *median = rates[rates.size() / 2];
  std::printf(
      "model=%s (%s engine) batch=%d threads=%d: %.0f images/s median of %d runs "
      "(min %.0f, max %.0f); loss %.4f\n",
      spec.name.c_str(), (*net)->on_graph_engine() ? "graph" : "fused", flags.batch, threads,
      rates[rates.size() / 2],
      flags.runs, rates.front(), rates.back(), loss);
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) {
  pscluster::Flags flags;
  if (!pscluster::ParseFlags(argc, argv, &flags)) return 2;
  if (!flags.keep_blas_env) {
    absl::Status st = pscluster::kernels::ReexecWithBlasEnvironment(argv);
    if (!st.ok()) std::fprintf(stderr, "warning: %s\n", st.ToString().c_str());
  }
  absl::StatusOr<std::string> text = pscluster::ReadModelFile(flags.model);
  absl::StatusOr<pscluster::ModelSpec> spec =
      text.ok() ? pscluster::ParseKerasModel(*text, flags.model) : text.status();
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().ToString().c_str());
    return 2;
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("OpenBLAS core: %s (OPENBLAS_CORETYPE %s)\n",
              pscluster::kernels::BlasCoreName().c_str(),
              coretype == nullptr ? "unset" : coretype);
  // The peer reads a file: a built-in model's text goes to a temporary one.
  std::string model_file = flags.model;
  if (!flags.peer.empty() && model_file.find('/') == std::string::npos &&
      model_file.find(".json") == std::string::npos) {
    model_file = "/tmp/worker_compute_" + flags.model + ".json";
    if (FILE* f = std::fopen(model_file.c_str(), "w")) {
      std::fputs(text->c_str(), f);
      std::fclose(f);
    }
  }
  for (int threads : flags.threads) {
    double ours = 0;
    if (pscluster::Measure(*spec, flags, threads, &ours) != 0) return 1;
    if (flags.peer.empty()) continue;
    const std::string cmd = absl::StrCat(
        "/usr/bin/python3 tests/bench/torch_compute.py --model=", model_file,
        " --batch=", flags.batch, " --threads=", threads, " --seconds=", flags.seconds,
        " --runs=", flags.runs, " 2>&1");
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    const int rc = p == nullptr ? -1 : pclose(p);
    const size_t at = out.find("images_per_s=");
    double theirs = 0;
    if (rc != 0 || at == std::string::npos ||
        !absl::SimpleAtod(out.substr(at + 13, out.find(' ', at) - at - 13), &theirs) ||
        theirs <= 0) {
      std::fprintf(stderr, "peer torch measured nothing (%s): %s\n", cmd.c_str(), out.c_str());
      return 1;
    }
    std::printf("  pytorch %s threads=%d: %.0f images/s; ours / pytorch = %.2fx\n",
                flags.model.c_str(), threads, theirs, ours / theirs);
    std::fflush(stdout);
  }
  return 0;
}
