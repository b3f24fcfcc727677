#include "common/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "prometheus/check_names.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace pscluster {
namespace {

// Civetweb threads answering scrapes; scrapes are rare and cheap.
constexpr int kServerThreads = 2;

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

// Opens and closes a TCP connection to ipv4:port; errors are ignored.
void Knock(const std::string& ipv4, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (ipv4.empty() || ::inet_pton(AF_INET, ipv4.c_str(), &addr.sin_addr) != 1) {
    return;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  ::close(fd);
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

Metrics::~Metrics() {
  if (exposer_ == nullptr) return;
  // Civetweb's listener polls in 2-second quanta and checks its stop flag
  // only between polls, so a plain reset() takes 2 s. A connection wakes
  // the poll: knock until the server is gone (each knock is accepted and
  // closed, or refused once the listener has closed).
  std::atomic<bool> stopped{false};
  std::thread knocker([this, &stopped] {
    while (!stopped.load()) {
      Knock(wake_address_, port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  exposer_.reset();
  stopped.store(true);
  knocker.join();
}

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
  try {
    metrics->exposer_ =
        std::make_unique<prometheus::Exposer>(bind_address, kServerThreads);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", bind_address, ": ", e.what()));
  }
  metrics->exposer_->RegisterCollectable(metrics->registry_);
  const std::vector<int> ports = metrics->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "metrics server on ", bind_address, " reports no listening port"));
  }
  metrics->port_ = ports.front();
  // Where the destructor knocks: the bound IPv4 address, loopback for any.
  const std::string host = bind_address.substr(0, bind_address.rfind(':'));
  metrics->wake_address_ = host == "0.0.0.0" ? "127.0.0.1" : host;
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
