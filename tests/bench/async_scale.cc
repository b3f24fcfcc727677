// Benchmark (not a test): sync against async training as the worker count
// grows (issue 16). For each W in --workers it runs, one after the other on
// this machine, a whole cluster of the real binaries (--num_ps ps, W
// workers, the chief and an evaluator, every flag at its default but the
// model, the epochs and the mode) in sync and then in async mode, and
// prints one table of both side by side:
//
//   W | mode | wall_s | images/s | gradients computed | applied per ps
//   (min..max) | applied/computed | mean staleness | max staleness |
//   bound wait s | test accuracy | async/sync wall
//
//   bazel run //tests/bench:async_scale -- [--workers=2,8,24] [--num_ps=2]
//       [--epochs=1] [--model=cnn] [--out_dir=DIR]
//
// The figures come from the logs: the chief's `final:` line (accuracy,
// wall_s), its `every worker is done:` line, its end-of-run line per ps
// (`ps:I version=... applied=... staleness_mean=... staleness_max=...`) and
// each worker's `done: N steps, ... bound_wait_s=...` (gradients computed =
// the sum of N). A key a daemon does not log shows as n/a. images/s =
// 60000 * epochs / wall_s; applied/computed takes the ps that applied
// fewest. Into --out_dir (default: a fresh /tmp/async_scale.XXXXXX) go the
// table as TSV (async_scale.tsv), the gnuplot script (async_scale.gp) and
// its PNG (async_scale.png: images/s and test accuracy against W, a line
// per mode; not drawn, and said so, without gnuplot: apt-get install
// gnuplot-nox), and every task's log of every run (logs/W<w>-<mode>/).
//
// Exit status: 0 when every run finished (every task exited 0 and the
// chief printed its accuracy), 1 when one did not (each is named), 2 for a
// bad flag. MNIST from $PSCLUSTER_DATA_DIR or ../shared/data/mnist.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/file_io.h"
#include "model/model_spec.h"
#include "tests/local_cluster.h"


namespace pscluster {
namespace {

constexpr int kTrainExamples = 60000;  // MNIST's training set
constexpr int kMaxWorkers = 256;
constexpr int kMaxPs = 64;

constexpr char kUsage[] =
    "async_scale: sync vs async training as the worker count grows; one cluster of the\n"
    "real binaries per (W, mode), one after the other, and one table of both.\n"
    "\n"
    "  bazel run //tests/bench:async_scale -- [flags]\n"
    "\n"
    "  --workers=LIST  worker counts, comma-separated (default 2,8,24)\n"
    "  --num_ps=N      parameter servers (default 2)\n"
    "  --epochs=N      epochs per run (default 1)\n"
    "  --model=NAME    cnn (the built-in CNN, default) or mlp\n"
    "  --out_dir=DIR   TSV, gnuplot script, PNG and logs (default: a new /tmp/async_scale.XXXXXX)\n"
    "  --help\n";

struct Flags {
  std::vector<int> workers = {2, 8, 24};
  int num_ps = 2;
  int epochs = 1;
  std::string model = "cnn";
  std::string out_dir;
};

[[noreturn]] void BadFlag(const std::string& arg, const std::string& want) {
  std::fprintf(stderr, "error: %s: %s\n", arg.c_str(), want.c_str());
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
    const std::string name = arg.substr(0, eq);
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      BadFlag(arg, "flags look like --name=value (try --help)");
    }
    const std::string value = arg.substr(eq + 1);
    if (name == "--workers") {
      f.workers.clear();
      for (absl::string_view w : absl::StrSplit(value, ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(w, &n) || n < 1 || n > kMaxWorkers) {
          BadFlag(arg, absl::StrCat("'", w, "' is not a worker count in [1, ", kMaxWorkers,
                                    "]; want e.g. --workers=2,8,24"));
        }
        if (std::find(f.workers.begin(), f.workers.end(), n) != f.workers.end()) {
          BadFlag(arg, absl::StrCat(n, " is listed twice"));
        }
        f.workers.push_back(n);
      }
    } else if (name == "--num_ps") {
      if (!absl::SimpleAtoi(value, &f.num_ps) || f.num_ps < 1 || f.num_ps > kMaxPs) {
        BadFlag(arg, absl::StrCat("must be an integer in [1, ", kMaxPs, "]"));
      }
    } else if (name == "--epochs") {
      if (!absl::SimpleAtoi(value, &f.epochs) || f.epochs < 1 || f.epochs > 100) {
        BadFlag(arg, "must be an integer in [1, 100]");
      }
    } else if (name == "--model") {
      if (!ModelByName(value).ok()) {
        BadFlag(arg, absl::StrCat("unknown model; known: ", absl::StrJoin(KnownModels(), ", ")));
      }
      f.model = value;
    } else if (name == "--out_dir") {
      if (value.empty()) BadFlag(arg, "must name a folder");
      f.out_dir = value;
    } else {
      BadFlag(arg, "unknown flag (try --help)");
    }
  }
  return f;
}

// ---- What one run's logs say -----------------------------------------------

struct Figures {
  int workers = 0;
  std::string mode;
  std::string failure;  // empty: the run finished
  double wall_s = NAN;
  double accuracy = NAN;
  long chunks = -1, handed_out_again = -1;
  long computed = 0;                     // gradients: sum of the workers' steps
  std::vector<long> applied;             // per ps
  long dropped_stale = 0;                // sum over the ps
  std::optional<double> staleness_mean;  // over the ps, weighted by applied
  std::optional<long> staleness_max;
  std::optional<double> bound_wait_s;  // sum over the workers
  bool ok() const { return failure.empty(); }
};

// The last line of `log` containing `marker`; "" when none.
std::string LastLine(const std::string& log, const std::string& marker) {
  std::string found;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (line.find(marker) != absl::string_view::npos) found = std::string(line);
  }
  return found;
}

// The last line of `log` that `re` matches; "" when none.
std::string LastMatch(const std::string& log, const std::regex& re) {
  std::string found;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    std::string l(line);
    if (std::regex_search(l, re)) found = std::move(l);
  }
  return found;
}

// The number after " key=" in `line`.
std::optional<double> Number(const std::string& line, const std::string& key) {
  const size_t k = line.find(" " + key + "=");
  if (k == std::string::npos) return std::nullopt;
  const char* start = line.c_str() + k + key.size() + 2;
  char* end = nullptr;
  const double v = std::strtod(start, &end);
  if (end == start || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Fills `f` from the logs of a run whose tasks all exited 0.
void ReadFigures(const testing::LocalCluster& c, int num_ps, Figures* f) {
  const std::string chief = c.Log("chief:0");
  const size_t at = chief.rfind("\nfinal: ");
  const std::string final_line =
      at == std::string::npos ? "" : chief.substr(at + 1, chief.find('\n', at + 1) - at - 1);
  const std::optional<double> accuracy = Number(final_line, "test_accuracy");
  const std::optional<double> wall = Number(final_line, "wall_s");
  if (!accuracy.has_value() || !wall.has_value()) {
    f->failure = final_line.empty() ? "no final: line from the chief"
                                    : "the chief's final line has no accuracy: " + final_line;
    return;
  }
  f->accuracy = *accuracy;
  f->wall_s = *wall;
  std::smatch m;
  const std::string done = LastLine(chief, "every worker is done:");
  if (std::regex_search(done, m, std::regex("done: (\\d+) of \\d+ chunks trained"))) {
    f->chunks = std::stol(m[1]);
  }
  if (std::optional<double> again = Number(done, "handed_out_again")) {
    f->handed_out_again = static_cast<long>(*again);
  }
  bool has_staleness = false;
  double staleness_weighted = 0;
  long staleness_weight = 0;
  for (int i = 0; i < num_ps; ++i) {
    const std::string line = LastLine(chief, absl::StrCat("ps:", i, " version="));
    const std::optional<double> applied = Number(line, "applied");
    if (!applied.has_value()) {
      f->failure = absl::StrCat("no end-of-run line for ps:", i, " in the chief's log");
      return;
    }
    f->applied.push_back(static_cast<long>(*applied));
    f->dropped_stale += static_cast<long>(Number(line, "dropped_stale").value_or(0));
    if (std::optional<double> mean = Number(line, "staleness_mean")) {
      staleness_weighted += *mean * *applied;
      staleness_weight += static_cast<long>(*applied);
      has_staleness = true;
    }
    if (std::optional<double> max = Number(line, "staleness_max")) {
      f->staleness_max = std::max(f->staleness_max.value_or(0), static_cast<long>(*max));
    }
  }
  if (has_staleness) {
    f->staleness_mean = staleness_weight > 0 ? staleness_weighted / staleness_weight : 0;
  }
  const std::regex worker_done("done: (\\d+) steps");
  for (int w = 0; w < f->workers; ++w) {
    const std::string line = LastMatch(c.Log(absl::StrCat("worker:", w)), worker_done);
    if (!std::regex_search(line, m, worker_done)) {
      f->failure = absl::StrCat("no done: line from worker:", w);
      return;
    }
    f->computed += std::stol(m[1]);
    if (std::optional<double> wait = Number(line, "bound_wait_s")) {
      f->bound_wait_s = f->bound_wait_s.value_or(0) + *wait;
    }
  }
}

// ---- Files ------------------------------------------------------------------

// mkdir -p. "" when `path` is a folder afterwards, else why not.
std::string MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return ec.message();
  return std::filesystem::is_directory(path) ? "" : "not a folder";
}

bool WriteFile(const std::string& path, const std::string& text) {
  return WriteFileAtomically(path, {text}).ok();
}

// Keeps every task's log of one run under out_dir/logs/W<w>-<mode>/.
void SaveLogs(const testing::LocalCluster& c, const std::string& out_dir, const Figures& f,
              int num_ps) {
  const std::string dir = absl::StrCat(out_dir, "/logs/W", f.workers, "-", f.mode);
  if (!MakeDirs(dir).empty()) return;
  std::vector<std::string> tasks = {"chief:0", "evaluator:0"};
  for (int i = 0; i < num_ps; ++i) tasks.push_back(absl::StrCat("ps:", i));
  for (int i = 0; i < f.workers; ++i) tasks.push_back(absl::StrCat("worker:", i));
  for (const std::string& t : tasks) {
    std::string name = t;
    name.erase(std::remove(name.begin(), name.end(), ':'), name.end());
    WriteFile(absl::StrCat(dir, "/", name, ".log"), c.Log(t));
  }
}

// The path of `program` on PATH; "" when it is not there.
std::string OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "", ':')) {
    if (dir.empty()) continue;
    const std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// The 1-minute load average (/proc/loadavg): other work on the machine
// shows in the timings, so each run's progress line says it.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string first;
  if (!(in >> first)) return "n/a";
  return first;
}

std::string Epochs(int epochs) { return epochs == 1 ? "1 epoch" : absl::StrCat(epochs, " epochs"); }

// ---- The table ----------------------------------------------------------------

std::string Fixed(std::optional<double> v, int decimals) {
  if (!v.has_value() || !std::isfinite(*v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, *v);
  return buf;
}

// The sync run with the same W; nullptr when it failed or did not run.
const Figures* SyncOf(const std::vector<Figures>& runs, int workers) {
  for (const Figures& r : runs) {
    if (r.workers == workers && r.mode == "sync" && r.ok()) return &r;
  }
  return nullptr;
}

std::vector<std::string> Cells(const Figures& f, const std::vector<Figures>& runs, int epochs) {
  std::vector<std::string> c = {absl::StrCat(f.workers), f.mode};
  if (!f.ok()) {
    c.push_back("FAILED: " + f.failure);
    return c;
  }
  const auto [lo, hi] = std::minmax_element(f.applied.begin(), f.applied.end());
  c.push_back(Fixed(f.wall_s, 1));
  c.push_back(Fixed(double(kTrainExamples) * epochs / f.wall_s, 0));
  c.push_back(absl::StrCat(f.computed));
  c.push_back(*lo == *hi ? absl::StrCat(*lo) : absl::StrCat(*lo, "..", *hi));
  c.push_back(f.computed > 0 ? Fixed(double(*lo) / f.computed, 3) : "n/a");
  c.push_back(Fixed(f.staleness_mean, 2));
  c.push_back(f.staleness_max.has_value() ? absl::StrCat(*f.staleness_max) : "n/a");
  c.push_back(Fixed(f.bound_wait_s, 1));
  c.push_back(Fixed(f.accuracy, 4));
  const Figures* sync = SyncOf(runs, f.workers);
  c.push_back(f.mode == "async" && sync != nullptr ? Fixed(f.wall_s / sync->wall_s, 2) : "-");
  return c;
}

void PrintTable(const std::vector<Figures>& runs, int epochs) {
  const std::vector<std::string> header = {
      "W",         "mode",         "wall_s",        "images/s",
      "computed",  "applied/ps",   "applied/comp.", "mean stale",
      "max stale", "bound wait s", "test acc",      "async/sync wall"};
  std::vector<std::vector<std::string>> rows = {header};
  for (const Figures& f : runs) rows.push_back(Cells(f, runs, epochs));
  // A failed run's row is W, mode and its message, which is not measured.
  std::vector<size_t> width(header.size(), 0);
  for (const auto& r : rows) {
    const size_t measured = r.size() == header.size() ? r.size() : 2;
    for (size_t i = 0; i < measured; ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    std::string line;
    for (size_t i = 0; i < rows[k].size(); ++i) {
      const std::string& cell = rows[k][i];
      if (i > 0) line += " | ";
      if (rows[k].size() == header.size() || i < 2) {
        line += std::string(width[i] - std::min(width[i], cell.size()), ' ');
      }
      line += cell;
    }
    std::printf("%s\n", line.c_str());
    if (k == 0) {
      std::string rule;
      for (size_t i = 0; i < width.size(); ++i)
        rule += (i > 0 ? "-+-" : "") + std::string(width[i], '-');
      std::printf("%s\n", rule.c_str());
    }
  }
}

std::string Tsv(const std::vector<Figures>& runs, int epochs) {
  auto na = [](const std::string& s) { return s == "n/a" || s == "-" ? std::string("NA") : s; };
  std::string out =
      "workers\tmode\twall_s\timages_per_s\tgradients_computed\tapplied_min\tapplied_max\t"
      "applied_over_computed\tstaleness_mean\tstaleness_max\tbound_wait_s\ttest_accuracy\t"
      "async_over_sync_wall\tchunks\thanded_out_again\tdropped_stale_sum\tstatus\n";
  for (const Figures& f : runs) {
    if (!f.ok()) {
      absl::StrAppend(&out, f.workers, "\t", f.mode);
      for (int i = 0; i < 14; ++i) absl::StrAppend(&out, "\tNA");
      absl::StrAppend(&out, "\tFAILED: ", f.failure, "\n");
      continue;
    }
    const std::vector<std::string> c = Cells(f, runs, epochs);
    const auto [lo, hi] = std::minmax_element(f.applied.begin(), f.applied.end());
    absl::StrAppend(&out, c[0], "\t", c[1], "\t", c[2], "\t", c[3], "\t", c[4], "\t", *lo, "\t",
                    *hi, "\t", na(c[6]), "\t", na(c[7]), "\t", na(c[8]), "\t", na(c[9]), "\t",
                    c[10], "\t", na(c[11]), "\t", f.chunks, "\t", f.handed_out_again, "\t",
                    f.dropped_stale, "\tok\n");
  }
  return out;
}

// Two panels, images/s and test accuracy against W, a line per mode; the
// figures sit in the script itself (gnuplot 5 data blocks). "" when no run
// finished: nothing to draw.
std::string GnuplotScript(const std::vector<Figures>& runs, const Flags& flags,
                          const std::string& png) {
  std::string s = absl::StrCat(
      "# Drawn by tests/bench/async_scale: gnuplot async_scale.gp\n"
      "set terminal pngcairo size 1200,480 font ',10'\n"
      "set output '",
      png, "'\n");
  std::vector<std::string> modes;  // those with a finished run
  for (const char* mode : {"sync", "async"}) {
    std::string block;
    for (const Figures& f : runs) {
      if (f.mode != mode || !f.ok()) continue;
      absl::StrAppend(&block, f.workers, " ",
                      Fixed(double(kTrainExamples) * flags.epochs / f.wall_s, 1), " ",
                      Fixed(f.accuracy, 4), "\n");
    }
    if (block.empty()) continue;
    absl::StrAppend(&s, "$", mode, " << EOD\n", block, "EOD\n");
    modes.push_back(mode);
  }
  if (modes.empty()) return "";
  auto plot = [&](int column) {
    std::vector<std::string> lines;
    for (const std::string& m : modes) {
      lines.push_back(absl::StrCat("$", m, " using 1:", column, " with linespoints lw 2 pt ",
                                   m == "sync" ? 7 : 5, " title '", m, "'"));
    }
    return absl::StrCat("plot ", absl::StrJoin(lines, ", \\\n     "), "\n");
  };
  const auto [fewest, most] = std::minmax_element(flags.workers.begin(), flags.workers.end());
  absl::StrAppend(&s, "set multiplot layout 1,2 title '", flags.model, ", ", Epochs(flags.epochs),
                  ", ", flags.num_ps, " ps, one evaluator, on this machine'\n",
                  "set logscale x 2\n", "set xrange [", Fixed(*fewest / 1.4, 2), ":",
                  Fixed(*most * 1.4, 2), "]\n", "set xtics (", absl::StrJoin(flags.workers, ", "),
                  ")\n",
                  "set xlabel 'workers'\n"
                  "set grid\n"
                  "set key outside right center vertical\n"
                  "set ylabel 'images/s'\n"
                  "set yrange [0:*]\n",
                  plot(2),
                  "set ylabel 'test accuracy'\n"
                  "set yrange [*:*]\n",
                  plot(3), "unset multiplot\n");
  return s;
}

// ---- The runs -------------------------------------------------------------------

Figures RunOne(const Flags& flags, const std::string& data_dir, int workers,
               const std::string& mode) {
  Figures f;
  f.workers = workers;
  f.mode = mode;
  testing::ClusterOptions o;
  o.num_ps = flags.num_ps;
  o.num_workers = workers;
  o.evaluator = true;
  o.evaluator_args = {"--eval_interval_s=30"};  // its default, as a user runs it
  o.data_dir = data_dir;
  o.chief_args = {"--model=" + flags.model, absl::StrCat("--epochs=", flags.epochs),
                  "--mode=" + mode};
  absl::StatusOr<std::unique_ptr<testing::LocalCluster>> c = testing::LocalCluster::Start(o);
  if (!c.ok()) {
    f.failure = absl::StrCat("the cluster did not start: ", c.status().message());
    return f;
  }
  const std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(30) * flags.epochs);
  std::vector<std::string> bad;
  for (const auto& [task, code] : codes) {
    if (code != 0) bad.push_back(absl::StrCat(task, " exited ", code));
  }
  if (!bad.empty()) {
    f.failure = absl::StrJoin(bad, ", ");
  } else {
    ReadFigures(**c, flags.num_ps, &f);
  }
  SaveLogs(**c, flags.out_dir, f, flags.num_ps);
  return f;
}

int Run(Flags flags) {
  const std::string data_dir = testing::TestDataDir();
  if (data_dir.empty()) {
    std::fprintf(stderr, "error: no MNIST: set PSCLUSTER_DATA_DIR\n");
    return 1;
  }
  if (flags.out_dir.empty()) {
    char tmpl[] = "/tmp/async_scale.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::fprintf(stderr, "error: cannot create a folder in /tmp: %s\n", std::strerror(errno));
      return 1;
    }
    flags.out_dir = tmpl;
  } else if (const std::string why = MakeDirs(flags.out_dir); !why.empty()) {
    std::fprintf(stderr, "error: --out_dir=%s: cannot create it: %s\n", flags.out_dir.c_str(),
                 why.c_str());
    return 2;
  }
  const int total = 2 * static_cast<int>(flags.workers.size());
  std::printf(
      "async_scale: %s, %s, %d ps, W = %s x {sync, async} (%d runs), an "
      "evaluator each, %ld cores; MNIST %s; output in %s\n",
      flags.model.c_str(), Epochs(flags.epochs).c_str(), flags.num_ps,
      absl::StrJoin(flags.workers, ",").c_str(), total, sysconf(_SC_NPROCESSORS_ONLN),
      data_dir.c_str(), flags.out_dir.c_str());
  std::fflush(stdout);

  std::vector<Figures> runs;
  for (int w : flags.workers) {
    for (const char* mode : {"sync", "async"}) {
      const int k = static_cast<int>(runs.size()) + 1;
      std::printf("[%d/%d] W=%d %s: starting (load average %s)\n", k, total, w, mode,
                  LoadAverage().c_str());
      std::fflush(stdout);
      const absl::Time start = absl::Now();
      runs.push_back(RunOne(flags, data_dir, w, mode));
      const Figures& f = runs.back();
      const double took = absl::ToDoubleSeconds(absl::Now() - start);
      if (f.ok()) {
        std::printf(
            "[%d/%d] W=%d %s: done in %.1f s: wall_s=%.1f test_accuracy=%.4f (load "
            "average %s)\n",
            k, total, w, mode, took, f.wall_s, f.accuracy, LoadAverage().c_str());
      } else {
        std::printf("[%d/%d] W=%d %s: FAILED after %.1f s: %s (logs in %s/logs/W%d-%s)\n", k, total,
                    w, mode, took, f.failure.c_str(), flags.out_dir.c_str(), w, mode);
      }
      std::fflush(stdout);
    }
  }

  std::printf("\n");
  PrintTable(runs, flags.epochs);
  std::printf("\n");
  int status = 0;
  const std::string tsv = flags.out_dir + "/async_scale.tsv";
  if (WriteFile(tsv, Tsv(runs, flags.epochs))) {
    std::printf("table: %s\n", tsv.c_str());
  } else {
    std::printf("error: could not write %s\n", tsv.c_str());
    status = 1;
  }
  const std::string script = flags.out_dir + "/async_scale.gp";
  const std::string png = flags.out_dir + "/async_scale.png";
  const std::string plot_script = GnuplotScript(runs, flags, png);
  if (!plot_script.empty()) WriteFile(script, plot_script);
  const std::string gnuplot = OnPath("gnuplot");
  if (plot_script.empty()) {
    std::printf("no run finished: no PNG drawn\n");
  } else if (gnuplot.empty()) {
    std::printf(
        "gnuplot is not on PATH: the PNG was not drawn (apt-get install gnuplot-nox, "
        "then gnuplot %s)\n",
        script.c_str());
  } else {
    const std::string log = flags.out_dir + "/gnuplot.log";
    const testing::ProcessResult r =
        testing::RunBinary(gnuplot, {script}, /*tf_config=*/"", absl::Minutes(2));
    WriteFile(log, r.output);
    const int rc = r.exit_code;
    if (rc == 0) {
      std::printf("plot: %s\n", png.c_str());
    } else {
      std::printf("error: gnuplot %s exited %d; the PNG was not drawn (see %s)\n", script.c_str(),
                  rc, log.c_str());
      status = 1;
    }
  }
  std::vector<std::string> failed;
  for (const Figures& f : runs) {
    if (!f.ok()) failed.push_back(absl::StrCat("W=", f.workers, " ", f.mode, " (", f.failure, ")"));
  }
  if (!failed.empty()) {
    std::printf("%zu of %d runs failed: %s\n", failed.size(), total,
                absl::StrJoin(failed, "; ").c_str());
    status = 1;
  }
  std::fflush(stdout);
  return status;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Run(pscluster::ParseFlags(argc, argv)); }
