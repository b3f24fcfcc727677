// DataPlaneServer: the ps's end of the tcp data plane (wire/data_plane.h).
// It listens on its own port beside the gRPC server, takes each connection
// on a thread of its own (a connection carries one worker's calls, one at a
// time), checks the cluster token in the hello frame, and answers every
// PushPull through PsDataService::DoPushPull: the same rules, counters and
// exactly-once answers as the gRPC method. ps 0 of a sync cluster sends
// its step decisions to the other ps the same way (CommitStep's
// DoCommitStep; ps_server/step_broadcaster.h), and a primary its updates
// to the backup store it keeps on another ps, whose own server this is
// then (Replicate's DoReplicate; ps_server/replicator.h).
//
// The port is told to clients through GetStats (PsStatsResponse.data_port),
// so by default it is any free one; --data_port on ps_server fixes it (for
// a firewall, a container's published ports or a Kubernetes Service).
#ifndef PSCLUSTER_PS_SERVER_DATA_PLANE_SERVER_H_
#define PSCLUSTER_PS_SERVER_DATA_PLANE_SERVER_H_

#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/security.h"
#include "ps_server/ps_service.h"
#include "wire/data_plane.h"

namespace pscluster {

class DataPlaneServer {
 public:
  // Listens on 0.0.0.0:`port` (0: any free port but those in `avoid`: the
  // ports the cluster spec gives tasks that may not have started yet, on
  // one machine the kernel could hand out as free). `service` is borrowed
  // and must outlive the server; a payload above `max_payload_bytes` is
  // refused (the gRPC server's message limit).
  static absl::StatusOr<std::unique_ptr<DataPlaneServer>> Start(
      int port, PsService* service, std::shared_ptr<const SecurityConfig> security,
      uint64_t max_payload_bytes, const std::vector<int>& avoid = {});
  // Stops: closes the port and every connection, and joins the threads.
  ~DataPlaneServer();

  int port() const { return port_; }

 private:
  explicit DataPlaneServer(std::shared_ptr<const SecurityConfig> security)
      : security_(std::move(security)), tls_(TlsContexts::kServer, security_) {}
  void AcceptLoop();
  void Serve(std::shared_ptr<DataSocket> socket);
  // Reads and answers the connection's hello: the token and, with
  // --authorize, the caller's identity (*caller), checked under the config
  // in force (*security). False when refused or broken.
  bool Hello(DataSocket& socket, const std::string& peer,
             std::shared_ptr<const SecurityConfig>* security, std::optional<TaskIdentity>* caller);
  // A step decision from ps 0 (DataKind::kCommit, whose header `h` and
  // meta were read): applied through PsControlService::DoCommitStep and answered.
  // False when the connection broke.
  bool ServeCommit(DataSocket& socket, const FrameHeader& h, std::string* meta,
                   std::string* payload);
  // A primary's updates (DataKind::kReplicate): applied through
  // PsControlService::DoReplicate and answered. False when the connection broke.
  bool ServeReplicate(DataSocket& socket, const FrameHeader& h, std::string* meta,
                      std::string* payload);

  PsService* service_ = nullptr;
  const std::shared_ptr<const SecurityConfig> security_;
  TlsContexts tls_;  // the process's certificates of now, for its config
  uint64_t max_payload_ = 0;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // a byte here ends AcceptLoop's poll
  int port_ = 0;
  std::thread acceptor_;

  std::mutex mu_;
  bool stopping_ = false;                                // guarded by mu_
  std::list<std::shared_ptr<DataSocket>> connections_;  // guarded by mu_
  int serving_ = 0;  // connections' threads running; guarded by mu_
  std::condition_variable threads_done_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVER_DATA_PLANE_SERVER_H_
