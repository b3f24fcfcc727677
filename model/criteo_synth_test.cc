#include "model/criteo_synth.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/testing/test_files.h"
#include "gtest/gtest.h"
#include "model/criteo.h"
#include "model/roc_auc.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

std::string TempDir(const std::string& name) { return ::testing::TempDir() + "/" + name; }

TEST(CriteoSynthOptionsTest, ErrorsNameTheFlag) {
  auto error = [](void (*change)(CriteoSynthOptions*)) {
    CriteoSynthOptions o;
    change(&o);
    return std::string(CheckCriteoSynthOptions(o).message());
  };
  EXPECT_TRUE(CheckCriteoSynthOptions(CriteoSynthOptions()).ok());
  EXPECT_EQ(error([](CriteoSynthOptions* o) { o->rows = 1; }), "--rows=1: need >= 2");
  EXPECT_EQ(error([](CriteoSynthOptions* o) { o->test_fraction = 1; }),
            "--test_fraction=1: must be in (0, 1)");
  EXPECT_EQ(error([](CriteoSynthOptions* o) {
              o->rows = 10;
              o->test_fraction = 0.01;
            }),
            "--test_fraction=0.01: leaves 0 of --rows=10 for the test split; both splits need "
            "at least one row");
  EXPECT_EQ(error([](CriteoSynthOptions* o) { o->ids_per_feature = 0; }),
            "--ids_per_feature=0: must be in [1, 134217728]");
  EXPECT_EQ(error([](CriteoSynthOptions* o) { o->zipf = -1; }), "--zipf=-1: must be in [0, 10]");
  EXPECT_EQ(error([](CriteoSynthOptions* o) { o->signal_ranks = -1; }),
            "--signal_ranks=-1: must be in [0, --ids_per_feature=100000]");
  EXPECT_EQ(error([](CriteoSynthOptions* o) {
              o->ids_per_feature = 10;
              o->signal_ranks = 11;
            }),
            "--signal_ranks=11: must be in [0, --ids_per_feature=10]");
  EXPECT_EQ(error([](CriteoSynthOptions* o) { o->buckets = -1; }),
            "--buckets=-1: must be in [1, 16777216] (2^24: rows are exact in float32), or 0 "
            "for int64 ids");
  EXPECT_EQ(error([](CriteoSynthOptions* o) { o->buckets = 16777217; }),
            "--buckets=16777217: must be in [1, 16777216] (2^24: rows are exact in float32), or "
            "0 for int64 ids");
  EXPECT_EQ(error([](CriteoSynthOptions* o) { o->buckets = kCriteoInt64Ids; }), "");
  EXPECT_EQ(error([](CriteoSynthOptions* o) { o->history = 65; }),
            "--history=65: must be in [0, 64]");
  EXPECT_EQ(error([](CriteoSynthOptions* o) {
              o->history = 5;
              o->buckets = kCriteoInt64Ids;
            }),
            "--history=5: needs --buckets (the items' rows), not --buckets=0");
}

TEST(SynthIdTest, EveryFeatureAndRankHasItsOwnReversibleId) {
  std::set<int64_t> ids;
  for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
    for (int64_t rank : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{999}, kMaxSynthIds - 1}) {
      const int64_t id = SynthIdOfRank(f, rank);
      ASSERT_GE(id, 1);
      ASSERT_LE(id, int64_t{1} << 32);
      EXPECT_TRUE(ids.insert(id).second) << f << " " << rank;
      EXPECT_EQ(SynthRankOfId(f, id), rank);
      EXPECT_EQ(SynthRankOfId((f + 1) % kCriteoCategoricalFeatures, id), -1);
    }
  }
  EXPECT_EQ(SynthRankOfId(0, kCriteoMissingId), -1);
}

// Every field empty: the bias, and each integer term at its input 0.
TEST(PlantedCtrModelTest, EmptyExampleIsTheBiasAndTheIntegersAtZero) {
  const PlantedCtrModel model(7);
  ASSERT_EQ(model.integer_weights().size(), size_t{kCriteoIntegerFeatures});
  double want = model.bias();
  for (int j = 0; j < kCriteoIntegerFeatures; ++j) {
    want += model.integer_weights()[j] * (0 - model.integer_centers()[j]);
  }
  EXPECT_DOUBLE_EQ(model.Logit(CriteoExample()), want);
  // An empty integer field is a present 0 (the reader gives models 0 for
  // both), and -1 too.
  CriteoExample zero;
  zero.integer_present = (1u << kCriteoIntegerFeatures) - 1;
  EXPECT_EQ(model.Logit(zero), model.Logit(CriteoExample()));
  zero.integers[1] = -1;
  EXPECT_EQ(model.Logit(zero), model.Logit(CriteoExample()));
}

TEST(PlantedCtrModelTest, DependsOnTheSeedAndTheColumn) {
  CriteoExample a;
  a.categories[0] = SynthIdOfRank(0, 0);
  CriteoExample b;
  b.categories[1] = a.categories[0];  // the same id in another column
  const PlantedCtrModel one(1), two(2);
  EXPECT_NE(one.Logit(a), one.Logit(b));
  EXPECT_NE(one.Logit(a), two.Logit(a));
  EXPECT_EQ(one.Logit(a), PlantedCtrModel(1).Logit(a));
}

// A factorization machine over all the fields: every two fields' ids
// interact (the logit of both is not the sum of each alone), and three
// ids interact only in pairs (no term of three).
TEST(PlantedCtrModelTest, EveryPairOfFieldsInteractsAndNothingMore) {
  const PlantedCtrModel model(11);
  const auto logit = [&model](std::initializer_list<int> fields) {
    CriteoExample e;
    for (const int f : fields) e.categories[f] = SynthIdOfRank(f, f % 3);
    return model.Logit(e);
  };
  const double none = logit({});
  for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
    for (int g = f + 1; g < kCriteoCategoricalFeatures; ++g) {
      const double pair = logit({f, g}) - logit({f}) - logit({g}) + none;
      EXPECT_GT(std::abs(pair), 1e-6) << "C" << f + 1 << " x C" << g + 1;
    }
  }
  for (const auto& [f, g, h] : {std::tuple{0, 1, 2}, std::tuple{3, 11, 25}}) {
    const double triple = logit({f, g, h}) - logit({f, g}) - logit({f, h}) - logit({g, h}) +
                          logit({f}) + logit({g}) + logit({h}) - none;
    EXPECT_NEAR(triple, 0, 1e-12) << f << " " << g << " " << h;
  }
}

// With signal_ranks, the most frequent ranks keep the weights every id
// has without it; rarer ids, and the pairs they are part of, add nothing.
TEST(PlantedCtrModelTest, SignalRanksWeighOnlyTheMostFrequentIds) {
  const PlantedCtrModel all(3), head(3, 10);
  const double base = all.Logit(CriteoExample());
  ASSERT_EQ(head.Logit(CriteoExample()), base);
  for (const int64_t rank : {0, 9}) {
    CriteoExample e;
    e.categories[4] = SynthIdOfRank(4, rank);
    EXPECT_NE(head.Logit(e), base) << rank;
    EXPECT_EQ(head.Logit(e), all.Logit(e)) << rank;
  }
  CriteoExample rare;
  rare.categories[4] = SynthIdOfRank(4, 10);
  EXPECT_EQ(head.Logit(rare), base);
  EXPECT_NE(all.Logit(rare), base);
  CriteoExample foreign;  // feature 5's id in column 4: no rank of column 4
  foreign.categories[4] = SynthIdOfRank(5, 0);
  EXPECT_EQ(head.Logit(foreign), base);
  // C5 x C6 is a planted pair: both in the head, the product counts.
  CriteoExample pair, half;
  pair.categories[4] = half.categories[4] = SynthIdOfRank(4, 1);
  pair.categories[5] = SynthIdOfRank(5, 2);
  half.categories[5] = SynthIdOfRank(5, 20);
  EXPECT_EQ(head.Logit(pair), all.Logit(pair));
  CriteoExample alone;
  alone.categories[4] = SynthIdOfRank(4, 1);
  EXPECT_EQ(head.Logit(half), head.Logit(alone));
}

TEST(CriteoSynthTest, SameSeedSameBytes) {
  CriteoSynthOptions options;
  options.rows = 20000;
  options.ids_per_feature = 5000;
  options.seed = 42;
  ASSERT_TRUE(WriteCriteoSynth(options, TempDir("same_a")).ok());
  ASSERT_TRUE(WriteCriteoSynth(options, TempDir("same_b")).ok());
  options.seed = 43;
  ASSERT_TRUE(WriteCriteoSynth(options, TempDir("same_c")).ok());
  for (const char* file : {"/train.txt", "/test.txt", "/planted.json"}) {
    const std::string a = testing::ReadAll(TempDir("same_a") + file);
    EXPECT_FALSE(a.empty()) << file;
    EXPECT_TRUE(a == testing::ReadAll(TempDir("same_b") + file)) << file;
    EXPECT_FALSE(a == testing::ReadAll(TempDir("same_c") + file)) << file;
  }
}

// Two tasks: the second label is a conversion, only after a click, at the
// rate its planted probability gives; criteo.json says so and the reader
// gives both labels.
TEST(CriteoSynthTest, ConversionsFollowClicks) {
  CriteoSynthOptions options;
  options.rows = 40000;
  options.ids_per_feature = 1000;
  options.seed = 5;
  options.buckets = 1000;
  options.conversions = true;
  absl::StatusOr<CriteoSynthSummary> summary = WriteCriteoSynth(options, TempDir("conv"));
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(testing::ReadAll(TempDir("conv") + "/criteo.json"),
            "{\"buckets\": 1000, \"labels\": 2}\n");
  absl::StatusOr<std::vector<CriteoExample>> rows =
      ReadCriteoFile(TempDir("conv") + "/train.txt", 2);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const PlantedCtrModel model(options.seed);
  double conversions = 0, expected = 0, clicks = 0;
  for (const CriteoExample& e : *rows) {
    ASSERT_LE(e.label2, e.label);  // never converted without a click
    if (e.label < 0.5f) continue;
    clicks += 1;
    conversions += e.label2;
    expected += model.ConversionProbability(e);
  }
  // The conversions among clicks as the planted probabilities say, within
  // 4 standard deviations of a sum of Bernoulli draws (at most sqrt(n)/2).
  EXPECT_NEAR(conversions, expected, 4 * std::sqrt(clicks) / 2);
  EXPECT_NEAR(summary->train_conversion_rate, conversions / double(rows->size()), 1e-12);
  EXPECT_GT(summary->test_conversion_auc, 0.7);  // the two tasks' shared signal
  // The conversion shares the click's factors but has its own weights.
  CriteoExample one;
  one.categories[3] = SynthIdOfRank(3, 0);
  EXPECT_NE(model.ConversionLogit(one) - model.conversion_bias(),
            model.Logit(one) - model.bias() - (model.Logit(CriteoExample()) - model.bias()));
  const std::string planted = testing::ReadAll(TempDir("conv") + "/planted.json");
  EXPECT_NE(planted.find("\"conversion\""), std::string::npos);
}

// Behaviour sequences: each example's history has 1 to --history of C1's
// items, each length about as often; a history leans to one
// topic (kSynthHistoryFocus); the click's planted probability, recomputed
// from the files, includes the interest term, which lifts the planted AUC
// above what the same probabilities without it reach.
TEST(CriteoSynthTest, HistoriesCarryTheUsersInterest) {
  CriteoSynthOptions options;
  options.rows = 40000;
  options.ids_per_feature = 2000;
  options.seed = 9;
  options.buckets = 1000;
  options.history = 6;
  absl::StatusOr<CriteoSynthSummary> summary = WriteCriteoSynth(options, TempDir("hist"));
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(testing::ReadAll(TempDir("hist") + "/criteo.json"),
            "{\"buckets\": 1000, \"history\": 6}\n");
  absl::StatusOr<std::vector<CriteoExample>> rows =
      ReadCriteoFile(TempDir("hist") + "/train.txt", 1, 6);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const PlantedCtrModel model(options.seed);
  std::map<int, int> lengths;
  double top_share = 0, interest = 0;
  int with_history = 0;
  for (const CriteoExample& e : *rows) {
    ++lengths[e.history_length];
    for (int k = 0; k < e.history_length; ++k) {
      ASSERT_GE(SynthRankOfId(kCriteoItemFeature, e.history[k]), 0) << "not one of C1's ids";
    }
    if (e.history_length < 4) continue;
    ++with_history;
    std::map<int, int> topics;
    for (int k = 0; k < e.history_length; ++k) ++topics[model.Topic(e.history[k])];
    int top = 0;
    for (const auto& [topic, count] : topics) top = std::max(top, count);
    top_share += double(top) / e.history_length;
    interest += std::fabs(model.Interest(e));
  }
  ASSERT_EQ(lengths.size(), 6u);  // 1..6
  EXPECT_EQ(lengths.begin()->first, 1);
  for (const auto& [length, count] : lengths) {
    EXPECT_NEAR(count, rows->size() / 6.0, 4 * std::sqrt(rows->size() / 6.0)) << length;
  }
  // 0.7 of a history from the user's topic, the rest any of 8: its top
  // topic holds about 0.74 of it (1/8 of it for uniform draws: about 0.4
  // counting chance clusters of 4-6 items).
  EXPECT_GT(top_share / with_history, 0.65);
  EXPECT_GT(interest / with_history, 0.3);  // the term is not negligible
  EXPECT_GT(summary->test_auc, summary->test_auc_without_history + 0.02);
  const std::string planted = testing::ReadAll(TempDir("hist") + "/planted.json");
  const nlohmann::json j = nlohmann::json::parse(planted);
  EXPECT_EQ(j["history"]["most_items"], 6);
  EXPECT_NEAR(j["history"]["planted_auc_without_history"].get<double>(),
              summary->test_auc_without_history, 1e-12);
  // The planted probabilities of the test file, recomputed from it, give
  // planted.json's AUC: the interest term is in the model the files hold.
  absl::StatusOr<std::vector<CriteoExample>> test =
      ReadCriteoFile(TempDir("hist") + "/test.txt", 1, 6);
  ASSERT_TRUE(test.ok()) << test.status();
  std::vector<float> p, labels;
  for (const CriteoExample& e : *test) {
    p.push_back(static_cast<float>(model.Probability(e)));
    labels.push_back(e.label);
  }
  EXPECT_NEAR(RocAuc(p, labels), j["planted_auc"].get<double>(), 1e-12);
}

TEST(CriteoSynthTest, ReportsProgressAndUnwritableFolders) {
  CriteoSynthOptions options;
  options.rows = 2005;
  options.ids_per_feature = 1000;
  std::vector<int64_t> calls;
  ASSERT_TRUE(
      WriteCriteoSynth(
          options, TempDir("progress"), [&calls](int64_t rows) { calls.push_back(rows); }, 1000)
          .ok());
  EXPECT_EQ(calls, (std::vector<int64_t>{1000, 2000}));
  options.rows = 10;
  const absl::Status s = WriteCriteoSynth(options, TempDir("no/such/parent")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("no/such/parent"), std::string::npos) << s;
}

// 200k rows with the default flags but the ids, written once for the tests
// below.
class CriteoSynthDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    options_ = new CriteoSynthOptions;
    options_->rows = 200000;
    options_->ids_per_feature = 20000;
    options_->seed = 5;
    options_->buckets = 50000;
    absl::StatusOr<CriteoSynthSummary> summary = WriteCriteoSynth(*options_, Dir());
    ASSERT_TRUE(summary.ok()) << summary.status();
    summary_ = new CriteoSynthSummary(*summary);
  }
  static void TearDownTestSuite() {
    delete options_;
    delete summary_;
  }
  static std::string Dir() { return TempDir("data200k"); }

  static CriteoSynthOptions* options_;
  static CriteoSynthSummary* summary_;
};

CriteoSynthOptions* CriteoSynthDataTest::options_ = nullptr;
CriteoSynthSummary* CriteoSynthDataTest::summary_ = nullptr;

TEST_F(CriteoSynthDataTest, SplitsParseAndHaveTheirRows) {
  absl::StatusOr<std::vector<CriteoExample>> train = ReadCriteoFile(Dir() + "/train.txt");
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<std::vector<CriteoExample>> test = ReadCriteoFile(Dir() + "/test.txt");
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(train->size(), 180000u);
  EXPECT_EQ(test->size(), 20000u);
  EXPECT_EQ(summary_->train_rows, 180000);
  EXPECT_EQ(summary_->test_rows, 20000);
  // Every id reads back to a rank of its own feature.
  int64_t missing = 0, negative = 0;
  for (const CriteoExample& e : *train) {
    for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
      if (e.categories[f] == kCriteoMissingId) {
        ++missing;
        continue;
      }
      const int64_t rank = SynthRankOfId(f, e.categories[f]);
      ASSERT_GE(rank, 0);
      ASSERT_LT(rank, options_->ids_per_feature);
    }
    negative += e.has_integer(1) && e.integers[1] < 0;
  }
  EXPECT_GT(missing, 0);
  EXPECT_GT(negative, 0);
}

TEST_F(CriteoSynthDataTest, PositiveRateAndPlantedAucAsIntended) {
  EXPECT_GT(summary_->train_positive_rate, 0.20);
  EXPECT_LT(summary_->train_positive_rate, 0.30);
  EXPECT_NEAR(summary_->test_positive_rate, summary_->train_positive_rate, 0.02);
  EXPECT_GT(summary_->test_auc, 0.74);
  EXPECT_LT(summary_->test_auc, 0.80);
}

TEST_F(CriteoSynthDataTest, PlantedJsonHoldsTheAucOfTheTestFile) {
  const nlohmann::json planted =
      nlohmann::json::parse(testing::ReadAll(Dir() + "/planted.json"), nullptr, false);
  ASSERT_FALSE(planted.is_discarded());
  EXPECT_EQ(planted["seed"], 5);
  EXPECT_EQ(planted["flags"]["rows"], 200000);
  EXPECT_EQ(planted["test"]["rows"], 20000);
  EXPECT_EQ(planted["train"]["rows"], 180000);
  EXPECT_EQ(planted["flags"]["buckets"], options_->buckets);
  // criteo.json makes the folder a dataset of options_->buckets rows a table.
  absl::StatusOr<int64_t> buckets = ReadCriteoBuckets(Dir());
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  EXPECT_EQ(*buckets, options_->buckets);

  // The planted probabilities recomputed from test.txt.
  absl::StatusOr<std::vector<CriteoExample>> test = ReadCriteoFile(Dir() + "/test.txt");
  ASSERT_TRUE(test.ok()) << test.status();
  const PlantedCtrModel model(options_->seed);
  std::vector<float> probabilities, labels;
  double positives = 0;
  for (const CriteoExample& e : *test) {
    probabilities.push_back(static_cast<float>(model.Probability(e)));
    labels.push_back(e.label);
    positives += e.label;
  }
  const double auc = RocAuc(probabilities, labels);
  EXPECT_EQ(planted["planted_auc"].get<double>(), auc);
  EXPECT_EQ(planted["test"]["planted_auc"].get<double>(), auc);
  EXPECT_EQ(planted["test"]["positive_rate"].get<double>(), positives / test->size());
  EXPECT_EQ(summary_->test_auc, auc);
}

TEST_F(CriteoSynthDataTest, IdsFollowAPowerLaw) {
  absl::StatusOr<std::vector<CriteoExample>> train = ReadCriteoFile(Dir() + "/train.txt");
  ASSERT_TRUE(train.ok()) << train.status();
  std::map<int64_t, int64_t> by_rank;  // C1's ranks
  for (const CriteoExample& e : *train) ++by_rank[SynthRankOfId(0, e.categories[0])];
  std::vector<int64_t> counts;
  for (const auto& [rank, count] : by_rank) counts.push_back(count);
  std::sort(counts.rbegin(), counts.rend());
  const int64_t top = counts.front(), median = counts[counts.size() / 2];
  EXPECT_EQ(by_rank.begin()->second, top);  // rank 0 is the most frequent
  EXPECT_GT(top, 100 * median) << top << " " << median;
  // Weight r^-zipf: rank 1 (the second) about 2^-1.05 of rank 0.
  EXPECT_NEAR(double(by_rank[1]) / by_rank[0], std::pow(2.0, -options_->zipf), 0.05);
}

}  // namespace
}  // namespace pscluster
