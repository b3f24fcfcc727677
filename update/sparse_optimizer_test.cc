#include "update/sparse_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "update/optimizer.h"

namespace pscluster {
namespace {

// Distance in units in the last place between two finite floats.
int64_t UlpDistance(float a, float b) {
  auto ordered = [](float x) {
    int32_t i;
    std::memcpy(&i, &x, sizeof i);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  return std::llabs(ordered(a) - ordered(b));
}

// A table of `rows` rows laid out as the optimizer asks, values drawn from
// a fixed stream and state as InitRow sets it.
struct Table {
  Table(const SparseOptimizer& opt, int rows, uint32_t seed)
      : width(opt.width()), stride(opt.floats_per_row()), data(rows * stride) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < width; ++j) row(r)[j] = dist(gen);
      opt.InitRow(row(r));
    }
  }
  float* row(int r) { return data.data() + r * stride; }
  // Slot s (0: the values) of row r.
  float* part(int r, int s) { return row(r) + s * width; }

  int width;
  int64_t stride;
  std::vector<float> data;
};

// A row in double precision: its values and up to two slots.
struct RefRow {
  std::vector<double> w, s0, s1;
};

// Row r is touched at step s unless (r + s) % 3 == 0; the last row never.
bool Touched(int r, int s, int rows) { return r != rows - 1 && (r + s) % 3 != 0; }

// Runs `opt` for `steps` steps over a table of `rows` rows with rows
// touched as Touched says and gradients from a fixed stream; after each
// step checks that the untouched rows are the same bits as before, and
// `reference(row, grad, t)` (t = 1-based step) that the touched rows
// follow the double-precision rule. Returns the largest error of any
// value or slot, relative to max(1, |reference|).
double RunAgainstReference(
    const SparseOptimizer& opt, int rows, int steps,
    const std::function<void(RefRow&, const std::vector<double>&, int64_t)>& reference) {
  const int d = opt.width();
  const int num_slots = static_cast<int>(opt.slot_names().size());
  Table table(opt, rows, 17);
  std::vector<RefRow> ref(rows);
  for (int r = 0; r < rows; ++r) {
    ref[r].w.assign(table.part(r, 0), table.part(r, 0) + d);
    if (num_slots > 0) ref[r].s0.assign(table.part(r, 1), table.part(r, 1) + d);
    if (num_slots > 1) ref[r].s1.assign(table.part(r, 2), table.part(r, 2) + d);
  }
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  double worst = 0.0;
  for (int s = 0; s < steps; ++s) {
    std::vector<float*> touched;
    std::vector<float> grads;
    for (int r = 0; r < rows; ++r) {
      if (!Touched(r, s, rows)) continue;
      touched.push_back(table.row(r));
      std::vector<double> g(d);
      for (int j = 0; j < d; ++j) {
        grads.push_back(dist(gen));
        g[j] = grads.back();
      }
      reference(ref[r], g, s + 1);
    }
    const std::vector<float> before = table.data;
    opt.Apply(touched, grads.data(), s);
    for (int r = 0; r < rows; ++r) {
      if (!Touched(r, s, rows)) {
        EXPECT_EQ(0, std::memcmp(before.data() + r * table.stride, table.row(r),
                                 table.stride * sizeof(float)))
            << "untouched row " << r << " changed at step " << s;
        continue;
      }
      const std::vector<double>* parts[] = {&ref[r].w, &ref[r].s0, &ref[r].s1};
      for (int p = 0; p <= num_slots; ++p) {
        for (int j = 0; j < d; ++j) {
          const double want = (*parts[p])[j];
          const double err = std::abs(table.part(r, p)[j] - want) / std::max(1.0, std::abs(want));
          worst = std::max(worst, err);
          EXPECT_LT(err, 2e-6) << "row " << r << " part " << p << " [" << j << "] step " << s
                               << ": " << table.part(r, p)[j] << " vs " << want;
        }
      }
    }
  }
  return worst;
}

std::unique_ptr<SparseOptimizer> MustCreate(const SparseOptimizerOptions& options, int width) {
  absl::StatusOr<std::unique_ptr<SparseOptimizer>> opt = SparseOptimizer::Create(options, width);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? std::move(*opt) : nullptr;
}

TEST(SparseOptimizerTest, LayoutAndInitialState) {
  EXPECT_EQ(SparseOptimizer::FloatsPerRow("sgd", 8), 8);
  EXPECT_EQ(SparseOptimizer::FloatsPerRow("adagrad", 8), 16);
  EXPECT_EQ(SparseOptimizer::FloatsPerRow("adam", 8), 24);
  EXPECT_EQ(SparseOptimizer::FloatsPerRow("ftrl", 8), 24);
  SparseOptimizerOptions o{"ftrl", 0.1f};
  o.initial_accumulator_value = 0.25f;
  std::unique_ptr<SparseOptimizer> ftrl = MustCreate(o, 2);
  EXPECT_EQ(ftrl->slot_names(), (std::vector<std::string>{"accumulator", "linear"}));
  std::vector<float> row = {1, 2, -1, -1, -1, -1};
  ftrl->InitRow(row.data());
  EXPECT_EQ(row, (std::vector<float>{1, 2, 0.25f, 0.25f, 0, 0}));
  o.name = "adam";
  std::unique_ptr<SparseOptimizer> adam = MustCreate(o, 2);
  EXPECT_EQ(adam->slot_names(), (std::vector<std::string>{"m", "v"}));
  row = {1, 2, -1, -1, -1, -1};
  adam->InitRow(row.data());
  EXPECT_EQ(row, (std::vector<float>{1, 2, 0, 0, 0, 0}));
}

// Keras 3's update rules in double, at the step's rate `lr`; t is the
// 1-based step (adam's bias correction).
void SgdReference(double lr, RefRow& row, const std::vector<double>& g) {
  for (size_t j = 0; j < g.size(); ++j) row.w[j] -= lr * g[j];
}

// accumulator += g^2; w -= lr * g / sqrt(accumulator + epsilon).
void AdagradReference(const SparseOptimizerOptions& o, double lr, RefRow& row,
                      const std::vector<double>& g) {
  for (size_t j = 0; j < g.size(); ++j) {
    row.s0[j] += g[j] * g[j];
    row.w[j] -= lr * g[j] / std::sqrt(row.s0[j] + o.epsilon);
  }
}

void AdamReference(const SparseOptimizerOptions& o, double lr, int64_t t, RefRow& row,
                   const std::vector<double>& g) {
  const double b1 = o.beta1, b2 = o.beta2;
  const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
  for (size_t j = 0; j < g.size(); ++j) {
    row.s0[j] = b1 * row.s0[j] + (1 - b1) * g[j];
    row.s1[j] = b2 * row.s1[j] + (1 - b2) * g[j] * g[j];
    row.w[j] -= alpha * row.s0[j] / (std::sqrt(row.s1[j]) + o.epsilon);
  }
}

TEST(SparseOptimizerTest, SgdFollowsKeras) {
  std::unique_ptr<SparseOptimizer> opt = MustCreate({"sgd", 0.05f}, 5);
  const double worst =
      RunAgainstReference(*opt, 6, 8, [&](RefRow& row, const std::vector<double>& g, int64_t) {
        SgdReference(0.05f, row, g);
      });
  std::printf("sgd: largest relative error vs float64 Keras rule %.3g\n", worst);
}

// Keras 3: accumulator += g^2; w -= lr * g / sqrt(accumulator + epsilon).
TEST(SparseOptimizerTest, AdagradFollowsKeras3) {
  SparseOptimizerOptions o{"adagrad", 0.1f};
  o.initial_accumulator_value = 0.1f;
  std::unique_ptr<SparseOptimizer> opt = MustCreate(o, 5);
  const double worst =
      RunAgainstReference(*opt, 6, 8, [&](RefRow& row, const std::vector<double>& g, int64_t) {
        AdagradReference(o, o.learning_rate, row, g);
      });
  std::printf("adagrad: largest relative error vs float64 Keras rule %.3g\n", worst);
}

// Keras's Adam with TensorFlow's lazy semantics: only touched rows' m and
// v move, and the bias correction uses the table's step t for them all.
TEST(SparseOptimizerTest, LazyAdamFollowsKerasWithTheGlobalStep) {
  SparseOptimizerOptions o{"adam", 0.01f};
  std::unique_ptr<SparseOptimizer> opt = MustCreate(o, 5);
  const double worst =
      RunAgainstReference(*opt, 6, 10, [&](RefRow& row, const std::vector<double>& g, int64_t t) {
        AdamReference(o, o.learning_rate, t, row, g);
      });
  std::printf("adam (lazy): largest relative error vs float64 Keras rule %.3g\n", worst);
}

// Keras 3's Ftrl.update_step in double.
void FtrlReference(const SparseOptimizerOptions& o, RefRow& row, const std::vector<double>& g) {
  const double lr = o.learning_rate, power = o.learning_rate_power;
  const double l1 = o.l1_regularization_strength;
  const double l2 = o.l2_regularization_strength + o.beta / (2.0 * lr);
  const double shrinkage = o.l2_shrinkage_regularization_strength;
  for (size_t j = 0; j < g.size(); ++j) {
    double& w = row.w[j];
    double& accum = row.s0[j];
    double& linear = row.s1[j];
    const double grad_to_use = g[j] + 2 * shrinkage * w;
    const double new_accum = accum + g[j] * g[j];
    linear += grad_to_use - (std::pow(new_accum, -power) - std::pow(accum, -power)) / lr * w;
    const double quadratic = std::pow(new_accum, -power) / lr + 2 * l2;
    w = (std::clamp(linear, -l1, l1) - linear) / quadratic;
    accum = new_accum;
  }
}

TEST(SparseOptimizerTest, FtrlFollowsKeras3) {
  struct Case {
    float power, l1, l2, shrinkage, beta, initial;
  };
  // Keras's defaults, then every term in use, then a fixed and a slower
  // rate (the pow path).
  const Case cases[] = {{-0.5f, 0, 0, 0, 0, 0.1f},
                        {-0.5f, 0.05f, 0.1f, 0.02f, 0.5f, 0.1f},
                        {0.0f, 0.05f, 0.1f, 0.0f, 0.0f, 0.0f},
                        {-0.3f, 0.01f, 0.0f, 0.01f, 0.1f, 0.5f}};
  for (const Case& c : cases) {
    SparseOptimizerOptions o{"ftrl", 0.2f};
    o.learning_rate_power = c.power;
    o.l1_regularization_strength = c.l1;
    o.l2_regularization_strength = c.l2;
    o.l2_shrinkage_regularization_strength = c.shrinkage;
    o.beta = c.beta;
    o.initial_accumulator_value = c.initial;
    std::unique_ptr<SparseOptimizer> opt = MustCreate(o, 5);
    const double worst = RunAgainstReference(
        *opt, 6, 8,
        [&](RefRow& row, const std::vector<double>& g, int64_t) { FtrlReference(o, row, g); });
    std::printf(
        "ftrl power %g l1 %g l2 %g shrinkage %g beta %g: largest relative error "
        "vs float64 Keras rule %.3g\n",
        c.power, c.l1, c.l2, c.shrinkage, c.beta, worst);
  }
}

// Every rule's rate follows Keras's ExponentialDecay (not staircase) of the
// table's update count: lr * rate^(iterations / steps), iterations the
// count before the step (t - 1 for the 1-based step t).
TEST(SparseOptimizerTest, EveryRuleDecaysItsRateWithTheTablesUpdateCount) {
  for (const std::string name : {"sgd", "adagrad", "adam", "ftrl"}) {
    SparseOptimizerOptions o{name, 0.2f};
    o.decay_rate = 0.7f;
    o.decay_steps = 3;
    o.l1_regularization_strength = 0.01f;  // ftrl's, in use with a changing rate
    o.beta = 0.5f;
    std::unique_ptr<SparseOptimizer> opt = MustCreate(o, 4);
    ASSERT_NE(opt, nullptr);
    auto rate = [&](int64_t t) {
      return double{o.learning_rate} * std::pow(double{o.decay_rate}, (t - 1) / 3.0);
    };
    const double worst = RunAgainstReference(
        *opt, 5, 9, [&](RefRow& row, const std::vector<double>& g, int64_t t) {
          const double lr = rate(t);
          if (name == "sgd") {
            SgdReference(lr, row, g);
          } else if (name == "adagrad") {
            AdagradReference(o, lr, row, g);
          } else if (name == "adam") {
            AdamReference(o, lr, t, row, g);
          } else {
            SparseOptimizerOptions at_t = o;
            at_t.learning_rate = static_cast<float>(lr);
            FtrlReference(at_t, row, g);
          }
        });
    std::printf("%s, decayed rate: largest relative error vs float64 Keras rule %.3g\n",
                name.c_str(), worst);
  }
  // The rate itself: 0.5 per 1000 updates is a quarter after 2000, and a
  // decay of 1, or of 0 steps, is none.
  SparseOptimizerOptions o{"adagrad", 0.1f};
  o.decay_rate = 0.5f;
  o.decay_steps = 1000;
  std::unique_ptr<SparseOptimizer> decayed = MustCreate(o, 1);
  EXPECT_EQ(decayed->LearningRate(0), 0.1f);
  EXPECT_EQ(decayed->LearningRate(2000), 0.1f / 4);
  EXPECT_FLOAT_EQ(decayed->LearningRate(500), 0.1f / std::sqrt(2.0f));
  o.decay_steps = 0;
  EXPECT_EQ(MustCreate(o, 1)->LearningRate(1000000), 0.1f);
}

// A table whose every row is touched at every step is a dense variable:
// lazy Adam must then be the dense Adam of update/optimizer.h.
TEST(SparseOptimizerTest, LazyAdamIsDenseAdamWhenEveryRowIsTouched) {
  constexpr int kRows = 6, kWidth = 19, kSteps = 30;
  OptimizerOptions dense_options;
  dense_options.name = "adam";
  dense_options.learning_rate = 0.01f;
  absl::StatusOr<std::unique_ptr<Optimizer>> dense =
      Optimizer::Create(dense_options, kRows * kWidth);
  ASSERT_TRUE(dense.ok()) << dense.status();
  std::unique_ptr<SparseOptimizer> lazy = MustCreate({"adam", 0.01f}, kWidth);
  Table table(*lazy, kRows, 3);
  std::vector<float> params;
  std::vector<float*> rows;
  for (int r = 0; r < kRows; ++r) {
    params.insert(params.end(), table.part(r, 0), table.part(r, 0) + kWidth);
    rows.push_back(table.row(r));
  }
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  int64_t worst = 0;
  for (int s = 0; s < kSteps; ++s) {
    std::vector<float> grad(kRows * kWidth);
    for (float& g : grad) g = dist(gen);
    lazy->Apply(rows, grad.data(), (*dense)->iterations());
    (*dense)->Apply(grad.data(), params.data());
    for (int r = 0; r < kRows; ++r) {
      for (int j = 0; j < kWidth; ++j) {
        const int i = r * kWidth + j;
        worst = std::max({worst, UlpDistance(table.part(r, 0)[j], params[i]),
                          UlpDistance(table.part(r, 1)[j], (*dense)->slot("m")[i]),
                          UlpDistance(table.part(r, 2)[j], (*dense)->slot("v")[i])});
      }
    }
  }
  std::printf("lazy adam vs dense adam, %d steps: largest difference %lld ulp\n", kSteps,
              static_cast<long long>(worst));
  // Bit for bit: the dense kernel's fused multiply-adds are written out
  // in the sparse one (sparse_optimizer.cc, AdamRow).
  EXPECT_EQ(worst, 0);
}

// TensorFlow.js's Adagrad (tests/fixtures/sparse_optimizers/
// make_adagrad_reference.js) on four rows touched on some steps only. Its
// rule is Keras 3's, epsilon inside the root, but computed as
// w + (g / sqrt(a + eps)) * -lr where Keras divides lr * g: the last bits
// may differ.
TEST(SparseOptimizerTest, AdagradMatchesTensorFlowJs) {
  std::ifstream in("tests/fixtures/sparse_optimizers/adagrad_reference.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json ref = nlohmann::json::parse(in);
  ASSERT_EQ(ref["cases"].size(), 2u);
  for (const nlohmann::json& c : ref["cases"]) {
    SparseOptimizerOptions o{"adagrad", c["learning_rate"].get<float>()};
    o.initial_accumulator_value = c["initial_accumulator_value"].get<float>();
    o.epsilon = c["epsilon"].get<float>();
    const int width = c["width"].get<int>();
    std::unique_ptr<SparseOptimizer> opt = MustCreate(o, width);
    const int rows = static_cast<int>(c["initial"].size());
    std::vector<float> table(rows * opt->floats_per_row());
    auto row = [&](int r) { return table.data() + r * opt->floats_per_row(); };
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < width; ++j) row(r)[j] = c["initial"][r][j].get<float>();
      opt->InitRow(row(r));
    }
    int64_t worst = 0;
    double worst_abs = 0.0;
    int64_t step = 0;
    for (const nlohmann::json& s : c["steps"]) {
      std::vector<float*> touched;
      std::vector<float> grads;
      for (size_t i = 0; i < s["rows"].size(); ++i) {
        touched.push_back(row(s["rows"][i].get<int>()));
        for (int j = 0; j < width; ++j) grads.push_back(s["grads"][i][j].get<float>());
      }
      opt->Apply(touched, grads.data(), step++);
      for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < width; ++j) {
          const float want = s["values"][r][j].get<float>();
          worst = std::max(worst, UlpDistance(row(r)[j], want));
          worst_abs = std::max(worst_abs, std::abs(static_cast<double>(row(r)[j]) - want));
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      ASSERT_FALSE(c["accumulators"][r].is_null());
      for (int j = 0; j < width; ++j) {
        // The accumulator is the same sum in the same order: the same bits.
        EXPECT_EQ(row(r)[width + j], c["accumulators"][r][j].get<float>());
      }
    }
    std::printf("adagrad lr %g initial %g vs tfjs %s: largest difference %.3g (%lld ulp)\n",
                o.learning_rate, o.initial_accumulator_value,
                ref["tfjs_version"].get<std::string>().c_str(), worst_abs,
                static_cast<long long>(worst));
    // Values are about 0.5 in size; a differently rounded update (0.05 in
    // size) moves them by its own last bit, and that adds up over steps.
    EXPECT_LT(worst_abs, 1e-7);
  }
}

TEST(SparseOptimizerTest, SumDuplicateRowsKeepsFirstAppearanceOrder) {
  const int64_t ids[] = {7, 3, 7, 9, 3};
  const float grads[] = {1, 2, 10, 20, 100, 200, 5, 6, 0.5f, 0.25f};
  const DeduplicatedRows out = SumDuplicateRows(ids, grads, 2);
  EXPECT_EQ(out.ids, (std::vector<int64_t>{7, 3, 9}));
  EXPECT_EQ(out.grads, (std::vector<float>{101, 202, 10.5f, 20.25f, 5, 6}));
}

// TensorFlow's semantics for a repeated id: one update with the summed
// gradient, which is not two updates in a row.
TEST(SparseOptimizerTest, DuplicatesSummedAreOneUpdate) {
  std::unique_ptr<SparseOptimizer> opt = MustCreate({"adagrad", 0.1f}, 1);
  std::vector<float> a = {1.0f, 0.0f}, b = a;
  opt->InitRow(a.data());
  opt->InitRow(b.data());
  const int64_t ids[] = {0, 0};
  const float grads[] = {0.5f, 0.25f};
  const DeduplicatedRows dedup = SumDuplicateRows(ids, grads, 1);
  float* row_a = a.data();
  opt->Apply({&row_a, 1}, dedup.grads.data(), 0);
  EXPECT_FLOAT_EQ(a[1], 0.1f + 0.75f * 0.75f);
  EXPECT_FLOAT_EQ(a[0], 1.0f - 0.1f * 0.75f / std::sqrt(0.1f + 0.5625f + 1e-7f));
  float* twice[] = {b.data(), b.data()};
  opt->Apply(twice, grads, 0);
  EXPECT_FLOAT_EQ(b[1], 0.1f + 0.25f + 0.0625f);
  EXPECT_NE(a[0], b[0]);
}

TEST(SparseOptimizerTest, RejectsBadOptionsNamingTheValue) {
  struct Case {
    SparseOptimizerOptions options;
    int width;
    std::string message;
  };
  auto with = [](std::string name, const std::function<void(SparseOptimizerOptions&)>& set) {
    SparseOptimizerOptions o{std::move(name), 0.1f};
    set(o);
    return o;
  };
  const Case cases[] = {
      {{"rmsprop", 0.1f}, 4, "unknown sparse optimizer \"rmsprop\""},
      {{"sgd", 0.0f}, 4, "\"sgd\": learning_rate 0 must be finite and > 0"},
      {{"adam", NAN}, 4, "learning_rate nan"},
      {{"adagrad", 0.1f}, 0, "width 0 must be > 0"},
      {with("adagrad", [](auto& o) { o.epsilon = 0; }), 4, "epsilon 0 must be"},
      {with("adagrad", [](auto& o) { o.initial_accumulator_value = -1; }), 4,
       "initial_accumulator_value -1 must be finite and >= 0"},
      {with("adam", [](auto& o) { o.beta1 = 1; }), 4, "beta1 1 must be in [0, 1)"},
      {with("adam", [](auto& o) { o.beta2 = -0.5f; }), 4, "beta2 -0.5"},
      {with("ftrl", [](auto& o) { o.learning_rate_power = 0.5f; }), 4,
       "learning_rate_power 0.5 must be finite and <= 0"},
      {with("ftrl", [](auto& o) { o.l1_regularization_strength = -0.1f; }), 4,
       "l1_regularization_strength -0.1"},
      {with("ftrl", [](auto& o) { o.l2_regularization_strength = INFINITY; }), 4,
       "l2_regularization_strength inf"},
      {with("ftrl", [](auto& o) { o.l2_shrinkage_regularization_strength = -1; }), 4,
       "l2_shrinkage_regularization_strength -1"},
      {with("ftrl", [](auto& o) { o.beta = -2; }), 4, "\"ftrl\": beta -2"},
      {with("sgd", [](auto& o) { o.decay_rate = 0; }), 4, "decay_rate 0 must be in (0, 1]"},
      {with("adam", [](auto& o) { o.decay_rate = 1.5f; }), 4, "decay_rate 1.5"},
      {with("adagrad", [](auto& o) { o.decay_rate = NAN; }), 4, "decay_rate nan"},
      {with("ftrl", [](auto& o) { o.decay_steps = -1; }), 4, "decay_steps -1 must be >= 0"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::unique_ptr<SparseOptimizer>> opt =
        SparseOptimizer::Create(c.options, c.width);
    ASSERT_FALSE(opt.ok()) << c.message;
    EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(opt.status().message().find(c.message), std::string::npos)
        << opt.status().message() << " lacks " << c.message;
  }
  // Options of other rules are not checked: sgd ignores a bad beta1.
  SparseOptimizerOptions sgd = with("sgd", [](auto& o) { o.beta1 = 2; });
  EXPECT_TRUE(SparseOptimizer::Create(sgd, 4).ok());
}

}  // namespace
}  // namespace pscluster
