// A daemon's place in the cluster, read from TensorFlow's TF_CONFIG JSON:
//
//   {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222"],
//                "ps": ["host3:2222"], "evaluator": ["host5:2222"]},
//    "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc"}
//
// A job's tasks are a list, or TensorFlow's sparse form {"1": "h:p", ...}
// whose keys are task indices. Parsed values are immutable and safe to read
// from any thread. Errors are InvalidArgument and start with the source
// ("TF_CONFIG" or the file's path), then name the offending value.
#ifndef PSCLUSTER_COMMON_CLUSTER_SPEC_H_
#define PSCLUSTER_COMMON_CLUSTER_SPEC_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pscluster {

// Job names accepted in `cluster` and in `task.type`.
inline constexpr char kChiefJob[] = "chief";
inline constexpr char kWorkerJob[] = "worker";
inline constexpr char kPsJob[] = "ps";
inline constexpr char kEvaluatorJob[] = "evaluator";

struct HostPort {
  std::string host;  // without brackets for IPv6: "::1"
  int port = 0;      // 1..65535
};

// Parses "host:port", "1.2.3.4:port" or "[v6addr]:port". The error names
// `address` and says what is wrong, prefixed with `where`.
absl::StatusOr<HostPort> ParseHostPort(std::string_view address,
                                       std::string_view where);

struct TaskId {
  std::string type;  // one of the job names above
  int index = 0;
};

// Jobs -> task index -> "host:port". A default-constructed spec is empty.
class ClusterSpec {
 public:
  using JobMap = std::map<std::string, std::map<int, std::string>>;

  ClusterSpec() = default;

  // Validates job names, addresses (ParseHostPort), that no address repeats
  // and at most one chief. Workers without a ps job are valid (the ring of
  // multi_worker_mirrored); the chief's strategy decides. `source` prefixes
  // error messages.
  static absl::StatusOr<ClusterSpec> Create(JobMap jobs,
                                            std::string_view source);

  // Job names present, sorted (as TensorFlow's ClusterSpec.jobs).
  std::vector<std::string> jobs() const;
  bool has_job(const std::string& job) const;
  // Number of tasks listed for `job` (for the sparse form, the number of
  // entries, not the largest index + 1); 0 for an absent job.
  int num_tasks(const std::string& job) const;
  // Indices of `job`'s tasks, ascending: 0..n-1 for the list form.
  std::vector<int> task_indices(const std::string& job) const;
  // "host:port" of a task; NotFound naming the job and index if absent.
  absl::StatusOr<std::string> address(const std::string& job, int index) const;
  const JobMap& job_map() const { return jobs_; }

 private:
  explicit ClusterSpec(JobMap jobs) : jobs_(std::move(jobs)) {}

  JobMap jobs_;
};

struct TfConfig {
  ClusterSpec cluster;
  TaskId task;
  std::string rpc_layer;  // "grpc" (also when absent) or "grpc+tls"
  std::string source;     // "TF_CONFIG" or the file the JSON came from

  // False only for an evaluator that is not listed in the cluster (as TF
  // and the Kubeflow operator set it up); every other task has an address.
  bool has_own_address() const;
  // This task's "host:port"; empty when !has_own_address().
  std::string own_address() const;
  // The port of own_address(); 0 when !has_own_address().
  int own_port() const;

  // TF_CONFIG JSON for this config, in list form where a job's indices are
  // 0..n-1 and in sparse form otherwise. ParseTfConfig reads it back.
  std::string ToJson() const;
};

// Parses TF_CONFIG text. `source` names where it came from in errors.
// Unknown top-level and task keys (e.g. "environment") are ignored, as TF
// does. task.index may be absent and then is 0, as in TF Estimator's
// RunConfig; when present it must be a non-negative integer (a JSON number,
// or a decimal string, which TF's int() also accepts).
absl::StatusOr<TfConfig> ParseTfConfig(std::string_view json,
                                       std::string_view source);

// For mains: reads and parses the file `file_flag` when non-empty (errors
// name the file), otherwise parses `env_value`, the value of the TF_CONFIG
// environment variable (nullptr when it is unset: an error saying neither
// was given).
absl::StatusOr<TfConfig> LoadTfConfig(const std::string& file_flag,
                                      const char* env_value);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_CLUSTER_SPEC_H_
