// Every communication setting (wire/codec.h, the chief's --push_codec,
// --pull_codec) trains through the real cluster, sync and async, to the
// accuracy fp32 reaches (within the bars below), and the ps receives
// exactly the bytes the encoding promises: each shard encoded on its own,
// small shards and BatchNormalization's statistics as fp32.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/keras_model.h"
#include "model/placement.h"
#include "tests/local_cluster.h"
#include "wire/codec.h"

namespace pscluster {
namespace testing {
namespace {

struct Setting {
  const char* name;
  const char* push;
  const char* pull;
  const char* mode;
  double min_accuracy;  // the mlp after one epoch
};

void PrintTo(const Setting& s, std::ostream* os) { *os << s.name; }

class CompressionTest : public ::testing::TestWithParam<Setting> {};

// The bytes the ps:`ps` receives for one push under `codec`: its shards
// encoded one by one, as wire/ps_client.cc does.
int64_t PushBytes(const Placement& p, int ps, const CodecOptions& codec) {
  int64_t bytes = 0;
  const CodecOptions exact;
  for (int k : p.shards_of_ps[ps]) {
    const Shard& s = p.shards[k];
    bytes += EncodedBytes(s.moving_statistic ? exact : codec, s.size);
  }
  return bytes;
}

TEST_P(CompressionTest, TrainsAndSendsTheBytesItPromises) {
  const Setting& s = GetParam();
  const std::string data = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(data);
  ClusterOptions o;
  o.data_dir = data;
  o.chief_args = {"--model=mlp", "--epochs=1", absl::StrCat("--mode=", s.mode),
                  absl::StrCat("--push_codec=", s.push), absl::StrCat("--pull_codec=", s.pull),
                  "--topk_fraction=0.01", "--codec_min_elements=1024"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  for (const auto& [task, code] : (*c)->Wait(absl::Minutes(5))) {
    EXPECT_EQ(code, 0) << task << "\n" << (*c)->AllLogs();
  }
  const std::string chief = (*c)->Log("chief:0");
  std::optional<FinalFigures> f = ParseFinalLine(chief);
  ASSERT_TRUE(f.has_value()) << chief;
  std::printf("%s: test_accuracy=%.4f test_loss=%.4f steps=%ld\n", s.name, f->test_accuracy,
              f->test_loss, f->steps);
  EXPECT_GE(f->test_accuracy, s.min_accuracy) << chief;
  EXPECT_NE(chief.find(absl::StrCat("wire: gradients ", s.push)), std::string::npos) << chief;

  // Bytes: every push the ps took, at exactly the encoded size.
  const ModelSpec spec = *ParseKerasModel(*ReadModelFile("mlp"), "mlp");
  const Placement placement = PlaceVariables(spec, 2);
  CodecOptions codec;
  codec.codec = *ParseCodec(s.push);
  codec.topk_fraction = 0.01;
  codec.min_elements = 1024;
  for (int ps = 0; ps < 2; ++ps) {
    const std::string line = absl::StrCat("ps:", ps, " version=");
    std::optional<long> applied = FindCounter(chief, line, "applied");
    std::optional<long> dropped = FindCounter(chief, line, "dropped_stale");
    ASSERT_TRUE(applied.has_value() && dropped.has_value()) << chief;
    const double expect_mb =
        static_cast<double>(*applied + *dropped) * PushBytes(placement, ps, codec) / 1e6;
    const size_t at = chief.rfind(line);
    const size_t mb = chief.find("pushed=", at);
    ASSERT_NE(mb, std::string::npos) << chief;
    const double pushed_mb = std::stod(chief.substr(mb + 7));
    std::printf("%s ps:%d: pushed %.1f MB, encoded size x pushes %.2f MB (fp32 would be %.1f)\n",
                s.name, ps, pushed_mb, expect_mb,
                static_cast<double>(*applied + *dropped) * placement.floats_of_ps[ps] * 4 / 1e6);
    EXPECT_NEAR(pushed_mb, expect_mb, 0.05 + 0.01 * expect_mb) << s.name << " ps:" << ps;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Settings, CompressionTest,
    // Sync without error feedback is deterministic: fp32 0.9256, bf16
    // 0.9249, fp16 0.9253, int8 0.9247 in every run. With it (topk, sign)
    // each worker's residual depends on which chunks it drew, which timing
    // decides: six runs gave topk (1%) + bf16 pulls 0.9171-0.9185 and sign
    // 0.9172-0.9234; eight async runs topk 0.9177-0.9207. Async sign spreads
    // wider: 0.9100-0.9266 in twelve runs two at a time, 0.9082 beside a
    // full test run (2026-11-30). Bars sit just below.
    ::testing::Values(Setting{"fp32", "fp32", "fp32", "sync", 0.92},
                      Setting{"bf16_both", "bf16", "bf16", "sync", 0.92},
                      Setting{"fp16_both", "fp16", "fp16", "sync", 0.92},
                      Setting{"int8", "int8", "fp32", "sync", 0.92},
                      Setting{"topk", "topk", "bf16", "sync", 0.912},
                      Setting{"sign", "sign", "fp32", "sync", 0.912},
                      Setting{"topk_async", "topk", "fp16", "async", 0.91},
                      Setting{"sign_async", "sign", "bf16", "async", 0.90},
                      // Change pulls: the ps sends what changed since the
                      // worker's weights, keeping the error for later.
                      // Measured: 0.9254 (every run); topk + int8 changes,
                      // six runs: 0.9153-0.9186; async, four runs:
                      // 0.9094-0.9189 and 0.9110-0.9150.
                      Setting{"int8_change_pulls", "fp32", "int8", "sync", 0.92},
                      Setting{"topk_int8_change", "topk", "int8", "sync", 0.91},
                      Setting{"sign_sign_change_async", "sign", "sign", "async", 0.90},
                      Setting{"topk_topk_change_async", "topk", "topk", "async", 0.90}),
    [](const ::testing::TestParamInfo<Setting>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace testing
}  // namespace pscluster
