// Every daemon refuses bad TF_CONFIG and bad flags with exit code 2 and a
// message naming the bad value, and answers --help with exit code 0.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

struct Binary {
  const char* path;
  const char* task_type;
  std::vector<std::string> good_args;  // valid flags, so only TF_CONFIG is wrong
};
const Binary kBinaries[] = {{"ps_server/ps_server", "ps", {}},
                            {"worker/worker", "worker", {"--data_dir=/nonexistent"}},
                            {"evaluator/evaluator", "evaluator", {"--data_dir=/nonexistent"}},
                            {"chief/chief", "chief", {}}};

struct BadConfig {
  const char* name;
  const char* json;       // %s is replaced by the binary's task type
  const char* expected;   // must appear in the output
};
const BadConfig kBadConfigs[] = {
    {"NotJson", "{\"cluster\": ", "TF_CONFIG"},
    {"IndexOutOfRange",
     "{\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:2\"], \"worker\": [\"h:3\"], "
     "\"evaluator\": [\"h:4\"]}, \"task\": {\"type\": \"%s\", \"index\": 7}}",
     "task.index 7"},
    {"UnknownJob",
     "{\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:2\"], \"trainer\": [\"h:3\"]}, "
     "\"task\": {\"type\": \"%s\", \"index\": 0}}",
     "trainer"},
    {"BadPort",
     "{\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:99999\"], \"worker\": [\"h:3\"], "
     "\"evaluator\": [\"h:4\"]}, \"task\": {\"type\": \"%s\", \"index\": 0}}",
     "h:99999"},
    {"DuplicateAddress",
     "{\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:2\"], \"worker\": [\"h:2\"], "
     "\"evaluator\": [\"h:4\"]}, \"task\": {\"type\": \"%s\", \"index\": 0}}",
     "h:2"},
    {"MissingTask", "{\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:2\"]}}", "task"},
};

std::string Format(const char* json, const char* type) {
  std::string s = json;
  size_t p = s.find("%s");
  if (p != std::string::npos) s.replace(p, 2, type);
  return s;
}

class BadConfigTest
    : public ::testing::TestWithParam<std::tuple<Binary, BadConfig>> {};

TEST_P(BadConfigTest, ExitsTwoNamingTheBadValue) {
  const auto& [binary, bad] = GetParam();
  ProcessResult r = RunBinary(binary.path, binary.good_args,
                              Format(bad.json, binary.task_type), absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(bad.expected), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    AllBinaries, BadConfigTest,
    ::testing::Combine(::testing::ValuesIn(kBinaries), ::testing::ValuesIn(kBadConfigs)),
    [](const ::testing::TestParamInfo<BadConfigTest::ParamType>& info) {
      std::string bin = std::get<0>(info.param).task_type;
      return bin + "_" + std::get<1>(info.param).name;
    });

TEST(NoPsClusterTest, WorkersTakeItForTheRingAndTheParameterServerChiefRefusesIt) {
  // Workers without a ps job: TensorFlow's MultiWorkerMirroredStrategy
  // cluster. The worker and the evaluator accept it and go on to their
  // data (here missing: exit 4); the chief refuses it under its default
  // --strategy=parameter_server, naming the flag.
  const char* json =
      "{\"cluster\": {\"chief\": [\"h:1\"], \"worker\": [\"h:3\"], \"evaluator\": [\"h:4\"]}, "
      "\"task\": {\"type\": \"%s\", \"index\": 0}}";
  for (const Binary& b : kBinaries) {
    if (b.task_type == std::string("ps")) continue;  // no ps task to be
    SCOPED_TRACE(b.path);
    ProcessResult r = RunBinary(b.path, b.good_args, Format(json, b.task_type), absl::Seconds(30));
    if (b.task_type == std::string("chief")) {
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_NE(r.output.find("lists no ps tasks: --strategy=parameter_server needs at least one"),
                std::string::npos)
          << r.output;
    } else {
      EXPECT_EQ(r.exit_code, 4) << r.output;
      EXPECT_NE(r.output.find("--data_dir=/nonexistent"), std::string::npos) << r.output;
      EXPECT_EQ(r.output.find("TF_CONFIG"), std::string::npos) << r.output;
    }
  }
}

class PerBinaryTest : public ::testing::TestWithParam<Binary> {};

TEST_P(PerBinaryTest, HelpExitsZeroAndListsFlags) {
  ProcessResult r = RunBinary(GetParam().path, {"--help"}, "", absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--tf_config"), std::string::npos) << r.output;
}

TEST_P(PerBinaryTest, NoTfConfigIsAnError) {
  ProcessResult r = RunBinary(GetParam().path, GetParam().good_args, "", absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("TF_CONFIG"), std::string::npos) << r.output;
}

TEST_P(PerBinaryTest, WrongTaskTypeIsAnError) {
  const char* other = std::string(GetParam().task_type) == "ps" ? "worker" : "ps";
  std::string json = absl::StrCat(
      "{\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:2\"], \"worker\": [\"h:3\"]}, "
      "\"task\": {\"type\": \"", other, "\", \"index\": 0}}");
  ProcessResult r = RunBinary(GetParam().path, GetParam().good_args, json, absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(absl::StrCat("task.type is \"", other, "\"")), std::string::npos)
      << r.output;
}

TEST_P(PerBinaryTest, TfConfigFileThatDoesNotExistIsNamed) {
  ProcessResult r = RunBinary(GetParam().path, {"--tf_config=/no/such/file.json"}, "",
                              absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/no/such/file.json"), std::string::npos) << r.output;
}

// Bad flag syntax: exit 2 (not Abseil's 1) with one line naming the flag
// and value, before anything else is looked at.
struct BadFlag {
  const char* name;
  std::vector<std::string> args;  // %f: an integer flag of the binary
  const char* expected;           // must appear in the output; %f as above
};

class BadFlagSyntaxTest : public ::testing::TestWithParam<std::tuple<Binary, BadFlag>> {};

TEST_P(BadFlagSyntaxTest, ExitsTwoWithTheMessage) {
  const auto& [binary, bad] = GetParam();
  // A flag of each binary that takes an integer.
  const std::map<std::string, std::string> int_flag = {{"ps", "max_message_mb"},
                                                       {"worker", "threads"},
                                                       {"evaluator", "threads"},
                                                       {"chief", "epochs"}};
  auto fill = [&](std::string s) {
    const size_t p = s.find("%f");
    if (p != std::string::npos) s.replace(p, 2, int_flag.at(binary.task_type));
    return s;
  };
  std::vector<std::string> args;
  for (const std::string& a : bad.args) args.push_back(fill(a));
  // No TF_CONFIG: a daemon that got past its flags would exit 2 too, but
  // naming TF_CONFIG, not the flag.
  ProcessResult r = RunBinary(binary.path, args, "", absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(absl::StrCat("error: ", fill(bad.expected))), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("TF_CONFIG"), std::string::npos) << r.output;
}

const BadFlag kBadFlags[] = {
    {"UnknownFlag", {"--nosuch"}, "unknown flag '--nosuch'"},
    {"UnknownFlagWithValue", {"--nosuch=1"}, "unknown flag '--nosuch=1'"},
    {"NotANumber", {"--%f=abc"}, "Illegal value 'abc' specified for flag '%f'"},
    {"EmptyValue", {"--%f="}, "Illegal value '' specified for flag '%f'"},
    {"OutOfRangeForType", {"--%f=99999999999"}, "Illegal value '99999999999' specified for flag '%f'"},
    {"MissingValue", {"--%f"}, "missing value for flag '--%f'"},
    {"NotAFlag", {"stray"}, "unexpected argument 'stray'"},
    {"AfterDoubleDash", {"--", "stray"}, "unexpected argument 'stray'"},
    {"AbseilsOwnFlag", {"--flagfile=/tmp/flags"}, "unknown flag '--flagfile=/tmp/flags'"},
};

INSTANTIATE_TEST_SUITE_P(
    AllBinaries, BadFlagSyntaxTest,
    ::testing::Combine(::testing::ValuesIn(kBinaries), ::testing::ValuesIn(kBadFlags)),
    [](const ::testing::TestParamInfo<BadFlagSyntaxTest::ParamType>& info) {
      return std::string(std::get<0>(info.param).task_type) + "_" +
             std::get<1>(info.param).name;
    });

TEST(HealthProbeFlagsTest, BadSyntaxExitsTwoNamingIt) {
  struct Case {
    std::vector<std::string> args;
    const char* expected;
  } cases[] = {{{"127.0.0.1:1", "--nosuch"}, "unknown flag '--nosuch'"},
               {{"127.0.0.1:1", "--timeout_ms=abc"}, "bad value in '--timeout_ms=abc'"},
               {{"127.0.0.1:1", "--timeout_ms="}, "bad value in '--timeout_ms='"},
               {{"127.0.0.1:1", "--service"}, "unknown flag '--service'"},
               {{"127.0.0.1:1", "127.0.0.1:2"}, "more than one address"},
               {{}, "no address"}};
  for (const Case& c : cases) {
    ProcessResult r = RunBinary("deploy/docker/health_probe", c.args, "", absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 2) << c.expected << "\n" << r.output;
    EXPECT_NE(r.output.find(absl::StrCat("error: ", c.expected)), std::string::npos)
        << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(AllBinaries, PerBinaryTest, ::testing::ValuesIn(kBinaries),
                         [](const ::testing::TestParamInfo<Binary>& info) {
                           return std::string(info.param.task_type);
                         });

TEST(ChiefFlagsTest, BadFlagValuesAreNamed) {
  const std::string json =
      "{\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:2\"], \"worker\": [\"h:3\", \"h:4\"]}, "
      "\"task\": {\"type\": \"chief\", \"index\": 0}}";
  struct Case {
    const char* flag;
    const char* expected;
  } cases[] = {{"--mode=fast", "--mode=fast"},
               {"--epochs=0", "--epochs=0"},
               {"--model=resnet", "--model=resnet"},
               {"--optimizer=lamb", "--optimizer=lamb"},
               {"--weight_decay=-2", "--weight_decay=-2"},
               {"--global_clipnorm=-1", "--global_clipnorm=-1: must be >= 0"},
               {"--replicas_to_aggregate=3", "--replicas_to_aggregate=3"},
               {"--num_workers=5", "lists 2 workers"},
               {"--batch_size=-4", "--batch_size=-4"},
               // A model file the workers cannot run: refused before
               // anything trains, naming the layer and the option.
               {"--model=tests/fixtures/keras/bad_constraint.json",
                "layer 'conv2d' (Conv2D): option 'kernel_constraint' = {\"class_name\":"
                "\"MaxNorm\",\"config\":{\"axis\":0,\"max_value\":2}} is not supported"},
               {"--model=/nonexistent/model.json", "/nonexistent/model.json"},
               {"--push_codec=int4", "--push_codec=int4: 'int4' is not a wire encoding"},
               {"--pull_codec=fp8", "--pull_codec=fp8: 'fp8' is not a wire encoding"},
               {"--topk_fraction=0", "--topk_fraction=0"},
               {"--codec_min_elements=-1", "--codec_min_elements=-1"},
               {"--transport=udp", "--transport=udp: unknown transport 'udp' (auto, tcp or grpc)"}};
  for (const Case& c : cases) {
    ProcessResult r = RunBinary("chief/chief", {c.flag}, json, absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 2) << c.flag << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.flag << "\n" << r.output;
  }
}

// The ps's own flags, past their syntax: a data port that no socket has,
// backup stores' ports that clash or pass 65535, a count of backup stores
// out of range, a negative thread count.
TEST(PsFlagsTest, DataPortOrThreadsOutOfRangeExitsTwo) {
  const std::string json =
      "{\"cluster\": {\"ps\": [\"127.0.0.1:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}";
  for (const char* flag : {"--data_port", "--backup_port", "--backup_data_port"}) {
    for (const char* port : {"-1", "65536"}) {
      ProcessResult r = RunBinary("ps_server/ps_server", {absl::StrCat(flag, "=", port)}, json,
                                  absl::Seconds(30));
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_NE(r.output.find(absl::StrCat(flag, " must be in [0, 65535], got ", port)),
                std::string::npos)
          << r.output;
    }
  }
  // A fixed port given twice, or the task's own again.
  struct Clash {
    std::vector<std::string> flags;
    const char* expected;
  };
  const Clash clashes[] = {
      {{"--data_port=1"}, "--data_port=1: so is the task's own port (TF_CONFIG)"},
      {{"--backup_port=7000", "--backup_data_port=7000"},
       "--backup_data_port=7000: so is --backup_port; each needs a port of its own"},
      {{"--data_port=7001", "--backup_data_port=7001"}, "--backup_data_port=7001: so is --data_port"},
      // The s-th backup store's ports are the flags' plus s.
      {{"--backup_stores=2", "--backup_port=7002", "--data_port=7003"},
       "--backup_port + 1=7003: so is --data_port"},
      {{"--backup_stores=2", "--backup_port=65535"},
       "--backup_port=65535: the 2 backup stores' ports from it pass 65535"},
  };
  for (const Clash& c : clashes) {
    ProcessResult r = RunBinary("ps_server/ps_server", c.flags, json, absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
  }
  for (const char* stores : {"-1", "9"}) {
    ProcessResult r = RunBinary("ps_server/ps_server", {absl::StrCat("--backup_stores=", stores)},
                                json, absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(absl::StrCat("--backup_stores must be in [0, 8], got ", stores)),
              std::string::npos)
        << r.output;
  }
  ProcessResult r = RunBinary("ps_server/ps_server", {"--update_threads=-2"}, json,
                              absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--update_threads must be in [0, 1024], got -2"), std::string::npos)
      << r.output;
}

// Data that does not fit the model: the chief given --data_dir refuses
// it at start-up with the data's code (4), naming the file and the shapes.
TEST(ChiefFlagsTest, DataThatDoesNotFitTheModelExits4) {
  const std::string json =
      "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": [\"127.0.0.1:2\"], "
      "\"worker\": [\"127.0.0.1:3\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}";
  ProcessResult r = RunBinary("chief/chief",
                              {"--model=mlp", "--data_dir=tests/fixtures/npy/flat.npz"}, json,
                              absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("flat.npz: examples are 1x1x16 but model \"mlp\" wants 28x28x1"),
            std::string::npos)
      << r.output;
}

// Missing data is not worth a restart: the worker and the evaluator exit
// with their own code (4, common/exit_codes.h) at once, naming the folder,
// before they wait for the chief; so does the chief given --data_dir (the
// test set for its own final evaluation), before anything trains.
TEST(DataErrorTest, MissingDataExitsFourNamingIt) {
  const std::string cluster =
      "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": [\"127.0.0.1:2\"], "
      "\"worker\": [\"127.0.0.1:3\"], \"evaluator\": [\"127.0.0.1:4\"]}, ";
  const std::string empty = ::testing::TempDir();
  struct Case {
    const char* binary;
    const char* type;
    const char* what;                // the split named in the message
    std::vector<std::string> args;   // besides --data_dir
  };
  const Case cases[] = {{"worker/worker", "worker", "train", {"--startup_timeout_s=1"}},
                        {"evaluator/evaluator", "evaluator", "test", {"--startup_timeout_s=1"}},
                        {"chief/chief", "chief", "test", {"--wait_for_cluster_s=1"}}};
  for (const Case& c : cases) {
    for (const std::string& dir : {std::string("/nonexistent/mnist"), empty}) {
      std::vector<std::string> args = c.args;
      args.push_back("--data_dir=" + dir);
      const absl::Time start = absl::Now();
      ProcessResult r = RunBinary(c.binary, args,
                                  cluster + "\"task\": {\"type\": \"" + c.type +
                                      "\", \"index\": 0}}",
                                  absl::Seconds(30));
      EXPECT_EQ(r.exit_code, 4) << c.binary << " " << dir << "\n" << r.output;
      EXPECT_NE(r.output.find(absl::StrCat("error: --data_dir=", dir, ": MNIST ", c.what,
                                           " images not found in ", dir)),
                std::string::npos)
          << r.output;
      // At once: nothing was waited for (the cluster's tasks do not exist).
      EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << c.binary << "\n" << r.output;
    }
  }
}

// A truncated .npz (a copy cut short, as an interrupted download leaves
// it): the worker refuses it at start-up with the data's code (4), naming
// the file, before it waits for the chief; nothing is trained.
TEST(DataErrorTest, TruncatedNpzExitsFourNamingIt) {
  std::ifstream in("tests/fixtures/npy/v2.npz", std::ios::binary);
  ASSERT_TRUE(in) << "tests/fixtures/npy/v2.npz";
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string cluster =
      "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": [\"127.0.0.1:2\"], "
      "\"worker\": [\"127.0.0.1:3\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}";
  for (const size_t keep : {bytes.size() / 2, bytes.size() - 10, size_t{100}}) {
    const std::string path =
        absl::StrCat(::testing::TempDir(), "/truncated_", keep, ".npz");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, keep);
    ProcessResult r = RunBinary("worker/worker", {"--startup_timeout_s=1", "--data_dir=" + path},
                                cluster, absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 4) << keep << " bytes\n" << r.output;
    EXPECT_NE(r.output.find("error: --data_dir=" + path + ": " + path + ": "), std::string::npos)
        << r.output;
  }
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
