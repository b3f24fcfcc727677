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
  return {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64};
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
    : task_(task), registry_(std::make_shared<prometheus::Registry>()) {}

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

void Metrics::RegisterStandardMetrics() {
  const prometheus::Labels labels = {{"task", task_}};
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter()
                .Name(name)
                .Help(help)
                .Labels(labels)
                .Register(*registry_)
                .Add({});
  };
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge()
                .Name(name)
                .Help(help)
                .Labels(labels)
                .Register(*registry_)
                .Add({});
  };
  auto histogram = [&](const char* name, const char* help,
                       const std::vector<double>& buckets) {
    return &prometheus::BuildHistogram()
                .Name(name)
                .Help(help)
                .Labels(labels)
                .Register(*registry_)
                .Add({}, buckets);
  };
  steps_ = counter("pscluster_steps_total", "Training steps completed.");
  examples_ =
      counter("pscluster_examples_total", "Training examples processed.");
  push_bytes_ = counter("pscluster_push_bytes_total",
                        "Gradient bytes pushed to (worker) or received by (ps) "
                        "parameter servers.");
  pull_bytes_ = counter(
      "pscluster_pull_bytes_total",
      "Weight bytes pulled from (worker) or served by (ps) parameter servers.");
  stale_dropped_ = counter("pscluster_stale_gradients_dropped_total",
                           "Gradients dropped as too stale or too late.");
  pushes_rejected_ = counter("pscluster_pushes_rejected_total",
                             "Gradient pushes rejected as invalid.");
  examples_per_second_ =
      gauge("pscluster_examples_per_second", "Recent training throughput.");
  pending_workers_ = gauge("pscluster_pending_workers",
                           "Workers not yet heard from in the current step.");
  model_version_ = gauge("pscluster_model_version",
                         "Version (global step) of the model's weights.");
  loss_ = gauge("pscluster_loss", "Latest loss.");
  accuracy_ = gauge("pscluster_accuracy", "Latest accuracy, 0..1.");
  push_latency_ = histogram("pscluster_push_latency_seconds",
                            "Latency of gradient pushes.", LatencyBuckets());
  pull_latency_ = histogram("pscluster_pull_latency_seconds",
                            "Latency of weight pulls.", LatencyBuckets());
  staleness_ =
      histogram("pscluster_gradient_staleness",
                "Versions a gradient's weights were behind when it arrived.",
                StalenessBuckets());
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Start(
    const std::string& bind_address, const std::string& task) {
  if (!bind_address.empty()) {
    absl::Status status = CheckBindAddress(bind_address);
    if (!status.ok()) return status;
  }
  std::unique_ptr<Metrics> metrics(new Metrics(task));
  try {
    metrics->RegisterStandardMetrics();
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
    const std::string& name, const std::string& help) {
  absl::Status status = CheckName(name);
  if (!status.ok()) return status;
  try {
    return &prometheus::BuildCounter()
                .Name(name)
                .Help(help)
                .Labels({{"task", task_}})
                .Register(*registry_)
                .Add({});
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("counter '", name, "': ", e.what()));
  }
}

absl::StatusOr<prometheus::Gauge*> Metrics::AddGauge(const std::string& name,
                                                     const std::string& help) {
  absl::Status status = CheckName(name);
  if (!status.ok()) return status;
  try {
    return &prometheus::BuildGauge()
                .Name(name)
                .Help(help)
                .Labels({{"task", task_}})
                .Register(*registry_)
                .Add({});
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("gauge '", name, "': ", e.what()));
  }
}

absl::StatusOr<prometheus::Histogram*> Metrics::AddHistogram(
    const std::string& name, const std::string& help,
    const std::vector<double>& bucket_bounds) {
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
                .Add({}, bucket_bounds);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("histogram '", name, "': ", e.what()));
  }
}

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace pscluster
