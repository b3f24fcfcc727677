#include "common/cluster_spec.h"

#include <cerrno>
#include <cstdio>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

using json = nlohmann::json;

constexpr const char* kKnownJobs[] = {kChiefJob, kWorkerJob, kPsJob,
                                      kEvaluatorJob};
constexpr char kKnownJobsText[] = "chief, worker, ps or evaluator";

bool IsKnownJob(std::string_view job) {
  for (const char* known : kKnownJobs) {
    if (job == known) return true;
  }
  return false;
}

// Debian's abseil has its own absl::string_view, which does not convert
// from std::string_view; internal code passes std::string instead.
absl::Status Invalid(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

std::string Quote(std::string_view s) {
  std::string quoted = "\"";
  quoted.append(s.data(), s.size());
  quoted += '"';
  return quoted;
}

// A JSON value as it appeared, shortened so a huge value cannot flood logs.
std::string Show(const json& value) {
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// Parses a non-negative decimal int without sign, spaces or overflow.
bool ParseIndex(std::string_view text, int* out) {
  if (text.empty() || text.size() > 10) return false;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  if (value > std::numeric_limits<int>::max()) return false;
  *out = static_cast<int>(value);
  return true;
}

bool IsHostChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
         c == '.' || c == '_';
}

bool IsIpv6Char(char c) {
  return absl::ascii_isxdigit(static_cast<unsigned char>(c)) || c == ':' ||
         c == '.';
}

// Where a job's tasks are listed 0..n-1 (list form).
bool IsDense(const std::map<int, std::string>& tasks) {
  return tasks.empty() ||
         tasks.rbegin()->first == static_cast<int>(tasks.size()) - 1;
}

// Parses text into JSON, turning syntax errors and duplicate keys (which
// nlohmann would silently collapse) into InvalidArgument.
absl::StatusOr<json> ParseJson(std::string_view text,
                               const std::string& source) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return Invalid(source, "is empty; expected a JSON object");
  }
  // One entry per open object: the keys seen so far and the latest one.
  struct Level {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Level> levels;
  std::string duplicate;
  // TF_CONFIG is three levels deep; anything far deeper is refused, and its
  // values are not even kept (a deep value would overflow the stack when
  // printed or freed).
  constexpr int kMaxDepth = 64;
  bool too_deep = false;
  json::parser_callback_t track = [&](int depth, json::parse_event_t event,
                                      json& parsed) {
    if (depth > kMaxDepth) {
      too_deep = true;
      return false;
    }
    switch (event) {
      case json::parse_event_t::object_start:
        levels.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!levels.empty()) levels.pop_back();
        break;
      case json::parse_event_t::key: {
        if (levels.empty()) break;
        std::string key = parsed.get<std::string>();
        levels.back().last_key = key;
        if (!levels.back().keys.insert(key).second && duplicate.empty()) {
          std::vector<std::string> path;
          for (size_t i = 0; i + 1 < levels.size(); ++i) {
            path.push_back(levels[i].last_key);
          }
          path.push_back(key);
          duplicate = absl::StrJoin(path, ".");
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  json value;
  try {
    value = json::parse(text.begin(), text.end(), track);
  } catch (const json::parse_error& e) {
    // what() is "[json.exception.parse_error.101] parse error at line 1,
    // column 5: ..."; keep the part after the id.
    std::string what = e.what();
    size_t bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    return Invalid(source,
                   absl::StrCat("invalid JSON at byte ", e.byte, ": ", what));
  }
  if (too_deep) {
    return Invalid(source, absl::StrCat("JSON nested deeper than ", kMaxDepth,
                                        " levels; a TF_CONFIG has three"));
  }
  if (!duplicate.empty()) {
    return Invalid(source, absl::StrCat("duplicate key ", Quote(duplicate)));
  }
  return value;
}

absl::StatusOr<std::map<int, std::string>> ParseJobTasks(
    const std::string& job, const json& tasks, const std::string& source) {
  std::map<int, std::string> result;
  if (tasks.is_array()) {
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (!tasks[i].is_string()) {
        return Invalid(
            source, absl::StrCat("cluster.", job, "[", i, "] ", Show(tasks[i]),
                                 " is not a \"host:port\" string"));
      }
      result[static_cast<int>(i)] = tasks[i].get<std::string>();
    }
    return result;
  }
  if (tasks.is_object()) {
    for (const auto& [key, address] : tasks.items()) {
      int index = 0;
      if (!ParseIndex(key, &index)) {
        return Invalid(source,
                       absl::StrCat("cluster.", job, " key ", Quote(key),
                                    " is not a task index (a non-negative "
                                    "integer)"));
      }
      if (!address.is_string()) {
        return Invalid(source, absl::StrCat("cluster.", job, "[\"", key, "\"] ",
                                            Show(address),
                                            " is not a \"host:port\" string"));
      }
      if (!result.emplace(index, address.get<std::string>()).second) {
        return Invalid(source,
                       absl::StrCat("cluster.", job, " key ", Quote(key),
                                    " repeats task index ", index));
      }
    }
    return result;
  }
  return Invalid(source,
                 absl::StrCat("cluster.", job, " ", Show(tasks),
                              " is neither a list of addresses nor an object "
                              "of task index to address"));
}

absl::StatusOr<int> ParseTaskIndex(const json& index,
                                   const std::string& source) {
  if (index.is_number_unsigned()) {
    uint64_t value = index.get<uint64_t>();
    if (value > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      return Invalid(source,
                     absl::StrCat("task.index ", value, " is out of range"));
    }
    return static_cast<int>(value);
  }
  if (index.is_number_integer()) {  // signed and not unsigned: negative
    return Invalid(source, absl::StrCat("task.index ", index.get<int64_t>(),
                                        " is negative"));
  }
  if (index.is_string()) {
    int value = 0;
    if (!ParseIndex(index.get<std::string>(), &value)) {
      return Invalid(source, absl::StrCat("task.index ", Show(index),
                                          " is not a non-negative integer"));
    }
    return value;
  }
  return Invalid(
      source, absl::StrCat("task.index ", Show(index), " is not an integer"));
}

absl::StatusOr<TfConfig> ParseTfConfigJson(const json& root,
                                           const std::string& source) {
  // Every TF_CONFIG field checked in the order TensorFlow reads them, each
  // error naming the field and the file: 102 lines of one check each.
  if (!root.is_object()) {
    return Invalid(source,
                   absl::StrCat("expected a JSON object, got ", Show(root)));
  }
  TfConfig config;
  config.source = std::string(source);

  auto cluster_it = root.find("cluster");
  if (cluster_it == root.end()) {
    return Invalid(source, "missing \"cluster\"");
  }
  if (!cluster_it->is_object()) {
    return Invalid(source, absl::StrCat("cluster ", Show(*cluster_it),
                                        " is not an object of job name to "
                                        "addresses"));
  }
  ClusterSpec::JobMap jobs;
  for (const auto& [job, tasks] : cluster_it->items()) {
    if (!IsKnownJob(job)) {
      return Invalid(
          source, absl::StrCat("unknown job ", Quote(job),
                               " in cluster (expected ", kKnownJobsText, ")"));
    }
    absl::StatusOr<std::map<int, std::string>> parsed =
        ParseJobTasks(job, tasks, source);
    if (!parsed.ok()) return parsed.status();
    jobs[job] = *std::move(parsed);
  }
  absl::StatusOr<ClusterSpec> cluster =
      ClusterSpec::Create(std::move(jobs), source);
  if (!cluster.ok()) return cluster.status();
  config.cluster = *std::move(cluster);

  auto task_it = root.find("task");
  if (task_it == root.end()) {
    return Invalid(source, "missing \"task\"");
  }
  if (!task_it->is_object()) {
    return Invalid(source,
                   absl::StrCat("task ", Show(*task_it), " is not an object"));
  }
  auto type_it = task_it->find("type");
  if (type_it == task_it->end()) {
    return Invalid(source, "missing task.type");
  }
  if (!type_it->is_string()) {
    return Invalid(
        source, absl::StrCat("task.type ", Show(*type_it), " is not a string"));
  }
  config.task.type = type_it->get<std::string>();
  if (!IsKnownJob(config.task.type)) {
    return Invalid(source, absl::StrCat("task.type ", Quote(config.task.type),
                                        " is not a known job (expected ",
                                        kKnownJobsText, ")"));
  }
  auto index_it = task_it->find("index");
  if (index_it != task_it->end()) {
    absl::StatusOr<int> index = ParseTaskIndex(*index_it, source);
    if (!index.ok()) return index.status();
    config.task.index = *index;
  }

  const std::string& type = config.task.type;
  const int index = config.task.index;
  const ClusterSpec::JobMap& job_map = config.cluster.job_map();
  auto job_it = job_map.find(type);
  if (job_it == job_map.end()) {
    // TF and the Kubeflow operator leave the evaluator out of the cluster.
    if (type != kEvaluatorJob) {
      return Invalid(
          source,
          absl::StrCat("task.type ", Quote(type), " is not in cluster (jobs: ",
                       absl::StrJoin(config.cluster.jobs(), ", "), ")"));
    }
  } else if (job_it->second.count(index) == 0) {
    const std::map<int, std::string>& tasks = job_it->second;
    if (IsDense(tasks)) {
      return Invalid(source, absl::StrCat("task.index ", index,
                                          " is out of range: cluster.", type,
                                          " has ", tasks.size(), " entries"));
    }
    return Invalid(
        source,
        absl::StrCat("task.index ", index, " is not among cluster.", type,
                     "'s indices ",
                     absl::StrJoin(config.cluster.task_indices(type), ", ")));
  }

  config.rpc_layer = "grpc";
  auto rpc_it = root.find("rpc_layer");
  if (rpc_it != root.end()) {
    if (!rpc_it->is_string() || (*rpc_it != "grpc" && *rpc_it != "grpc+tls")) {
      return Invalid(source,
                     absl::StrCat("rpc_layer ", Show(*rpc_it),
                                  " is not supported (expected \"grpc\" or "
                                  "\"grpc+tls\")"));
    }
    config.rpc_layer = rpc_it->get<std::string>();
  }
  return config;
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(std::string_view address,
                                       std::string_view where) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(where), " ", Quote(address),
                     " is not \"host:port\": ", why));
  };
  HostPort result;
  std::string_view port;
  if (address.empty()) return bad("it is empty");
  if (address.front() == '[') {
    size_t close = address.find(']');
    if (close == std::string_view::npos) return bad("'[' without ']'");
    std::string_view host = address.substr(1, close - 1);
    if (host.empty()) return bad("empty IPv6 address in brackets");
    if (host.find(':') == std::string_view::npos) {
      return bad("brackets are only for IPv6 addresses");
    }
    for (char c : host) {
      if (!IsIpv6Char(c)) {
        return bad(absl::StrCat("invalid character '", std::string(1, c),
                                "' in IPv6 address"));
      }
    }
    std::string_view rest = address.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return bad("missing \":port\"");
    result.host = std::string(host);
    port = rest.substr(1);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) return bad("missing \":port\"");
    std::string_view host = address.substr(0, colon);
    if (host.find(':') != std::string_view::npos) {
      return bad("IPv6 addresses must be bracketed, e.g. \"[::1]:2222\"");
    }
    if (host.empty()) return bad("empty host");
    for (char c : host) {
      if (!IsHostChar(c)) {
        return bad(absl::StrCat("invalid character '", std::string(1, c),
                                "' in host"));
      }
    }
    result.host = std::string(host);
    port = address.substr(colon + 1);
  }
  if (port.empty()) return bad("empty port");
  int value = 0;
  if (!ParseIndex(port, &value)) {
    return bad(absl::StrCat("port ", Quote(port), " is not a number"));
  }
  if (value < 1 || value > 65535) {
    return bad(absl::StrCat("port ", value, " is out of range 1..65535"));
  }
  result.port = value;
  return result;
}

absl::StatusOr<ClusterSpec> ClusterSpec::Create(JobMap jobs,
                                                std::string_view source_view) {
  const std::string source(source_view);
  // Normalised address ("host" lower-cased, port as a number) -> first use.
  std::map<std::string, std::string> seen;
  for (const auto& [job, tasks] : jobs) {
    if (!IsKnownJob(job)) {
      return Invalid(
          source, absl::StrCat("unknown job ", Quote(job),
                               " in cluster (expected ", kKnownJobsText, ")"));
    }
    for (const auto& [index, address] : tasks) {
      std::string where = absl::StrCat("cluster.", job, "[", index, "]");
      if (index < 0) {
        return Invalid(source, absl::StrCat(where, ": negative task index"));
      }
      absl::StatusOr<HostPort> hp =
          ParseHostPort(address, absl::StrCat(source, ": ", where));
      if (!hp.ok()) return hp.status();
      std::string key =
          absl::StrCat(absl::AsciiStrToLower(hp->host), "|", hp->port);
      auto [it, inserted] = seen.emplace(key, where);
      if (!inserted) {
        return Invalid(source, absl::StrCat("address ", Quote(address),
                                            " appears twice in cluster: ",
                                            it->second, " and ", where));
      }
    }
  }
  auto count = [&](const char* job) {
    auto it = jobs.find(job);
    return it == jobs.end() ? size_t{0} : it->second.size();
  };
  if (count(kChiefJob) > 1) {
    return Invalid(source, absl::StrCat("cluster.chief has ", count(kChiefJob),
                                        " entries; at most one chief is "
                                        "allowed"));
  }
  return ClusterSpec(std::move(jobs));
}

std::vector<std::string> ClusterSpec::jobs() const {
  std::vector<std::string> names;
  for (const auto& entry : jobs_) names.push_back(entry.first);
  return names;
}

bool ClusterSpec::has_job(const std::string& job) const {
  return jobs_.count(job) > 0;
}

int ClusterSpec::num_tasks(const std::string& job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : static_cast<int>(it->second.size());
}

std::vector<int> ClusterSpec::task_indices(const std::string& job) const {
  std::vector<int> indices;
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return indices;
  for (const auto& entry : it->second) indices.push_back(entry.first);
  return indices;
}

absl::StatusOr<std::string> ClusterSpec::address(const std::string& job,
                                                 int index) const {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("cluster has no job ", Quote(job)));
  }
  auto task = it->second.find(index);
  if (task == it->second.end()) {
    return absl::NotFoundError(
        absl::StrCat("cluster.", job, " has no task ", index));
  }
  return task->second;
}

bool TfConfig::has_own_address() const {
  return cluster.address(task.type, task.index).ok();
}

std::string TfConfig::own_address() const {
  absl::StatusOr<std::string> address = cluster.address(task.type, task.index);
  return address.ok() ? *address : std::string();
}

int TfConfig::own_port() const {
  std::string address = own_address();
  if (address.empty()) return 0;
  absl::StatusOr<HostPort> hp = ParseHostPort(address, source);
  return hp.ok() ? hp->port : 0;
}

std::string TfConfig::ToJson() const {
  json cluster_json = json::object();
  for (const auto& [job, tasks] : cluster.job_map()) {
    if (IsDense(tasks)) {
      json list = json::array();
      for (const auto& entry : tasks) list.push_back(entry.second);
      cluster_json[job] = std::move(list);
    } else {
      json sparse = json::object();
      for (const auto& [index, address] : tasks) {
        sparse[std::to_string(index)] = address;
      }
      cluster_json[job] = std::move(sparse);
    }
  }
  json root = {{"cluster", std::move(cluster_json)},
               {"task", {{"type", task.type}, {"index", task.index}}},
               {"rpc_layer", rpc_layer}};
  return root.dump();
}

absl::StatusOr<TfConfig> ParseTfConfig(std::string_view text,
                                       std::string_view source_view) {
  const std::string source(source_view);
  // The parser checks types before every access; this catch is the safety
  // net that keeps a missed case from throwing across the component.
  try {
    absl::StatusOr<json> root = ParseJson(text, source);
    if (!root.ok()) return root.status();
    return ParseTfConfigJson(*root, source);
  } catch (const json::exception& e) {
    return Invalid(source, e.what());
  }
}

absl::StatusOr<TfConfig> LoadTfConfig(const std::string& file_flag,
                                      const char* env_value) {
  if (!file_flag.empty()) {
    std::FILE* file = std::fopen(file_flag.c_str(), "rb");
    if (file == nullptr) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("--tf_config ", file_flag, ": cannot open"));
    }
    std::string text;
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
      text.append(buffer, n);
    }
    const bool failed = std::ferror(file);
    const int error = errno;
    std::fclose(file);
    if (failed) {
      return absl::ErrnoToStatus(
          error, absl::StrCat("--tf_config ", file_flag, ": cannot read"));
    }
    return ParseTfConfig(text, file_flag);
  }
  if (env_value == nullptr) {
    return absl::InvalidArgumentError(
        "no cluster configuration: neither --tf_config=FILE nor the "
        "TF_CONFIG environment variable is set");
  }
  return ParseTfConfig(env_value, "TF_CONFIG");
}

}  // namespace pscluster
