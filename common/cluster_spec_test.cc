#include "common/cluster_spec.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

constexpr char kExample[] = R"({
  "cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"],
              "ps": ["host3:2222"], "evaluator": ["host5:2222"]},
  "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"})";

// Wraps a cluster object and task object into TF_CONFIG text.
std::string Config(const std::string& cluster, const std::string& task) {
  return "{\"cluster\": " + cluster + ", \"task\": " + task + "}";
}

constexpr char kSmallCluster[] = R"({"worker": ["w0:1"], "ps": ["p0:1"]})";

TfConfig MustParse(const std::string& text) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(text, "TF_CONFIG");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : TfConfig();
}

TEST(ClusterSpecTest, ParsesTensorFlowExample) {
  TfConfig config = MustParse(kExample);
  const ClusterSpec& cluster = config.cluster;
  EXPECT_EQ(cluster.jobs(),
            (std::vector<std::string>{"chief", "evaluator", "ps", "worker"}));
  EXPECT_EQ(cluster.num_tasks("worker"), 2);
  EXPECT_EQ(cluster.num_tasks("ps"), 1);
  EXPECT_EQ(cluster.num_tasks("nope"), 0);
  EXPECT_TRUE(cluster.has_job("chief"));
  EXPECT_EQ(cluster.task_indices("worker"), (std::vector<int>{0, 1}));
  EXPECT_EQ(*cluster.address("worker", 0), "host1:2222");
  EXPECT_EQ(*cluster.address("evaluator", 0), "host5:2222");
  EXPECT_EQ(cluster.address("worker", 2).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(cluster.address("master", 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(config.task.type, "worker");
  EXPECT_EQ(config.task.index, 1);
  EXPECT_EQ(config.rpc_layer, "grpc");
  EXPECT_EQ(config.source, "TF_CONFIG");
  EXPECT_TRUE(config.has_own_address());
  EXPECT_EQ(config.own_address(), "host2:2222");
  EXPECT_EQ(config.own_port(), 2222);
}

TEST(ClusterSpecTest, ParsesSparseForm) {
  TfConfig config = MustParse(Config(
      R"({"worker": {"1": "w1:2222", "3": "w3:2222"}, "ps": {"0": "p0:1"}})",
      R"({"type": "worker", "index": 3})"));
  EXPECT_EQ(config.cluster.num_tasks("worker"), 2);
  EXPECT_EQ(config.cluster.task_indices("worker"), (std::vector<int>{1, 3}));
  EXPECT_EQ(*config.cluster.address("worker", 1), "w1:2222");
  EXPECT_FALSE(config.cluster.address("worker", 0).ok());
  EXPECT_EQ(config.own_address(), "w3:2222");
}

TEST(ClusterSpecTest, MissingIndexDefaultsToZero) {
  TfConfig config = MustParse(
      Config(R"({"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"]})",
             R"({"type": "chief"})"));
  EXPECT_EQ(config.task.index, 0);
  EXPECT_EQ(config.own_address(), "c:1");
}

TEST(ClusterSpecTest, IndexAsDecimalStringIsAccepted) {
  TfConfig config =
      MustParse(Config(R"({"worker": ["w0:1", "w1:1"], "ps": ["p:1"]})",
                       R"({"type": "worker", "index": "1"})"));
  EXPECT_EQ(config.task.index, 1);
}

TEST(ClusterSpecTest, EvaluatorMayBeAbsentFromCluster) {
  TfConfig config =
      MustParse(Config(kSmallCluster, R"({"type": "evaluator", "index": 0})"));
  EXPECT_FALSE(config.has_own_address());
  EXPECT_EQ(config.own_address(), "");
  EXPECT_EQ(config.own_port(), 0);
  EXPECT_FALSE(config.cluster.has_job("evaluator"));
}

TEST(ClusterSpecTest, EvaluatorListedInClusterHasAddress) {
  TfConfig config = MustParse(
      Config(R"({"worker": ["w:1"], "ps": ["p:1"], "evaluator": ["e:7"]})",
             R"({"type": "evaluator"})"));
  EXPECT_TRUE(config.has_own_address());
  EXPECT_EQ(config.own_port(), 7);
}

TEST(ClusterSpecTest, PsAndChiefWithoutWorkersIsValid) {
  TfConfig config = MustParse(Config(R"({"chief": ["c:1"], "ps": ["p:1"]})",
                                     R"({"type": "ps", "index": 0})"));
  EXPECT_EQ(config.cluster.num_tasks("worker"), 0);
}

TEST(ClusterSpecTest, WorkersWithoutPsAreValidForTheRingStrategy) {
  // TensorFlow's MultiWorkerMirroredStrategy has no ps; the chief decides
  // whether its strategy needs them.
  TfConfig config = MustParse(
      R"({"cluster": {"chief": ["c:1"], "worker": ["w:1", "v:1"]}, "task": {"type": "worker",
          "index": 1}})");
  EXPECT_EQ(config.cluster.num_tasks(kWorkerJob), 2);
  EXPECT_EQ(config.cluster.num_tasks(kPsJob), 0);
}

TEST(ClusterSpecTest, RpcLayerGrpcTlsAndDefault) {
  std::string base = Config(kSmallCluster, R"({"type": "ps", "index": 0})");
  EXPECT_EQ(MustParse(base).rpc_layer, "grpc");
  std::string tls =
      base.substr(0, base.size() - 1) + R"(, "rpc_layer": "grpc+tls"})";
  EXPECT_EQ(MustParse(tls).rpc_layer, "grpc+tls");
}

TEST(ClusterSpecTest, IgnoresUnknownTopLevelAndTaskKeys) {
  TfConfig config = MustParse(
      R"({"cluster": {"worker": ["w:1"], "ps": ["p:1"]},
          "task": {"type": "ps", "index": 0, "trial": "1"},
          "environment": "cloud"})");
  EXPECT_EQ(config.task.type, "ps");
}

TEST(ClusterSpecTest, AcceptsIpv4AndBracketedIpv6) {
  TfConfig config = MustParse(Config(
      R"({"worker": ["10.0.0.1:2222", "[::1]:2223"], "ps": ["[fe80::1:2]:80"]})",
      R"({"type": "worker", "index": 1})"));
  EXPECT_EQ(config.own_address(), "[::1]:2223");
  EXPECT_EQ(config.own_port(), 2223);
}

TEST(ClusterSpecTest, ToJsonRoundTrips) {
  for (const std::string& text :
       {std::string(kExample),
        Config(R"({"worker": {"1": "w1:2", "3": "w3:2"}, "ps": ["p:1"]})",
               R"({"type": "worker", "index": 1})")}) {
    TfConfig config = MustParse(text);
    TfConfig again = MustParse(config.ToJson());
    EXPECT_EQ(again.cluster.job_map(), config.cluster.job_map());
    EXPECT_EQ(again.task.type, config.task.type);
    EXPECT_EQ(again.task.index, config.task.index);
    EXPECT_EQ(again.rpc_layer, config.rpc_layer);
  }
}

TEST(ClusterSpecTest, CreateValidatesLikeTheParser) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::Create(
      {{"worker", {{0, "a:1"}}}, {"ps", {{0, "a:1"}}}}, "launcher");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(),
            "launcher: address \"a:1\" appears twice in cluster: "
            "cluster.ps[0] and cluster.worker[0]");
  spec = ClusterSpec::Create({{"worker", {{-1, "a:1"}}}, {"ps", {{0, "b:1"}}}},
                             "launcher");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("cluster.worker[-1]"),
            std::string::npos);
}

TEST(ParseHostPortTest, SplitsHostAndPort) {
  absl::StatusOr<HostPort> hp = ParseHostPort("example.com:8080", "test");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "example.com");
  EXPECT_EQ(hp->port, 8080);
  hp = ParseHostPort("[2001:db8::1]:65535", "test");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "2001:db8::1");
  EXPECT_EQ(hp->port, 65535);
}

// Every error: the text, and substrings the message must contain besides
// the "TF_CONFIG: " prefix.
struct ErrorCase {
  const char* name;
  std::string text;
  std::vector<std::string> expected;
};

std::ostream& operator<<(std::ostream& os, const ErrorCase& c) {
  return os << c.name;
}

class TfConfigErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(TfConfigErrorTest, IsInvalidArgumentNamingTheValue) {
  const ErrorCase& c = GetParam();
  absl::StatusOr<TfConfig> config = ParseTfConfig(c.text, "TF_CONFIG");
  ASSERT_FALSE(config.ok()) << c.text;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(config.status().message());
  EXPECT_EQ(message.rfind("TF_CONFIG: ", 0), 0u) << message;
  for (const std::string& part : c.expected) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "message: " << message << "\nmissing: " << part;
  }
}

std::string WithWorkers(const std::string& workers) {
  return Config("{\"worker\": " + workers + ", \"ps\": [\"p:1\"]}",
                R"({"type": "ps", "index": 0})");
}

std::string WithTask(const std::string& task) {
  return Config(
      R"({"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p:1"]})", task);
}

std::string WithRpcLayer(const std::string& rpc_layer) {
  return R"({"cluster": {"ps": ["p:1"]}, "task": {"type": "ps"}, "rpc_layer": )" +
         rpc_layer + "}";
}

INSTANTIATE_TEST_SUITE_P(
    AllErrors, TfConfigErrorTest,
    testing::Values(
        ErrorCase{"BadJsonHasPosition",
                  R"({"cluster": {"ps": ["p:1"]},)",
                  {"invalid JSON at byte 29", "line 1, column 29"}},
        ErrorCase{"EmptyText", "  \n", {"is empty"}},
        ErrorCase{
            "DuplicateKey",
            R"({"cluster": {"ps": ["p:1"], "ps": ["q:1"]}, "task": {"type": "ps"}})",
            {"duplicate key \"cluster.ps\""}},
        ErrorCase{
            "NotAnObject", "[1, 2]", {"expected a JSON object, got [1,2]"}},
        ErrorCase{"MissingCluster",
                  R"({"task": {"type": "ps"}})",
                  {"missing \"cluster\""}},
        ErrorCase{"ClusterNotObject",
                  R"({"cluster": ["p:1"], "task": {"type": "ps"}})",
                  {"cluster [\"p:1\"] is not an object"}},
        ErrorCase{"UnknownJob",
                  Config(R"({"master": ["m:1"], "ps": ["p:1"]})",
                         R"({"type": "ps"})"),
                  {"unknown job \"master\""}},
        ErrorCase{"JobValueIsString",
                  WithWorkers(R"("w:1")"),
                  {"cluster.worker \"w:1\" is neither a list"}},
        ErrorCase{"JobValueIsNumber",
                  WithWorkers("5"),
                  {"cluster.worker 5 is neither a list"}},
        ErrorCase{"AddressNotString",
                  WithWorkers(R"(["w:1", 2222])"),
                  {"cluster.worker[1] 2222 is not a \"host:port\" string"}},
        ErrorCase{"SparseKeyNotInteger",
                  WithWorkers(R"({"x": "w:1"})"),
                  {"cluster.worker key \"x\" is not a task index"}},
        ErrorCase{"SparseKeyNegative",
                  WithWorkers(R"({"-1": "w:1"})"),
                  {"cluster.worker key \"-1\" is not a task index"}},
        ErrorCase{"SparseValueNotString",
                  WithWorkers(R"({"0": 7})"),
                  {"cluster.worker[\"0\"] 7 is not a \"host:port\" string"}},
        ErrorCase{"SparseRepeatedIndex",
                  WithWorkers(R"({"1": "a:1", "01": "b:1"})"),
                  {"key \"1\" repeats task index 1"}},
        ErrorCase{"AddressEmpty",
                  WithWorkers(R"([""])"),
                  {"cluster.worker[0] \"\" is not \"host:port\": it is empty"}},
        ErrorCase{"AddressMissingPort",
                  WithWorkers(R"(["host1"])"),
                  {"cluster.worker[0] \"host1\"", "missing \":port\""}},
        ErrorCase{"AddressEmptyHost",
                  WithWorkers(R"([":2222"])"),
                  {"\":2222\"", "empty host"}},
        ErrorCase{"AddressEmptyPort",
                  WithWorkers(R"(["host1:"])"),
                  {"\"host1:\"", "empty port"}},
        ErrorCase{"AddressPortNotNumber",
                  WithWorkers(R"(["host1:http"])"),
                  {"\"host1:http\"", "port \"http\" is not a number"}},
        ErrorCase{"AddressPortSigned",
                  WithWorkers(R"(["host1:+80"])"),
                  {"port \"+80\" is not a number"}},
        ErrorCase{"AddressPortZero",
                  WithWorkers(R"(["host1:0"])"),
                  {"port 0 is out of range 1..65535"}},
        ErrorCase{"AddressPortTooLarge",
                  WithWorkers(R"(["host1:65536"])"),
                  {"port 65536 is out of range 1..65535"}},
        ErrorCase{"AddressPortHuge",
                  WithWorkers(R"(["host1:99999999999"])"),
                  {"port \"99999999999\" is not a number"}},
        ErrorCase{"AddressBadHostChar",
                  WithWorkers(R"(["ho st:1"])"),
                  {"\"ho st:1\"", "invalid character ' ' in host"}},
        ErrorCase{"Ipv6NotBracketed",
                  WithWorkers(R"(["::1:2222"])"),
                  {"\"::1:2222\"", "must be bracketed"}},
        ErrorCase{"Ipv6Unclosed",
                  WithWorkers(R"(["[::1:2222"])"),
                  {"\"[::1:2222\"", "'[' without ']'"}},
        ErrorCase{
            "Ipv6Empty", WithWorkers(R"(["[]:2222"])"), {"empty IPv6 address"}},
        ErrorCase{"Ipv6MissingPort",
                  WithWorkers(R"(["[::1]2222"])"),
                  {"\"[::1]2222\"", "missing \":port\""}},
        ErrorCase{"Ipv6BadChar",
                  WithWorkers(R"(["[::g]:1"])"),
                  {"invalid character 'g' in IPv6 address"}},
        ErrorCase{"BracketsAroundName",
                  WithWorkers(R"(["[host]:1"])"),
                  {"brackets are only for IPv6"}},
        ErrorCase{"DuplicateAddressAcrossJobs",
                  WithWorkers(R"(["p:1"])"),
                  {"address \"p:1\" appears twice", "cluster.ps[0]",
                   "cluster.worker[0]"}},
        ErrorCase{"DuplicateAddressIgnoresHostCase",
                  WithWorkers(R"(["w:1", "W:01"])"),
                  {"address \"W:01\" appears twice", "cluster.worker[0]",
                   "cluster.worker[1]"}},
        ErrorCase{"MissingTask",
                  R"({"cluster": {"ps": ["p:1"]}})",
                  {"missing \"task\""}},
        ErrorCase{"TaskNotObject",
                  Config(kSmallCluster, R"("ps")"),
                  {"task \"ps\" is not an object"}},
        ErrorCase{"MissingTaskType",
                  WithTask(R"({"index": 0})"),
                  {"missing task.type"}},
        ErrorCase{"TaskTypeNotString",
                  WithTask(R"({"type": 3})"),
                  {"task.type 3 is not a string"}},
        ErrorCase{"UnknownTaskType",
                  WithTask(R"({"type": "master"})"),
                  {"task.type \"master\" is not a known job"}},
        ErrorCase{"TaskTypeNotInCluster",
                  Config(kSmallCluster, R"({"type": "chief"})"),
                  {"task.type \"chief\" is not in cluster (jobs: ps, worker)"}},
        ErrorCase{"NegativeIndex",
                  WithTask(R"({"type": "worker", "index": -1})"),
                  {"task.index -1 is negative"}},
        ErrorCase{"FractionalIndex",
                  WithTask(R"({"type": "worker", "index": 1.5})"),
                  {"task.index 1.5 is not an integer"}},
        ErrorCase{"BooleanIndex",
                  WithTask(R"({"type": "worker", "index": true})"),
                  {"task.index true is not an integer"}},
        ErrorCase{"NonNumericStringIndex",
                  WithTask(R"({"type": "worker", "index": "one"})"),
                  {"task.index \"one\" is not a non-negative integer"}},
        ErrorCase{"HugeIndex",
                  WithTask(R"({"type": "worker", "index": 10000000000})"),
                  {"task.index 10000000000 is out of range"}},
        ErrorCase{
            "IndexOutOfRange",
            Config(R"({"worker": ["host1:2222", "host2:2222"], "ps": ["p:1"]})",
                   R"({"type": "worker", "index": 3})"),
            {"TF_CONFIG: task.index 3 is out of range: cluster.worker "
             "has 2 entries"}},
        ErrorCase{"EvaluatorIndexOutOfRange",
                  Config(R"({"ps": ["p:1"], "evaluator": ["e:1"]})",
                         R"({"type": "evaluator", "index": 1})"),
                  {"task.index 1 is out of range: cluster.evaluator has 1"}},
        ErrorCase{
            "SparseIndexNotAmongKeys",
            Config(R"({"worker": {"1": "a:1", "3": "b:1"}, "ps": ["p:1"]})",
                   R"({"type": "worker", "index": 2})"),
            {"task.index 2 is not among cluster.worker's indices 1, 3"}},
        ErrorCase{"TwoChiefs",
                  Config(R"({"chief": ["c:1", "d:1"], "ps": ["p:1"]})",
                         R"({"type": "chief"})"),
                  {"cluster.chief has 2 entries; at most one chief"}},
        ErrorCase{"BadRpcLayer",
                  WithRpcLayer(R"("http")"),
                  {"rpc_layer \"http\" is not supported"}},
        ErrorCase{"EmptyRpcLayer",
                  WithRpcLayer(R"("")"),
                  {"rpc_layer \"\" is not supported"}},
        ErrorCase{"RpcLayerNotString",
                  WithRpcLayer("1"),
                  {"rpc_layer 1 is not supported"}}),
    [](const testing::TestParamInfo<ErrorCase>& info) {
      return std::string(info.param.name);
    });

class LoadTfConfigTest : public testing::Test {
 protected:
  std::string WriteFile(const std::string& name, const std::string& text) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string path = std::string(tmp ? tmp : "/tmp") + "/" + name;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr) << path;
    if (f != nullptr) {
      std::fwrite(text.data(), 1, text.size(), f);
      std::fclose(f);
    }
    return path;
  }
};

TEST_F(LoadTfConfigTest, ReadsFileAndNamesItAsSource) {
  std::string path = WriteFile("tf_config.json", kExample);
  absl::StatusOr<TfConfig> config = LoadTfConfig(path, nullptr);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->source, path);
  EXPECT_EQ(config->own_address(), "host2:2222");
}

TEST_F(LoadTfConfigTest, FileTakesPrecedenceOverEnvironment) {
  std::string path = WriteFile("tf_config2.json", kExample);
  absl::StatusOr<TfConfig> config = LoadTfConfig(path, "not json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task.index, 1);
}

TEST_F(LoadTfConfigTest, ErrorsInFileNameTheFile) {
  std::string path = WriteFile("bad_tf_config.json", R"({"cluster": 1})");
  absl::StatusOr<TfConfig> config = LoadTfConfig(path, nullptr);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message().rfind(path + ": cluster 1", 0), 0u)
      << config.status();
}

TEST_F(LoadTfConfigTest, UnreadableFileIsNamed) {
  absl::StatusOr<TfConfig> config =
      LoadTfConfig("/nonexistent/tf_config.json", kExample);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(config.status().message().find("/nonexistent/tf_config.json"),
            std::string::npos);
}

TEST_F(LoadTfConfigTest, UsesEnvironmentValueWithoutFile) {
  absl::StatusOr<TfConfig> config = LoadTfConfig("", kExample);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->source, "TF_CONFIG");
}

TEST_F(LoadTfConfigTest, NeitherFileNorEnvironmentIsAnError) {
  absl::StatusOr<TfConfig> config = LoadTfConfig("", nullptr);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("--tf_config"), std::string::npos);
  EXPECT_NE(config.status().message().find("TF_CONFIG"), std::string::npos);
}

TEST_F(LoadTfConfigTest, EmptyEnvironmentValueIsAnError) {
  absl::StatusOr<TfConfig> config = LoadTfConfig("", "");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            "TF_CONFIG: is empty; expected a JSON object");
}

}  // namespace
}  // namespace pscluster
