// Benchmark (not a test): one parameter server's fused PushPull throughput,
// over its tcp data plane (wire/data_plane.h) and over gRPC, against a
// bare gRPC echo and the physical limit, a bare TCP ping-pong of the same
// sizes, in one process over loopback.
//
//   bazel run //tests/bench:ps_throughput -- [--sizes=4K,1M,16M] [--seconds=2.5]
//
// For each size N (bytes; K and M suffixes are KiB and MiB): a fresh
// ParameterStore behind a PsService (async, sgd, one worker, no staleness
// limit in practice), Init'ed with N/4 floats, twice: once served by a
// DataPlaneServer and called through a DataChannel (what --transport=tcp
// runs), once through gRPC; and an echo service (bytes in,
// the same bytes out), each on its own grpc::Server on 127.0.0.1 (ephemeral
// port) set up by ConfigureServer, each called through its own MakeChannel
// channel: the daemons' configuration. After a warm-up, calls are made back
// to back for --seconds per service, in slices alternating between the two;
// the table gives the median latency per call, 2N / median as GB/s (N bytes
// up, N bytes down; 1 GB = 1e9 bytes), and the CPU time client and server
// spent per call.
//
// The echo handler copies the request bytes into the response once, as the
// ps's pull must copy its values once; everything else the ps does beyond
// the echo (the gradient check, the optimizer, locking) shows in the ratio.
//
// A step's push+pull instead (issue 29), with --model=NAME (a built-in
// model, e.g. cnn: 0.49 MB of weights, negligible compute beside them):
//
//   bazel run //tests/bench:ps_throughput -- --model=cnn [--ps=1,2] [--seconds=3]
//
// For each ps count P: P real ps_server processes (tests/local_cluster.h)
// set up as the chief sets them up for one worker (sync, adam, the model's
// variables placed over the P ps as model/placement.h places them), and
// this process as worker 0 with three PsClients: over the tcp data plane,
// the same as the worker calls it by default (the gradient streamed as
// layers become final, all at once here, and the weights written as they
// arrive), and over gRPC. Each call is PsClient::PushPullAll of the whole
// gradient (no compute): every ps takes its shards' gradient, closes the
// step (ps 0 decides it for the others), applies Adam and answers with the
// new weights. Beside them, in the same run and the same alternating slices, a
// bare TCP round trip of the same bytes on loopback: one connection, the
// P ps's messages written back to back, each echoed by a thread of this
// process as it arrives, and all read back. The table gives the median
// milliseconds per call and each transport's ratio to the bare round trip.
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster_spec.h"
#include "common/daemon.h"
#include "common/metrics.h"
#include "common/rpc.h"
#include "model/gradient_watermark.h"
#include "model/model_spec.h"
#include "model/params_watermark.h"
#include "model/placement.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/data_plane_server.h"
#include "ps_server/ps_service.h"
#include "tests/bench/bench_flags.h"
#include "tests/bench/echo.grpc.pb.h"
#include "tests/local_cluster.h"
#include "update/parameter_store.h"
#include "wire/data_plane.h"
#include "wire/ps_client.h"

namespace pscluster {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kLayout = 0x5eed;
constexpr std::chrono::seconds kCallTimeout(60);

struct Flags {
  std::vector<int64_t> sizes = {4 << 10, 1 << 20, 16 << 20};
  double seconds = 2.5;  // per size and service, after the warm-up
  // Step-shaped mode: the model whose weights a step pushes and pulls, and
  // the ps counts to measure it with.
  std::string model;
  std::vector<int> ps = {1, 2};
};

// "4096", "4K", "4KiB", "16M", "16MiB".
bool ParseSize(absl::string_view text, int64_t* bytes) {
  int64_t unit = 1;
  for (const auto& [suffix, scale] :
       {std::pair<const char*, int64_t>{"KiB", 1 << 10}, {"MiB", 1 << 20},
        {"K", 1 << 10}, {"M", 1 << 20}}) {
    if (absl::EndsWith(text, suffix)) {
      text.remove_suffix(std::strlen(suffix));
      unit = scale;
      break;
    }
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n <= 0) return false;
  *bytes = n * unit;
  return true;
}

bool ParseFlags(int argc, char** argv, Flags* flags) {
  const std::optional<std::string> bad =
      FirstBadFlag(argc, argv, [&](const std::string& name, const std::string& value) {
        bool ok = true;
        if (name == "--sizes") {
          flags->sizes.clear();
          for (absl::string_view part : absl::StrSplit(value, ',')) {
            int64_t bytes = 0;
            ok = ok && ParseSize(part, &bytes) && bytes % sizeof(float) == 0 &&
                 bytes <= RpcOptions().max_message_bytes / 2;
            flags->sizes.push_back(bytes);
          }
        } else if (name == "--seconds") {
          ok = absl::SimpleAtod(value, &flags->seconds) && flags->seconds > 0;
        } else if (name == "--model") {
          ok = ModelByName(value).ok();
          flags->model = value;
        } else if (name == "--ps") {
          flags->ps.clear();
          for (absl::string_view part : absl::StrSplit(value, ',')) {
            int n = 0;
            ok = ok && absl::SimpleAtoi(part, &n) && n >= 1 && n <= 8;
            flags->ps.push_back(n);
          }
        } else {
          ok = false;
        }
        return ok;
      });
  if (!bad) return true;
  std::fprintf(stderr,
               "bad flag %s\nusage: ps_throughput [--sizes=4K,1M,16M] "
               "[--seconds=2.5]\n       ps_throughput --model=cnn [--ps=1,2] "
               "[--seconds=2.5]\n(sizes: positive multiples of 4 bytes; model: a "
               "built-in model; ps: 1 to 8)\n",
               bad->c_str());
  return false;
}

std::string SizeName(int64_t bytes) {
  if (bytes % (1 << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes % (1 << 10) == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " B");
}

class EchoService final : public bench::Echo::Service {
 public:
  grpc::Status Echo(grpc::ServerContext*, const bench::EchoMessage* req,
                    bench::EchoMessage* resp) override {
    resp->set_data(req->data());  // the one copy a ps's pull also makes
    return grpc::Status::OK;
  }
};

// A server on 127.0.0.1 with the daemons' configuration. The service is
// borrowed and must outlive the server.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
    const std::vector<grpc::Service*>& services, std::string* address) {
  grpc::ServerBuilder builder;
  ConfigureServer(builder);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return absl::UnavailableError("cannot listen on 127.0.0.1 (ephemeral port)");
  }
  *address = absl::StrCat("127.0.0.1:", port);
  return server;
}

// One service under test: its server and a client with its own channel.
class Target {
 public:
  virtual ~Target() = default;
  // One call of N bytes up and N bytes down, checked.
  virtual absl::Status Call() = 0;
  // Before each slice of calls, untimed.
  virtual absl::Status BeginSlice() { return absl::OkStatus(); }
};

class PsTarget final : public Target {
 public:
  static absl::StatusOr<std::unique_ptr<PsTarget>> Create(int64_t bytes, Transport transport) {
    std::unique_ptr<PsTarget> t(new PsTarget(bytes));
    absl::StatusOr<std::unique_ptr<grpc::Server>> server =
        StartServer(t->service_.grpc_services(), &t->address_);
    if (!server.ok()) return server.status();
    t->server_ = *std::move(server);
    const std::shared_ptr<grpc::Channel> channel = MakeChannel(t->address_);
    t->stub_ = ParameterServer::NewStub(channel);
    t->control_ = PsControl::NewStub(channel);
    if (transport == TRANSPORT_TCP) {
      absl::StatusOr<std::unique_ptr<DataPlaneServer>> data =
          DataPlaneServer::Start(0, &t->service_, nullptr, uint64_t{1} << 31);
      if (!data.ok()) return data.status();
      t->data_server_ = *std::move(data);
      const int port = t->data_server_->port();
      t->data_ = std::make_unique<DataChannel>(
          t->address_, [port](absl::Time) -> absl::StatusOr<int> { return port; },
          ProcessSecurity());
    }
    if (absl::Status s = t->Init(); !s.ok()) return s;
    return t;
  }

  ~PsTarget() override {
    store_.Cancel();
    data_.reset();
    data_server_.reset();
    server_->Shutdown(std::chrono::system_clock::now());
  }

  absl::Status Call() override {
    req_.set_version(version_);
    req_.set_request_id(++request_id_);
    grpc::Status s;
    if (data_ != nullptr) {
      std::promise<grpc::Status> done;
      data_->StartPushPull(&req_, &resp_, absl::Now() + absl::FromChrono(kCallTimeout),
                           [&done](grpc::Status st) { done.set_value(std::move(st)); });
      s = done.get_future().get();
    } else {
      grpc::ClientContext ctx;
      ctx.set_deadline(DeadlineIn(kCallTimeout));
      s = stub_->PushPull(&ctx, req_, &resp_);
    }
    const PushPullResponse& resp = resp_;
    if (!s.ok()) return FromGrpcStatus(s, "PushPull");
    if (!resp.push().applied() ||
        static_cast<int64_t>(resp.pull().values().size()) != bytes_) {
      return absl::InternalError(absl::StrCat(
          "PushPull: applied=", resp.push().applied(), ", pulled ",
          resp.pull().values().size(), " bytes, expected ", bytes_));
    }
    version_ = resp.pull().version();
    return absl::OkStatus();
  }

 private:
  // Metrics counted but not served, as a ps_server without --metrics_port.
  explicit PsTarget(int64_t bytes)
      : bytes_(bytes), metrics_(*Metrics::Start("", "ps:0", MetricsRole::kPs)), service_(&store_, metrics_.get()) {}

  // Async sgd for one worker, as a worker's first Init would set it up;
  // then the push request every call re-sends (small gradients keep the
  // weights finite however many steps run).
  absl::Status Init() {
    const int64_t n = bytes_ / static_cast<int64_t>(sizeof(float));
    InitRequest init;
    init.set_layout_fingerprint(kLayout);
    ShardSpec* shard = init.add_shards();
    shard->set_variable("bench/w");
    shard->set_size(n);
    const std::vector<float> initial(n, 0.5f);
    init.set_values(initial.data(), bytes_);
    init.mutable_optimizer()->set_name("sgd");
    init.mutable_optimizer()->set_learning_rate(1e-3f);
    init.set_mode(ASYNC);
    init.set_num_workers(1);
    init.set_replicas_to_aggregate(1);
    InitResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(kCallTimeout));
    grpc::Status s = control_->Init(&ctx, init, &resp);
    if (!s.ok()) return FromGrpcStatus(s, "Init");
    version_ = resp.version();
    req_.set_layout_fingerprint(kLayout);
    req_.set_worker_index(0);
    req_.set_num_examples(1);
    const std::vector<float> grads(n, 1e-3f);
    req_.set_gradients(grads.data(), bytes_);
    return absl::OkStatus();
  }

  const int64_t bytes_;
  ParameterStore store_;  // on every core, as ps_server by default
  std::unique_ptr<Metrics> metrics_;
  PsService service_;  // borrows store_ and metrics_
  std::string address_;
  std::unique_ptr<grpc::Server> server_;  // serves service_
  std::unique_ptr<ParameterServer::Stub> stub_;
  std::unique_ptr<PsControl::Stub> control_;
  std::unique_ptr<DataPlaneServer> data_server_;  // tcp: serves service_
  std::unique_ptr<DataChannel> data_;             // tcp: the client's end
  PushRequest req_;
  PushPullResponse resp_;  // reused, as PsClient does
  int64_t version_ = 0;
  uint64_t request_id_ = 0;
};

class EchoTarget final : public Target {
 public:
  static absl::StatusOr<std::unique_ptr<EchoTarget>> Create(int64_t bytes) {
    std::unique_ptr<EchoTarget> t(new EchoTarget(bytes));
    absl::StatusOr<std::unique_ptr<grpc::Server>> server = StartServer({&t->service_}, &t->address_);
    if (!server.ok()) return server.status();
    t->server_ = *std::move(server);
    t->stub_ = bench::Echo::NewStub(MakeChannel(t->address_));
    t->req_.mutable_data()->assign(bytes, '\x01');
    return t;
  }

  ~EchoTarget() override { server_->Shutdown(std::chrono::system_clock::now()); }

  absl::Status Call() override {
    bench::EchoMessage resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(kCallTimeout));
    grpc::Status s = stub_->Echo(&ctx, req_, &resp);
    if (!s.ok()) return FromGrpcStatus(s, "Echo");
    if (static_cast<int64_t>(resp.data().size()) != bytes_) {
      return absl::InternalError(absl::StrCat("Echo: got ", resp.data().size(),
                                              " bytes, expected ", bytes_));
    }
    return absl::OkStatus();
  }

 private:
  explicit EchoTarget(int64_t bytes) : bytes_(bytes) {}

  const int64_t bytes_;
  EchoService service_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;  // serves service_
  std::unique_ptr<bench::Echo::Stub> stub_;
  bench::EchoMessage req_;
};

// The limit: a bare TCP ping-pong over loopback. A server thread reads
// each message from one persistent connection and writes it back as soon
// as it is in (its own buffer, one copy each way, as the echo); the client
// writes every message back to back, then reads them all. No framing, no
// serialization, no threads handing work over. One message of N bytes for
// --sizes; a step's messages (one per ps) for --model.
class TcpTarget final : public Target {
 public:
  static absl::StatusOr<std::unique_ptr<TcpTarget>> Create(std::vector<int64_t> messages) {
    std::unique_ptr<TcpTarget> t(new TcpTarget(std::move(messages)));
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0) return absl::InternalError("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(listener, 1) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      close(listener);
      return absl::InternalError("bind/listen on 127.0.0.1 failed");
    }
    t->client_ = socket(AF_INET, SOCK_STREAM, 0);
    if (t->client_ < 0 ||
        connect(t->client_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(listener);
      return absl::InternalError("connect to the TCP echo failed");
    }
    const int server = accept(listener, nullptr, nullptr);
    close(listener);
    if (server < 0) return absl::InternalError("accept failed");
    for (int fd : {t->client_, server}) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    t->server_ = server;
    const int64_t largest = *std::max_element(t->messages_.begin(), t->messages_.end());
    t->thread_ = std::thread([fd = server, messages = t->messages_, largest] {
      std::vector<char> buf(largest);
      while (true) {
        for (int64_t m : messages) {
          if (!ReadAll(fd, buf.data(), m) || !WriteAll(fd, buf.data(), m)) return;
        }
      }
    });
    t->up_.assign(largest, '\x01');
    t->down_.resize(largest);
    return t;
  }

  ~TcpTarget() override {
    shutdown(client_, SHUT_RDWR);
    close(client_);
    thread_.join();
    close(server_);
  }

  absl::Status Call() override {
    for (int64_t m : messages_) {
      if (!WriteAll(client_, up_.data(), m)) {
        return absl::InternalError("TCP ping-pong: the connection failed");
      }
    }
    for (int64_t m : messages_) {
      if (!ReadAll(client_, down_.data(), m)) {
        return absl::InternalError("TCP ping-pong: the connection failed");
      }
    }
    return absl::OkStatus();
  }

 private:
  explicit TcpTarget(std::vector<int64_t> messages) : messages_(std::move(messages)) {}

  static bool ReadAll(int fd, char* p, int64_t n) {
    while (n > 0) {
      const ssize_t r = read(fd, p, static_cast<size_t>(n));
      if (r <= 0) return false;
      p += r;
      n -= r;
    }
    return true;
  }
  static bool WriteAll(int fd, const char* p, int64_t n) {
    while (n > 0) {
      const ssize_t w = write(fd, p, static_cast<size_t>(n));
      if (w <= 0) return false;
      p += w;
      n -= w;
    }
    return true;
  }

  const std::vector<int64_t> messages_;  // bytes each way, in order
  int client_ = -1;
  int server_ = -1;
  std::thread thread_;
  std::vector<char> up_, down_;
};

// A step's push+pull through PsClient (--model): worker 0 of a sync
// cluster with one worker, so that every call closes a step on every ps.
// Before each slice the client pulls, to catch up with the steps the other
// transport's client took meanwhile.
class StepTarget final : public Target {
 public:
  // `as_worker` (the data plane only): the call as the worker makes it by
  // default, its gradient streamed (PsClient::Overlap, every layer final
  // at once) and the weights written as they arrive (priority pulls).
  static absl::StatusOr<std::unique_ptr<StepTarget>> Create(const ClusterSpec& cluster,
                                                            const Placement* placement,
                                                            int64_t num_floats,
                                                            Transport transport,
                                                            bool as_worker = false) {
    std::unique_ptr<StepTarget> t(new StepTarget(num_floats));
    t->as_worker_ = as_worker;
    PsClientOptions o;
    o.sync = true;
    o.worker_index = 0;
    o.transport = transport;
    o.retry.total_timeout = absl::FromChrono(kCallTimeout);
    absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Create(cluster, placement, o);
    if (!client.ok()) return client.status();
    t->client_ = *std::move(client);
    t->params_.resize(num_floats);
    // Small, finite and not all alike: weights stay finite however long
    // it runs.
    t->grads_.resize(num_floats);
    for (int64_t i = 0; i < num_floats; ++i) t->grads_[i] = 1e-4f * static_cast<float>(i % 7 - 3);
    if (absl::Status s = t->BeginSlice(); !s.ok()) return s;
    return t;
  }

  absl::Status BeginSlice() override {
    return client_->PullAll(0, params_.data(), absl::FromChrono(kCallTimeout));
  }

  absl::Status Call() override {
    absl::Status s;
    if (as_worker_) {
      ready_.Reset(static_cast<int64_t>(grads_.size()));
      ready_.MarkAllFinal();
      arrived_.Reset();
      absl::Notification params_free;
      params_free.Notify();
      PsClient::Overlap overlap{&ready_, &params_free, &arrived_, nullptr};
      s = client_->PushPullAll(0, 64, grads_.data(), params_.data(),
                               absl::FromChrono(kCallTimeout), &overlap);
    } else {
      s = client_->PushPullAll(0, 64, grads_.data(), params_.data(),
                               absl::FromChrono(kCallTimeout));
    }
    if (!s.ok()) return s;
    if (!client_->last_push_applied()) {
      return absl::InternalError(absl::StrCat("the push of version ", client_->version() - 1,
                                              " was not applied"));
    }
    return absl::OkStatus();
  }

 private:
  explicit StepTarget(int64_t num_floats) : arrived_(num_floats) {}

  std::unique_ptr<PsClient> client_;
  std::vector<float> params_, grads_;
  bool as_worker_ = false;
  GradientWatermark ready_;
  ParamsWatermark arrived_;
};

struct Timing {
  double median_s = 0;  // wall time per call
  double cpu_s = 0;     // process CPU time (all threads) per call, mean
  int64_t calls = 0;
};

double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

// After a warm-up of each target, calls each back to back for `seconds` in
// all, in kSlices alternating slices: the process's state (the heap above
// all: freshly mapped pages cost page faults) and other load on the machine
// then weigh on every target alike. Per target: the median of the per-call
// times, and the CPU time both ends spent per call (less sensitive than
// wall time to other processes on a shared machine). Stops at the first
// failed call.
absl::StatusOr<std::vector<Timing>> Measure(const std::vector<Target*>& targets,
                                            double seconds) {
  constexpr int kSlices = 8;
  auto since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (Target* t : targets) {
    if (absl::Status s = t->BeginSlice(); !s.ok()) return s;
    const Clock::time_point warm = Clock::now();
    for (int i = 0; i < 3 || since(warm) < std::min(0.5, seconds / 4); ++i) {
      if (absl::Status s = t->Call(); !s.ok()) return s;
    }
  }
  std::vector<std::vector<double>> times(targets.size());
  std::vector<double> cpu(targets.size(), 0.0);
  for (int slice = 0; slice < kSlices; ++slice) {
    for (size_t k = 0; k < targets.size(); ++k) {
      if (absl::Status s = targets[k]->BeginSlice(); !s.ok()) return s;
      const double cpu0 = ProcessCpuSeconds();
      const Clock::time_point start = Clock::now();
      do {
        const Clock::time_point t0 = Clock::now();
        if (absl::Status s = targets[k]->Call(); !s.ok()) return s;
        times[k].push_back(since(t0));
      } while (since(start) < seconds / kSlices);
      cpu[k] += ProcessCpuSeconds() - cpu0;
    }
  }
  std::vector<Timing> result;
  for (size_t k = 0; k < targets.size(); ++k) {
    std::vector<double>& t = times[k];
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    const int64_t calls = static_cast<int64_t>(t.size());
    result.push_back(Timing{t[t.size() / 2], cpu[k] / calls, calls});
  }
  return result;
}

// Sets up each ps of `cluster` for `placement` as the chief does for one
// sync worker (the chief's default optimizer), with the model's initial
// weights; waits up to a minute for the ps to come up.
absl::Status InitPs(const TfConfig& tf, const ModelSpec& spec, const Placement& placement) {
  const std::vector<float> initial = InitialParameters(spec, 1);
  for (int i = 0; i < placement.num_ps; ++i) {
    InitRequest req;
    req.set_layout_fingerprint(placement.fingerprint);
    for (int k : placement.shards_of_ps[i]) {
      const Shard& sh = placement.shards[k];
      ShardSpec* spec_of = req.add_shards();
      spec_of->set_variable(sh.variable);
      spec_of->set_part(sh.part);
      spec_of->set_offset(sh.offset);
      spec_of->set_size(sh.size);
      spec_of->set_moving_statistic(sh.moving_statistic);
      spec_of->set_momentum(sh.momentum);
    }
    std::vector<float> wire(placement.floats_of_ps[i]);
    GatherForPs(placement, i, initial.data(), wire.data());
    req.set_values(wire.data(), wire.size() * sizeof(float));
    OptimizerConfig* o = req.mutable_optimizer();
    o->set_name("adam");
    o->set_learning_rate(0.002f);
    o->set_beta1(0.9f);
    o->set_beta2(0.999f);
    o->set_epsilon(1e-7f);
    o->set_decay_rate(0.5f);
    o->set_decay_steps(1000);
    req.set_mode(SYNC);
    req.set_num_workers(1);
    req.set_replicas_to_aggregate(1);
    absl::StatusOr<std::string> address = tf.cluster.address(kPsJob, i);
    if (!address.ok()) return address.status();
    std::unique_ptr<PsControl::Stub> stub = PsControl::NewStub(MakeChannel(*address));
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(60)));
    InitResponse resp;
    grpc::Status s = stub->Init(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s, "Init ps:" + std::to_string(i));
  }
  return absl::OkStatus();
}

// --model: a step's push+pull over the data plane and gRPC against the
// bare round trip, for each ps count.
int RunSteps(const Flags& flags) {
  const ModelSpec spec = *ModelByName(flags.model);
  std::printf("%s: %lld weights (%.3f MB); sync, 1 worker, adam; median ms per push+pull\n",
              flags.model.c_str(), static_cast<long long>(spec.num_parameters),
              spec.num_parameters * 4 / 1e6);
  std::printf("%-4s %-24s %12s %12s %12s %12s %10s %10s %10s\n", "ps", "bytes per ps",
              "tcp plane", "as worker", "gRPC", "bare TCP", "tcp/bare", "worker/bare",
              "gRPC/bare");
  std::fflush(stdout);
  for (int num_ps : flags.ps) {
    auto fail = [&](const absl::Status& s) {
      std::fprintf(stderr, "%d ps: %s\n", num_ps, s.ToString().c_str());
      return 1;
    };
    testing::ClusterOptions co;
    co.num_ps = num_ps;
    co.num_workers = 1;
    co.evaluator = false;
    co.not_started = {"chief:0", "worker:0"};
    absl::StatusOr<std::unique_ptr<testing::LocalCluster>> cluster =
        testing::LocalCluster::Start(co);
    if (!cluster.ok()) return fail(cluster.status());
    std::string json = "{\"cluster\": {\"chief\": [\"" + (*cluster)->Address("chief:0") +
                       "\"], \"worker\": [\"" + (*cluster)->Address("worker:0") +
                       "\"], \"ps\": [";
    for (int i = 0; i < num_ps; ++i) {
      json += absl::StrCat(i ? ", " : "", "\"", (*cluster)->Address(absl::StrCat("ps:", i)),
                           "\"");
    }
    json += "]}, \"task\": {\"type\": \"worker\", \"index\": 0}}";
    absl::StatusOr<TfConfig> tf = ParseTfConfig(json, "bench");
    if (!tf.ok()) return fail(tf.status());
    const Placement placement = PlaceVariables(spec, num_ps);
    if (absl::Status s = InitPs(*tf, spec, placement); !s.ok()) {
      std::fprintf(stderr, "%s\n", (*cluster)->AllLogs().c_str());
      return fail(s);
    }
    std::vector<int64_t> messages;
    std::string sizes;
    for (int64_t n : placement.floats_of_ps) {
      messages.push_back(n * static_cast<int64_t>(sizeof(float)));
      absl::StrAppend(&sizes, sizes.empty() ? "" : "+", n * 4);
    }
    absl::StatusOr<std::unique_ptr<StepTarget>> tcp_plane =
        StepTarget::Create(tf->cluster, &placement, spec.num_parameters, TRANSPORT_TCP);
    if (!tcp_plane.ok()) return fail(tcp_plane.status());
    absl::StatusOr<std::unique_ptr<StepTarget>> as_worker = StepTarget::Create(
        tf->cluster, &placement, spec.num_parameters, TRANSPORT_TCP, /*as_worker=*/true);
    if (!as_worker.ok()) return fail(as_worker.status());
    absl::StatusOr<std::unique_ptr<StepTarget>> grpc =
        StepTarget::Create(tf->cluster, &placement, spec.num_parameters, TRANSPORT_GRPC);
    if (!grpc.ok()) return fail(grpc.status());
    absl::StatusOr<std::unique_ptr<TcpTarget>> bare = TcpTarget::Create(messages);
    if (!bare.ok()) return fail(bare.status());
    absl::StatusOr<std::vector<Timing>> t = Measure(
        {tcp_plane->get(), as_worker->get(), grpc->get(), bare->get()}, flags.seconds);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", (*cluster)->AllLogs().c_str());
      return fail(t.status());
    }
    const double tcp_ms = (*t)[0].median_s * 1e3, worker_ms = (*t)[1].median_s * 1e3,
                 grpc_ms = (*t)[2].median_s * 1e3, bare_ms = (*t)[3].median_s * 1e3;
    std::printf("%-4d %-24s %12.3f %12.3f %12.3f %12.3f %10.2f %10.2f %10.2f\n", num_ps,
                sizes.c_str(), tcp_ms, worker_ms, grpc_ms, bare_ms, tcp_ms / bare_ms,
                worker_ms / bare_ms, grpc_ms / bare_ms);
    std::fflush(stdout);
  }
  std::printf(
      "tcp plane, gRPC: PsClient::PushPullAll against ps_server processes (each call a sync\n"
      "step: every ps applies adam and answers); as worker: the tcp plane as the worker\n"
      "calls it by default (gradient streamed, weights written as they arrive); bare TCP:\n"
      "the same messages echoed over one loopback connection\n");
  return 0;
}

int Run(const Flags& flags) {
  const char* names[] = {"PushPull, tcp data plane", "PushPull, gRPC", "gRPC echo",
                         "bare TCP ping-pong"};
  std::printf("%-8s", "");
  for (const char* n : names) std::printf("  %-29s", n);
  std::printf("  %12s %12s\n", "tcp-ps/TCP", "grpc-ps/TCP");
  std::printf("%-8s", "size");
  for (int k = 0; k < 4; ++k) std::printf("  %7s %10s %10s", "GB/s", "median us", "cpu us");
  std::printf("\n");
  std::fflush(stdout);
  for (int64_t bytes : flags.sizes) {
    auto fail = [&](const absl::Status& s) {
      std::fprintf(stderr, "%s: %s\n", SizeName(bytes).c_str(), s.ToString().c_str());
      return 1;
    };
    absl::StatusOr<std::unique_ptr<PsTarget>> ps_tcp = PsTarget::Create(bytes, TRANSPORT_TCP);
    if (!ps_tcp.ok()) return fail(ps_tcp.status());
    absl::StatusOr<std::unique_ptr<PsTarget>> ps = PsTarget::Create(bytes, TRANSPORT_GRPC);
    if (!ps.ok()) return fail(ps.status());
    absl::StatusOr<std::unique_ptr<EchoTarget>> echo = EchoTarget::Create(bytes);
    if (!echo.ok()) return fail(echo.status());
    absl::StatusOr<std::unique_ptr<TcpTarget>> tcp = TcpTarget::Create({bytes});
    if (!tcp.ok()) return fail(tcp.status());
    absl::StatusOr<std::vector<Timing>> timings =
        Measure({ps_tcp->get(), ps->get(), echo->get(), tcp->get()}, flags.seconds);
    if (!timings.ok()) return fail(timings.status());
    double gbs[4];
    std::printf("%-8s", SizeName(bytes).c_str());
    for (int k = 0; k < 4; ++k) {
      const Timing& t = (*timings)[k];
      gbs[k] = 2.0 * bytes / t.median_s / 1e9;
      std::printf("  %7.3f %10.1f %10.1f", gbs[k], t.median_s * 1e6, t.cpu_s * 1e6);
    }
    std::printf("  %12.2f %12.2f\n", gbs[0] / gbs[3], gbs[1] / gbs[3]);
    std::fflush(stdout);
  }
  std::printf(
      "GB/s = 2 x size / median call time (bytes up and down), 1 GB = 1e9 B;\n"
      "cpu us = CPU time of the whole process (client and server) per call\n");
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) {
  pscluster::Flags flags;
  if (!pscluster::ParseFlags(argc, argv, &flags)) return 2;
  // The allocator settings the daemons run with (common/daemon.h).
  pscluster::TuneAllocator();
  return flags.model.empty() ? pscluster::Run(flags) : pscluster::RunSteps(flags);
}
