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

#include <cstring>
#include <optional>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "wire/data_plane.h"

namespace pscluster {
namespace testing {
namespace {

constexpr char kNoData[] =
    "no MNIST: set PSCLUSTER_DATA_DIR or put the IDX files in ../shared/data/mnist beside "
    "the workspace";

std::string ShutdownField(const std::string& log, const std::string& key) {
  const size_t line = log.rfind("shutting down");
  if (line == std::string::npos) return "";
  const size_t at = log.find(key + "=", line);
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size() + 1;
  return log.substr(begin, log.find_first_of(" \n", begin) - begin);
}

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
// the ps answers until it hangs up too.
std::string SendRaw(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << port;
  EXPECT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  shutdown(fd, SHUT_WR);
  char buf[4096];
  std::string answer;
  ssize_t r;
  while ((r = recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, static_cast<size_t>(r));
  close(fd);
  return answer;
}

TEST(HostileFrameTest, APsFedLyingFramesKeepsTrainingTheWorkers) {
  ClusterOptions o;
  o.data_dir = TestDataDir();
  if (o.data_dir.empty()) GTEST_SKIP() << kNoData;
  o.num_ps = 2;
  o.num_workers = 2;
  o.chief_args = {"--model=mlp", "--epochs=1", "--mode=sync", "--transport=tcp"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  // Mid-run: the workers' own connections are open and in use.
  ASSERT_TRUE((*c)->WaitForChunks(50, absl::Minutes(2))) << (*c)->AllLogs();
  const std::string hello = Frame(DataKind::kHello, "");  // no cluster token
  const std::string garbage_meta(40, '\xff');
  for (const std::string ps : {"ps:0", "ps:1"}) {
    const int port = DataPort(**c, ps);
    ASSERT_GT(port, 0) << (*c)->Log(ps);
    SCOPED_TRACE(absl::StrCat(ps, " data port ", port));
    // Not a frame at all: dropped unanswered.
    EXPECT_EQ(SendRaw(port, std::string(64, 'x')), "");
    // A meta above the limit: dropped unanswered.
    EXPECT_EQ(SendRaw(port, Frame(DataKind::kHello, "", 0, kMaxMetaBytes + 1)), "");
    // A wrong token: refused.
    EXPECT_NE(SendRaw(port, Frame(DataKind::kHello, "guess")).find("cluster token"),
              std::string::npos);
    // After a good hello: a request that does not parse is answered with
    // an error; a payload that claims 1 MiB, of which 100 bytes come
    // before the peer hangs up; a commit claiming 1 GiB; a header cut off.
    EXPECT_NE(SendRaw(port, hello + Frame(DataKind::kPushPull, garbage_meta, std::string(64, 0)))
                  .find("cannot parse the PushRequest"),
              std::string::npos);
    SendRaw(port, hello + Frame(DataKind::kPushPull, "", 1 << 20, 0) + std::string(100, '\x7f'));
    SendRaw(port, hello + Frame(DataKind::kCommit, "", uint64_t{1} << 30, 0) + "abc");
    SendRaw(port, hello + Frame(DataKind::kPushPull, "", 8, 0).substr(0, 17));
  }
  for (const auto& [task, code] : (*c)->Wait(absl::Minutes(5))) {
    EXPECT_EQ(code, 0) << task << " exited " << code << "\n" << (*c)->AllLogs();
  }
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
