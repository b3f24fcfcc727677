#include "update/optimizer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

std::unique_ptr<Optimizer> Make(OptimizerOptions options, int64_t n) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt =
      Optimizer::Create(options, n);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? *std::move(opt) : nullptr;
}

OptimizerOptions Options(const std::string& name, float lr) {
  OptimizerOptions o;
  o.name = name;
  o.learning_rate = lr;
  return o;
}

void ExpectNear(absl::Span<const float> actual,
                const std::vector<double>& expected, double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tolerance) << "element " << i;
  }
}

// Relative comparison, for slots whose scale is far from 1.
void ExpectRelativelyNear(absl::Span<const float> actual,
                          const std::vector<double>& expected,
                          double relative) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], relative * std::fabs(expected[i]))
        << "element " << i;
  }
}

// Values below were computed by hand (SGD, momentum) and with the formulas
// in double precision (Adam); the optimizer works in float.

TEST(OptimizerTest, SgdTwoSteps) {
  std::unique_ptr<Optimizer> opt = Make(Options("sgd", 0.1f), 3);
  ASSERT_NE(opt, nullptr);
  EXPECT_TRUE(opt->slot_names().empty());
  std::vector<float> p = {1.0f, -2.0f, 0.5f};
  std::vector<float> g1 = {0.5f, -1.0f, 2.0f};
  opt->Apply(g1.data(), p.data());
  ExpectNear(p, {0.95, -1.9, 0.3}, 1e-6);
  std::vector<float> g2 = {1.0f, 1.0f, -1.0f};
  opt->Apply(g2.data(), p.data());
  ExpectNear(p, {0.85, -2.0, 0.4}, 1e-6);
  EXPECT_EQ(opt->iterations(), 2);
}

TEST(OptimizerTest, MomentumThreeSteps) {
  OptimizerOptions o = Options("momentum", 0.1f);
  o.momentum = 0.9f;
  std::unique_ptr<Optimizer> opt = Make(o, 2);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->slot_names(), std::vector<std::string>{"momentum"});
  std::vector<float> p = {1.0f, -2.0f};
  std::vector<float> g1 = {0.5f, -1.0f}, g2 = {1.0f, 1.0f}, g3 = {0.0f, 0.0f};
  // v = -lr*g = (-0.05, 0.1); p = (0.95, -1.9)
  opt->Apply(g1.data(), p.data());
  ExpectNear(opt->slot("momentum"), {-0.05, 0.1}, 1e-7);
  ExpectNear(p, {0.95, -1.9}, 1e-6);
  // v = 0.9*(-0.05, 0.1) - 0.1*(1, 1) = (-0.145, -0.01); p = (0.805, -1.91)
  opt->Apply(g2.data(), p.data());
  ExpectNear(opt->slot("momentum"), {-0.145, -0.01}, 1e-7);
  ExpectNear(p, {0.805, -1.91}, 1e-6);
  // A zero gradient still moves p: v = (-0.1305, -0.009); p = (0.6745, -1.919)
  opt->Apply(g3.data(), p.data());
  ExpectNear(opt->slot("momentum"), {-0.1305, -0.009}, 1e-7);
  ExpectNear(p, {0.6745, -1.919}, 1e-6);
  EXPECT_EQ(opt->iterations(), 3);
}

TEST(OptimizerTest, AdamThreeSteps) {
  std::unique_ptr<Optimizer> opt = Make(Options("adam", 0.001f), 2);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->slot_names(), (std::vector<std::string>{"m", "v"}));
  std::vector<float> p = {1.0f, -2.0f};
  std::vector<float> g1 = {0.5f, -1.0f}, g2 = {1.0f, 1.0f}, g3 = {-2.0f, 0.0f};
  // In float, 1 - 0.999f is 0.00099998713 and 1 - 0.9f is 0.100000024, as
  // in Keras's float32 arithmetic: slots match to ~1.3e-5 relative.
  // t=1: m = 0.1*g, v = 0.001*g^2, lr_t = 0.001*sqrt(0.001)/0.1
  //      = 3.1622776601683816e-4: the first step is ~lr * sign(g).
  opt->Apply(g1.data(), p.data());
  ExpectRelativelyNear(opt->slot("m"), {0.05, -0.1}, 1e-6);
  ExpectRelativelyNear(opt->slot("v"), {0.00025, 0.001}, 2e-5);
  ExpectNear(p, {0.9990000063245154, -1.9990000031622677}, 1e-6);
  // t=2: lr_t = 0.001*sqrt(1-0.999^2)/(1-0.9^2) = 2.3531672532745276e-4
  opt->Apply(g2.data(), p.data());
  ExpectRelativelyNear(opt->slot("m"), {0.145, 0.01}, 1e-6);
  ExpectRelativelyNear(opt->slot("v"), {0.00124975, 0.001999}, 2e-5);
  ExpectNear(p, {0.9980348270289059, -1.999052634623498}, 1e-6);
  // t=3: lr_t = 2.020105974389679e-4
  opt->Apply(g3.data(), p.data());
  ExpectRelativelyNear(opt->slot("m"), {-0.0695, 0.009}, 1e-6);
  ExpectRelativelyNear(opt->slot("v"), {0.00524850025, 0.001997001}, 2e-5);
  ExpectNear(p, {0.998228621216413, -1.999093318895526}, 1e-6);
  EXPECT_EQ(opt->iterations(), 3);
}

// Many parameters (not a multiple of any vector width) over many steps
// against a double-precision reference of Keras's Adam.
TEST(OptimizerTest, AdamMatchesDoubleReferenceOnLongVector) {
  const int n = 1003, steps = 20;
  OptimizerOptions o = Options("adam", 0.01f);
  std::unique_ptr<Optimizer> opt = Make(o, n);
  ASSERT_NE(opt, nullptr);
  std::vector<float> p(n);
  std::vector<double> ref_p(n), ref_m(n, 0.0), ref_v(n, 0.0);
  for (int i = 0; i < n; ++i) p[i] = ref_p[i] = std::sin(0.37 * i);
  std::vector<float> g(n);
  for (int t = 1; t <= steps; ++t) {
    for (int i = 0; i < n; ++i) {
      g[i] = static_cast<float>(std::cos(0.11 * i * t) * (1 + i % 7));
    }
    opt->Apply(g.data(), p.data());
    const double lr_t =
        0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
    for (int i = 0; i < n; ++i) {
      ref_m[i] = 0.9 * ref_m[i] + 0.1 * g[i];
      ref_v[i] = 0.999 * ref_v[i] + 0.001 * double(g[i]) * g[i];
      ref_p[i] -= lr_t * ref_m[i] / (std::sqrt(ref_v[i]) + 1e-7);
    }
  }
  for (int i = 0; i < n; ++i) {
    ASSERT_NEAR(p[i], ref_p[i], 2e-5) << "element " << i;
  }
}

TEST(OptimizerTest, ZeroParametersIsANoOp) {
  std::unique_ptr<Optimizer> opt = Make(Options("adam", 0.1f), 0);
  ASSERT_NE(opt, nullptr);
  opt->Apply(nullptr, nullptr);
  EXPECT_EQ(opt->iterations(), 1);
  EXPECT_TRUE(opt->slot("m").empty());
}

TEST(OptimizerTest, UnknownSlotIsEmpty) {
  std::unique_ptr<Optimizer> opt = Make(Options("momentum", 0.1f), 4);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->slot("momentum").size(), 4u);
  EXPECT_TRUE(opt->slot("m").empty());
}

TEST(OptimizerTest, RestoredStateContinuesIdentically) {
  const int n = 5;
  std::unique_ptr<Optimizer> a = Make(Options("adam", 0.01f), n);
  std::unique_ptr<Optimizer> b = Make(Options("adam", 0.01f), n);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<float> pa = {1, 2, 3, 4, 5};
  std::vector<float> g = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f};
  for (int i = 0; i < 3; ++i) a->Apply(g.data(), pa.data());
  OptimizerState state = a->SaveState();
  EXPECT_EQ(state.iterations, 3);
  ASSERT_EQ(state.slots.size(), 2u);
  EXPECT_EQ(state.slots[0].name, "m");
  EXPECT_EQ(state.slots[1].name, "v");
  // Slots in any order are accepted.
  std::swap(state.slots[0], state.slots[1]);
  ASSERT_TRUE(b->RestoreState(state).ok());
  EXPECT_EQ(b->iterations(), 3);
  std::vector<float> pb = pa;
  a->Apply(g.data(), pa.data());
  b->Apply(g.data(), pb.data());
  EXPECT_EQ(pa, pb);
}

// An update computed aside and then taken leaves the parameters, the slots
// and the iteration count bit for bit where Apply leaves them, step after
// step; until it is taken the optimizer is as it was.
TEST(OptimizerTest, AnUpdateComputedAsideAndTakenIsApplysBitForBit) {
  for (const char* name : {"sgd", "momentum", "adam", "adamw", "adagrad", "rmsprop",
                           "rmsprop+", "ftrl", "sgd+"}) {
    SCOPED_TRACE(name);
    // "+": with a weight decay, and rmsprop's momentum and centering.
    const std::string base = std::string(name).substr(0, std::string(name).find('+'));
    OptimizerOptions o = Options(base, 0.01f);
    if (base == "adamw" || std::string(name).back() == '+') o.weight_decay = 0.05f;
    if (std::string(name) == "rmsprop+") {
      o.momentum = 0.5f;
      o.centered = true;
    }
    o.decay_rate = 0.5f;
    o.decay_steps = 3;
    constexpr int64_t kN = 1000;  // more than one vector's worth, and a tail
    std::unique_ptr<Optimizer> in_place = Make(o, kN), aside = Make(o, kN);
    std::vector<float> p(kN), q(kN), out(kN), g(kN);
    for (int64_t i = 0; i < kN; ++i) p[i] = q[i] = std::sin(0.37f * i) * (i % 5 == 0 ? -0.0f : 1.0f);
    for (int step = 0; step < 5; ++step) {
      for (int64_t i = 0; i < kN; ++i) g[i] = std::cos(0.11f * i * (step + 1)) * 0.5f;
      in_place->Apply(g.data(), p.data());
      const OptimizerState before = aside->SaveState();
      aside->ApplyAside(g.data(), q.data(), out.data());
      const OptimizerState unchanged = aside->SaveState();
      EXPECT_EQ(unchanged.iterations, before.iterations);
      for (size_t k = 0; k < before.slots.size(); ++k) {
        EXPECT_EQ(unchanged.slots[k].values, before.slots[k].values);
      }
      aside->TakeAside();
      q = out;
      EXPECT_EQ(std::memcmp(p.data(), q.data(), kN * sizeof(float)), 0) << "step " << step;
      const OptimizerState a = in_place->SaveState(), b = aside->SaveState();
      EXPECT_EQ(a.iterations, b.iterations);
      for (size_t k = 0; k < a.slots.size(); ++k) {
        EXPECT_EQ(std::memcmp(a.slots[k].values.data(), b.slots[k].values.data(),
                              kN * sizeof(float)),
                  0)
            << a.slots[k].name << " at step " << step;
      }
    }
  }
}

TEST(OptimizerTest, SgdStateHasOnlyIterations) {
  std::unique_ptr<Optimizer> opt = Make(Options("sgd", 0.1f), 3);
  ASSERT_NE(opt, nullptr);
  OptimizerState state;
  state.iterations = 42;
  ASSERT_TRUE(opt->RestoreState(state).ok());
  EXPECT_EQ(opt->iterations(), 42);
  EXPECT_TRUE(opt->SaveState().slots.empty());
}

TEST(OptimizerTest, BadStateIsRejectedAndChangesNothing) {
  std::unique_ptr<Optimizer> opt = Make(Options("adam", 0.01f), 2);
  ASSERT_NE(opt, nullptr);
  std::vector<float> p = {1, 2}, g = {1, 1};
  opt->Apply(g.data(), p.data());
  const OptimizerState before = opt->SaveState();
  OptimizerState good = before;
  good.iterations = 9;
  for (OptimizerSlot& s : good.slots) s.values = {7, 7};

  struct Case {
    OptimizerState state;
    std::string expected;
  };
  std::vector<Case> cases;
  {
    OptimizerState s = good;
    s.iterations = -1;
    cases.push_back({s, "iterations -1 is negative"});
  }
  {  // ps_service_fuzzer: counting on from it overflowed
    OptimizerState s = good;
    s.iterations = std::numeric_limits<int64_t>::max();
    cases.push_back({s, "iterations 9223372036854775807 is more than 2^53"});
  }
  {
    OptimizerState s = good;
    s.slots.pop_back();
    cases.push_back({s, "missing slot \"v\""});
  }
  {
    OptimizerState s = good;
    s.slots.push_back({"momentum", {0, 0}});
    cases.push_back({s, "unexpected slot \"momentum\""});
  }
  {
    OptimizerState s = good;
    s.slots[1] = s.slots[0];
    cases.push_back({s, "slot \"m\" appears twice"});
  }
  {
    OptimizerState s = good;
    s.slots[1].values = {1, 2, 3};
    cases.push_back({s, "slot \"v\" has 3 values, expected 2"});
  }
  for (const Case& c : cases) {
    absl::Status status = opt->RestoreState(c.state);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.expected;
    EXPECT_NE(status.message().find(c.expected), std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find("optimizer \"adam\""), std::string::npos);
    OptimizerState now = opt->SaveState();
    EXPECT_EQ(now.iterations, before.iterations);
    EXPECT_EQ(now.slots[0].values, before.slots[0].values);
    EXPECT_EQ(now.slots[1].values, before.slots[1].values);
  }
}

TEST(OptimizerTest, OptionsForOtherOptimizersAreNotChecked) {
  OptimizerOptions o = Options("sgd", 0.1f);
  o.momentum = 5.0f;
  o.beta1 = -1.0f;
  o.epsilon = 0.0f;
  EXPECT_TRUE(Optimizer::Create(o, 1).ok());
}

struct BadOptionsCase {
  const char* name;
  OptimizerOptions options;
  int64_t num_params;
  std::string expected;
};

std::ostream& operator<<(std::ostream& os, const BadOptionsCase& c) {
  return os << c.name;
}

OptimizerOptions With(const std::string& name,
                      void (*edit)(OptimizerOptions&)) {
  OptimizerOptions o = Options(name, 0.01f);
  edit(o);
  return o;
}

class BadOptionsTest : public testing::TestWithParam<BadOptionsCase> {};

TEST_P(BadOptionsTest, IsInvalidArgumentNamingTheValue) {
  const BadOptionsCase& c = GetParam();
  absl::StatusOr<std::unique_ptr<Optimizer>> opt =
      Optimizer::Create(c.options, c.num_params);
  ASSERT_FALSE(opt.ok());
  EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(opt.status().message().find(c.expected), std::string::npos)
      << opt.status().message();
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

INSTANTIATE_TEST_SUITE_P(
    AllErrors, BadOptionsTest,
    testing::Values(
        BadOptionsCase{"UnknownName", Options("lamb", 0.1f), 1,
                       "unknown optimizer \"lamb\""},
        BadOptionsCase{"EmptyName", Options("", 0.1f), 1,
                       "unknown optimizer \"\""},
        BadOptionsCase{"ZeroLearningRate", Options("sgd", 0.0f), 1,
                       "optimizer \"sgd\": learning_rate 0 must be finite"},
        BadOptionsCase{"NegativeLearningRate", Options("adam", -0.5f), 1,
                       "learning_rate -0.5 must be finite and > 0"},
        BadOptionsCase{"NaNLearningRate", Options("sgd", kNaN), 1,
                       "learning_rate nan"},
        BadOptionsCase{"InfiniteLearningRate", Options("momentum", kInf), 1,
                       "learning_rate inf"},
        BadOptionsCase{"NegativeNumParams", Options("sgd", 0.1f), -3,
                       "num_params -3 is negative"},
        BadOptionsCase{
            "MomentumOne",
            With("momentum", [](OptimizerOptions& o) { o.momentum = 1.0f; }), 1,
            "optimizer \"momentum\": momentum 1 must be in [0, 1)"},
        BadOptionsCase{
            "MomentumNegative",
            With("momentum", [](OptimizerOptions& o) { o.momentum = -0.1f; }),
            1, "momentum -0.1 must be in [0, 1)"},
        BadOptionsCase{
            "MomentumNaN",
            With("momentum", [](OptimizerOptions& o) { o.momentum = kNaN; }), 1,
            "momentum nan"},
        BadOptionsCase{
            "Beta1One",
            With("adam", [](OptimizerOptions& o) { o.beta1 = 1.0f; }), 1,
            "optimizer \"adam\": beta1 1 must be in [0, 1)"},
        BadOptionsCase{
            "Beta1Negative",
            With("adam", [](OptimizerOptions& o) { o.beta1 = -0.9f; }), 1,
            "beta1 -0.9 must be in [0, 1)"},
        BadOptionsCase{
            "Beta2TooLarge",
            With("adam", [](OptimizerOptions& o) { o.beta2 = 1.5f; }), 1,
            "beta2 1.5 must be in [0, 1)"},
        BadOptionsCase{
            "Beta2NaN",
            With("adam", [](OptimizerOptions& o) { o.beta2 = kNaN; }), 1,
            "beta2 nan"},
        BadOptionsCase{
            "EpsilonZero",
            With("adam", [](OptimizerOptions& o) { o.epsilon = 0.0f; }), 1,
            "epsilon 0 must be finite and > 0"},
        BadOptionsCase{
            "EpsilonInfinite",
            With("adam", [](OptimizerOptions& o) { o.epsilon = kInf; }), 1,
            "epsilon inf"},
        BadOptionsCase{
            "WeightDecayNegative",
            With("adamw", [](OptimizerOptions& o) { o.weight_decay = -0.01f; }), 1,
            "optimizer \"adamw\": weight_decay -0.01 must be finite and >= 0"},
        BadOptionsCase{
            "AdamwBeta1One",
            With("adamw", [](OptimizerOptions& o) { o.beta1 = 1.0f; }), 1,
            "beta1 1 must be in [0, 1)"},
        BadOptionsCase{
            "AdagradEpsilonZero",
            With("adagrad", [](OptimizerOptions& o) { o.epsilon = 0.0f; }), 1,
            "optimizer \"adagrad\": epsilon 0 must be finite and > 0"},
        BadOptionsCase{
            "AdagradAccumulatorNegative",
            With("adagrad", [](OptimizerOptions& o) { o.initial_accumulator_value = -1.0f; }),
            1, "initial_accumulator_value -1 must be finite and >= 0"},
        BadOptionsCase{
            "RmspropRhoOne",
            With("rmsprop", [](OptimizerOptions& o) { o.rho = 1.0f; }), 1,
            "optimizer \"rmsprop\": rho 1 must be in [0, 1)"},
        BadOptionsCase{
            "RmspropMomentumNaN",
            With("rmsprop", [](OptimizerOptions& o) { o.momentum = kNaN; }), 1,
            "momentum nan"},
        BadOptionsCase{
            "FtrlPowerPositive",
            With("ftrl", [](OptimizerOptions& o) { o.learning_rate_power = 0.5f; }), 1,
            "optimizer \"ftrl\": learning_rate_power 0.5 must be finite and <= 0"},
        BadOptionsCase{
            "FtrlL1Negative",
            With("ftrl", [](OptimizerOptions& o) { o.l1 = -0.1f; }), 1,
            "l1 -0.1 must be finite and >= 0"},
        BadOptionsCase{
            "FtrlBetaInfinite",
            With("ftrl", [](OptimizerOptions& o) { o.beta = kInf; }), 1,
            "beta inf must be finite and >= 0"}),
    [](const testing::TestParamInfo<BadOptionsCase>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace pscluster

namespace pscluster {
namespace {

TEST(OptimizerDecayTest, ExponentialDecayFollowsKeras) {
  OptimizerOptions o;
  o.name = "sgd";
  o.learning_rate = 1.0f;
  o.decay_rate = 0.25f;
  o.decay_steps = 2;
  std::unique_ptr<Optimizer> opt = *Optimizer::Create(o, 1);
  float p = 0.0f;
  const float g = 1.0f;
  // t = 0, 1, 2: lr = 0.25^(t/2) = 1, 0.5, 0.25.
  EXPECT_FLOAT_EQ(opt->current_learning_rate(), 1.0f);
  opt->Apply(&g, &p);
  EXPECT_FLOAT_EQ(p, -1.0f);
  opt->Apply(&g, &p);
  EXPECT_FLOAT_EQ(p, -1.5f);
  opt->Apply(&g, &p);
  EXPECT_FLOAT_EQ(p, -1.75f);
}

TEST(OptimizerDecayTest, BadDecayIsRefusedNamingIt) {
  OptimizerOptions o;
  o.name = "adam";
  o.learning_rate = 0.1f;
  o.decay_rate = 1.5f;
  absl::StatusOr<std::unique_ptr<Optimizer>> r = Optimizer::Create(o, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("decay_rate"), std::string::npos);
  o.decay_rate = 0.5f;
  o.decay_steps = -1;
  r = Optimizer::Create(o, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("decay_steps -1"), std::string::npos);
}

}  // namespace
}  // namespace pscluster

// The rules that Keras 3 has and the first three optimizers do not:
// AdamW, Adagrad, RMSprop (plain, with momentum, centered) and FTRL, each
// checked step by step against its formula in double precision (Keras's
// update_step, keras/src/optimizers/*.py), and a weight decay on another
// rule.
namespace pscluster {
namespace {

// One coordinate's state in double: the value and up to three slots.
struct Coord {
  double p;
  double s[3];
};

using Rule = void (*)(const OptimizerOptions& o, double lr, int64_t t, double g, Coord* c);

void AdamRule(const OptimizerOptions& o, double lr, int64_t t, double g, Coord* c) {
  c->s[0] = o.beta1 * c->s[0] + (1 - double{o.beta1}) * g;
  c->s[1] = o.beta2 * c->s[1] + (1 - double{o.beta2}) * g * g;
  const double lr_t = lr * std::sqrt(1 - std::pow(double{o.beta2}, t)) /
                      (1 - std::pow(double{o.beta1}, t));
  c->p -= lr_t * c->s[0] / (std::sqrt(c->s[1]) + o.epsilon);
}

void AdagradRule(const OptimizerOptions& o, double lr, int64_t, double g, Coord* c) {
  c->s[0] += g * g;
  c->p -= lr * g / std::sqrt(c->s[0] + o.epsilon);
}

// s[0] velocity, then momentum, then the average gradient, as the slots.
void RmspropRule(const OptimizerOptions& o, double lr, int64_t, double g, Coord* c) {
  const double rho = o.rho;
  c->s[0] = rho * c->s[0] + (1 - rho) * g * g;
  double denominator = c->s[0];
  const int average = o.momentum > 0 ? 2 : 1;
  if (o.centered) {
    c->s[average] = rho * c->s[average] + (1 - rho) * g;
    denominator -= c->s[average] * c->s[average];
  }
  const double increment = lr * g / std::sqrt(denominator + o.epsilon);
  if (o.momentum > 0) {
    c->s[1] = o.momentum * c->s[1] + increment;
    c->p -= c->s[1];
  } else {
    c->p -= increment;
  }
}

void FtrlRule(const OptimizerOptions& o, double lr, int64_t, double g, Coord* c) {
  const double power = -double{o.learning_rate_power};
  const double l2_reg = o.l2 + o.beta / (2 * lr);
  const double g_shrunk = g + 2 * double{o.l2_shrinkage} * c->p;
  const double n = c->s[0] + g * g;
  c->s[1] += g_shrunk - (std::pow(n, power) - std::pow(c->s[0], power)) / lr * c->p;
  const double quadratic = std::pow(n, power) / lr + 2 * l2_reg;
  const double z = c->s[1];
  c->p = (std::clamp(z, -double{o.l1}, double{o.l1}) - z) / quadratic;
  c->s[0] = n;
}

void SgdRule(const OptimizerOptions&, double lr, int64_t, double g, Coord* c) { c->p -= lr * g; }

// Runs `steps` updates of kN coordinates with gradients of several scales
// through the optimizer and through `rule` in double (after the weight
// decay p -= p * weight_decay * lr when set), comparing values and slots
// after every step within `relative` of the larger of the reference and
// `floor`.
void ExpectFollowsRule(const OptimizerOptions& o, Rule rule, int steps, double relative) {
  constexpr int64_t kN = 257;
  std::unique_ptr<Optimizer> opt = Make(o, kN);
  ASSERT_NE(opt, nullptr);
  const size_t slots = opt->slot_names().size();
  std::vector<float> p(kN), g(kN);
  std::vector<Coord> ref(kN);
  for (int64_t i = 0; i < kN; ++i) {
    p[i] = std::sin(0.7 * i) * 0.5f;
    ref[i].p = p[i];
    for (size_t k = 0; k < slots; ++k) ref[i].s[k] = opt->slot(opt->slot_names()[k])[i];
  }
  for (int step = 0; step < steps; ++step) {
    const double lr = opt->current_learning_rate();
    for (int64_t i = 0; i < kN; ++i) {
      // Gradients from 1e-3 to 3 in size, both signs, some exactly 0.
      g[i] = i % 11 == 0 ? 0.0f
                         : static_cast<float>(std::cos(1.3 * i + step) * std::pow(10.0, i % 4 - 3) *
                                              (1 + step % 3));
      if (o.weight_decay != 0.0f) ref[i].p -= ref[i].p * o.weight_decay * lr;
      rule(o, lr, opt->iterations() + 1, g[i], &ref[i]);
    }
    opt->Apply(g.data(), p.data());
    // Elementwise within `relative` of the reference, or of a hundredth
    // of the largest in the array where the element is smaller (a float
    // near 0 after a cancellation carries the rounding of its operands).
    auto check = [&](const std::string& what, auto got, auto want) {
      double scale = 0;
      for (int64_t i = 0; i < kN; ++i) scale = std::max(scale, std::fabs(want(i)));
      for (int64_t i = 0; i < kN; ++i) {
        const double tol = relative * std::max(std::fabs(want(i)), 0.01 * scale);
        ASSERT_NEAR(got(i), want(i), tol) << what << " " << i << " after step " << step + 1;
      }
    };
    check("value", [&](int64_t i) { return p[i]; }, [&](int64_t i) { return ref[i].p; });
    for (size_t k = 0; k < slots; ++k) {
      absl::Span<const float> slot = opt->slot(opt->slot_names()[k]);
      check(opt->slot_names()[k], [&](int64_t i) { return slot[i]; },
            [&](int64_t i) { return ref[i].s[k]; });
    }
  }
}

TEST(KerasOptimizerTest, AdamwIsAdamAfterTheDecoupledWeightDecay) {
  OptimizerOptions o = Options("adamw", 0.01f);
  o.weight_decay = 0.004f;
  ExpectFollowsRule(o, AdamRule, 30, 1e-4);
  o.weight_decay = 0.5f;  // large enough to matter within a few steps
  o.decay_rate = 0.5f;
  o.decay_steps = 4;  // the decay follows the scheduled rate
  ExpectFollowsRule(o, AdamRule, 30, 1e-4);
}

TEST(KerasOptimizerTest, AdagradAccumulatesFromItsInitialValue) {
  OptimizerOptions o = Options("adagrad", 0.1f);
  std::unique_ptr<Optimizer> opt = Make(o, 3);
  ASSERT_EQ(opt->slot_names(), std::vector<std::string>{"accumulator"});
  for (float a : opt->slot("accumulator")) EXPECT_EQ(a, 0.1f);
  ExpectFollowsRule(o, AdagradRule, 30, 1e-5);
  o.initial_accumulator_value = 0.0f;  // Keras allows it: the first step is lr * sign(g)
  o.epsilon = 1e-3f;
  ExpectFollowsRule(o, AdagradRule, 30, 1e-5);
}

TEST(KerasOptimizerTest, RmspropPlainWithMomentumAndCentered) {
  OptimizerOptions o = Options("rmsprop", 0.01f);
  o.momentum = 0.0f;  // Keras's default
  EXPECT_EQ(Make(o, 1)->slot_names(), std::vector<std::string>{"velocity"});
  ExpectFollowsRule(o, RmspropRule, 30, 1e-4);
  o.momentum = 0.9f;
  EXPECT_EQ(Make(o, 1)->slot_names(), (std::vector<std::string>{"velocity", "momentum"}));
  ExpectFollowsRule(o, RmspropRule, 30, 1e-4);
  o.centered = true;
  EXPECT_EQ(Make(o, 1)->slot_names(),
            (std::vector<std::string>{"velocity", "momentum", "average_gradient"}));
  ExpectFollowsRule(o, RmspropRule, 30, 1e-4);
  o.momentum = 0.0f;
  o.rho = 0.5f;
  EXPECT_EQ(Make(o, 1)->slot_names(),
            (std::vector<std::string>{"velocity", "average_gradient"}));
  ExpectFollowsRule(o, RmspropRule, 30, 1e-4);
}

TEST(KerasOptimizerTest, FtrlWithAndWithoutItsRegularizers) {
  OptimizerOptions o = Options("ftrl", 0.1f);
  std::unique_ptr<Optimizer> opt = Make(o, 2);
  ASSERT_EQ(opt->slot_names(), (std::vector<std::string>{"accumulator", "linear"}));
  EXPECT_EQ(opt->slot("accumulator")[0], 0.1f);
  EXPECT_EQ(opt->slot("linear")[0], 0.0f);
  ExpectFollowsRule(o, FtrlRule, 30, 1e-4);
  o.l1 = 0.001f;  // small coordinates are held at exactly 0
  o.l2 = 0.01f;
  o.l2_shrinkage = 0.02f;
  o.beta = 0.5f;
  ExpectFollowsRule(o, FtrlRule, 30, 1e-4);
  o.learning_rate_power = -0.7f;  // pow, not sqrt
  ExpectFollowsRule(o, FtrlRule, 30, 1e-4);
}

TEST(KerasOptimizerTest, AWeightDecayAppliesToEveryRule) {
  OptimizerOptions o = Options("sgd", 0.1f);
  o.weight_decay = 0.1f;
  ExpectFollowsRule(o, SgdRule, 10, 1e-5);
  o.name = "adagrad";
  ExpectFollowsRule(o, AdagradRule, 10, 1e-5);
  // p = p - p * wd * lr with g = 0: 2 * (1 - 0.01) under sgd.
  o.name = "sgd";
  std::unique_ptr<Optimizer> opt = Make(o, 1);
  float p = 2.0f;
  const float g = 0.0f;
  opt->Apply(&g, &p);
  EXPECT_FLOAT_EQ(p, 1.98f);
}

TEST(KerasOptimizerTest, RestoredStateOfEachNewRuleContinuesIdentically) {
  for (const char* name : {"adamw", "adagrad", "rmsprop", "ftrl"}) {
    SCOPED_TRACE(name);
    OptimizerOptions o = Options(name, 0.05f);
    o.momentum = 0.5f;
    o.centered = true;
    std::unique_ptr<Optimizer> a = Make(o, 4), b = Make(o, 4);
    std::vector<float> p = {0.1f, -0.2f, 0.3f, 0.0f}, g = {0.5f, -1.0f, 0.25f, 2.0f};
    a->Apply(g.data(), p.data());
    a->Apply(g.data(), p.data());
    ASSERT_TRUE(b->RestoreState(a->SaveState()).ok());
    std::vector<float> q = p;
    a->Apply(g.data(), p.data());
    b->Apply(g.data(), q.data());
    EXPECT_EQ(p, q);
    EXPECT_EQ(b->iterations(), 3);
  }
}

}  // namespace
}  // namespace pscluster
