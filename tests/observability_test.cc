// What a run leaves for people to look at: TensorBoard event files and the
// safetensors export from the chief, Prometheus /metrics and the gRPC health
// service on the daemons.

#include <cmath>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/tensorboard_writer.h"
#include "gtest/gtest.h"
#include "model/safetensors.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

std::string TmpDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return absl::StrCat(t ? t : "/tmp", "/", name);
}

TEST(ObservabilityTest, ChiefWritesTensorBoardEventsAndSafetensors) {
  const std::string data = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(data);
  const std::string logdir = TmpDir("tb");
  ClusterOptions o;
  o.data_dir = data;
  o.chief_args = {"--model=mlp", "--epochs=1", "--log_every_s=0.2", "--logdir=" + logdir};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  std::map<std::string, int> codes = (*c)->Wait(absl::Minutes(5));
  ASSERT_EQ(codes["chief:0"], 0) << (*c)->AllLogs();

  // Event files: every record's CRCs check out (ReadEventFile verifies).
  absl::StatusOr<std::vector<std::string>> files = ListEventFiles(logdir);
  ASSERT_TRUE(files.ok()) << files.status();
  std::string chief_file;
  for (const std::string& f : *files) {
    if (f.find(".chief") != std::string::npos) chief_file = f;
  }
  ASSERT_FALSE(chief_file.empty()) << "no chief event file in " << logdir;
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile(chief_file);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_GE(events->size(), 3u);
  EXPECT_EQ((*events)[0].file_version(), "brain.Event:2");
  std::map<std::string, int> tags;
  int64_t last_step = -1;
  for (size_t i = 1; i < events->size(); ++i) {
    const tensorflow::Event& e = (*events)[i];
    EXPECT_GE(e.step(), last_step);
    last_step = e.step();
    EXPECT_GT(e.wall_time(), 1.6e9);
    for (const auto& v : e.summary().value()) {
      tags[v.tag()]++;
      EXPECT_TRUE(std::isfinite(v.simple_value())) << v.tag();
    }
  }
  for (const char* tag : {"train/loss", "train/accuracy", "train/examples_per_second",
                          "train/staleness", "final/test_accuracy", "final/test_loss"}) {
    EXPECT_GT(tags[tag], 0) << "no " << tag << " scalar";
  }
  EXPECT_EQ(last_step, 469);

  // The exported weights: every variable, its Keras shape, finite values.
  std::map<std::string, std::string> meta;
  absl::StatusOr<std::vector<NamedTensor>> tensors =
      ReadSafetensors(logdir + "/model.safetensors", &meta);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const NamedTensor& t : *tensors) {
    shapes[t.name] = t.shape;
    for (float x : t.values) ASSERT_TRUE(std::isfinite(x)) << t.name;
  }
  EXPECT_EQ(shapes["dense1/kernel"], (std::vector<int64_t>{784, 32}));
  EXPECT_EQ(shapes["dense1/bias"], (std::vector<int64_t>{32}));
  EXPECT_EQ(shapes["dense2/kernel"], (std::vector<int64_t>{32, 10}));
  EXPECT_EQ(shapes["dense2/bias"], (std::vector<int64_t>{10}));
  EXPECT_EQ(meta["model"], "mlp");
  EXPECT_EQ(meta["steps"], "469");
}

TEST(ObservabilityTest, PsServesHealthAndMetrics) {
  const int grpc_port = FreePort();
  const int metrics_port = FreePort();
  const std::string tf_config = absl::StrCat(
      "{\"cluster\": {\"ps\": [\"127.0.0.1:", grpc_port, "\"]}, \"task\": {\"type\": \"ps\", "
      "\"index\": 0}}");
  // Serves until killed, once probed: up to a minute to start (a loaded
  // machine once took more than 8 s), then its /metrics.
  std::string metrics;
  bool serving = false;
  ProcessResult r = RunBinaryDuring(
      "ps_server/ps_server", {absl::StrCat("--metrics_port=", metrics_port)}, tf_config, [&] {
        auto channel = MakeChannel(absl::StrCat("127.0.0.1:", grpc_port));
        const absl::Time give_up = absl::Now() + absl::Minutes(1);
        while (!serving && absl::Now() < give_up) {
          serving = IsServing(*channel, std::chrono::milliseconds(500));
          if (!serving) absl::SleepFor(absl::Milliseconds(100));
        }
        metrics = ScrapeMetrics(metrics_port);
      });
  EXPECT_TRUE(serving) << r.output;
  for (const char* name :
       {"pscluster_push_bytes_total{task=\"ps:0\"}", "pscluster_pull_bytes_total",
        "pscluster_stale_gradients_dropped_total", "pscluster_gradient_staleness_bucket",
        "pscluster_push_latency_seconds_bucket", "pscluster_model_version"}) {
    EXPECT_NE(metrics.find(name), std::string::npos) << name << "\n" << metrics;
  }
}

TEST(ObservabilityTest, BadMetricsPortIsNamed) {
  const std::string tf_config =
      "{\"cluster\": {\"ps\": [\"127.0.0.1:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}";
  ProcessResult r = RunBinary("ps_server/ps_server", {"--metrics_port=70000"}, tf_config,
                              absl::Seconds(10));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--metrics_port=70000"), std::string::npos) << r.output;
}

// A second daemon on a port a live one serves (a stale ps, a typo in
// TF_CONFIG) exits 1 naming the port, instead of taking some of the
// first's connections (gRPC's default SO_REUSEPORT shares the port).
TEST(ObservabilityTest, APortAnotherDaemonServesIsRefused) {
  const int grpc_port = FreePort();
  const std::string tf_config = absl::StrCat(
      "{\"cluster\": {\"ps\": [\"127.0.0.1:", grpc_port, "\"]}, \"task\": {\"type\": \"ps\", "
      "\"index\": 0}}");
  bool serving = false;
  ProcessResult second;
  ProcessResult first = RunBinaryDuring(
      "ps_server/ps_server", {"--metrics_port=0"}, tf_config, [&] {
        auto channel = MakeChannel(absl::StrCat("127.0.0.1:", grpc_port));
        const absl::Time give_up = absl::Now() + absl::Minutes(1);
        while (!serving && absl::Now() < give_up) {
          serving = IsServing(*channel, std::chrono::milliseconds(500));
          if (!serving) absl::SleepFor(absl::Milliseconds(100));
        }
        if (serving) {
          second = RunBinary("ps_server/ps_server", {"--metrics_port=0"}, tf_config,
                             absl::Minutes(1));
        }
      });
  ASSERT_TRUE(serving) << first.output;
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_NE(second.output.find(absl::StrCat("cannot listen on 0.0.0.0:", grpc_port)),
            std::string::npos)
      << second.output;
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
