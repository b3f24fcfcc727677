// Benchmark (not a test): images/s of a model on one GPU, at each batch
// size, compute only (ComputeBackend::TrainStep on real batches, the next
// batch prefetched) beside PyTorch on the same card in the same run
// (tests/bench/torch_gpu.py: the same model file, fp32, TF32 off, the batch
// copied from pinned memory each step; eager, torch.compile and the step
// captured as a CUDA graph, each with its ratio, and the ratio to the best
// of the three), and inside a
// 1-ps/1-worker cluster of the real binaries (worker --device=cuda), with
// the step-time split: pull, host->device, compute, device->host, push
// (pull and push of a step travel in one fused RPC and are reported
// together).
//
//   bazel run //tests/bench:gpu_throughput -- [--model=cnn|NAME|FILE]
//       [--device=cuda] [--batches=128,1024,8192] [--seconds=5]
//       [--epochs=N] [--mode=sync] [--no_cluster] [--idle_ms=0]
//       [--peer=python3|none] [--peer_script=tests/bench/torch_gpu.py]
//       [--cluster_args=--flag=value,...]
//
// --epochs: of the cluster runs; default enough for 40 steps.
// --model: a built-in model's name or a Keras model file; its input must be
// 28x28x1 (MNIST, or Fashion-MNIST for vgg_fashion) when a cluster runs.
// --idle_ms: sleep this long between compute-only steps (a GPU left idle
// between steps may lower its clocks: this shows what that costs).
// --peer: the Python that runs the PyTorch peer ("none": no peer); it must
// have torch with CUDA. --device=cpu runs the same measurement on the CPU
// backend. Without a usable GPU it prints "SKIPPED: <why>" and exits 0.
// Data from $PSCLUSTER_DATA_DIR or ../shared/data/mnist (its sibling
// fashion-mnist for vgg_fashion).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "compute/backend_factory.h"
#include "compute/kernels/blas_env.h"
#include "model/idx_dataset.h"
#include "model/keras_model.h"
#include "model/model_spec.h"
#include "tests/bench/bench_flags.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace {

struct Flags {
  std::string model = "cnn";
  std::string device = "cuda";
  std::vector<int> batches = {128, 1024, 8192};
  double seconds = 5;
  int epochs = 0;  // 0: enough for 40 steps
  std::string mode = "sync";
  bool cluster = true;
  int idle_ms = 0;
  std::string peer = "python3";
  std::string peer_script = "tests/bench/torch_gpu.py";
  std::vector<std::string> cluster_args;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  const std::optional<std::string> bad =
      FirstBadFlag(argc, argv, [&](const std::string& name, const std::string& value) {
        bool ok = true;
        if (name == "--model") {
          f->model = value;
          ok = !value.empty();
        } else if (name == "--idle_ms") {
          ok = absl::SimpleAtoi(value, &f->idle_ms) && f->idle_ms >= 0;
        } else if (name == "--peer") {
          f->peer = value;
          ok = !value.empty();
        } else if (name == "--peer_script") {
          f->peer_script = value;
          ok = !value.empty();
        } else if (name == "--cluster_args") {
          f->cluster_args = absl::StrSplit(value, ',', absl::SkipEmpty());
        } else if (name == "--device") {
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
          ok = absl::SimpleAtoi(value, &f->epochs) && f->epochs >= 0;
        } else if (name == "--mode") {
          ok = (f->mode = value) == "sync" || value == "async";
        } else if (name == "--no_cluster") {
          f->cluster = false;
        } else {
          ok = false;
        }
        return ok;
      });
  if (!bad) return true;
  std::fprintf(stderr,
               "bad flag %s (flags: --model --device --batches --seconds --epochs "
               "--mode --no_cluster --idle_ms --peer --peer_script "
               "--cluster_args)\n",
               bad->c_str());
  return false;
}

struct ComputeFigures {
  double images_per_s = 0;
  StepTimes per_step;  // mean seconds
  std::string backend;
};

// TrainStep over consecutive real batches for `seconds`, the next batch
// prefetched as the trainer does; false on a failed step.
bool ComputeOnly(const Flags& flags, const ModelSpec& spec, int batch,
                 const Dataset& data, ComputeFigures* out) {
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
  const int pixels = data.height * data.width * data.channels;
  const int batches = data.count / batch;
  std::vector<float> images[2];
  std::vector<float> labels[2];
  auto fill = [&](int b, int buf) {
    const size_t first = size_t(b % batches) * batch;
    images[buf].assign(&data.images[first * pixels],
                       &data.images[(first + batch) * pixels]);
    labels[buf].assign(&data.targets[first], &data.targets[first + batch]);
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
    if (flags.idle_ms > 0) absl::SleepFor(absl::Milliseconds(flags.idle_ms));
    if (!step()) return false;
    const StepTimes t = (*backend)->last_step_times();
    sum.h2d_s += t.h2d_s;
    sum.compute_s += t.compute_s;
    sum.d2h_s += t.d2h_s;
  }
  // With --idle_ms, images/s counts the steps' time only.
  const double wall = absl::ToDoubleSeconds(absl::Now() - start) -
                      done * flags.idle_ms * 1e-3;
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

// One of the peer's ways of running the step (tests/bench/torch_gpu.py):
// eager, compile or graph, its images/s (-1 when it could not run) and its
// device and torch version, or why it did not run.
struct PeerFigure {
  std::string mode;
  double images_per_s = -1;
  std::string detail;
};

// The peer's figures on `model_file` at `batch`, one per mode it printed;
// empty with *why saying why when it printed none.
std::vector<PeerFigure> PeerImagesPerSecond(const Flags& flags, const std::string& model_file,
                                            int batch, std::string* why) {
  const std::string command = absl::StrCat(
      flags.peer, " ", flags.peer_script, " --model=", model_file,
      " --batch=", batch, " --seconds=", flags.seconds, " 2>&1");
  std::vector<PeerFigure> figures;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *why = "cannot run " + command;
    return figures;
  }
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (!absl::ConsumePrefix(&line, "torch_gpu: mode=")) continue;
    PeerFigure f;
    f.mode = std::string(line.substr(0, line.find(' ')));
    const size_t at = line.find("images_per_s=");
    const size_t failed = line.find(" FAILED: ");
    if (at != absl::string_view::npos &&
        absl::SimpleAtod(line.substr(at + 13, line.find(' ', at) - at - 13), &f.images_per_s)) {
      const size_t dev = line.find(" device=");
      if (dev != absl::string_view::npos) f.detail = std::string(line.substr(dev + 1));
    } else {
      f.images_per_s = -1;
      f.detail = failed != absl::string_view::npos ? std::string(line.substr(failed + 9))
                                                   : std::string(line);
    }
    figures.push_back(f);
  }
  if (figures.empty()) *why = absl::StrCat(command, " exited ", status, ": ", out);
  return figures;
}

// The model's JSON in a file the peer can read (the built-in models live in
// the binary); empty on failure.
std::string ModelFileForPeer(const Flags& flags) {
  absl::StatusOr<std::string> json = ReadModelFile(flags.model);
  if (!json.ok()) return "";
  char path[] = "/tmp/gpu_throughput_model_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "";
  close(fd);
  std::ofstream(path) << *json;
  return path;
}

int Run(const Flags& flags) {
  // The benchmark's script, one measurement after another (126 lines): what
  // it prints is the order of its lines.
  const DeviceChoice device = *ParseDevice(flags.device);
  absl::StatusOr<ResolvedDevice> resolved = ResolveDevice(device);
  if (!resolved.ok()) {
    std::printf("SKIPPED: --device=%s: %s\n", flags.device.c_str(),
                std::string(resolved.status().message()).c_str());
    return 0;
  }
  absl::StatusOr<std::string> json = ReadModelFile(flags.model);
  absl::StatusOr<ModelSpec> spec =
      json.ok() ? ParseKerasModel(*json, flags.model) : json.status();
  if (!spec.ok()) {
    std::fprintf(stderr, "--model=%s: %s\n", flags.model.c_str(),
                 std::string(spec.status().message()).c_str());
    return 2;
  }
  std::string dir = testing::TestDataDir();
  if (dir.empty()) {
    std::printf("SKIPPED: no MNIST: set PSCLUSTER_DATA_DIR\n");
    return 0;
  }
  // vgg_fashion is Fashion-MNIST's model: its sibling folder, when there.
  const std::string fashion = dir + "/../fashion-mnist";
  if (flags.model == "vgg_fashion" &&
      access((fashion + "/train-images-idx3-ubyte.gz").c_str(), R_OK) == 0) {
    dir = fashion;
  }
  absl::StatusOr<Dataset> data = LoadMnist(dir, Split::kTrain);
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  if (spec->input_height != data->height || spec->input_width != data->width ||
      spec->input_channels != data->channels) {
    std::fprintf(stderr,
                 "--model=%s takes %dx%dx%d images; %s holds %dx%dx%d\n",
                 flags.model.c_str(), spec->input_height, spec->input_width,
                 spec->input_channels, dir.c_str(), data->height, data->width,
                 data->channels);
    return 2;
  }
  const std::string peer_model =
      flags.peer == "none" ? "" : ModelFileForPeer(flags);
  std::printf("%s on %s, data from %s\n", flags.model.c_str(),
              resolved->device.ToString().c_str(), dir.c_str());
  std::printf("%-22s %6s %12s %10s %10s %10s %10s %10s\n", "", "batch",
              "images/s", "pull ms", "h2d ms", "compute ms", "d2h ms",
              "push ms");
  for (int batch : flags.batches) {
    ComputeFigures c;
    if (!ComputeOnly(flags, *spec, batch, *data, &c)) return 1;
    std::printf("%-22s %6d %12.0f %10s %10.3f %10.3f %10.3f %10s   per step\n",
                "compute only", batch, c.images_per_s, "-",
                c.per_step.h2d_s * 1e3, c.per_step.compute_s * 1e3,
                c.per_step.d2h_s * 1e3, "-");
    std::fflush(stdout);
    if (!peer_model.empty()) {
      std::string why;
      double best = -1;
      std::string best_mode;
      for (const PeerFigure& f : PeerImagesPerSecond(flags, peer_model, batch, &why)) {
        const std::string label = absl::StrCat("pytorch ", f.mode, " (peer)");
        if (f.images_per_s <= 0) {
          std::printf("%-22s %6d   no figure: %s\n", label.c_str(), batch, f.detail.c_str());
          continue;
        }
        std::printf("%-22s %6d %12.0f   (%s)\n", label.c_str(), batch, f.images_per_s,
                    f.detail.c_str());
        std::printf("%-22s %6d %12.2f\n", absl::StrCat("ratio ours/", f.mode).c_str(), batch,
                    c.images_per_s / f.images_per_s);
        if (f.images_per_s > best) {
          best = f.images_per_s;
          best_mode = f.mode;
        }
      }
      if (best > 0) {
        std::printf("%-22s %6d %12.2f   (pytorch's best: %s)\n", "ratio ours/best", batch,
                    c.images_per_s / best, best_mode.c_str());
      } else {
        std::printf("%-22s %6d   no figure: %s\n", "pytorch (peer)", batch,
                    why.empty() ? "no mode ran" : why.c_str());
      }
      std::fflush(stdout);
    }
    if (!flags.cluster) continue;

    testing::ClusterOptions o;
    o.num_ps = 1;
    o.num_workers = 1;
    o.evaluator = false;
    o.data_dir = dir;
    // Enough steps that the step time, not the start, is measured.
    const int steps_per_epoch = (data->count + batch - 1) / batch;
    const int epochs = flags.epochs > 0
                           ? flags.epochs
                           : (40 + steps_per_epoch - 1) / steps_per_epoch;
    o.chief_args = {absl::StrCat("--epochs=", epochs),
                    absl::StrCat("--batch_size=", batch),
                    "--mode=" + flags.mode, "--model=" + flags.model};
    for (const std::string& a : flags.cluster_args) o.chief_args.push_back(a);
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
  if (!peer_model.empty()) unlink(peer_model.c_str());
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
