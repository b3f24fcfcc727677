// Malformed data-plane frames through the real daemons: while two workers
// train over the tcp data plane (--transport=tcp), raw sockets send each
// ps the frames a broken or hostile peer would (bad magic, a meta that
// claims more than the limit, a wrong token, a request that does not
// parse, a payload that claims far more than it sends before the peer
// hangs up). Each such connection is dropped or answered with an error;
// the ps keeps serving the workers, the run ends as a clean one does
// (every step, the usual accuracy, every process exiting 0) and each ps
// applied exactly the workers' gradients: no frame changed a weight.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "wire/data_plane.h"

namespace pscluster {
namespace testing {
namespace {

// The ps's data port from its start-up line, waiting for it.
int DataPort(const LocalCluster& c, const std::string& task) {
  static const std::regex kLine(R"(tcp data plane on port (\d+))");
  for (const absl::Time give_up = absl::Now() + absl::Minutes(2); absl::Now() < give_up;) {
    std::smatch m;
    const std::string log = c.Log(task);
    if (std::regex_search(log, m, kLine)) return std::stoi(m[1]);
    absl::SleepFor(absl::Milliseconds(200));
  }
  return 0;
}

std::string Frame(DataKind kind, const std::string& meta, uint64_t payload_size,
                  uint32_t meta_size) {
  FrameHeader h;
  h.kind = static_cast<uint32_t>(kind);
  h.meta_size = meta_size;
  h.payload_size = payload_size;
  h.timeout_us = 1000000;
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + meta;
}
std::string Frame(DataKind kind, const std::string& meta, const std::string& payload = "") {
  return Frame(kind, meta, payload.size(), static_cast<uint32_t>(meta.size())) + payload;
}

// Sends `bytes` to 127.0.0.1:port, then hangs up its side and reads what
// the ps answers until it hangs up too; nullopt when the ps is not there
// (any more: the run may have ended).
std::optional<std::string> SendRaw(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return std::nullopt;
  }
  (void)send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  char buf[4096];
  std::string answer;
  ssize_t r;
  while ((r = recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, static_cast<size_t>(r));
  close(fd);
  return answer;
}

// What one round of hostile frames got back from a ps, by frame.
struct Round {
  bool complete = false;  // every frame reached the ps
  std::string bad_magic, huge_meta, wrong_token, unparsable;
};

Round HostileRound(int port) {
  const std::string hello = Frame(DataKind::kHello, "");  // no cluster token
  Round r;
  std::optional<std::string> a[8];
  a[0] = SendRaw(port, std::string(64, 'x'));  // not a frame at all
  a[1] = SendRaw(port, Frame(DataKind::kHello, "", 0, kMaxMetaBytes + 1));
  a[2] = SendRaw(port, Frame(DataKind::kHello, "guess"));
  // After a good hello: a request that does not parse; a payload that
  // claims 1 MiB, of which 100 bytes come before the peer hangs up; a
  // commit claiming 1 GiB; a header cut off.
  a[3] = SendRaw(port, hello + Frame(DataKind::kPushPull, std::string(40, '\xff'),
                                     std::string(64, '\0')));
  a[4] = SendRaw(port, hello + Frame(DataKind::kPushPull, "", 1 << 20, 0) +
                           std::string(100, '\x7f'));
  a[5] = SendRaw(port, hello + Frame(DataKind::kCommit, "", uint64_t{1} << 30, 0) + "abc");
  a[6] = SendRaw(port, hello + Frame(DataKind::kPushPull, "", 8, 0).substr(0, 17));
  a[7] = SendRaw(port, hello + Frame(static_cast<DataKind>(77), "", std::string(12, '\1')));
  r.complete = true;
  for (const auto& x : a) r.complete = r.complete && x.has_value();
  if (!r.complete) return r;
  r.bad_magic = *a[0];
  r.huge_meta = *a[1];
  r.wrong_token = *a[2];
  r.unparsable = *a[3];
  return r;
}

TEST(HostileFrameTest, APsFedLyingFramesKeepsTrainingTheWorkers) {
  ClusterOptions o;
  o.data_dir = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(o.data_dir);
  o.num_ps = 2;
  o.num_workers = 2;
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync", "--transport=tcp"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const int ports[2] = {DataPort(**c, "ps:0"), DataPort(**c, "ps:1")};
  ASSERT_GT(ports[0], 0) << (*c)->Log("ps:0");
  ASSERT_GT(ports[1], 0) << (*c)->Log("ps:1");
  // Rounds of hostile frames to both ps from before the workers' first
  // push until the run ends, alongside the workers' own connections.
  std::atomic<bool> stop{false};
  int complete_rounds = 0;
  Round first;
  std::thread hostile([&] {
    while (!stop.load()) {
      for (int port : ports) {
        Round r = HostileRound(port);
        if (!r.complete) continue;
        if (complete_rounds++ == 0) first = r;
      }
    }
  });
  const std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(5));
  stop = true;
  hostile.join();
  for (const auto& [task, code] : codes) {
    EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << (*c)->AllLogs();
  }
  ASSERT_GT(complete_rounds, 0) << "no round of hostile frames reached a ps";
  std::printf("%d rounds of hostile frames reached a ps\n", complete_rounds);
  EXPECT_EQ(first.bad_magic, "");  // dropped unanswered
  EXPECT_EQ(first.huge_meta, "");
  EXPECT_NE(first.wrong_token.find("missing or wrong cluster token"), std::string::npos);
  EXPECT_NE(first.unparsable.find("cannot parse the PushRequest"), std::string::npos);
  std::optional<FinalFigures> f = ParseFinalLine((*c)->Log("chief:0"));
  ASSERT_TRUE(f.has_value()) << (*c)->AllLogs();
  EXPECT_EQ(f->steps, 469) << (*c)->Log("chief:0");
  // The same training as cluster_test's sync run: 0.9256 in every run.
  EXPECT_GT(f->test_accuracy, 0.92) << (*c)->Log("chief:0");
  const std::string ps0 = (*c)->Log("ps:0"), ps1 = (*c)->Log("ps:1");
  // Two workers' gradients for each of 469 steps, nothing else.
  EXPECT_EQ(ShutdownField(ps0, "applied"), "938") << ps0;
  EXPECT_EQ(ShutdownField(ps1, "applied"), "938") << ps1;
  EXPECT_EQ(ShutdownField(ps0, "applied_digest"), ShutdownField(ps1, "applied_digest"));
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
