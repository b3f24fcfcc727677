#include "update/sparse_table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

constexpr int kWidth = 4;

SparseTableOptions Options(const std::string& optimizer = "sgd") {
  SparseTableOptions o;
  o.name = "emb/embeddings";
  o.table = 2;
  o.width = kWidth;
  o.input_dim = 1000;
  o.fan_in = 1000;
  o.fan_out = kWidth;
  o.seed = 7;
  o.optimizer.name = optimizer;
  o.optimizer.learning_rate = 0.1f;
  return o;
}

std::unique_ptr<SparseTable> MakeTable(const SparseTableOptions& options) {
  absl::StatusOr<std::unique_ptr<SparseTable>> table = SparseTable::Create(options);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *std::move(table) : nullptr;
}

// The initial values of row `id` of the table `o` describes.
std::vector<float> Initial(const SparseTableOptions& o, int64_t id) {
  std::vector<float> row(o.width);
  InitialRow(o.initializer, o.fan_in, o.fan_out, o.seed, o.table, id, o.width, row.data());
  return row;
}

std::vector<float> ReadRow(const SparseTable& table, int64_t id) {
  std::vector<float> row(table.width());
  table.Read({id}, row.data());
  return row;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// `n` values of `init` drawn as rows of width 10 of consecutive ids.
std::vector<float> Draw(const Initializer& init, int n, int64_t fan_in = 1, int64_t fan_out = 1) {
  constexpr int kRowWidth = 10;
  std::vector<float> values(n);
  for (int i = 0; i < n; i += kRowWidth) {
    InitialRow(init, fan_in, fan_out, /*seed=*/3, /*table=*/0, i / kRowWidth,
               std::min(kRowWidth, n - i), values.data() + i);
  }
  return values;
}

double Mean(const std::vector<float>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

double Stddev(const std::vector<float>& v) {
  const double mean = Mean(v);
  double sum = 0.0;
  for (float x : v) sum += (x - mean) * (x - mean);
  return std::sqrt(sum / v.size());
}

TEST(RowOwnerTest, DeterministicInRangeAndEven) {
  constexpr int kPs = 4;
  constexpr int kIds = 1000000;
  std::vector<int64_t> count(kPs);
  for (int64_t id = 0; id < kIds; ++id) {
    const int owner = RowOwner(1, id, kPs);
    ASSERT_GE(owner, 0);
    ASSERT_LT(owner, kPs);
    ASSERT_EQ(owner, RowOwner(1, id, kPs));
    count[owner]++;
  }
  for (int ps = 0; ps < kPs; ++ps) {
    EXPECT_NEAR(count[ps], kIds / kPs, kIds / kPs / 100) << "ps " << ps;
  }
  EXPECT_EQ(RowOwner(1, 12345, 1), 0);
  // Large (hashed) ids land in range too.
  EXPECT_LT(RowOwner(25, INT64_MAX, 3), 3);
}

TEST(RowOwnerTest, DiffersBetweenTables) {
  int differ = 0;
  for (int64_t id = 0; id < 10000; ++id) differ += RowOwner(0, id, 4) != RowOwner(1, id, 4);
  // Independent owners differ 3 times in 4.
  EXPECT_GT(differ, 7000);
  EXPECT_LT(differ, 8000);
}

TEST(InitialRowTest, PureFunctionOfSeedTableAndId) {
  const Initializer init = Initializer::RandomUniform();
  auto row = [&](uint64_t seed, int table, int64_t id) {
    std::vector<float> out(16);
    InitialRow(init, 1, 1, seed, table, id, 16, out.data());
    return out;
  };
  EXPECT_TRUE(SameBits(row(1, 0, 5), row(1, 0, 5)));
  EXPECT_FALSE(SameBits(row(1, 0, 5), row(1, 0, 6)));
  EXPECT_FALSE(SameBits(row(1, 0, 5), row(1, 1, 5)));
  EXPECT_FALSE(SameBits(row(1, 0, 5), row(2, 0, 5)));
  // Elements of a row differ from one another.
  const std::vector<float> r = row(1, 0, 5);
  EXPECT_NE(r[0], r[1]);
  // A wider row starts with the narrower row's elements.
  std::vector<float> narrow(4);
  InitialRow(init, 1, 1, 1, 0, 5, 4, narrow.data());
  EXPECT_TRUE(SameBits(narrow, std::vector<float>(r.begin(), r.begin() + 4)));
}

TEST(InitialRowTest, RandomUniformIsKerasEmbeddingDefault) {
  const std::vector<float> v = Draw(Initializer::RandomUniform(), 100000);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_GE(*lo, -0.05f);
  EXPECT_LE(*hi, 0.05f);
  EXPECT_LT(*lo, -0.0499f);
  EXPECT_GT(*hi, 0.0499f);
  // The mean's standard error is 0.1 / sqrt(12 * 10^5) ~ 9e-5.
  EXPECT_NEAR(Mean(v), 0.0, 5e-4);
  EXPECT_NEAR(Stddev(v), 0.1 / std::sqrt(12.0), 0.01 * 0.1 / std::sqrt(12.0));
}

TEST(InitialRowTest, RandomNormalStddev) {
  Initializer init;
  init.kind = Initializer::Kind::kRandomNormal;
  init.mean = 1.0;
  init.stddev = 0.5;
  const std::vector<float> v = Draw(init, 100000);
  EXPECT_NEAR(Stddev(v), 0.5, 0.005);
  EXPECT_NEAR(Mean(v), 1.0, 0.01);
  // Untruncated: some values lie beyond 2 stddev (4.6% of a normal).
  const auto beyond =
      std::count_if(v.begin(), v.end(), [](float x) { return std::fabs(x - 1) > 1; });
  EXPECT_NEAR(beyond, 4550, 400);
}

TEST(InitialRowTest, TruncatedNormalNeverBeyondTwoStddev) {
  Initializer init;
  init.kind = Initializer::Kind::kTruncatedNormal;
  init.mean = 0.0;
  init.stddev = 0.05;
  const std::vector<float> v = Draw(init, 100000);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_GE(*lo, -0.1f);
  EXPECT_LE(*hi, 0.1f);
  EXPECT_LT(*lo, -0.099f);  // reaches the bounds: truncated, not shrunk
  EXPECT_GT(*hi, 0.099f);
  // A unit normal truncated at 2 has stddev 0.8796.
  EXPECT_NEAR(Stddev(v), 0.05 * 0.87962566, 0.0005);
}

TEST(InitialRowTest, VarianceScalingUniformFanIn) {
  Initializer init;
  init.kind = Initializer::Kind::kVarianceScaling;
  init.scale = 2.0;
  init.mode = Initializer::Mode::kFanIn;
  init.distribution = Initializer::Distribution::kUniform;
  const double limit = std::sqrt(3.0 * 2.0 / 600);
  const std::vector<float> v = Draw(init, 100000, /*fan_in=*/600, /*fan_out=*/8);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_GE(*lo, -limit * (1 + 1e-6));
  EXPECT_LE(*hi, limit * (1 + 1e-6));
  EXPECT_LT(*lo, -limit * 0.999);
  EXPECT_GT(*hi, limit * 0.999);
  // fan_out picks the other fan.
  init.mode = Initializer::Mode::kFanOut;
  const std::vector<float> out = Draw(init, 100000, 600, 8);
  EXPECT_GT(*std::max_element(out.begin(), out.end()), std::sqrt(3.0 * 2.0 / 8) * 0.999);
}

TEST(InitialRowTest, ConstantKinds) {
  std::vector<float> row(5, 9.0f);
  InitialRow(Initializer::Zeros(), 1, 1, 1, 0, 3, 5, row.data());
  EXPECT_EQ(row, std::vector<float>(5, 0.0f));
  InitialRow(Initializer::Ones(), 1, 1, 1, 0, 3, 5, row.data());
  EXPECT_EQ(row, std::vector<float>(5, 1.0f));
  Initializer constant;
  constant.kind = Initializer::Kind::kConstant;
  constant.value = 0.25;
  InitialRow(constant, 1, 1, 1, 0, 3, 5, row.data());
  EXPECT_EQ(row, std::vector<float>(5, 0.25f));
}

TEST(SparseTableTest, CreateRefusesBadOptions) {
  auto error = [](void (*change)(SparseTableOptions&)) {
    SparseTableOptions o = Options();
    change(o);
    absl::StatusOr<std::unique_ptr<SparseTable>> t = SparseTable::Create(o);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(t.status().message());
  };
  EXPECT_NE(error([](SparseTableOptions& o) { o.width = 0; }).find("width 0"), std::string::npos);
  EXPECT_NE(error([](SparseTableOptions& o) { o.input_dim = -1; }).find("input_dim -1"),
            std::string::npos);
  EXPECT_NE(error([](SparseTableOptions& o) { o.admit_after = 0; }).find("admit_after 0"),
            std::string::npos);
  EXPECT_NE(error([](SparseTableOptions& o) { o.evict_after = -2; }).find("evict_after -2"),
            std::string::npos);
  EXPECT_NE(error([](SparseTableOptions& o) { o.optimizer.name = "rmsprop"; }).find("rmsprop"),
            std::string::npos);
  EXPECT_NE(
      error([](SparseTableOptions& o) { o.optimizer.learning_rate = 0; }).find("learning_rate"),
      std::string::npos);
  std::unique_ptr<SparseTable> table = MakeTable(Options("adam"));
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->floats_per_row(), 3 * kWidth);
  EXPECT_EQ(table->slot_names(), (std::vector<std::string>{"m", "v"}));
}

TEST(SparseTableTest, CheckIds) {
  std::unique_ptr<SparseTable> bounded = MakeTable(Options());
  EXPECT_TRUE(bounded->CheckIds({0, 5, 999}).ok());
  absl::Status s = bounded->CheckIds({0, 1000, 5});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("id 1000"), std::string::npos) << s;
  EXPECT_NE(s.message().find("emb/embeddings"), std::string::npos) << s;
  EXPECT_EQ(bounded->CheckIds({3, -1}).code(), absl::StatusCode::kInvalidArgument);

  SparseTableOptions o = Options();
  o.input_dim = 0;
  std::unique_ptr<SparseTable> unbounded = MakeTable(o);
  EXPECT_TRUE(unbounded->CheckIds({0, 1000, INT64_MAX}).ok());
  s = unbounded->CheckIds({7, -5});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("id -5"), std::string::npos) << s;
}

TEST(SparseTableTest, ReadOfAbsentRowIsInitialAndMakesNothing) {
  const SparseTableOptions o = Options();
  std::unique_ptr<SparseTable> table = MakeTable(o);
  std::vector<float> out(2 * kWidth);
  table->Read({17, 4}, out.data());
  std::vector<float> expected = Initial(o, 17);
  const std::vector<float> second = Initial(o, 4);
  expected.insert(expected.end(), second.begin(), second.end());
  EXPECT_TRUE(SameBits(out, expected));
  EXPECT_EQ(table->stats().rows, 0);
  EXPECT_EQ(table->Export().ids.size(), 0u);
}

TEST(SparseTableTest, SgdApplyIsTheOptimizerOnTheInitialRow) {
  const SparseTableOptions o = Options("sgd");
  std::unique_ptr<SparseTable> table = MakeTable(o);
  const std::vector<float> grads = {1, 2, 3, 4, -0.5f, 0.25f, 8, -1};
  table->Apply({9, 3}, grads.data(), 0);

  std::unique_ptr<SparseOptimizer> sgd = *SparseOptimizer::Create(o.optimizer, kWidth);
  for (int i = 0; i < 2; ++i) {
    const int64_t id = i == 0 ? 9 : 3;
    std::vector<float> row = Initial(o, id);
    sgd->InitRow(row.data());
    float* rows[] = {row.data()};
    sgd->Apply(rows, grads.data() + i * kWidth, 0);
    EXPECT_TRUE(SameBits(ReadRow(*table, id), row)) << "id " << id;
    // And that is init - lr * g.
    const std::vector<float> init = Initial(o, id);
    for (int j = 0; j < kWidth; ++j) {
      EXPECT_EQ(row[j], init[j] - 0.1f * grads[i * kWidth + j]);
    }
  }
  EXPECT_EQ(table->stats().rows, 2);
  EXPECT_EQ(table->stats().admitted, 2);
  EXPECT_EQ(table->Export().ids, (std::vector<int64_t>{3, 9}));
  EXPECT_EQ(table->Export().last_update, (std::vector<int64_t>{0, 0}));
  // A row not updated holds nothing and reads its initial values.
  EXPECT_TRUE(SameBits(ReadRow(*table, 4), Initial(o, 4)));
  EXPECT_EQ(table->stats().rows, 2);
}

TEST(SparseTableTest, AdagradSlotsAfterOneApply) {
  SparseTableOptions o = Options("adagrad");
  o.optimizer.initial_accumulator_value = 0.5f;
  std::unique_ptr<SparseTable> table = MakeTable(o);
  const std::vector<float> grads = {1, -2, 3, 0.5f};
  table->Apply({42}, grads.data(), 7);
  const SparseTable::Rows rows = table->Export();
  ASSERT_EQ(rows.ids, (std::vector<int64_t>{42}));
  ASSERT_EQ(rows.rows.size(), 2u * kWidth);
  for (int j = 0; j < kWidth; ++j) {
    EXPECT_EQ(rows.rows[kWidth + j], 0.5f + grads[j] * grads[j]) << j;
  }
  EXPECT_EQ(rows.last_update, (std::vector<int64_t>{7}));
  EXPECT_EQ(table->slot_names(), (std::vector<std::string>{"accumulator"}));
}

TEST(SparseTableTest, RepeatedAppliesUpdateTheHeldRow) {
  const SparseTableOptions o = Options("sgd");
  std::unique_ptr<SparseTable> table = MakeTable(o);
  const std::vector<float> g = {1, 1, 1, 1};
  table->Apply({5}, g.data(), 0);
  table->Apply({5}, g.data(), 1);
  const std::vector<float> init = Initial(o, 5);
  const std::vector<float> row = ReadRow(*table, 5);
  for (int j = 0; j < kWidth; ++j) EXPECT_EQ(row[j], (init[j] - 0.1f) - 0.1f);
  EXPECT_EQ(table->stats().admitted, 1);
  EXPECT_EQ(table->Export().last_update, (std::vector<int64_t>{1}));
}

TEST(SparseTableTest, AdmitAfterThree) {
  SparseTableOptions o = Options("sgd");
  o.input_dim = 0;
  o.admit_after = 3;
  std::unique_ptr<SparseTable> table = MakeTable(o);
  const int64_t id = int64_t{1} << 40;
  const std::vector<float> g = {1, 2, 3, 4};
  for (int step = 0; step < 2; ++step) {
    table->Apply({id}, g.data(), step);
    EXPECT_TRUE(SameBits(ReadRow(*table, id), Initial(o, id))) << step;
    EXPECT_EQ(table->stats().rows, 0);
    EXPECT_EQ(table->stats().pending_ids, 1);
    EXPECT_EQ(table->stats().dropped_unadmitted, step + 1);
  }
  table->Apply({id}, g.data(), 2);
  const SparseTableStats stats = table->stats();
  EXPECT_EQ(stats.rows, 1);
  EXPECT_EQ(stats.admitted, 1);
  EXPECT_EQ(stats.pending_ids, 0);
  EXPECT_EQ(stats.dropped_unadmitted, 2);
  // The third gradient is applied, once.
  const std::vector<float> init = Initial(o, id);
  const std::vector<float> row = ReadRow(*table, id);
  for (int j = 0; j < kWidth; ++j) EXPECT_EQ(row[j], init[j] - 0.1f * g[j]);
}

TEST(SparseTableTest, DroppedRowsKeepTheOthersGradients) {
  SparseTableOptions o = Options("sgd");
  o.admit_after = 2;
  std::unique_ptr<SparseTable> table = MakeTable(o);
  const std::vector<float> g1 = {1, 1, 1, 1};
  table->Apply({1}, g1.data(), 0);  // id 1 pending
  table->Apply({1}, g1.data(), 1);  // id 1 admitted
  // id 2 is new and dropped, between two held rows' gradients.
  const std::vector<float> g = {1, 2, 3, 4, 50, 60, 70, 80, 5, 6, 7, 8};
  table->Apply({1, 2, 3}, g.data(), 2);
  // id 3 was new too: dropped. Then id 3 again, admitted with its own gradient.
  table->Apply({2, 3}, g.data() + kWidth, 3);
  const std::vector<float> row1 = ReadRow(*table, 1);
  const std::vector<float> init1 = Initial(o, 1);
  const std::vector<float> row2 = ReadRow(*table, 2);
  const std::vector<float> init2 = Initial(o, 2);
  const std::vector<float> row3 = ReadRow(*table, 3);
  const std::vector<float> init3 = Initial(o, 3);
  for (int j = 0; j < kWidth; ++j) {
    EXPECT_EQ(row1[j], (init1[j] - 0.1f) - 0.1f * g[j]);
    EXPECT_EQ(row2[j], init2[j] - 0.1f * g[kWidth + j]);
    EXPECT_EQ(row3[j], init3[j] - 0.1f * g[2 * kWidth + j]);
  }
  EXPECT_EQ(table->stats().dropped_unadmitted, 3);
  EXPECT_EQ(table->stats().rows, 3);
}

TEST(SparseTableTest, EvictDropsStaleRowsAndPendingIds) {
  SparseTableOptions o = Options("adagrad");
  o.evict_after = 10;
  std::unique_ptr<SparseTable> table = MakeTable(o);
  const std::vector<float> g = {1, 1, 1, 1, 2, 2, 2, 2};
  table->Apply({1, 2}, g.data(), 0);
  table->Apply({2}, g.data(), 5);
  EXPECT_EQ(table->Evict(10), 0);  // 10 updates since row 1's: not more than 10
  EXPECT_EQ(table->Evict(11), 1);
  EXPECT_EQ(table->Export().ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(table->stats().evicted, 1);
  EXPECT_EQ(table->stats().rows, 1);
  EXPECT_TRUE(SameBits(ReadRow(*table, 1), Initial(o, 1)));

  // Touched again, row 1 starts afresh: the same as a fresh table's first
  // update.
  table->Apply({1}, g.data() + kWidth, 12);
  std::unique_ptr<SparseTable> fresh = MakeTable(o);
  fresh->Apply({1}, g.data() + kWidth, 12);
  EXPECT_EQ(table->Export().rows.size(), 2u * 2 * kWidth);
  EXPECT_TRUE(SameBits(ReadRow(*table, 1), ReadRow(*fresh, 1)));
  const SparseTable::Rows a = table->Export(), b = fresh->Export();
  EXPECT_TRUE(SameBits(std::vector<float>(a.rows.begin(), a.rows.begin() + 2 * kWidth), b.rows));

  EXPECT_EQ(table->Evict(100), 2);
  EXPECT_EQ(table->stats().rows, 0);

  // Pending ids are forgotten after evict_after updates too.
  o.admit_after = 2;
  std::unique_ptr<SparseTable> growing = MakeTable(o);
  growing->Apply({8}, g.data(), 0);
  growing->Apply({9}, g.data(), 20);
  EXPECT_EQ(growing->Evict(25), 0);
  EXPECT_EQ(growing->stats().pending_ids, 1);
  growing->Apply({8}, g.data(), 26);  // the count restarted: still pending
  EXPECT_EQ(growing->stats().rows, 0);

  // evict_after 0: never.
  o.evict_after = 0;
  o.admit_after = 1;
  std::unique_ptr<SparseTable> keeping = MakeTable(o);
  keeping->Apply({1}, g.data(), 0);
  EXPECT_EQ(keeping->Evict(1000000), 0);
  EXPECT_EQ(keeping->stats().rows, 1);
}

TEST(SparseTableTest, ExportImportRoundTrip) {
  const SparseTableOptions o = Options("adam");
  std::unique_ptr<SparseTable> table = MakeTable(o);
  std::vector<float> g(3 * kWidth);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * static_cast<float>(i) - 0.4f;
  table->Apply({700, 3, 250}, g.data(), 0);
  table->Apply({3, 999, 250}, g.data(), 1);
  const SparseTable::Rows rows = table->Export();
  EXPECT_EQ(rows.ids, (std::vector<int64_t>{3, 250, 700, 999}));
  EXPECT_EQ(rows.last_update, (std::vector<int64_t>{1, 1, 0, 1}));
  EXPECT_EQ(rows.rows.size(), 4u * 3 * kWidth);

  std::unique_ptr<SparseTable> copy = MakeTable(o);
  copy->Apply({5}, g.data(), 0);  // replaced by the import
  ASSERT_TRUE(copy->Import(rows).ok());
  EXPECT_EQ(copy->Crc(), table->Crc());
  const SparseTable::Rows again = copy->Export();
  EXPECT_EQ(again.ids, rows.ids);
  EXPECT_TRUE(SameBits(again.rows, rows.rows));
  EXPECT_EQ(again.last_update, rows.last_update);
  const std::vector<int64_t> ids = {999, 5, 3, 250, 700, 6};
  std::vector<float> a(ids.size() * kWidth), b(ids.size() * kWidth);
  table->Read(ids, a.data());
  copy->Read(ids, b.data());
  EXPECT_TRUE(SameBits(a, b));
  // The same updates next give the same rows.
  table->Apply({3, 5}, g.data(), 2);
  copy->Apply({3, 5}, g.data(), 2);
  EXPECT_EQ(copy->Crc(), table->Crc());

  // Import in another order holds the same rows.
  SparseTable::Rows reversed;
  for (int i = static_cast<int>(rows.ids.size()) - 1; i >= 0; --i) {
    reversed.ids.push_back(rows.ids[i]);
    reversed.rows.insert(reversed.rows.end(), rows.rows.begin() + i * 3 * kWidth,
                         rows.rows.begin() + (i + 1) * 3 * kWidth);
    reversed.last_update.push_back(rows.last_update[i]);
  }
  std::unique_ptr<SparseTable> other = MakeTable(o);
  ASSERT_TRUE(other->Import(reversed).ok());
  EXPECT_EQ(other->Export().ids, rows.ids);
  EXPECT_TRUE(SameBits(other->Export().rows, rows.rows));
}

TEST(SparseTableTest, CrcSeesEveryBitButNotTheOrder) {
  const SparseTableOptions o = Options("adagrad");
  std::unique_ptr<SparseTable> a = MakeTable(o), b = MakeTable(o);
  const std::vector<float> g = {1, 2, 3, 4, 5, 6, 7, 8};
  a->Apply({10, 20}, g.data(), 0);
  const std::vector<float> swapped = {5, 6, 7, 8, 1, 2, 3, 4};
  b->Apply({20, 10}, swapped.data(), 0);
  EXPECT_EQ(a->Crc(), b->Crc());

  SparseTable::Rows rows = a->Export();
  uint32_t bits;
  std::memcpy(&bits, &rows.rows[kWidth + 1], sizeof bits);  // a slot
  bits ^= 1;
  std::memcpy(&rows.rows[kWidth + 1], &bits, sizeof bits);
  ASSERT_TRUE(b->Import(rows).ok());
  EXPECT_NE(a->Crc(), b->Crc());
  rows = a->Export();
  rows.ids[1] = 21;
  ASSERT_TRUE(b->Import(rows).ok());
  EXPECT_NE(a->Crc(), b->Crc());
  EXPECT_NE(a->Crc(), MakeTable(o)->Crc());
}

TEST(SparseTableTest, ImportRefusesBadRowsAndChangesNothing) {
  const SparseTableOptions o = Options("adagrad");
  std::unique_ptr<SparseTable> table = MakeTable(o);
  const std::vector<float> g = {1, 2, 3, 4};
  table->Apply({1}, g.data(), 0);
  const uint32_t crc = table->Crc();
  SparseTable::Rows good;
  good.ids = {4, 6};
  good.rows.assign(2 * 2 * kWidth, 0.5f);
  good.last_update = {3, 3};

  SparseTable::Rows repeated = good;
  repeated.ids = {6, 6};
  absl::Status s = table->Import(repeated);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("repeats id 6"), std::string::npos) << s;

  SparseTable::Rows short_rows = good;
  short_rows.rows.pop_back();
  EXPECT_EQ(table->Import(short_rows).code(), absl::StatusCode::kInvalidArgument);
  SparseTable::Rows short_updates = good;
  short_updates.last_update.pop_back();
  EXPECT_EQ(table->Import(short_updates).code(), absl::StatusCode::kInvalidArgument);
  SparseTable::Rows out_of_range = good;
  out_of_range.ids[1] = 1000;
  EXPECT_EQ(table->Import(out_of_range).code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(table->Crc(), crc);
  EXPECT_EQ(table->Export().ids, (std::vector<int64_t>{1}));
  ASSERT_TRUE(table->Import(good).ok());
  EXPECT_EQ(table->Export().ids, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(ReadRow(*table, 6), std::vector<float>(kWidth, 0.5f));
}

TEST(SparseTableTest, MemoryPerRowOfAMillionRows) {
  SparseTableOptions o = Options("adagrad");
  o.width = 8;
  o.input_dim = 0;
  o.evict_after = 10;
  std::unique_ptr<SparseTable> table = MakeTable(o);
  constexpr int kRows = 1000000;
  constexpr int kBatch = 10000;
  const std::vector<float> grads(kBatch * o.width, 0.01f);
  std::vector<int64_t> ids(kBatch);
  for (int start = 0; start < kRows; start += kBatch) {
    // Spread-out ids, as hashed categoricals are.
    for (int i = 0; i < kBatch; ++i) ids[i] = (int64_t{start + i} * 2654435761) ^ 12345;
    table->Apply(ids, grads.data(), start / kBatch);
  }
  ASSERT_EQ(table->stats().rows, kRows);
  const double ideal = table->floats_per_row() * 4.0 + 8 + 8;
  const double per_row = static_cast<double>(table->bytes()) / kRows;
  EXPECT_LT(per_row, 1.25 * ideal) << per_row << " bytes a row, ideal " << ideal;
  std::printf("%.1f bytes a row, ideal %.0f\n", per_row, ideal);
  EXPECT_GE(per_row, table->floats_per_row() * 4.0);  // bytes() counts the rows

  // Evicted slots are reused: half evicted and half made again adds no block.
  const int64_t before = table->bytes();
  EXPECT_EQ(table->Evict(kRows / kBatch / 2 + 10), kRows / 2);
  for (int start = 0; start < kRows / 2; start += kBatch) {
    for (int i = 0; i < kBatch; ++i) ids[i] = (int64_t{1} << 50) + start + i;  // new ids
    table->Apply(ids, grads.data(), 1000);
  }
  EXPECT_EQ(table->stats().rows, kRows);
  // At most the free list's room: 4 bytes a freed slot, its capacity doubling.
  EXPECT_LE(table->bytes(), before + int64_t{kRows} / 2 * 4 * 2);
}

}  // namespace
}  // namespace pscluster
