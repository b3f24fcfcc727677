#include "model/criteo_dataset.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"
#include "model/criteo.h"
#include "model/dataset.h"
#include "model/keras_model.h"
#include "model/model_spec.h"

namespace pscluster {
namespace {

// A fresh folder under the test's temporary directory.
std::string NewDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

// Two lines: the first with I1 = 0, I2 = -1, I3 = 10, I4 empty and C1
// empty; the second a click with every field.
const char kLine1[] =
    "0\t0\t-1\t10\t\t1\t2\t3\t4\t5\t6\t7\t8\t9\t"
    "\t0000000a\t0000000b\t0000000c\t0000000d\t0000000e\t0000000f\t00000010\t00000011\t"
    "00000012\t00000013\t00000014\t00000015\t00000016\t00000017\t00000018\t00000019\t"
    "0000001a\t0000001b\t0000001c\t0000001d\t0000001e\t0000001f\t00000020\t00000021\t"
    "ffffffff\n";
const char kLine2[] =
    "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\t"
    "68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t25c83c98\t7e0ccccf\tde7995b8\t1f89b562\t"
    "a73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\t"
    "e5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t3a171ecb\tc5c50484\te8b83407\t"
    "9727dd16\t00000000\n";

std::vector<float> ExpectedValues(const std::string& line, int64_t buckets) {
  CriteoExample e;
  EXPECT_TRUE(ParseCriteoLine(line, &e).ok());
  std::vector<float> v(kCriteoExampleValues);
  CriteoExampleValues(e, buckets, v.data());
  return v;
}

TEST(CriteoDatasetTest, ReadsValuesAndLabels) {
  const std::string dir = NewDir("plain");
  testing::WriteAll(dir + "/train.txt", std::string(kLine1) + kLine2);
  testing::WriteAll(dir + "/criteo.json", CriteoConfigJson(1000));
  ASSERT_TRUE(IsCriteoFolder(dir));
  ASSERT_TRUE(CheckDataFiles(dir, Split::kTrain).ok());
  absl::StatusOr<Dataset> d = LoadDataset(dir, Split::kTrain);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->count, 2);
  EXPECT_EQ(d->height, 1);
  EXPECT_EQ(d->width, 1);
  EXPECT_EQ(d->channels, 39);
  EXPECT_EQ(d->targets_per_example, 1);
  EXPECT_EQ(d->targets, (std::vector<float>{0, 1}));
  ASSERT_EQ(d->images.size(), 78u);
  const float* first = d->images.data();
  EXPECT_EQ(first[0], 0.0f);                   // I1 = 0: log(1)
  EXPECT_EQ(first[1], 0.0f);                   // I2 = -1 clipped
  EXPECT_FLOAT_EQ(first[2], std::log(11.0f));  // I3 = 10
  EXPECT_EQ(first[3], 0.0f);                   // I4 empty
  EXPECT_EQ(first[13], static_cast<float>(CriteoBucket(0, kCriteoMissingId, 1000)));
  EXPECT_EQ(first[14], static_cast<float>(CriteoBucket(1, 0x0a + 1, 1000)));
  EXPECT_EQ(first[38], static_cast<float>(CriteoBucket(25, 0xffffffffLL + 1, 1000)));
  EXPECT_EQ(std::vector<float>(d->images.begin() + 39, d->images.end()),
            ExpectedValues(kLine2, 1000));
  for (int i = 0; i < d->count; ++i) {
    for (int c = 13; c < 39; ++c) {
      const float row = d->images[i * 39 + c];
      EXPECT_GE(row, 0.0f);
      EXPECT_LT(row, 1000.0f);
      EXPECT_EQ(row, static_cast<float>(static_cast<int64_t>(row)));
    }
  }
}

TEST(CriteoDatasetTest, DefaultBucketsWithoutConfig) {
  const std::string dir = NewDir("no_config");
  testing::WriteAll(dir + "/test.txt", kLine2);
  absl::StatusOr<int64_t> buckets = ReadCriteoBuckets(dir);
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  EXPECT_EQ(*buckets, 1000000);
  absl::StatusOr<Dataset> d = LoadDataset(dir, Split::kTest);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->images, ExpectedValues(kLine2, 1000000));
  // The other split is missing: NotFound naming both names.
  const absl::Status s = CheckDataFiles(dir, Split::kTrain);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find(dir + "/train.txt (or " + dir + "/train.txt.gz)"), std::string::npos)
      << s;
}

TEST(CriteoDatasetTest, ReadsGzip) {
  const std::string dir = NewDir("gz");
  const std::string text = std::string(kLine2) + kLine1;
  gzFile file = gzopen((dir + "/train.txt.gz").c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, text.data(), text.size()), static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
  ASSERT_TRUE(CheckDataFiles(dir, Split::kTrain).ok());
  absl::StatusOr<Dataset> d = LoadDataset(dir, Split::kTrain);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->count, 2);
  EXPECT_EQ(d->targets, (std::vector<float>{1, 0}));
  EXPECT_EQ(std::vector<float>(d->images.begin(), d->images.begin() + 39),
            ExpectedValues(kLine2, kCriteoDefaultBuckets));
}

TEST(CriteoDatasetTest, BadLineNamesFileAndLine) {
  const std::string dir = NewDir("bad_line");
  std::string bad = kLine2;
  bad.replace(bad.find("\t68fd1e64"), 9, "\t68fd1e6g");
  testing::WriteAll(dir + "/train.txt", std::string(kLine1) + bad);
  const absl::StatusOr<Dataset> d = LoadDataset(dir, Split::kTrain);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find(dir + "/train.txt:2: field 15 (C1)"), std::string::npos)
      << d.status();
  // OpenExampleSource (what a worker calls) says the same.
  EXPECT_EQ(OpenExampleSource(dir, Split::kTrain).status(), d.status());
}

TEST(CriteoDatasetTest, EmptyFileIsRefused) {
  const std::string dir = NewDir("empty");
  testing::WriteAll(dir + "/train.txt", "");
  const absl::StatusOr<Dataset> d = LoadDataset(dir, Split::kTrain);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("train.txt: no examples"), std::string::npos) << d.status();
}

// {"ids": "int64"}: each categorical is its own 63-bit id, beside the
// floats (Dataset::ids), for tables given --embedding_unbounded.
TEST(CriteoDatasetTest, Int64IdsBesideTheFloats) {
  const std::string dir = NewDir("int64");
  testing::WriteAll(dir + "/train.txt", std::string(kLine1) + kLine2);
  testing::WriteAll(dir + "/criteo.json", CriteoConfigJson(kCriteoInt64Ids));
  absl::StatusOr<int64_t> buckets = ReadCriteoBuckets(dir);
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  EXPECT_EQ(*buckets, kCriteoInt64Ids);
  absl::StatusOr<Dataset> d = LoadDataset(dir, Split::kTrain);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->count, 2);
  EXPECT_EQ(d->ids_first, 13);
  EXPECT_EQ(d->ids_per_example, 26);
  ASSERT_EQ(d->ids.size(), 52u);
  ASSERT_EQ(d->images.size(), 78u);
  int64_t beyond_float = 0;
  for (int i = 0; i < 2; ++i) {
    CriteoExample e;
    ASSERT_TRUE(ParseCriteoLine(i == 0 ? kLine1 : kLine2, &e).ok());
    for (int c = 0; c < 26; ++c) {
      const int64_t id = d->ids[i * 26 + c];
      EXPECT_EQ(id, CriteoInt64Id(c, e.categories[c])) << i << " " << c;
      EXPECT_EQ(id, static_cast<int64_t>(CriteoFeatureKey(c, e.categories[c]) >> 1));
      EXPECT_GE(id, 0);
      beyond_float += id >= (int64_t{1} << 24);
      EXPECT_EQ(d->images[i * 39 + 13 + c], 0.0f);  // not read
    }
    // The integer features as with buckets.
    const std::vector<float> bucketed = ExpectedValues(i == 0 ? kLine1 : kLine2, 1000);
    EXPECT_EQ(std::vector<float>(d->images.begin() + i * 39, d->images.begin() + i * 39 + 13),
              std::vector<float>(bucketed.begin(), bucketed.begin() + 13));
  }
  EXPECT_GT(beyond_float, 48) << "a 63-bit hash is almost never below 2^24";
  // Distinct (feature, value) pairs, distinct ids: the missing C1 and the
  // same value in two columns included.
  std::vector<int64_t> sorted = d->ids;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
  // A source over it gathers the ids of the examples asked for.
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = OpenExampleSource(dir, Split::kTrain);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->ids_per_example(), 26);
  EXPECT_EQ((*source)->ids_first(), 13);
  const int32_t second[] = {1};
  std::vector<int64_t> ids(26);
  ASSERT_TRUE((*source)->GatherIds(second, 1, ids.data()).ok());
  EXPECT_EQ(ids, std::vector<int64_t>(d->ids.begin() + 26, d->ids.end()));
}

// criteo.json's "labels": 2: each line starts with the click and the
// conversion, the two targets of an example in that order.
TEST(CriteoDatasetTest, TwoLabelColumns) {
  const std::string dir = NewDir("two_labels");
  testing::WriteAll(dir + "/train.txt",
                    absl::StrCat("0\t", kLine1, "1\t", kLine2));  // the click, then
  testing::WriteAll(dir + "/criteo.json", CriteoConfigJson(1000, 2));
  ASSERT_TRUE(CheckDataFiles(dir, Split::kTrain).ok());
  absl::StatusOr<Dataset> d = LoadDataset(dir, Split::kTrain);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->targets_per_example, 2);
  EXPECT_EQ(d->targets, (std::vector<float>{0, 0, 1, 1}));
  EXPECT_EQ(std::vector<float>(d->images.begin(), d->images.begin() + kCriteoExampleValues),
            ExpectedValues(kLine1, 1000));
  // A line of one label in data of two names the file, line and count.
  testing::WriteAll(dir + "/train.txt", kLine1);
  absl::StatusOr<Dataset> bad = LoadDataset(dir, Split::kTrain);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "train.txt:1: the line has 40 tab-separated fields, expected 41 (2 labels"),
            std::string::npos)
      << bad.status();
  testing::WriteAll(dir + "/train.txt", absl::StrCat("1\t7", kLine1 + 1));  // labels 1 and 7
  bad = LoadDataset(dir, Split::kTrain);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("field 2 (label 2): \"7\" is not a label"),
            std::string::npos)
      << bad.status();
  // A feature's field is named by its column in a line of two labels.
  testing::WriteAll(dir + "/train.txt", absl::StrCat("1\t0\tx", kLine1 + 3));  // I1 = "x"
  bad = LoadDataset(dir, Split::kTrain);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("field 3 (I1): \"x\" is not an integer"), std::string::npos)
      << bad.status();
}

// With "history": 3, an example is its 39 values, the item's (C1's) row
// and the history's three: 1 + CriteoBucket(0, id, B), 0 for an empty C1
// and past the history's end (the padding a mask_zero Embedding skips).
TEST(CriteoDatasetTest, HistoryAfterTheItem) {
  const std::string dir = NewDir("history");
  auto without_newline = [](const char* line) {
    return std::string(line, std::string(line).size() - 1);
  };
  testing::WriteAll(dir + "/train.txt",
                    absl::StrCat(without_newline(kLine1), "\t68fd1e64,0000000a\n",
                                 without_newline(kLine2), "\t\n"));
  testing::WriteAll(dir + "/criteo.json", CriteoConfigJson(1000, 1, 3));
  absl::StatusOr<CriteoConfig> config = ReadCriteoConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->history, 3);
  ASSERT_TRUE(CheckDataFiles(dir, Split::kTrain).ok());
  absl::StatusOr<Dataset> d = LoadDataset(dir, Split::kTrain);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->channels, 43);
  ASSERT_EQ(CriteoValuesPerExample(3), 43);
  auto row = [](int64_t hex) { return static_cast<float>(1 + CriteoBucket(0, hex + 1, 1000)); };
  const std::vector<float> first(d->images.begin(), d->images.begin() + 43);
  EXPECT_EQ(std::vector<float>(first.begin(), first.begin() + 39), ExpectedValues(kLine1, 1000));
  // kLine1's C1 is empty: the item is padding; its history two items.
  EXPECT_EQ(std::vector<float>(first.begin() + 39, first.end()),
            (std::vector<float>{0, row(0x68fd1e64), row(0xa), 0}));
  const std::vector<float> second(d->images.begin() + 43, d->images.end());
  EXPECT_EQ(std::vector<float>(second.begin() + 39, second.end()),
            (std::vector<float>{row(0x68fd1e64), 0, 0, 0}));
  EXPECT_GE(row(0xa), 1.0f);
  EXPECT_LE(row(0xa), 1000.0f);
  // Lines without the field, or a history longer than criteo.json's, are
  // refused naming the file and the line.
  testing::WriteAll(dir + "/train.txt", kLine1);
  absl::StatusOr<Dataset> bad = LoadDataset(dir, Split::kTrain);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train.txt:1: the line has 40 tab-separated fields, "
                                        "expected 41 (label, I1..I13, C1..C26, history)"),
            std::string::npos)
      << bad.status();
  testing::WriteAll(dir + "/train.txt", absl::StrCat(without_newline(kLine1),
                                                     "\t00000001,00000002,00000003,00000004\n"));
  bad = LoadDataset(dir, Split::kTrain);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train.txt:1: field 41 (history)"), std::string::npos)
      << bad.status();
}

TEST(CriteoDatasetTest, BadConfigNamesTheFile) {
  const std::string dir = NewDir("bad_config");
  testing::WriteAll(dir + "/train.txt", kLine1);
  for (const std::string& text :
       {std::string("{\"buckets\": 0}"), std::string("{\"buckets\": 16777217}"),
        std::string("{\"buckets\": 1.5}"), std::string("{}"), std::string("[1"),
        std::string("{\"ids\": \"int32\"}"), std::string("{\"ids\": 64}"),
        std::string("{\"ids\": \"int64\", \"buckets\": 10}"),
        std::string("{\"buckets\": 10, \"labels\": 3}"),
        std::string("{\"buckets\": 10, \"labels\": \"2\"}"),
        std::string("{\"buckets\": 10, \"history\": 0}"),
        std::string("{\"buckets\": 10, \"history\": 65}"),
        std::string("{\"ids\": \"int64\", \"history\": 5}")}) {
    testing::WriteAll(dir + "/criteo.json", text);
    const absl::Status s = CheckDataFiles(dir, Split::kTrain);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(s.message().find(dir + "/criteo.json: "), std::string::npos) << s;
    EXPECT_FALSE(LoadDataset(dir, Split::kTrain).ok()) << text;
  }
  testing::WriteAll(dir + "/criteo.json", "{\"buckets\": 16777216}");
  EXPECT_TRUE(CheckDataFiles(dir, Split::kTrain).ok());
}

// The shipped CTR models (deploy/models/ctr_wide_deep.json, ctr_deepfm.json)
// parse, have their 10^6-row Embeddings (Wide&Deep: one 16 wide; DeepFM:
// first-order weights, 1 wide, and factors, 16 wide), and take a Criteo
// folder's examples.
TEST(CtrModelFileTest, ParsesAndFitsCriteoData) {
  const struct {
    const char* file;
    std::vector<int> widths;  // of its Embeddings, in layer order
  } models[] = {{"ctr_wide_deep.json", {16}}, {"ctr_deepfm.json", {16, 1}}};
  for (const auto& model : models) {
    SCOPED_TRACE(model.file);
    absl::StatusOr<std::string> text =
        ReadModelFile(std::string("deploy/models/") + model.file);
    ASSERT_TRUE(text.ok()) << text.status();
    absl::StatusOr<ModelSpec> spec = ParseKerasModel(*text, model.file);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_EQ(spec->inputs.size(), 2u);
    EXPECT_EQ(spec->inputs[0].name, "dense");
    EXPECT_EQ(spec->inputs[0].size(), 13);
    EXPECT_EQ(spec->inputs[1].name, "ids");
    EXPECT_EQ(spec->inputs[1].size(), 26);
    EXPECT_EQ(spec->input_height * spec->input_width * spec->input_channels, 39);
    EXPECT_EQ(spec->loss, LossKind::kBinaryCrossentropy);
    EXPECT_EQ(spec->num_classes, 1);
    std::vector<int> widths;
    for (const LayerSpec& l : spec->layers) {
      if (l.kind != LayerKind::kEmbedding) continue;
      widths.push_back(l.units);
      EXPECT_EQ(l.input_dim, kCriteoDefaultBuckets);
    }
    EXPECT_EQ(widths, model.widths);

    const std::string dir = NewDir(std::string("fits_") + model.file);
    testing::WriteAll(dir + "/train.txt", std::string(kLine1) + kLine2);
    absl::StatusOr<std::unique_ptr<ExampleSource>> source =
        OpenExampleSource(dir, Split::kTrain);
    ASSERT_TRUE(source.ok()) << source.status();
    EXPECT_TRUE(CheckSourceFitsModel(source->get(), dir, *spec).ok());
  }
}

// ESMM (deploy/models/ctr_esmm.json): two outputs on binary cross-entropy,
// weights 1 from the file, on a folder of two label columns; one label
// column is refused naming both outputs.
// deploy/models/<name>.json, parsed.
ModelSpec ShippedModel(const std::string& name) {
  absl::StatusOr<std::string> text = ReadModelFile(absl::StrCat("deploy/models/", name, ".json"));
  EXPECT_TRUE(text.ok()) << text.status();
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(text.ok() ? *text : "", name + ".json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : ModelSpec();
}

// Whether two-label data (kLine1 and kLine2, labelled 1 and 0 before
// their clicks) in a fresh folder `dir_name` fits `spec`.
absl::Status FitsTwoLabelData(const ModelSpec& spec, const std::string& dir_name) {
  const std::string dir = NewDir(dir_name);
  testing::WriteAll(dir + "/train.txt", absl::StrCat("1\t", kLine1, "0\t", kLine2));
  testing::WriteAll(dir + "/criteo.json", CriteoConfigJson(1000000, 2));
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = OpenExampleSource(dir, Split::kTrain);
  if (!source.ok()) return source.status();
  return CheckSourceFitsModel(source->get(), dir, spec);
}

// deploy/models/ctr_mmoe.json: two sigmoid heads over four experts mixed
// by a softmax gate each (a Softmax node, a Dot of sequences along the
// steps), on data of two labels.
TEST(CtrModelFileTest, MmoeMixesExpertsPerTask) {
  const ModelSpec spec = ShippedModel("ctr_mmoe");
  ASSERT_EQ(spec.outputs.size(), 2u);
  EXPECT_EQ(spec.outputs[0].name, "ctr");
  EXPECT_EQ(spec.outputs[1].name, "ctcvr");
  int softmaxes = 0, dots = 0;
  for (const LayerSpec& l : spec.layers) {
    softmaxes += l.kind == LayerKind::kSoftmax;
    dots += l.kind == LayerKind::kDot;
  }
  EXPECT_EQ(softmaxes, 2);
  EXPECT_EQ(dots, 2);
  EXPECT_EQ(TargetsOf(spec), 2);
  EXPECT_TRUE(FitsTwoLabelData(spec, "fits_mmoe").ok());
}

// deploy/models/ctr_din.json: the item's row attends over the history's
// masked rows; its inputs take the 39 values, the item and a history of
// 10 (criteo_synth --history=10), and not data without a history.
TEST(CtrModelFileTest, DinTakesTheItemAndItsHistory) {
  const ModelSpec spec = ShippedModel("ctr_din");
  std::vector<std::string> inputs;
  for (const InputSpec& in : spec.inputs) inputs.push_back(absl::StrCat(in.name, ":", in.c));
  EXPECT_EQ(inputs, (std::vector<std::string>{"dense:13", "ids:26", "item:1", "history:10"}));
  int attention = 0, masked = 0;
  for (const LayerSpec& l : spec.layers) {
    attention += l.kind == LayerKind::kAttention;
    if (l.kind == LayerKind::kEmbedding && l.mask_zero) {
      ++masked;
      EXPECT_EQ(l.name, "history_embedding");
      EXPECT_EQ(l.input_dim, 1000001);  // the rows 1 + bucket, and padding
    }
  }
  EXPECT_EQ(attention, 1);
  EXPECT_EQ(masked, 1);
  const std::string dir = NewDir("fits_din");
  auto with_history = [](const char* line, const std::string& history) {
    return absl::StrCat(std::string(line, std::string(line).size() - 1), "\t", history, "\n");
  };
  testing::WriteAll(dir + "/train.txt", with_history(kLine1, "0000000a") +
                                            with_history(kLine2, "0000000b,0000000c"));
  testing::WriteAll(dir + "/criteo.json", CriteoConfigJson(1000000, 1, 10));
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = OpenExampleSource(dir, Split::kTrain);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_TRUE(CheckSourceFitsModel(source->get(), dir, spec).ok());
  testing::WriteAll(dir + "/train.txt", std::string(kLine1) + kLine2);
  testing::WriteAll(dir + "/criteo.json", CriteoConfigJson(1000000));
  source = OpenExampleSource(dir, Split::kTrain);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_FALSE(CheckSourceFitsModel(source->get(), dir, spec).ok());
}

TEST(CtrModelFileTest, EsmmTakesTwoLabelColumns) {
  const ModelSpec spec = ShippedModel("ctr_esmm");
  ASSERT_EQ(spec.outputs.size(), 2u);
  EXPECT_EQ(spec.outputs[0].name, "ctr");
  EXPECT_EQ(spec.outputs[1].name, "ctcvr");
  EXPECT_FALSE(spec.outputs[0].group.probabilities);
  EXPECT_TRUE(spec.outputs[1].group.probabilities);
  for (const OutputSpec& o : spec.outputs) {
    EXPECT_EQ(o.group.loss, LossKind::kBinaryCrossentropy);
    EXPECT_EQ(o.group.weight, 1.0f);
  }
  EXPECT_EQ(TargetsOf(spec), 2);
  EXPECT_TRUE(FitsTwoLabelData(spec, "fits_esmm").ok());
  const std::string dir = NewDir("esmm_one_label");
  testing::WriteAll(dir + "/train.txt", std::string(kLine1) + kLine2);
  testing::WriteAll(dir + "/criteo.json", CriteoConfigJson(1000000));
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = OpenExampleSource(dir, Split::kTrain);
  ASSERT_TRUE(source.ok()) << source.status();
  const absl::Status s = CheckSourceFitsModel(source->get(), dir, spec);
  EXPECT_NE(s.message().find("1 label values per example but model \"ctr_esmm\" has 2 outputs "
                             "that want 2 (ctr: 1, ctcvr: 1)"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace pscluster
