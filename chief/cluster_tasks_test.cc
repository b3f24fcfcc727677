#include "chief/cluster_tasks.h"

#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/coordination.grpc.pb.h"

namespace pscluster {
namespace {

// A task whose first Shutdown answers after the chief's 5 s deadline, as
// one cut off from the chief when the run ends; later ones at once.
class SlowFirstShutdown final : public TaskControl::Service {
 public:
  grpc::Status Shutdown(grpc::ServerContext*, const ShutdownRequest*,
                        ShutdownResponse*) override {
    if (++calls_ == 1) absl::SleepFor(absl::Milliseconds(5500));
    return grpc::Status::OK;
  }
  int calls() const { return calls_; }

 private:
  std::atomic<int> calls_{0};
};

// A loopback port nothing listens on: bound, then closed.
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

// The run's end: a task that does not answer in time is told again (it
// would otherwise wait for ever for a chief that has exited), one whose
// port is closed is not waited for.
TEST(ClusterTasksTest, ShutdownTellsATaskThatTimedOutAgainAndLeavesOneThatIsGone) {
  SlowFirstShutdown slow;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&slow);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::Create(
      {{"chief", {{0, absl::StrCat("127.0.0.1:", ClosedPort())}}},
       {"ps",
        {{0, absl::StrCat("127.0.0.1:", port)}, {1, absl::StrCat("127.0.0.1:", ClosedPort())}}}},
      "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::atomic<bool> stop{false};
  ClusterTasks tasks(*spec, &stop);
  tasks.ShutdownAll("training finished");
  EXPECT_EQ(slow.calls(), 2);
  server->Shutdown();
}

}  // namespace
}  // namespace pscluster
