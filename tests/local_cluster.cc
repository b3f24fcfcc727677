#include "tests/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

extern char** environ;

namespace pscluster {
namespace testing {
namespace {

bool HasMnist(const std::string& dir) {
  struct stat st;
  return !dir.empty() &&
         (stat((dir + "/train-images-idx3-ubyte.gz").c_str(), &st) == 0 ||
          stat((dir + "/train-images-idx3-ubyte").c_str(), &st) == 0);
}

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string base = t ? t : "/tmp";
  std::string tmpl = base + "/cluster.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char* d = mkdtemp(buf.data());
  return d ? d : base;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Starts `binary` with its output in `log`. TF_CONFIG replaces any
// inherited one; OpenBLAS is told to detect the CPU and use one thread.
pid_t Spawn(const std::string& binary, const std::vector<std::string>& args,
            const std::string& tf_config, const std::string& log,
            const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.rfind("TF_CONFIG=", 0) == 0 || kv.rfind("OPENBLAS_", 0) == 0) continue;
    env_strings.push_back(kv);
  }
  env_strings.push_back("OPENBLAS_NUM_THREADS=1");
  if (!tf_config.empty()) env_strings.push_back("TF_CONFIG=" + tf_config);
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = {binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), envp.data()) != 0) {
    pid = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Waits for `pid` until `deadline`; kills it then. Returns the exit code.
int WaitUntil(pid_t pid, absl::Time deadline) {
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return DecodeStatus(status);
    if (r < 0) return -1;
    if (absl::Now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return 137;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace

std::string TestDataDir() {
  const char* env = std::getenv("PSCLUSTER_DATA_DIR");
  if (env != nullptr && HasMnist(env)) return env;
  // Under `bazel test` a data file of ours is a symlink into the workspace;
  // the shared folder sits beside the workspace.
  char buf[4096];
  ssize_t n = readlink("tests/local_cluster.h", buf, sizeof(buf) - 1);
  if (n > 0) {
    std::string target(buf, n);
    std::string workspace = target.substr(0, target.rfind("/tests/"));
    std::string dir = workspace + "/../shared/data/mnist";
    if (HasMnist(dir)) return dir;
  }
  return "";
}

namespace {

// Where tests and the local launcher reserve the ports they hand out
// (deploy/local/train.sh takes the same locks): a port's file is locked by
// the process that picked it for as long as that process lives, so that
// tests run side by side (tests/run_all.sh, bazel test --local_test_jobs)
// never pick a port another one picked and has not bound yet.
constexpr char kPortLockDir[] = "/tmp/pscluster-port-locks";

// Whether this process now holds `port`'s reservation. Without the lock
// folder (not writable), every port counts as reserved: the bind check
// alone, as before.
bool ReservePort(int port) {
  static const bool have_dir = [] {
    mkdir(kPortLockDir, 01777);
    struct stat st;
    return stat(kPortLockDir, &st) == 0 && S_ISDIR(st.st_mode);
  }();
  if (!have_dir) return true;
  const std::string path = absl::StrCat(kPortLockDir, "/", port);
  const int fd = open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return true;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return false;
  }
  return true;  // fd stays open: the lock ends with the process
}

}  // namespace

int FreePort() {
  // Outside the kernel's ephemeral range, as the local launcher picks
  // (deploy/local/train.sh): there, a daemon that takes any free port (a
  // ps's data plane, its backup stores) or an outgoing connection could
  // take a port handed out here for another task of the cluster before
  // that task binds it ("Address already in use": cluster_metrics_test once
  // lost a worker so). 20000-32767 with Linux's default range. Random in
  // it, reserved (ReservePort) so that tests running at once never hand out
  // the same, bound to check it is free, then released; never the same one
  // twice in a process.
  static absl::Mutex mu(absl::kConstInit);
  static std::set<int>* given = new std::set<int>();
  static std::mt19937* rng = new std::mt19937(static_cast<uint32_t>(getpid()) ^
                                              static_cast<uint32_t>(absl::ToUnixNanos(absl::Now())));
  absl::MutexLock lock(&mu);
  int ephemeral_lo = 32768, ephemeral_hi = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> ephemeral_lo >> ephemeral_hi;
  int lo = 20000, span = ephemeral_lo - 20000;
  if (ephemeral_lo <= 22000) {
    lo = ephemeral_hi + 1;
    span = 65000 - ephemeral_hi;
  }
  if (span < 1000) {  // no room beside the range: any port the kernel gives
    lo = 0;
    span = 0;
  }
  while (true) {
    const int wanted = span > 0 ? lo + static_cast<int>((*rng)() % span) : 0;
    if (wanted != 0 && (given->count(wanted) > 0 || !ReservePort(wanted))) continue;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(wanted);
    const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    const int port = ntohs(addr.sin_port);
    if (bound && given->insert(port).second) return port;
  }
}

std::string ScrapeMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  timeval tv{5, 0};  // a daemon that stops mid-answer does not hang the test
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fd);
  return out;
}

namespace {

// Runs `binary` as RunBinary says until deadline() (asked once it runs;
// it may do work of its own first), then kills it unless it ended.
ProcessResult RunBinaryUntil(const std::string& binary, const std::vector<std::string>& args,
                             const std::string& tf_config,
                             const std::function<absl::Time()>& deadline) {
  std::string log = TempDir() + "/run.log";
  ProcessResult r;
  pid_t pid = Spawn(binary, args, tf_config, log);
  if (pid < 0) {
    r.output = "could not start " + binary;
    return r;
  }
  r.exit_code = WaitUntil(pid, deadline());
  r.output = ReadFile(log);
  return r;
}

}  // namespace

ProcessResult RunBinary(const std::string& binary, const std::vector<std::string>& args,
                        const std::string& tf_config, absl::Duration timeout) {
  return RunBinaryUntil(binary, args, tf_config, [timeout] { return absl::Now() + timeout; });
}

ProcessResult RunBinaryDuring(const std::string& binary, const std::vector<std::string>& args,
                              const std::string& tf_config,
                              const std::function<void()>& during) {
  return RunBinaryUntil(binary, args, tf_config, [&during] {
    during();
    return absl::Now();
  });
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const ClusterOptions& options) {
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  c->dir_ = TempDir();
  auto list = [&c](const std::string& job, int n) {
    std::vector<std::string> a;
    for (int i = 0; i < n; ++i) {
      const std::string address = absl::StrCat("127.0.0.1:", FreePort());
      c->addresses_[absl::StrCat(job, ":", i)] = address;
      a.push_back(absl::StrCat("\"", address, "\""));
    }
    return absl::StrCat("[", absl::StrJoin(a, ", "), "]");
  };
  std::string cluster =
      absl::StrCat("\"chief\": ", list("chief", 1), ", \"ps\": ", list("ps", options.num_ps),
                   ", \"worker\": ", list("worker", options.num_workers));
  if (options.evaluator && !options.evaluator_unlisted) {
    absl::StrAppend(&cluster, ", \"evaluator\": ", list("evaluator", 1));
  }
  auto tf_config = [&](const std::string& type, int index) {
    return absl::StrCat("{\"cluster\": {", cluster, "}, \"task\": {\"type\": \"", type,
                        "\", \"index\": ", index, "}}");
  };
  auto start = [&](const std::string& type, int index, const std::string& binary,
                   std::vector<std::string> args) -> absl::Status {
    const std::string name = absl::StrCat(type, ":", index);
    for (const std::string& skip : options.not_started) {
      if (skip == name) return absl::OkStatus();
    }
    // "{task}" in all_args: this task's file name ("worker-1"), for files
    // of its own (per-task certificates and tokens).
    for (const std::string& a : options.all_args) {
      args.push_back(absl::StrReplaceAll(a, {{"{task}", absl::StrCat(type, "-", index)}}));
    }
    if (options.metrics) {
      const int port = FreePort();
      c->metrics_ports_[name] = port;
      args.push_back(absl::StrCat("--metrics_port=", port));
    }
    Proc p;
    p.name = name;
    p.log = absl::StrCat(c->dir_, "/", type, index, ".log");
    p.binary = binary;
    p.args = args;
    p.tf_config = tf_config(type, index);
    if (auto env = options.task_env.find(name); env != options.task_env.end()) p.env = env->second;
    for (const std::string& later : options.start_later) {
      if (later == name) {
        c->later_.push_back(std::move(p));
        return absl::OkStatus();
      }
    }
    p.pid = Spawn(binary, args, p.tf_config, p.log, p.env);
    if (p.pid < 0) return absl::InternalError("could not start " + binary);
    c->procs_.push_back(std::move(p));
    return absl::OkStatus();
  };
  // The chief goes first: Wait() reaps it first.
  absl::Status s = start("chief", 0, "chief/chief", options.chief_args);
  for (int i = 0; s.ok() && i < options.num_ps; ++i) {
    s = start("ps", i, "ps_server/ps_server", {});
  }
  for (int i = 0; s.ok() && i < options.num_workers; ++i) {
    // One compute thread unless a test asks for more (a later flag wins):
    // the workers share this host's cores, and a result depends on the
    // thread count (the worker's default is every core).
    std::vector<std::string> args = {"--data_dir=" + options.data_dir, "--threads=1"};
    args.insert(args.end(), options.worker_args.begin(), options.worker_args.end());
    auto it = options.one_worker_args.find(i);
    if (it != options.one_worker_args.end()) {
      args.insert(args.end(), it->second.begin(), it->second.end());
    }
    s = start("worker", i, options.worker_binary, args);
  }
  if (s.ok() && options.evaluator) {
    // A listed evaluator's figures that count are the final evaluation the
    // chief asks for; periodic ones every 2 s took as much CPU as both
    // workers together (the conv models trained 40% slower on 2 cores), so
    // it evaluates at its own default. An unlisted one sends the chief only
    // periodic evaluations, the latest of which become the final figures.
    std::vector<std::string> args = {
        "--data_dir=" + options.data_dir,
        options.evaluator_unlisted ? "--eval_interval_s=2" : "--eval_interval_s=30"};
    args.insert(args.end(), options.evaluator_args.begin(), options.evaluator_args.end());
    s = start("evaluator", 0, "evaluator/evaluator", args);
  }
  if (!s.ok()) return s;
  return c;
}

LocalCluster::~LocalCluster() {
  for (Proc& p : procs_) {
    if (!p.exit_code.has_value() && p.pid > 0) {
      kill(p.pid, SIGKILL);
      int status;
      waitpid(p.pid, &status, 0);
    }
  }
}

void LocalCluster::Reap(Proc& p, absl::Time deadline) {
  if (!p.exit_code.has_value()) p.exit_code = WaitUntil(p.pid, deadline);
}

std::map<std::string, int> LocalCluster::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::map<std::string, int> codes;
  for (Proc& p : procs_) {
    // Others get a little time after the chief to wind down.
    Reap(p, p.name == "chief:0" ? deadline : std::max(deadline, absl::Now() + absl::Seconds(15)));
    codes[p.name] = *p.exit_code;
  }
  return codes;
}

absl::StatusOr<int> LocalCluster::WaitForExit(const std::string& task, absl::Duration timeout) {
  Proc* p = Find(task);
  if (p == nullptr) return absl::NotFoundError("no task " + task);
  Reap(*p, absl::Now() + timeout);
  return *p->exit_code;
}

LocalCluster::Proc* LocalCluster::Find(const std::string& task) {
  for (Proc& p : procs_) {
    if (p.name == task) return &p;
  }
  return nullptr;
}

absl::Status LocalCluster::Kill(const std::string& task) {
  Proc* p = Find(task);
  if (p == nullptr) return absl::NotFoundError("no task " + task);
  if (p->exit_code.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(task, " already exited with ",
                                                      *p->exit_code));
  }
  kill(p->pid, SIGKILL);
  int status = 0;
  waitpid(p->pid, &status, 0);
  p->exit_code = DecodeStatus(status);
  return absl::OkStatus();
}

absl::Status LocalCluster::Signal(const std::string& task, int signal) {
  Proc* p = Find(task);
  if (p == nullptr) return absl::NotFoundError("no task " + task);
  if (p->exit_code.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(task, " already exited with ", *p->exit_code));
  }
  if (kill(p->pid, signal) != 0) return absl::InternalError(absl::StrCat("kill ", task));
  return absl::OkStatus();
}

absl::Status LocalCluster::KillAndRestart(const std::string& task, absl::Duration down_for) {
  if (absl::Status s = Kill(task); !s.ok()) return s;
  absl::SleepFor(down_for);
  Proc* p = Find(task);
  ++p->lives;
  p->pid = Spawn(p->binary, p->args, p->tf_config, absl::StrCat(p->log, ".", p->lives), p->env);
  if (p->pid < 0) return absl::InternalError("could not restart " + task);
  p->exit_code.reset();
  return absl::OkStatus();
}

absl::Status LocalCluster::StartTask(const std::string& task) {
  for (auto it = later_.begin(); it != later_.end(); ++it) {
    if (it->name != task) continue;
    it->pid = Spawn(it->binary, it->args, it->tf_config, it->log, it->env);
    if (it->pid < 0) return absl::InternalError("could not start " + task);
    // Wait() reaps the chief first.
    procs_.insert(task == "chief:0" ? procs_.begin() : procs_.end(), std::move(*it));
    later_.erase(it);
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat(task, " is not waiting in start_later"));
}

std::string LocalCluster::Address(const std::string& task) const {
  auto it = addresses_.find(task);
  return it == addresses_.end() ? "" : it->second;
}

int LocalCluster::MetricsPort(const std::string& task) const {
  auto it = metrics_ports_.find(task);
  return it == metrics_ports_.end() ? 0 : it->second;
}

bool LocalCluster::WaitForLog(const std::string& task, const std::string& text,
                              absl::Duration timeout) const {
  const absl::Time give_up = absl::Now() + timeout;
  while (Log(task).find(text) == std::string::npos) {
    if (absl::Now() >= give_up) return false;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return true;
}

bool LocalCluster::WaitForChunks(int64_t chunks, absl::Duration timeout) const {
  const absl::Time give_up = absl::Now() + timeout;
  while (absl::Now() < give_up) {
    const std::string log = Log("chief:0");
    const size_t at = log.rfind(" chunks ");
    int64_t done = 0;
    if (at != std::string::npos) {
      const size_t slash = log.find('/', at);
      if (slash != std::string::npos &&
          absl::SimpleAtoi(log.substr(at + 8, slash - at - 8), &done) && done >= chunks) {
        return true;
      }
    }
    for (const Proc& p : procs_) {
      if (p.name == "chief:0" && p.exit_code.has_value()) return false;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

std::string LocalCluster::Log(const std::string& task) const {
  for (const Proc& p : procs_) {
    if (p.name != task) continue;
    std::string out = ReadFile(p.log);
    for (int life = 2; life <= p.lives; ++life) {
      absl::StrAppend(&out, "----- ", task, " restarted (life ", life, ") -----\n",
                      ReadFile(absl::StrCat(p.log, ".", life)));
    }
    return out;
  }
  return "";
}

std::string LocalCluster::AllLogs() const {
  std::string out;
  for (const Proc& p : procs_) {
    std::string log = ReadFile(p.log);
    // The tail is what explains a failure.
    if (log.size() > 6000) log = "...\n" + log.substr(log.size() - 6000);
    absl::StrAppend(&out, "===== ", p.name, " =====\n", log, "\n");
  }
  return out;
}

std::unique_ptr<LocalCluster> RunToEnd(const ClusterOptions& o,
                                       const std::function<void(LocalCluster&)>& during,
                                       const std::map<std::string, int>& expected_codes) {
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  if (during) during(**c);
  for (const auto& [task, code] : (*c)->Wait(absl::Minutes(5))) {
    auto it = expected_codes.find(task);
    EXPECT_EQ(code, it == expected_codes.end() ? 0 : it->second)
        << task << " exited " << code << "\n"
        << (*c)->AllLogs();
  }
  return *std::move(c);
}

std::optional<FinalFigures> ParseFinalLine(const std::string& log) {
  size_t pos = log.rfind("final: ");
  if (pos == std::string::npos) return std::nullopt;
  std::string line = log.substr(pos, log.find('\n', pos) - pos);
  FinalFigures f;
  for (absl::string_view field : absl::StrSplit(line, ' ')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    if (kv.first == "test_accuracy") f.test_accuracy = std::atof(kv.second.c_str());
    if (kv.first == "test_loss") f.test_loss = std::atof(kv.second.c_str());
    if (kv.first == "test_auc") f.test_auc = std::atof(kv.second.c_str());
    if (kv.first == "test_mse") f.test_mse = std::atof(kv.second.c_str());
    if (kv.first == "steps") f.steps = std::atol(kv.second.c_str());
  }
  return f;
}

std::string ShutdownField(const std::string& log, const std::string& key) {
  const size_t line = log.rfind("shutting down");
  if (line == std::string::npos) return "";
  const size_t at = log.find(" " + key + "=", line);
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size() + 2;
  return log.substr(begin, log.find_first_of(" \n", begin) - begin);
}

std::optional<long> FindCounter(const std::string& log, const std::string& marker,
                                const std::string& key) {
  std::optional<long> value;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (line.find(marker) == absl::string_view::npos) continue;
    size_t k = line.find(" " + key + "=");
    if (k == absl::string_view::npos) continue;
    value = std::atol(std::string(line.substr(k + key.size() + 2)).c_str());
  }
  return value;
}

void ExpectExportReproducesEvaluator(const std::string& model_file,
                                     const std::string& export_path, const std::string& data,
                                     const FinalFigures& evaluator) {
  const ProcessResult py = RunBinary(
      "/usr/bin/python3", {"tests/keras_model_forward.py", model_file, export_path, data}, "",
      absl::Minutes(5));
  ASSERT_EQ(py.exit_code, 0) << "/usr/bin/python3 tests/keras_model_forward.py " << model_file
                             << " " << export_path << " " << data << ":\n"
                             << py.output;
  std::printf("%s", py.output.c_str());
  // "keras_model_forward: correct=N of M loss=L ambiguous=A"
  std::map<std::string, double> got;
  for (const char* key : {"correct", "of", "loss", "ambiguous"}) {
    const std::string k = absl::StrCat(" ", key, key == std::string("of") ? " " : "=");
    const size_t at = py.output.find(k);
    ASSERT_NE(at, std::string::npos) << key << " in " << py.output;
    const size_t end = py.output.find_first_of(" \n", at + k.size());
    ASSERT_TRUE(absl::SimpleAtod(py.output.substr(at + k.size(), end - at - k.size()), &got[key]))
        << key << " in " << py.output;
  }
  ASSERT_EQ(got["of"], 10000) << py.output;
  // The chief prints the evaluator's accuracy with four decimals: on 10000
  // examples, the exact count of correct predictions.
  const long evaluator_correct = std::lround(evaluator.test_accuracy * 10000);
  EXPECT_LE(std::abs(static_cast<long>(got["correct"]) - evaluator_correct),
            static_cast<long>(got["ambiguous"]))
      << "numpy counts " << got["correct"] << " correct, the evaluator " << evaluator_correct
      << " (" << got["ambiguous"] << " examples too close to call)";
  // The loss is printed with four decimals; float32 against float64 adds
  // far less than that.
  EXPECT_NEAR(got["loss"], evaluator.test_loss, 0.00005 + 1e-5) << py.output;
}

}  // namespace testing
}  // namespace pscluster
