// Benchmark (not a test): what adding and draining a ps costs
// (docs/faults.md, "Parameter servers added and drained in a running
// job"). For each model, a local cluster of the real binaries (3 ps listed,
// the chief on --min_ps=2, 2 workers, the evaluator) trains, async; ps:2
// starts a quarter into the run (the shards placed over 3 ps) and is
// stopped by SIGTERM at three quarters (placed over 2 again). The chief
// logs each move: the megabytes that changed ps, of the model's with its
// optimizer slots, those it sent to the ps (a ps keeps the floats that
// stay on it), and how long training paused, split into the checkpoint
// and the restore; each model twice, the restore sending each ps only the
// floats that come to it from another ps (the chief's way) and, for
// comparison, all of them (PSCLUSTER_TEST_MOVE_SENDS_ALL). Beside them,
// in the same run, the least such a move can
// take on this machine: the moved bytes, and all of them, sent once over a
// loopback TCP connection (measured here, before the runs).
//
//   bazel run //tests/bench:ps_resize -- [--models=mlp,cnn,mlp_large] [--epochs=2]
//
// MNIST from $PSCLUSTER_DATA_DIR or ../shared/data/mnist.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/bench/bench_flags.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace {

struct Flags {
  std::vector<std::string> models = {"mlp", "cnn", "mlp_large"};
  int epochs = 2;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  const std::optional<std::string> bad =
      FirstBadFlag(argc, argv, [&](const std::string& name, const std::string& value) {
        bool ok = true;
        if (name == "--models") {
          f->models = absl::StrSplit(value, ',', absl::SkipEmpty());
          ok = !f->models.empty();
        } else if (name == "--epochs") {
          ok = absl::SimpleAtoi(value, &f->epochs) && f->epochs > 0;
        } else {
          ok = false;
        }
        return ok;
      });
  if (!bad) return true;
  std::fprintf(stderr, "ps_resize: bad flag %s (flags: --models=a,b --epochs=N)\n", bad->c_str());
  return false;
}

// Bytes per second through one loopback TCP connection: 512 MB sent in
// 1 MB writes, read on another thread.
double LoopbackBytesPerSecond() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("ps_resize: loopback listener");
    return 0;
  }
  constexpr size_t kChunk = 1 << 20;
  constexpr size_t kTotal = 512 * kChunk;
  std::thread reader([listener] {
    const int in = accept(listener, nullptr, nullptr);
    std::vector<char> buf(kChunk);
    size_t got = 0;
    while (got < kTotal) {
      const ssize_t n = read(in, buf.data(), buf.size());
      if (n <= 0) break;
      got += n;
    }
    close(in);
  });
  const int out = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("ps_resize: loopback connect");
    reader.join();
    return 0;
  }
  std::vector<char> buf(kChunk, 1);
  const absl::Time t0 = absl::Now();
  for (size_t sent = 0; sent < kTotal;) {
    const ssize_t n = write(out, buf.data(), buf.size());
    if (n <= 0) break;
    sent += n;
  }
  close(out);
  reader.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  close(listener);
  return kTotal / seconds;
}

struct Move {
  int to_ps = 0;
  double moved_mb = 0, total_mb = 0, sent_mb = 0, paused_ms = 0, checkpoint_ms = 0, restore_ms = 0;
};

std::vector<Move> Moves(const std::string& chief_log) {
  static const std::regex kLine(
      "the shards are placed over ([0-9]+) ps from step [0-9]+ \\(generation [0-9]+\\): "
      "([0-9.e+-]+) MB of ([0-9.e+-]+) MB changed ps, ([0-9.e+-]+) MB sent to the ps; training "
      "paused ([0-9.]+) ms \\(([0-9.]+) ms for the checkpoint, ([0-9.]+) ms to place and "
      "restore\\)");
  std::vector<Move> moves;
  for (auto it = std::sregex_iterator(chief_log.begin(), chief_log.end(), kLine);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    Move mv;
    mv.to_ps = std::stoi(m[1]);
    mv.moved_mb = std::stod(m[2]);
    mv.total_mb = std::stod(m[3]);
    mv.sent_mb = std::stod(m[4]);
    mv.paused_ms = std::stod(m[5]);
    mv.checkpoint_ms = std::stod(m[6]);
    mv.restore_ms = std::stod(m[7]);
    moves.push_back(mv);
  }
  return moves;
}

// One 2 -> 3 -> 2 run of `model`; its moves, or none when it failed (said
// on stderr).
std::vector<Move> Run(const std::string& model, int epochs, bool send_all) {
  // 60,000 examples in per-worker batches of 32.
  const int64_t chunks = 60000 / 32 * epochs;
  testing::ClusterOptions o;
  o.data_dir = testing::TestDataDir();
  o.num_ps = 3;
  o.num_workers = 2;
  o.chief_args = {"--model=" + model, absl::StrCat("--epochs=", epochs), "--mode=async",
                  "--batch_size=64", "--log_every_s=0.2", "--min_ps=2"};
  o.start_later = {"ps:2"};
  if (send_all) o.task_env["chief:0"] = {"PSCLUSTER_TEST_MOVE_SENDS_ALL=1"};
  absl::StatusOr<std::unique_ptr<testing::LocalCluster>> c = testing::LocalCluster::Start(o);
  if (!c.ok()) {
    std::fprintf(stderr, "ps_resize: %s: %s\n", model.c_str(), c.status().ToString().c_str());
    return {};
  }
  testing::LocalCluster& cluster = **c;
  bool ok = cluster.WaitForChunks(chunks / 4, absl::Minutes(10)) &&
            cluster.StartTask("ps:2").ok() &&
            cluster.WaitForLog("chief:0", "the shards are placed over 3 ps", absl::Minutes(2)) &&
            cluster.WaitForChunks(chunks * 3 / 4, absl::Minutes(20)) &&
            cluster.Signal("ps:2", SIGTERM).ok() &&
            cluster.WaitForLog("chief:0", "the shards are placed over 2 ps", absl::Minutes(2));
  for (const auto& [task, code] : cluster.Wait(absl::Minutes(20))) {
    if (code != 0) {
      std::fprintf(stderr, "ps_resize: %s: %s exited %d\n", model.c_str(), task.c_str(), code);
      ok = false;
    }
  }
  if (!ok) {
    std::fprintf(stderr, "ps_resize: the %s run failed; its logs:\n%s\n", model.c_str(),
                 cluster.AllLogs().c_str());
    return {};
  }
  return Moves(cluster.Log("chief:0"));
}

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;
  const double loopback = LoopbackBytesPerSecond();
  if (loopback <= 0) return 1;
  std::printf("ps_resize: %u cores, loopback TCP %.0f MB/s (one connection)\n",
              std::thread::hardware_concurrency(), loopback / 1e6);
  // "sends": what a move's restore sends each ps, only the floats that
  // come to it from another ps (the chief's way) or all of them (before).
  std::printf("%-10s %-7s %-6s %9s %9s %9s %10s %10s %10s %13s %13s\n", "model", "move", "sends",
              "moved MB", "total MB", "sent MB", "paused ms", "ckpt ms", "restore ms",
              "moved@lo ms", "total@lo ms");
  int failed = 0;
  for (const std::string& model : flags.models) {
    for (const bool send_all : {false, true}) {
      const std::vector<Move> moves = Run(model, flags.epochs, send_all);
      if (moves.size() != 2) {
        std::fprintf(stderr, "ps_resize: %s: %zu moves logged, expected 2\n", model.c_str(),
                     moves.size());
        ++failed;
        continue;
      }
      for (const Move& m : moves) {
        std::printf("%-10s %-7s %-6s %9.3f %9.3f %9.3f %10.1f %10.1f %10.1f %13.2f %13.2f\n",
                    model.c_str(), m.to_ps == 3 ? "2 -> 3" : "3 -> 2", send_all ? "all" : "moved",
                    m.moved_mb, m.total_mb, m.sent_mb, m.paused_ms, m.checkpoint_ms, m.restore_ms,
                    m.moved_mb * 1e6 / loopback * 1e3, m.total_mb * 1e6 / loopback * 1e3);
      }
      std::fflush(stdout);
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
