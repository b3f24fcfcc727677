// Fuzz target for the TF_CONFIG parser (common/cluster_spec.h). The first
// byte picks what the rest of the input becomes:
//   0  TF_CONFIG text as it is: ParseTfConfig, and LoadTfConfig with it as
//      the environment value and as a --tf_config file (a memfd);
//   1  an address: ParseHostPort;
//   2  a TF_CONFIG assembled from fuzzed pieces (job names, list or sparse
//      form, addresses, task type and index, rpc_layer, extra keys), so that
//      valid configs and near-misses come up often, not only syntax errors;
//   3  a ClusterSpec::Create job map, with what JSON cannot express
//      (negative indices);
//   4  large text from a short input: A repeated n times, B, C repeated n
//      times (n up to about kMaxRepeat), e.g. deeply nested JSON, which the
//      4 KiB inputs libFuzzer starts with cannot reach;
//   5-7 as 0.
// Besides crashes and sanitizer reports, it aborts when a result breaks the
// header's contract: errors are InvalidArgument starting with the source;
// a parsed config names a known task type that has an address (or is an
// evaluator left out of the cluster), valid unique addresses, at most one
// chief (workers without a ps are valid: the ring's cluster); ToJson()
// parses back to the same.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_spec.h"
#include "fuzz/fuzz_input.h"

namespace pscluster {
namespace {

// A --tf_config file may be any size; a TF_CONFIG variable is at most
// 128 KiB (Linux's MAX_ARG_STRLEN). Mode 4 makes texts up to ~1 MiB.
constexpr int64_t kMaxRepeat = 200000;

constexpr const char* kJobs[] = {kChiefJob, kWorkerJob, kPsJob, kEvaluatorJob};

void Require(bool condition, const std::string& what) {
  if (condition) return;
  std::fprintf(stderr, "tf_config_fuzzer: contract broken: %s\n", what.c_str());
  std::abort();
}

bool IsKnownJob(const std::string& job) {
  for (const char* known : kJobs) {
    if (job == known) return true;
  }
  return false;
}

void CheckError(const absl::Status& status, const std::string& source) {
  Require(status.code() == absl::StatusCode::kInvalidArgument,
          absl::StrCat("error is not InvalidArgument: ", status.ToString()));
  Require(absl::StartsWith(status.message(), absl::StrCat(source, ": ")),
          absl::StrCat("error does not start with the source \"", source,
                       "\": ", status.message()));
}

// What Create promises of every spec it returns.
void CheckSpec(const ClusterSpec& spec) {
  std::set<std::string> addresses;
  for (const auto& [job, tasks] : spec.job_map()) {
    Require(IsKnownJob(job), absl::StrCat("unknown job \"", job, "\" accepted"));
    Require(spec.has_job(job), "has_job false for a listed job");
    Require(spec.num_tasks(job) == static_cast<int>(tasks.size()) &&
                spec.task_indices(job).size() == tasks.size(),
            absl::StrCat("task counts of ", job, " disagree"));
    for (const auto& [index, address] : tasks) {
      Require(index >= 0, absl::StrCat("negative index in ", job));
      absl::StatusOr<HostPort> hp = ParseHostPort(address, "spec");
      Require(hp.ok(), absl::StrCat("invalid address accepted: ", address));
      Require(hp->port >= 1 && hp->port <= 65535 && !hp->host.empty(),
              absl::StrCat("ParseHostPort returned a bad value for ", address));
      Require(addresses
                  .insert(absl::StrCat(absl::AsciiStrToLower(hp->host), "|",
                                       hp->port))
                  .second,
              absl::StrCat("repeated address accepted: ", address));
      absl::StatusOr<std::string> looked_up = spec.address(job, index);
      Require(looked_up.ok() && *looked_up == address, "address() disagrees");
    }
  }
  Require(spec.num_tasks(kChiefJob) <= 1, "two chiefs accepted");
  // Workers without a ps are valid: the ring's cluster (the chief's
  // strategy decides whether it needs ps).
}

void CheckConfig(const TfConfig& config, const std::string& source) {
  Require(config.source == source, "source not kept");
  CheckSpec(config.cluster);
  Require(IsKnownJob(config.task.type),
          absl::StrCat("unknown task.type accepted: ", config.task.type));
  Require(config.task.index >= 0, "negative task.index accepted");
  Require(config.rpc_layer == "grpc" || config.rpc_layer == "grpc+tls",
          absl::StrCat("rpc_layer ", config.rpc_layer, " accepted"));
  if (config.cluster.has_job(config.task.type)) {
    Require(config.has_own_address(), "listed task without its address");
    Require(config.own_port() >= 1 && config.own_port() <= 65535,
            "own_port out of range");
  } else {
    Require(config.task.type == kEvaluatorJob,
            "a task whose job is absent accepted (only evaluators may be)");
    Require(!config.has_own_address() && config.own_address().empty() &&
                config.own_port() == 0,
            "an absent evaluator has an address");
  }
  // ToJson's promise: ParseTfConfig reads it back.
  const std::string json = config.ToJson();
  absl::StatusOr<TfConfig> again = ParseTfConfig(json, source);
  Require(again.ok(), absl::StrCat("ToJson() does not parse back: ",
                                   again.status().ToString(), "\n", json));
  Require(again->cluster.job_map() == config.cluster.job_map() &&
              again->task.type == config.task.type &&
              again->task.index == config.task.index &&
              again->rpc_layer == config.rpc_layer,
          absl::StrCat("ToJson() round trip differs: ", json));
  Require(again->ToJson() == json, "ToJson() not stable");
}

void Parse(std::string_view text, const std::string& source) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(text, source);
  if (config.ok()) {
    CheckConfig(*config, source);
  } else {
    CheckError(config.status(), source);
  }
}

// A JSON string literal holding s (control characters escaped; other bytes
// as they are, so invalid UTF-8 reaches the parser too).
std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", u);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JobName(FuzzInput& in) {
  static constexpr const char* kNames[] = {
      "chief", "worker", "ps", "evaluator", "chief", "worker", "ps",
      "evaluator", "master", "Worker", "", "ps "};
  if (in.IntInRange(0, 15) < 15) return in.Pick(kNames);
  return std::string(in.LengthPrefixed(12));
}

std::string Address(FuzzInput& in, int* serial) {
  static constexpr const char* kAddresses[] = {
      "host0:2222", "HOST0:2222", "10.0.0.1:1", "[::1]:2222", "[fe80::1%eth0]:1",
      "localhost:65535", "h-1.example.com:80", "h_2:8080", "host:0",
      "host:65536", "host", ":80", "host:", "[::1]", "[::1]2222",
      "[1.2.3.4]:5", "::1:2222", "a b:1", "host:+1", "host:0080",
      "host:99999999999", "[]:1", "[::1:1", "h:1:2"};
  const int64_t kind = in.IntInRange(0, 7);
  if (kind < 5) {  // valid and distinct
    static constexpr const char* kHosts[] = {"h", "10.1.2.", "[::", "node-"};
    const char* host = in.Pick(kHosts);
    const int n = (*serial)++;
    const std::string port = std::to_string(in.IntInRange(1, 65535));
    if (host[0] == '[') return absl::StrCat(host, n, "]:", port);
    return absl::StrCat(host, n, ":", port);
  }
  if (kind < 7) return in.Pick(kAddresses);
  return std::string(in.LengthPrefixed(24));
}

std::string TaskList(FuzzInput& in, int* serial) {
  const int64_t form = in.IntInRange(0, 7);
  const int64_t n = in.IntInRange(0, 4);
  std::string out;
  if (form < 4) {  // list
    out = "[";
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) out += ", ";
      out += in.IntInRange(0, 15) == 0 ? std::string("42")
                                       : JsonString(Address(in, serial));
    }
    return out + "]";
  }
  if (form < 7) {  // sparse
    static constexpr const char* kKeys[] = {
        "0", "1", "2", "3", "10", "-1", "01", "x", "", " 1",
        "2147483647", "2147483648", "99999999999"};
    out = "{";
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) out += ", ";
      const std::string key = in.IntInRange(0, 7) < 7
                                  ? std::string(in.Pick(kKeys))
                                  : std::string(in.LengthPrefixed(12));
      out += JsonString(key) + ": " +
             (in.IntInRange(0, 15) == 0 ? std::string("null")
                                        : JsonString(Address(in, serial)));
    }
    return out + "}";
  }
  static constexpr const char* kOther[] = {"null", "3", "\"h:1\"", "true", "[[]]"};
  return in.Pick(kOther);
}

std::string TaskIndex(FuzzInput& in) {
  static constexpr const char* kOdd[] = {
      "-1", "1.0", "1e2", "\"1\"", "\"01\"", "\"-1\"", "\"x\"", "null",
      "true", "[0]", "2147483647", "2147483648", "18446744073709551615",
      "18446744073709551616", "-9223372036854775808", "\"\""};
  const int64_t kind = in.IntInRange(0, 7);
  if (kind < 6) return std::to_string(in.IntInRange(0, 4));
  return in.Pick(kOdd);
}

std::string AssembledConfig(FuzzInput& in) {
  int serial = 0;
  std::string cluster = "{";
  const int64_t jobs = in.IntInRange(0, 5);
  for (int64_t i = 0; i < jobs; ++i) {
    if (i > 0) cluster += ", ";
    const std::string job = JobName(in);  // read before the tasks
    cluster += JsonString(job) + ": " + TaskList(in, &serial);
  }
  cluster += "}";

  std::string task = "{";
  std::string sep;
  if (in.IntInRange(0, 15) > 0) {
    task += "\"type\": " + (in.IntInRange(0, 15) > 0 ? JsonString(JobName(in))
                                                    : std::string("7"));
    sep = ", ";
  }
  if (in.IntInRange(0, 7) > 0) {
    task += sep + "\"index\": " + TaskIndex(in);
    sep = ", ";
  }
  if (in.IntInRange(0, 7) == 0) task += sep + "\"trial\": \"1\"";
  task += "}";

  std::string root = "{";
  sep.clear();
  const int64_t shape = in.IntInRange(0, 31);
  if (shape != 1) {
    root += "\"cluster\": " + (shape == 2 ? std::string("[]") : cluster);
    sep = ", ";
  }
  if (shape != 3) {
    root += sep + "\"task\": " + (shape == 4 ? std::string("\"worker\"") : task);
    sep = ", ";
  }
  switch (in.IntInRange(0, 7)) {
    case 0: root += sep + "\"rpc_layer\": \"grpc\""; break;
    case 1: root += sep + "\"rpc_layer\": \"grpc+tls\""; break;
    case 2: root += sep + "\"rpc_layer\": \"grpc+verbs\""; break;
    case 3: root += sep + "\"rpc_layer\": 1"; break;
    case 4: root += sep + "\"environment\": \"cloud\""; break;
    case 5: root += sep + "\"task\": {}"; break;  // a duplicate key
    default: break;
  }
  root += "}";
  if (shape == 5) return "[" + root + "]";
  if (shape == 6) return root + " x";
  return root;
}

void CreateSpec(FuzzInput& in) {
  ClusterSpec::JobMap jobs;
  int serial = 0;
  const int64_t n = in.IntInRange(0, 5);
  for (int64_t i = 0; i < n; ++i) {
    std::map<int, std::string>& tasks = jobs[JobName(in)];
    const int64_t count = in.IntInRange(0, 4);
    for (int64_t t = 0; t < count; ++t) {
      int index = static_cast<int>(in.IntInRange(-2, 5));
      if (in.IntInRange(0, 31) == 0) index = in.Raw<int>();
      tasks[index] = Address(in, &serial);
    }
  }
  const std::string source = "fuzz";
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::Create(jobs, source);
  if (spec.ok()) {
    CheckSpec(*spec);
    Require(spec->job_map() == jobs, "Create changed the job map");
  } else {
    CheckError(spec.status(), source);
  }
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  FuzzInput in(data, size);
  switch (in.Byte() % 8) {
    case 0: {
      const std::string text(in.Rest());
      Parse(text, "TF_CONFIG");
      // As the environment variable: the text up to its first NUL.
      absl::StatusOr<TfConfig> env = LoadTfConfig("", text.c_str());
      if (env.ok()) {
        CheckConfig(*env, "TF_CONFIG");
      } else {
        CheckError(env.status(), "TF_CONFIG");
      }
      // As a file: errors are named after it.
      const int fd = memfd_create("tf_config", 0);
      Require(fd >= 0, "memfd_create");
      Require(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()),
              "write to memfd");
      const std::string path = absl::StrCat("/proc/self/fd/", fd);
      absl::StatusOr<TfConfig> file = LoadTfConfig(path, nullptr);
      close(fd);
      if (file.ok()) {
        CheckConfig(*file, path);
      } else {
        CheckError(file.status(), path);
      }
      break;
    }
    case 1: {
      const std::string_view address = in.Rest();
      absl::StatusOr<HostPort> hp = ParseHostPort(address, "where");
      if (hp.ok()) {
        Require(hp->port >= 1 && hp->port <= 65535, "port out of range");
        Require(!hp->host.empty(), "empty host accepted");
      } else {
        Require(hp.status().code() == absl::StatusCode::kInvalidArgument &&
                    absl::StartsWith(hp.status().message(), "where "),
                absl::StrCat("ParseHostPort error: ", hp.status().ToString()));
      }
      break;
    }
    case 2: {
      static constexpr const char* kSources[] = {"TF_CONFIG", "/etc/tf_config.json", ""};
      const std::string source = in.Pick(kSources);
      Parse(AssembledConfig(in), source);
      break;
    }
    case 3:
      CreateSpec(in);
      break;
    case 4: {
      // Mostly short repeats (they parse fast), sometimes long ones. Two
      // statements, so the bytes are read in a fixed order.
      const int64_t a = in.IntInRange(0, 255);
      const int64_t n = a * in.IntInRange(0, kMaxRepeat / 255);
      const std::string_view open = in.LengthPrefixed(8);
      const std::string_view middle = in.LengthPrefixed(256);
      const std::string_view close = in.LengthPrefixed(8);
      std::string text;
      text.reserve(n * (open.size() + close.size()) + middle.size());
      for (int64_t i = 0; i < n; ++i) text.append(open.data(), open.size());
      text.append(middle.data(), middle.size());
      for (int64_t i = 0; i < n; ++i) text.append(close.data(), close.size());
      Parse(text, "TF_CONFIG");
      break;
    }
    default: {
      const std::string text(in.Rest());
      Parse(text, "TF_CONFIG");
      break;
    }
  }
  return 0;
}
