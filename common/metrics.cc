#include "common/metrics.h"

#include <arpa/inet.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "prometheus/check_names.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace pscluster {
namespace {

std::vector<double> LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};
}

std::vector<double> StalenessBuckets() {
  return {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024};
}

// "host:port" with a decimal port in [0, 65535]. Civetweb itself would also
// take "9100", "9100s" (TLS) or several comma-separated ports; we do not.
absl::Status CheckBindAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size() ||
      colon + 6 < address.size() || address.find(',') != std::string::npos) {
    port = -1;
  } else {
    const std::string digits = address.substr(colon + 1);
    bool all_digits = true;
    for (char c : digits) all_digits = all_digits && absl::ascii_isdigit(c);
    if (!all_digits || !absl::SimpleAtoi(digits, &port)) port = -1;
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address '", address,
        "' is not host:port with a port in 0..65535 (e.g. 0.0.0.0:9100)"));
  }
  return absl::OkStatus();
}

absl::Status CheckName(const std::string& name) {
  if (!prometheus::CheckMetricName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metric name '", name, "' is not a valid Prometheus name"));
  }
  return absl::OkStatus();
}

}  // namespace

Metrics::Metrics(const std::string& task)
    : task_(task),
      registry_(std::make_shared<prometheus::Registry>()),
      unserved_(std::make_shared<prometheus::Registry>()) {}

// A minimal HTTP/1.0 endpoint for GET /metrics on one thread of ours.
// (prometheus-cpp's civetweb Exposer starts threads with a fixed 100 KiB
// stack, too small once a library with a large static TLS block, such as
// cuBLAS, is loaded: pthread_create fails with EINVAL.) Scrapes are rare
// and small: one connection at a time is plenty.
class Metrics::HttpEndpoint {
 public:
  // Binds and listens; the serving thread starts in Start().
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Bind(const std::string& address) {
    const size_t colon = address.rfind(':');
    const std::string host = address.substr(0, colon);
    int port = 0;
    (void)absl::SimpleAtoi(address.substr(colon + 1), &port);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics address '", address, "': '", host, "' is not an IPv4 address"));
    }
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(fd, 16) != 0) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) ::close(fd);
      return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", why));
    }
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    auto e = std::unique_ptr<HttpEndpoint>(new HttpEndpoint());
    e->fd_ = fd;
    e->port_ = ntohs(addr.sin_port);
    return e;
  }

  void Start(const Metrics* metrics) {
    thread_ = std::thread([this, metrics] { Serve(*metrics); });
  }

  ~HttpEndpoint() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }

  int port() const { return port_; }

 private:
  HttpEndpoint() = default;

  void Serve(const Metrics& metrics) {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;  // wakes to check stop_
      const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      Answer(conn, metrics);
      ::close(conn);
    }
  }

  // Reads the request head (bounded in size and time), answers it.
  static void Answer(int conn, const Metrics& metrics) {
    timeval tv{2, 0};
    ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::string head;
    char buf[1024];
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < 8192) {
      const ssize_t n = ::read(conn, buf, sizeof(buf));
      if (n <= 0) break;
      head.append(buf, n);
    }
    std::string status = "404 Not Found", type = "text/plain", body = "not found\n";
    if (head.rfind("GET /metrics ", 0) == 0 || head.rfind("GET /metrics?", 0) == 0) {
      status = "200 OK";
      type = "text/plain; version=0.0.4; charset=utf-8";
      body = metrics.Serialize();
    }
    const std::string reply = absl::StrCat("HTTP/1.0 ", status, "\r\nContent-Type: ", type,
                                           "\r\nContent-Length: ", body.size(),
                                           "\r\nConnection: close\r\n\r\n", body);
    size_t off = 0;
    while (off < reply.size()) {
      const ssize_t n = ::send(conn, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += n;
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Metrics::~Metrics() = default;

void Metrics::RegisterStandardMetrics(MetricsRole role) {
  const bool ps = role == MetricsRole::kPs;
  const bool worker = role == MetricsRole::kWorker;
  const bool chief = role == MetricsRole::kChief;
  const bool evaluator = role == MetricsRole::kEvaluator;
  const prometheus::Labels labels = {{"task", task_}};
  // `served`: the role updates it, so it goes in the registry /metrics shows.
  auto registry = [&](bool served) -> prometheus::Registry& {
    return served ? *registry_ : *unserved_;
  };
  auto counter = [&](bool served, const char* name, const std::string& help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Labels(labels)
                .Register(registry(served)).Add({});
  };
  auto gauge = [&](bool served, const char* name, const std::string& help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Labels(labels)
                .Register(registry(served)).Add({});
  };
  auto histogram = [&](bool served, const char* name, const std::string& help,
                       const std::vector<double>& buckets) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Labels(labels)
                .Register(registry(served)).Add({}, buckets);
  };
  // One help text per role that serves the metric ("" where none does).
  auto help = [&](const char* on_ps, const char* on_worker, const char* on_chief,
                  const char* on_evaluator) {
    return std::string(ps ? on_ps : worker ? on_worker : chief ? on_chief : on_evaluator);
  };

  steps_ = counter(worker, "pscluster_steps_total",
                   "Training steps this worker completed: chunks trained and pushed.");
  examples_ = counter(worker, "pscluster_examples_total",
                      "Training examples this worker trained on.");
  push_bytes_ = counter(
      ps || worker, "pscluster_push_bytes_total",
      help("Gradient bytes (payload) of the pushes this ps took, applied or dropped as stale.",
           "Bytes this worker sent to the parameter servers: serialized PushPull (gradients) "
           "and Pull requests, every attempt counted.",
           "", ""));
  pull_bytes_ = counter(
      ps || worker, "pscluster_pull_bytes_total",
      help("Weight bytes (payload) this ps served in Pull and PushPull answers.",
           "Bytes this worker received from the parameter servers: serialized PushPull and "
           "Pull responses (weights).",
           "", ""));
  stale_dropped_ = counter(ps, "pscluster_stale_gradients_dropped_total",
                           "Sync gradients this ps dropped without applying them: ones for a "
                           "step already applied (backup workers) or from a worker out of the "
                           "step. Async gradients are never dropped.");
  pushes_rejected_ = counter(ps, "pscluster_pushes_rejected_total",
                             "Pushes this ps refused as invalid; nothing of them was applied.");
  examples_per_second_ = gauge(chief, "pscluster_examples_per_second",
                               "Training examples per second over every worker, between the "
                               "chief's last two progress lines.");
  pending_workers_ = gauge(chief, "pscluster_pending_workers",
                           "Workers that have not finished their part of the run: the "
                           "cluster's workers minus those that reported their last step "
                           "(lost ones count as pending).");
  model_version_ = gauge(
      true, "pscluster_model_version",
      help("Version of this ps's shards: updates applied.",
           "Version of the weights this worker computes on (the smallest over the ps).",
           "Global step: the newest version the workers reported.",
           "Version of the weights of the latest evaluation."));
  loss_ = gauge(chief || evaluator, "pscluster_loss",
                help("", "", "Training loss, mean of the workers' latest reports.",
                     "Test-set loss of the latest evaluation."));
  accuracy_ = gauge(chief || evaluator, "pscluster_accuracy",
                    help("", "", "Training accuracy (0..1), mean of the workers' latest reports.",
                         "Test-set accuracy (0..1) of the latest evaluation."));
  push_latency_ = histogram(
      ps || worker, "pscluster_push_latency_seconds",
      help("Seconds this ps took to take a push (validation, aggregation or update).",
           "Seconds per PushPull over every ps (one fused call carries the gradients and "
           "brings the next weights; sync: waits for the step), retries included.",
           "", ""),
      LatencyBuckets());
  pull_latency_ = histogram(
      ps || worker, "pscluster_pull_latency_seconds",
      help("Seconds this ps held a pull, waiting for its version included.",
           "Seconds to get the weights from every ps: each Pull, and each PushPull (which "
           "brings them: the same call as in pscluster_push_latency_seconds), retries included.",
           "", ""),
      LatencyBuckets());
  staleness_ = histogram(
      ps || worker, "pscluster_gradient_staleness",
      help("Staleness of the pushes this ps applied (sync: took into a step): its version "
           "minus the version the gradient was computed on.",
           "Staleness of this worker's pushes: the ps's version when it took the push minus "
           "the version the gradient was computed on (the largest over the ps); dropped "
           "pushes included.",
           "", ""),
      StalenessBuckets());
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Start(
    const std::string& bind_address, const std::string& task, MetricsRole role) {
  if (!bind_address.empty()) {
    absl::Status status = CheckBindAddress(bind_address);
    if (!status.ok()) return status;
  }
  std::unique_ptr<Metrics> metrics(new Metrics(task));
  try {
    metrics->RegisterStandardMetrics(role);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("cannot register the standard metrics: ", e.what()));
  }
  if (bind_address.empty()) return metrics;
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> endpoint = HttpEndpoint::Bind(bind_address);
  if (!endpoint.ok()) return endpoint.status();
  metrics->endpoint_ = *std::move(endpoint);
  metrics->port_ = metrics->endpoint_->port();
  metrics->endpoint_->Start(metrics.get());
  return metrics;
}

absl::StatusOr<prometheus::Counter*> Metrics::AddCounter(
    const std::string& name, const std::string& help, const prometheus::Labels& labels) {
  absl::Status status = CheckName(name);
  if (!status.ok()) return status;
  try {
    return &prometheus::BuildCounter()
                .Name(name)
                .Help(help)
                .Labels({{"task", task_}})
                .Register(*registry_)
                .Add(labels);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("counter '", name, "': ", e.what()));
  }
}

absl::StatusOr<prometheus::Gauge*> Metrics::AddGauge(
    const std::string& name, const std::string& help, const prometheus::Labels& labels) {
  absl::Status status = CheckName(name);
  if (!status.ok()) return status;
  try {
    return &prometheus::BuildGauge()
                .Name(name)
                .Help(help)
                .Labels({{"task", task_}})
                .Register(*registry_)
                .Add(labels);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("gauge '", name, "': ", e.what()));
  }
}

absl::StatusOr<prometheus::Histogram*> Metrics::AddHistogram(
    const std::string& name, const std::string& help,
    const std::vector<double>& bucket_bounds, const prometheus::Labels& labels) {
  absl::Status status = CheckName(name);
  if (!status.ok()) return status;
  for (size_t i = 0; i < bucket_bounds.size(); ++i) {
    if (!std::isfinite(bucket_bounds[i]) ||
        (i > 0 && !(bucket_bounds[i - 1] < bucket_bounds[i]))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram '", name, "': bucket bound ", i, " (", bucket_bounds[i],
          ") is not finite or not above the previous one"));
    }
  }
  try {
    return &prometheus::BuildHistogram()
                .Name(name)
                .Help(help)
                .Labels({{"task", task_}})
                .Register(*registry_)
                .Add(labels, bucket_bounds);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("histogram '", name, "': ", e.what()));
  }
}

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace pscluster
