// ps_server: holds a shard of the model's variables and optimizer state and
// applies the workers' gradients. Its place in the cluster comes from
// TF_CONFIG (or --tf_config); the chief initialises it and, at the end,
// tells it to exit.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/cluster_spec.h"
#include "common/daemon.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/crc32c.h"
#include "common/task_server.h"
#include "ps_server/data_plane_server.h"
#include "ps_server/ps_service.h"
#include "ps_server/step_broadcaster.h"
#include "spdlog/spdlog.h"
#include "update/parameter_store.h"

ABSL_FLAG(int, max_message_mb, 512, "Largest gRPC message accepted, in MiB");
ABSL_FLAG(int, data_port, 0,
          "Port of the tcp data plane (the workers' PushPull tensor bytes unless the chief runs "
          "with --transport=grpc, and ps 0's step decisions); 0: any free port (clients ask for "
          "it over gRPC)");
ABSL_FLAG(int, backup_stores, 1,
          "Backup stores this ps keeps for other ps: the chief's --ps_replicas=R needs R on "
          "every ps (the s-th keeps ps (this - s - 1)'s backup); 0: none, for runs without "
          "backups (--ps_replicas=0)");
ABSL_FLAG(int, backup_port, 0,
          "Port (gRPC) of the first backup store this ps keeps for another ps when the chief "
          "runs with --ps_replicas (the chief asks for it); the s-th store's is this + s; 0: "
          "any free ports");
ABSL_FLAG(int, backup_data_port, 0,
          "Port of the first backup store's tcp data plane (the s-th's is this + s): its "
          "primary's updates, and the workers' push-pulls once it serves a lost ps's shards; "
          "0: any free ports (clients ask for them over gRPC)");
ABSL_FLAG(int, update_threads, 0,
          "Cores a large shard's update (its gradient check, sync's sum, the optimizer) may "
          "use at once; 0: every core. Results do not depend on it");

namespace {

// How long a stopped ps waits to be drained (the chief moves its shards in
// well under a second per GB on these machines; Kubernetes gives a pod 30 s
// before it kills it).
constexpr absl::Duration kDrainGrace = absl::Seconds(25);

// A port the kernel gives out now that is not in `avoid` (the cluster
// spec's: a task that has not started yet may be about to take it); 0 when
// none was found (the caller then takes any). The ports looked at are held
// while looking, so that each try gets another, and let go at the end.
int FreePortAvoiding(const std::vector<int>& avoid) {
  std::vector<int> fds;
  int chosen = 0;
  for (int i = 0; i < 64 && chosen == 0; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    fds.push_back(fd);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof(a);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      break;
    }
    const int port = ntohs(a.sin_port);
    if (std::find(avoid.begin(), avoid.end(), port) == avoid.end()) chosen = port;
  }
  for (int fd : fds) close(fd);
  return chosen;
}

// CRC-32C of a store's values and optimizer slots: stores that hold the
// same bits (a primary and its backup) log the same. 0 before Init.
uint32_t StateCrc(const pscluster::ParameterStore& store) {
  pscluster::StoreState snap;
  if (!store.Snapshot(store.stats().layout_fingerprint, &snap).ok()) return 0;
  uint32_t crc = pscluster::crc32c::Value(snap.values.data(), snap.values.size() * sizeof(float));
  for (const pscluster::OptimizerSlot& s : snap.optimizer.slots) {
    crc = pscluster::crc32c::Extend(crc, s.values.data(), s.values.size() * sizeof(float));
  }
  for (const pscluster::SparseTable::Rows& t : snap.sparse) {  // ids increasing
    crc = pscluster::crc32c::Extend(crc, t.ids.data(), t.ids.size() * sizeof(int64_t));
    crc = pscluster::crc32c::Extend(crc, t.rows.data(), t.rows.size() * sizeof(float));
  }
  return crc;
}

// A backup store this ps keeps for another ps (--ps_replicas): a store
// and service of their own on ports of their own, idle until that ps's
// Replicator seeds it (docs/replication.md). Its metrics are its own, not
// exported: /metrics stays this ps's.
struct BackupSlot {
  BackupSlot(int threads, const pscluster::PsServiceOptions& options)
      : store(threads),
        metrics(*pscluster::Metrics::Start("", "ps", pscluster::MetricsRole::kPs)),
        service(&store, metrics.get(), options) {}

  // Serves the store on `port` (gRPC) and `data_port` (its tcp data plane:
  // its primary's updates come over it, a gRPC round trip less per update,
  // and the workers' push-pulls once it is promoted; 0: any free port).
  absl::Status Start(int port, int data_port, const std::vector<int>& avoid,
                     const pscluster::RpcOptions& rpc) {
    // The data plane first: GetStats tells its port from the first call.
    // Any free port but `port` too: that one is free now, not bound until
    // the gRPC server below binds it, and the kernel would hand it out
    // again (with a narrow ephemeral range it did, and the ps exited).
    std::vector<int> avoid_also_port = avoid;
    avoid_also_port.push_back(port);
    absl::StatusOr<std::unique_ptr<pscluster::DataPlaneServer>> d =
        pscluster::DataPlaneServer::Start(data_port, &service, nullptr,
                                          static_cast<uint64_t>(rpc.max_message_bytes),
                                          avoid_also_port);
    if (!d.ok()) return d.status();
    data_plane = *std::move(d);
    service.shard().set_data_port(data_plane->port());
    // Promoted to decide the sync steps in a lost ps 0's place, the store
    // sends its decisions as ps 0 did, to the followers the chief names.
    service.control().set_followers_handler([this, rpc](const std::vector<std::string>& f) {
      absl::MutexLock lock(&broadcaster_mu);
      if (broadcaster != nullptr) return broadcaster->SetFollowers(f);
      broadcaster = std::make_unique<pscluster::StepBroadcaster>(&store, f, rpc);
      return absl::OkStatus();
    });
    absl::StatusOr<std::unique_ptr<pscluster::TaskServer>> s =
        pscluster::TaskServer::Start(port, service.grpc_services(), nullptr, rpc);
    if (!s.ok()) return s.status();
    server = *std::move(s);
    return absl::OkStatus();
  }

  // Stops serving; what was started is stopped, in reverse.
  void Stop() {
    store.Cancel();
    {
      absl::MutexLock lock(&broadcaster_mu);
      broadcaster.reset();
    }
    data_plane.reset();
    if (server != nullptr) server->Stop(absl::ZeroDuration());
  }

  pscluster::ParameterStore store;
  std::unique_ptr<pscluster::Metrics> metrics;
  pscluster::PsService service;
  std::unique_ptr<pscluster::TaskServer> server;
  std::unique_ptr<pscluster::DataPlaneServer> data_plane;
  absl::Mutex broadcaster_mu;
  std::unique_ptr<pscluster::StepBroadcaster> broadcaster ABSL_GUARDED_BY(broadcaster_mu);
};

// The flags, checked: each bad value exits 2 naming it.
struct PsFlags {
  int max_mb = 0;
  int data_port = 0;
  int backup_port = 0;
  int backup_data_port = 0;
  int backup_stores = 0;
  int update_threads = 0;
};

int PortFlagOrExit(const char* name, int value) {
  if (value < 0 || value > 65535) {
    pscluster::ExitWithUsageError(absl::StrCat(name, " must be in [0, 65535], got ", value));
  }
  return value;
}

// Fixed ports, each its own: one given twice would fail its bind later
// with a message that names neither flag. A backup store's ports are the
// flag's plus its slot.
void CheckPortsDistinctOrExit(const pscluster::TfConfig& config, const PsFlags& f) {
  for (const auto& [flag, port] : {std::pair<const char*, int>{"--backup_port", f.backup_port},
                                   {"--backup_data_port", f.backup_data_port}}) {
    if (port != 0 && port + std::max(f.backup_stores, 1) - 1 > 65535) {
      pscluster::ExitWithUsageError(absl::StrCat(flag, "=", port, ": the ", f.backup_stores,
                                                 " backup stores' ports from it pass 65535"));
    }
  }
  std::vector<std::pair<std::string, int>> fixed = {
      {"the task's own port (TF_CONFIG)", config.own_port()}, {"--data_port", f.data_port}};
  for (int s = 0; s < f.backup_stores; ++s) {
    const std::string slot = s == 0 ? "" : absl::StrCat(" + ", s);
    if (f.backup_port != 0) fixed.emplace_back("--backup_port" + slot, f.backup_port + s);
    if (f.backup_data_port != 0) {
      fixed.emplace_back("--backup_data_port" + slot, f.backup_data_port + s);
    }
  }
  for (size_t i = 0; i < fixed.size(); ++i) {
    for (size_t j = i + 1; j < fixed.size(); ++j) {
      if (fixed[i].second != 0 && fixed[i].second == fixed[j].second) {
        pscluster::ExitWithUsageError(absl::StrCat(fixed[j].first, "=", fixed[j].second,
                                                   ": so is ", fixed[i].first,
                                                   "; each needs a port of its own"));
      }
    }
  }
}

PsFlags FlagsOrExit(const pscluster::TfConfig& config) {
  PsFlags f;
  f.max_mb = absl::GetFlag(FLAGS_max_message_mb);
  if (f.max_mb < 1 || f.max_mb > 2047) {
    pscluster::ExitWithUsageError("--max_message_mb must be in [1, 2047], got " +
                                  std::to_string(f.max_mb));
  }
  f.data_port = PortFlagOrExit("--data_port", absl::GetFlag(FLAGS_data_port));
  f.backup_port = PortFlagOrExit("--backup_port", absl::GetFlag(FLAGS_backup_port));
  f.backup_data_port = PortFlagOrExit("--backup_data_port", absl::GetFlag(FLAGS_backup_data_port));
  f.backup_stores = absl::GetFlag(FLAGS_backup_stores);
  if (f.backup_stores < 0 || f.backup_stores > 8) {
    pscluster::ExitWithUsageError("--backup_stores must be in [0, 8], got " +
                                  std::to_string(f.backup_stores));
  }
  CheckPortsDistinctOrExit(config, f);
  f.update_threads = absl::GetFlag(FLAGS_update_threads);
  if (f.update_threads < 0 || f.update_threads > 1024) {
    pscluster::ExitWithUsageError("--update_threads must be in [0, 1024], got " +
                                  std::to_string(f.update_threads));
  }
  return f;
}

// The ports the cluster spec gives its tasks: an ephemeral port this ps
// takes must not take one of a task that has not started yet (on one
// machine, the local launcher's).
std::vector<int> SpecPorts(const pscluster::TfConfig& config) {
  std::vector<int> ports;
  for (const auto& [job, tasks] : config.cluster.job_map()) {
    for (const auto& [index, address] : tasks) {
      absl::StatusOr<pscluster::HostPort> hp = pscluster::ParseHostPort(address, config.source);
      if (hp.ok()) ports.push_back(hp->port);
    }
  }
  return ports;
}

// The backup stores this ps keeps for other ps (--ps_replicas), each
// started on ports of its own (the flags' plus the slot, or free ones):
// into *backups as they start; an error names the store that failed.
absl::Status StartBackupStores(const PsFlags& f, int threads,
                               const pscluster::PsServiceOptions& options,
                               const std::vector<int>& spec_ports,
                               const pscluster::RpcOptions& rpc,
                               std::vector<std::unique_ptr<BackupSlot>>* backups) {
  for (int s = 0; s < f.backup_stores; ++s) {
    backups->push_back(std::make_unique<BackupSlot>(threads, options));
    absl::Status started = backups->back()->Start(
        f.backup_port != 0 ? f.backup_port + s : FreePortAvoiding(spec_ports),
        f.backup_data_port != 0 ? f.backup_data_port + s : 0, spec_ports, rpc);
    if (!started.ok()) {
      return absl::Status(started.code(),
                          absl::StrCat("backup store ", s, ": ", started.message()));
    }
  }
  return absl::OkStatus();
}

// What the store and each backup store hold at shutdown: the lines the
// tests compare (a primary's state CRC equals its backup's).
void LogShutdown(const std::string& reason, const pscluster::ParameterStore& store,
                 pscluster::PsService& service,
                 const std::vector<std::unique_ptr<BackupSlot>>& backups) {
  const pscluster::StoreStats st = store.stats();
  spdlog::info("shutting down ({}): version={} applied={} dropped_stale={} rejected={} "
               "duplicate={} torn_steps={} applied_digest={:016x} steps_ahead={} state_crc={:08x}",
               reason, st.version, st.pushes_applied, st.pushes_dropped_stale,
               service.shard().pushes_rejected(), st.pushes_duplicate, st.steps_torn,
               st.applied_digest, st.steps_ahead, StateCrc(store));
  for (size_t t = 0; t < st.sparse_tables.size(); ++t) {
    spdlog::info("sparse table {}: rows={} bytes={} admitted={} evicted={} dropped_unadmitted={}",
                 t, st.sparse_tables[t].rows, st.sparse_tables[t].bytes,
                 st.sparse_tables[t].admitted, st.sparse_tables[t].evicted,
                 st.sparse_tables[t].dropped_unadmitted);
  }
  for (size_t s = 0; s < backups.size(); ++s) {
    const pscluster::StoreStats bst = backups[s]->store.stats();
    if (bst.initialized) {
      spdlog::info("backup store{}: {}: version={} applied={} applied_digest={:016x} "
                   "generation={} state_crc={:08x}",
                   s == 0 ? "" : absl::StrCat(" ", s), bst.backup ? "a backup" : "promoted",
                   bst.version, bst.pushes_applied, bst.applied_digest, bst.generation,
                   StateCrc(backups[s]->store));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pscluster;
  const TfConfig config = StartDaemonOrExit(
      argc, argv, std::getenv("TF_CONFIG"), kPsJob,
      "Parameter server task. Usage: TF_CONFIG='{...\"task\":{\"type\":\"ps\","
      "\"index\":0}}' ps_server [--tf_config=FILE]");
  const PsFlags flags = FlagsOrExit(config);
  const int max_mb = flags.max_mb;
  const int data_port = flags.data_port;
  const int update_threads = flags.update_threads;
  std::unique_ptr<Metrics> metrics = StartLoggingAndMetricsOrExit(config);

  // Sync steps with several ps are decided by ps 0 (the first in
  // TF_CONFIG's list) for all; it sends its decisions to the others.
  const std::vector<int> ps_indices = config.cluster.task_indices(kPsJob);
  const bool decides = ps_indices.empty() || config.task.index == ps_indices.front();
  RpcOptions rpc;
  rpc.max_message_bytes = max_mb << 20;
  PsServiceOptions options;
  options.step_role = decides ? StepRole::kDecide : StepRole::kFollow;
  options.replicator.rpc = rpc;
  // A test's fault (tests/elastic_ps_test): never set outside tests.
  options.exit_on_new_placement = std::getenv("PSCLUSTER_TEST_EXIT_ON_NEW_PLACEMENT") != nullptr;
  const int threads = update_threads > 0 ? update_threads : HardwareThreads();
  ParameterStore store(threads);
  PsService service(&store, metrics.get(), options);
  std::unique_ptr<StepBroadcaster> broadcaster;
  if (decides && ps_indices.size() > 1) {
    std::vector<std::string> followers;
    for (size_t i = 1; i < ps_indices.size(); ++i) {
      absl::StatusOr<std::string> address = config.cluster.address(kPsJob, ps_indices[i]);
      if (!address.ok()) ExitWithUsageError(std::string(address.status().message()));
      followers.push_back(*address);
    }
    broadcaster = std::make_unique<StepBroadcaster>(&store, followers, rpc);
    service.control().set_followers_handler(
        [b = broadcaster.get()](const std::vector<std::string>& f) { return b->SetFollowers(f); });
  }
  // What GetStats tells of (the data plane's port, the backup stores') is
  // set before the ps serves: a chief that asks a restarted ps at once
  // must find its backup stores (it once found none, 50 ms early, and
  // failed the run).
  const std::vector<int> spec_ports = SpecPorts(config);
  absl::StatusOr<std::unique_ptr<DataPlaneServer>> data_plane =
      DataPlaneServer::Start(data_port, &service, nullptr,
                             static_cast<uint64_t>(rpc.max_message_bytes), spec_ports);
  if (!data_plane.ok()) {
    spdlog::error("{}", std::string(data_plane.status().message()));
    return 1;
  }
  service.shard().set_data_port((*data_plane)->port());
  std::vector<std::unique_ptr<BackupSlot>> backups;
  auto stop_started = [&] {
    for (std::unique_ptr<BackupSlot>& b : backups) b->Stop();
    data_plane->reset();
  };
  if (absl::Status s = StartBackupStores(flags, threads, options, spec_ports, rpc, &backups);
      !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    stop_started();
    return 1;
  }
  std::vector<int> backup_ports;
  for (const std::unique_ptr<BackupSlot>& b : backups) backup_ports.push_back(b->server->port());
  service.shard().set_backup_ports(backup_ports);
  absl::StatusOr<std::unique_ptr<TaskServer>> server =
      TaskServer::Start(config.own_port(), service.grpc_services(), nullptr, rpc);
  if (!server.ok()) {
    spdlog::error("{}", std::string(server.status().message()));
    stop_started();
    return 1;
  }
  // In a run that drains ps (the chief's --min_ps), a stop signal first
  // asks the chief to move this ps's shards to the others: the ps says it
  // leaves (GetStats), serves on until the chief demotes it, and exits
  // then, or after kDrainGrace. A second signal exits at once.
  absl::Mutex drain_mu;
  std::thread drain;
  HandleTerminationSignals([&](const std::string& why) {
    const StoreStats st = store.stats();
    if (!service.shard().drains_on_stop() || !st.initialized || st.backup) {
      (*server)->RequestShutdown(why);
      return;
    }
    service.shard().set_leaving();
    spdlog::warn("{}: waiting up to {} s for the chief to move this ps's shards to the others", why,
                 absl::ToInt64Seconds(kDrainGrace));
    absl::MutexLock lock(&drain_mu);
    drain = std::thread([&, why] {
      const absl::Time give_up = absl::Now() + kDrainGrace;
      while (absl::Now() < give_up && !(*server)->shutdown_requested()) {
        const StoreStats now = store.stats();
        if (!now.initialized || now.backup) {
          (*server)->RequestShutdown(why + "; drained: the other ps serve its shards");
          return;
        }
        absl::SleepFor(absl::Milliseconds(20));
      }
      (*server)->RequestShutdown(
          absl::StrCat(why, "; not drained within ", absl::ToInt64Seconds(kDrainGrace), " s"));
    });
  });
  std::string backup_note;
  for (size_t s = 0; s < backups.size(); ++s) {
    absl::StrAppend(&backup_note, ", backup store", s == 0 ? "" : absl::StrCat(" ", s),
                    " on port ", backups[s]->server->port(), " with its data plane on port ",
                    backups[s]->data_plane->port());
  }
  spdlog::info("serving on {} (tcp data plane on port {}{})", config.own_address(),
               (*data_plane)->port(), backup_note);
  // Ready once the chief has initialised or restored the store.
  std::thread readiness([&] {
    if (store.AwaitInitialized()) (*server)->SetReady(true);
  });
  std::string reason = (*server)->WaitForShutdownRequest();
  LogShutdown(reason, store, service, backups);
  for (std::unique_ptr<BackupSlot>& b : backups) b->Stop();
  store.Cancel();
  data_plane->reset();
  broadcaster.reset();
  readiness.join();
  {
    absl::MutexLock lock(&drain_mu);
    if (drain.joinable()) drain.join();
  }
  const bool run_failed = (*server)->run_failed();
  (*server)->Stop();
  return run_failed ? kExitRunFailed : kExitOk;
}
