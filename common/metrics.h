// A daemon's Prometheus metrics (prometheus-cpp), served in the text
// exposition format at http://<bind_address>/metrics.
//
// Metrics owns the registry, the HTTP server and the standard metrics, all
// labelled task="<task>". Each daemon registers, and so serves, only the
// standard metrics its role updates (the table below); their help text says
// what they count on that role. The accessors return references that stay
// valid for the Metrics object's lifetime: look them up once and keep the
// reference on hot paths. Every method is thread-safe, and so are
// Counter::Increment, Gauge::Set and Histogram::Observe (prometheus-cpp's
// counters and gauges are atomics; a histogram takes a short lock).
// The HTTP endpoint is a small one of ours on one thread (see metrics.cc
// for why not prometheus-cpp's civetweb Exposer); IPv4 addresses only.
#ifndef PSCLUSTER_COMMON_METRICS_H_
#define PSCLUSTER_COMMON_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/labels.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace pscluster {

// The daemon a Metrics object serves. Standard metrics per role:
//   ps         push_bytes, pull_bytes, stale_gradients_dropped,
//              pushes_rejected, model_version, push_latency_seconds,
//              pull_latency_seconds, gradient_staleness
//   worker     steps, examples, push_bytes, pull_bytes, model_version,
//              push_latency_seconds, pull_latency_seconds,
//              gradient_staleness
//   chief      examples_per_second, pending_workers, model_version, loss,
//              accuracy (a parameter-server run adds its ps's copies and
//              fail-overs: chief/failover_metrics.h)
//   evaluator  model_version, loss, accuracy
enum class MetricsRole { kPs, kWorker, kChief, kEvaluator };

class Metrics {
 public:
  // Registers `role`'s standard metrics and serves them on `bind_address`
  // ("0.0.0.0:9100"; port 0 picks a free port, see port()); an empty
  // `bind_address` serves nothing, and the metrics still work (Serialize()).
  // `task` is the value of every metric's "task" label, e.g. "worker:1".
  // InvalidArgument for an address that is not "host:port"; Unavailable
  // naming the address when it cannot be bound (port in use, unknown host).
  static absl::StatusOr<std::unique_ptr<Metrics>> Start(
      const std::string& bind_address, const std::string& task, MetricsRole role);

  // Stops the HTTP server (within ~20 ms for an IPv4 address).
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The port /metrics is served on (the bound one when 0 was asked for);
  // 0 when not serving.
  int port() const { return port_; }

  // The standard metrics (names and meanings per role in metrics.cc). A
  // metric that the role does not register is still returned, but counts
  // where nothing serves it: a daemon must update only its role's.

  // Counters (monotonic).
  prometheus::Counter& steps() { return *steps_; }        // pscluster_steps_total
  prometheus::Counter& examples() { return *examples_; }  // pscluster_examples_total
  prometheus::Counter& push_bytes() { return *push_bytes_; }  // pscluster_push_bytes_total
  prometheus::Counter& pull_bytes() { return *pull_bytes_; }  // pscluster_pull_bytes_total
  // pscluster_stale_gradients_dropped_total
  prometheus::Counter& stale_gradients_dropped() { return *stale_dropped_; }
  // pscluster_pushes_rejected_total
  prometheus::Counter& pushes_rejected() { return *pushes_rejected_; }

  // Gauges (current value).
  prometheus::Gauge& examples_per_second() { return *examples_per_second_; }
  prometheus::Gauge& pending_workers() { return *pending_workers_; }
  prometheus::Gauge& model_version() { return *model_version_; }
  prometheus::Gauge& loss() { return *loss_; }
  prometheus::Gauge& accuracy() { return *accuracy_; }  // 0..1

  // Histograms. Latencies in seconds, buckets 100 us .. 10 s; staleness in
  // versions, buckets 0 .. 1024.
  prometheus::Histogram& push_latency_seconds() { return *push_latency_; }
  prometheus::Histogram& pull_latency_seconds() { return *pull_latency_; }
  prometheus::Histogram& gradient_staleness() { return *staleness_; }

  // Further metrics, labelled like the others, and with `labels` besides
  // (one series of a family per set of labels: {{"how", "backup"}}; every
  // series of a name should carry the same label names). Asking again for
  // a name of the same kind and the same `labels` returns the same metric
  // (help and buckets of the first call stay). InvalidArgument naming
  // `name` when it is not a valid Prometheus name, is already used by
  // another kind of metric, when a label name is not valid or is "task",
  // or when `bucket_bounds` are not finite and strictly increasing.
  absl::StatusOr<prometheus::Counter*> AddCounter(const std::string& name,
                                                  const std::string& help,
                                                  const prometheus::Labels& labels = {});
  absl::StatusOr<prometheus::Gauge*> AddGauge(const std::string& name,
                                              const std::string& help,
                                              const prometheus::Labels& labels = {});
  absl::StatusOr<prometheus::Histogram*> AddHistogram(
      const std::string& name, const std::string& help,
      const std::vector<double>& bucket_bounds, const prometheus::Labels& labels = {});

  // Every metric in the text exposition format: what /metrics returns.
  std::string Serialize() const;

 private:
  explicit Metrics(const std::string& task);

  // Registers `role`'s standard metrics in registry_ and the others in
  // unserved_; throws prometheus-cpp's exceptions, which Start() turns into
  // a status.
  void RegisterStandardMetrics(MetricsRole role);

  const std::string task_;
  // Declared before endpoint_, so it outlives the thread that serves it.
  std::shared_ptr<prometheus::Registry> registry_;
  // The standard metrics of other roles: never serialized.
  std::shared_ptr<prometheus::Registry> unserved_;
  class HttpEndpoint;
  std::unique_ptr<HttpEndpoint> endpoint_;  // null when not serving
  int port_ = 0;

  // Owned by registry_ or unserved_; set once in Start(), then only read.
  prometheus::Counter* steps_ = nullptr;
  prometheus::Counter* examples_ = nullptr;
  prometheus::Counter* push_bytes_ = nullptr;
  prometheus::Counter* pull_bytes_ = nullptr;
  prometheus::Counter* stale_dropped_ = nullptr;
  prometheus::Counter* pushes_rejected_ = nullptr;
  prometheus::Gauge* examples_per_second_ = nullptr;
  prometheus::Gauge* pending_workers_ = nullptr;
  prometheus::Gauge* model_version_ = nullptr;
  prometheus::Gauge* loss_ = nullptr;
  prometheus::Gauge* accuracy_ = nullptr;
  prometheus::Histogram* push_latency_ = nullptr;
  prometheus::Histogram* pull_latency_ = nullptr;
  prometheus::Histogram* staleness_ = nullptr;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_METRICS_H_
