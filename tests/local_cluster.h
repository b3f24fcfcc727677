// Test harness that runs the real daemons (declared as `data` of the test)
// as child processes on 127.0.0.1, each with its own TF_CONFIG, like
// TensorFlow's TestCluster. Each process's output goes to a log file that
// tests read. Not thread-safe; one test owns a cluster. The destructor
// kills whatever still runs.
#ifndef PSCLUSTER_TESTS_LOCAL_CLUSTER_H_
#define PSCLUSTER_TESTS_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pscluster {
namespace testing {

// Folder of the MNIST IDX files for tests: $PSCLUSTER_DATA_DIR, else the
// workspace's ../shared/data/mnist. Empty when neither has the files.
std::string TestDataDir();

// Why a test that needs MNIST skips (TestDataDir() empty), and where the
// files go.
inline constexpr char kNoMnist[] =
    "no MNIST: set PSCLUSTER_DATA_DIR or put the IDX files in ../shared/data/mnist beside "
    "the workspace";

// In a test body or SetUp: skips the test when `dir` (from TestDataDir())
// is empty, saying kNoMnist. On CI (CI=true) tests/run_all.sh counts such a
// skip as a failure.
#define PSCLUSTER_SKIP_WITHOUT_MNIST(dir) \
  if ((dir).empty()) GTEST_SKIP() << ::pscluster::testing::kNoMnist

// A free TCP port on 127.0.0.1 (bound, then released) outside the kernel's
// ephemeral range, where daemons that take any free port take theirs; never
// the same one twice in a process, nor one that another test process or
// the local launcher holds (a lock in /tmp/pscluster-port-locks, kept until
// this process exits). Thread-safe.
int FreePort();

// GET http://127.0.0.1:port/metrics: the whole HTTP response (status line,
// headers, body), or "" when nothing answers.
std::string ScrapeMetrics(int port);

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed by one
  std::string output;  // stdout and stderr together
};

// Runs `binary` (a path relative to the runfiles root, e.g.
// "ps_server/ps_server") with `args` and TF_CONFIG set to `tf_config`
// (unset when empty); kills it after `timeout`.
ProcessResult RunBinary(const std::string& binary, const std::vector<std::string>& args,
                        const std::string& tf_config, absl::Duration timeout);

// Runs `binary` as RunBinary does while `during` runs in this thread (it
// probes the daemon, with deadlines of its own), then kills it unless it
// ended first. For a daemon that serves until killed: the probe, not a
// guess at how long starting takes on a loaded machine, says when to stop.
ProcessResult RunBinaryDuring(const std::string& binary, const std::vector<std::string>& args,
                              const std::string& tf_config, const std::function<void()>& during);

// The worker with the tests' fault flags (tests/faults/faulty_worker).
inline constexpr char kFaultyWorker[] = "tests/faults/faulty_worker";

struct ClusterOptions {
  int num_ps = 2;
  int num_workers = 2;
  bool evaluator = true;
  // Starts the evaluator without listing it in cluster.evaluator, as
  // TensorFlow and the Kubeflow operator do.
  bool evaluator_unlisted = false;
  std::string data_dir;
  std::vector<std::string> chief_args;
  // The workers' binary under the runfiles root: the shipped worker, or
  // the tests' "tests/faults/faulty_worker" (which the test then declares
  // as data) for --straggle_ms, --lose_reply_every, --duplicate_every.
  std::string worker_binary = "worker/worker";
  std::vector<std::string> worker_args;               // every worker
  std::map<int, std::vector<std::string>> one_worker_args;  // by index
  // The evaluator's, after its --eval_interval_s (a later flag wins): 30,
  // the daemon's default, or 2 when evaluator_unlisted.
  std::vector<std::string> evaluator_args;
  // Tasks listed in TF_CONFIG but not started ("worker:1").
  std::vector<std::string> not_started;
  // Tasks listed in TF_CONFIG and started only by StartTask().
  std::vector<std::string> start_later;
  // Every task serves Prometheus /metrics on a free port (MetricsPort()).
  bool metrics = false;
  // Appended to every daemon's arguments (e.g. TLS and token flags);
  // "{task}" in one is replaced by the task's file name, "worker-1" (its
  // own certificate: "--tls_cert=DIR/{task}.pem").
  std::vector<std::string> all_args;
  // Environment added to one task's ("ps:2" -> {"NAME=value"}), every life.
  std::map<std::string, std::vector<std::string>> task_env;
};

class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const ClusterOptions& options);
  ~LocalCluster();

  // Waits for the chief, then for the others; each gets until `deadline`
  // (measured from the call). Returns exit codes by task name ("ps:0");
  // tasks still running at the deadline are killed and get 137.
  std::map<std::string, int> Wait(absl::Duration timeout);
  // Waits until `task` alone exits and returns its exit code; kills it
  // after `timeout` (137). For a test whose assertion is one task's exit:
  // the others, which may wait for it for long, are killed by the
  // destructor. NotFound for an unknown task.
  absl::StatusOr<int> WaitForExit(const std::string& task, absl::Duration timeout);

  // Fault injection: kill -9 `task` ("ps:1"), wait `down_for`, and start
  // it again as the launcher would (same TF_CONFIG, flags and port; its log
  // continues in the same Log()). NotFound for an unknown task.
  absl::Status KillAndRestart(const std::string& task, absl::Duration down_for);
  // kill -9 only; the task stays down.
  absl::Status Kill(const std::string& task);
  // Sends `signal` (SIGHUP: read the security files again) to `task`.
  absl::Status Signal(const std::string& task, int signal);
  // Waits until the chief's progress lines report at least `chunks` chunks
  // done ("chunks N/M"); false on timeout or when the chief exited.
  bool WaitForChunks(int64_t chunks, absl::Duration timeout) const;
  // Polls `task`'s log until it holds `text`; false on timeout.
  bool WaitForLog(const std::string& task, const std::string& text, absl::Duration timeout) const;

  // Starts a task named in ClusterOptions::start_later. NotFound when it is
  // not one, or was started already.
  absl::Status StartTask(const std::string& task);
  // `task`'s host:port in TF_CONFIG; "" for a task not in the cluster.
  std::string Address(const std::string& task) const;
  // The port of `task`'s /metrics (ClusterOptions::metrics); 0 when none.
  int MetricsPort(const std::string& task) const;

  std::string Log(const std::string& task) const;
  // Every task's log, for failure messages.
  std::string AllLogs() const;

 private:
  struct Proc {
    std::string name;
    pid_t pid = -1;
    std::string log;
    std::optional<int> exit_code;
    std::string binary;
    std::vector<std::string> args;
    std::string tf_config;
    std::vector<std::string> env;  // ClusterOptions::task_env's
    int lives = 1;  // log of life n > 1: log + "." + n
  };
  Proc* Find(const std::string& task);
  LocalCluster() = default;
  void Reap(Proc& p, absl::Time deadline);

  std::vector<Proc> procs_;
  std::vector<Proc> later_;  // ClusterOptions::start_later, not spawned yet
  std::map<std::string, std::string> addresses_;
  std::map<std::string, int> metrics_ports_;
  std::string dir_;
};

// Parses "final: test_accuracy=A test_loss=L steps=S ..." from a log.
struct FinalFigures {
  double test_accuracy = -1;
  double test_loss = -1;
  double test_auc = -1;  // binary cross-entropy models
  double test_mse = -1;  // mean squared error models
  long steps = -1;
};
std::optional<FinalFigures> ParseFinalLine(const std::string& log);

// Starts a cluster of `o`, runs `during` (may be empty) while it trains,
// waits up to 5 minutes for every task to exit, and expects each to exit
// with its code in `expected_codes` (0 for a task not named there). The
// stopped cluster, for its logs; nullptr (with a failed expectation) when
// it did not start.
std::unique_ptr<LocalCluster> RunToEnd(const ClusterOptions& o,
                                       const std::function<void(LocalCluster&)>& during,
                                       const std::map<std::string, int>& expected_codes);

// Runs tests/keras_model_forward.py (an independent numpy forward pass over
// the model file and the exported weights; the test declares it, the model
// file and the data as its data) and checks, with gtest expectations, that
// it counts the evaluator's correct predictions (within the examples too
// close to call) and its loss, from the chief's `final:` figures.
void ExpectExportReproducesEvaluator(const std::string& model_file,
                                     const std::string& export_path, const std::string& data,
                                     const FinalFigures& evaluator);

// The value after "key=" on the last "shutting down" line of a ps's log
// (its counters: applied=, applied_digest=, version=, ...), as text; ""
// when there is none.
std::string ShutdownField(const std::string& log, const std::string& key);

// The number after "key=" in the last line of `log` that contains `marker`.
std::optional<long> FindCounter(const std::string& log, const std::string& marker,
                                const std::string& key);

}  // namespace testing
}  // namespace pscluster

#endif  // PSCLUSTER_TESTS_LOCAL_CLUSTER_H_
