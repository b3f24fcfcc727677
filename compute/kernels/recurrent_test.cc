#include "compute/kernels/recurrent.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace kernels {
namespace {

using nlohmann::json;
using testing::Dot;
using testing::GradientsNear;
using testing::NumericalGradient;
using testing::RandomFloats;

// The fixture's bounds, about 7x the largest differences measured (float32
// arithmetic against float64: outputs 7.0e-8, gradients 2.9e-7).
constexpr double kOutputTolerance = 5e-7;
constexpr double kGradientTolerance = 2e-6;

// Written into the gradients before a backward pass: a pass that adds to
// them instead of overwriting them fails the comparisons.
constexpr float kStale = 1000.0f;

// The largest |a[i] - b[i]|; infinity when the sizes differ.
double MaxDiff(const std::vector<float>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

ActivationFn ActivationNamed(const std::string& name) {
  if (name == "sigmoid") return ActivationFn::kSigmoid;
  if (name == "relu") return ActivationFn::kRelu;
  if (name == "hard_sigmoid") return ActivationFn::kHardSigmoid;
  EXPECT_EQ(name, "tanh") << "unknown activation";
  return ActivationFn::kTanh;
}

// One layer's weights, inputs and mask, and what the kernels compute for it.
struct Layer {
  RecurrentShape s;
  int n = 0;
  std::vector<float> x, kernel, recurrent, bias, ids;
  StepMask mask() const { return StepMask{ids.empty() ? nullptr : ids.data(), 0}; }
  const float* bias_or_null() const { return bias.empty() ? nullptr : bias.data(); }
  int64_t y_size() const {
    return static_cast<int64_t>(n) * (s.return_sequences ? s.steps : 1) * s.units;
  }

  std::vector<float> Forward(std::vector<float>* saved) const {
    std::vector<float> y(y_size(), kStale);
    saved->assign(n * RecurrentSavedPerExample(s), kStale);
    RecurrentForward(n, s, x.data(), kernel.data(), recurrent.data(), bias_or_null(), mask(),
                     y.data(), saved->data());
    return y;
  }

  // Every gradient from gy: gx, gkernel, grecurrent, gbias (empty without a
  // bias); gx not computed (null) when `with_gx` is false.
  std::vector<std::vector<float>> Backward(const std::vector<float>& gy,
                                           bool with_gx = true) const {
    std::vector<float> saved;
    Forward(&saved);
    std::vector<float> gx(x.size(), kStale), gk(kernel.size(), kStale),
        gr(recurrent.size(), kStale), gb(bias.size(), kStale);
    RecurrentBackward(n, s, x.data(), kernel.data(), recurrent.data(), bias_or_null(), mask(),
                      saved.data(), gy.data(), with_gx ? gx.data() : nullptr, gk.data(), gr.data(),
                      gb.empty() ? nullptr : gb.data());
    if (!with_gx) gx.clear();
    return {gx, gk, gr, gb};
  }
};

// tests/fixtures/recurrent/recurrent.json (make_recurrent_reference.py):
// Keras 3's LSTM and GRU in float64 PyTorch, outputs and the gradients of
// sum(gy * y), for every combination the kernels distinguish.
TEST(RecurrentTest, MatchesFloat64Reference) {
  std::ifstream in("tests/fixtures/recurrent/recurrent.json");
  ASSERT_TRUE(in.good()) << "cannot read recurrent.json";
  const json doc = json::parse(in);
  ASSERT_EQ(doc["cases"].size(), 10u);
  double worst_y = 0.0, worst_grad = 0.0;
  for (const json& c : doc["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    Layer run;
    run.n = c["n"];
    run.s.cell = c["cell"] == "lstm" ? RecurrentCell::kLstm : RecurrentCell::kGru;
    run.s.steps = c["steps"];
    run.s.in = c["in"];
    run.s.units = c["units"];
    run.s.use_bias = c["use_bias"];
    run.s.reset_after = c["reset_after"];
    run.s.return_sequences = c["return_sequences"];
    run.s.go_backwards = c["go_backwards"];
    run.s.activation = ActivationNamed(c["activation"]);
    run.s.recurrent_activation = ActivationNamed(c["recurrent_activation"]);
    run.s.alpha = c["alpha"];
    ASSERT_EQ(c["padding_id"], 0);
    run.x = c["x"].get<std::vector<float>>();
    run.kernel = c["kernel"].get<std::vector<float>>();
    run.recurrent = c["recurrent_kernel"].get<std::vector<float>>();
    if (!c["bias"].is_null()) run.bias = c["bias"].get<std::vector<float>>();
    if (!c["ids"].is_null()) run.ids = c["ids"].get<std::vector<float>>();
    ASSERT_EQ(static_cast<int64_t>(run.bias.size()), RecurrentBiasSize(run.s));

    std::vector<float> saved;
    const std::vector<float> y = run.Forward(&saved);
    const std::vector<float> gy = c["gy"].get<std::vector<float>>();
    const std::vector<std::vector<float>> grads = run.Backward(gy);
    const double dy = MaxDiff(y, c["y"].get<std::vector<double>>());
    const char* keys[] = {"gx", "gkernel", "grecurrent_kernel", "gbias"};
    double dg[4] = {NAN, NAN, NAN, NAN};  // NaN: the case has no bias
    for (int i = 0; i < 4; ++i) {
      if (c[keys[i]].is_null()) {
        EXPECT_TRUE(grads[i].empty());
        continue;
      }
      dg[i] = MaxDiff(grads[i], c[keys[i]].get<std::vector<double>>());
      EXPECT_LE(dg[i], kGradientTolerance) << keys[i];
      worst_grad = std::max(worst_grad, dg[i]);
    }
    EXPECT_LE(dy, kOutputTolerance);
    worst_y = std::max(worst_y, dy);
    char bias_diff[16] = "-";  // no bias in the case
    if (!std::isnan(dg[3])) std::snprintf(bias_diff, sizeof(bias_diff), "%.1e", dg[3]);
    std::printf("%-20s max |diff|: y %.1e  gx %.1e  gkernel %.1e  grecurrent %.1e  gbias %s\n",
                name.c_str(), dy, dg[0], dg[1], dg[2], bias_diff);

    // Without gx the weights' gradients are the same.
    const std::vector<std::vector<float>> no_gx = run.Backward(gy, /*with_gx=*/false);
    EXPECT_EQ(no_gx[1], grads[1]);
    EXPECT_EQ(no_gx[2], grads[2]);
    EXPECT_EQ(no_gx[3], grads[3]);
  }
  std::printf("worst: y %.1e, gradients %.1e\n", worst_y, worst_grad);
  RecordProperty("max_output_diff", std::to_string(worst_y));
  RecordProperty("max_gradient_diff", std::to_string(worst_grad));
}

// A small layer with random weights, for the central differences.
Layer RandomLayer(RecurrentCell cell, bool reset_after, bool return_sequences, bool go_backwards,
                  std::vector<float> ids, uint32_t seed) {
  Layer run;
  run.n = 3;
  run.s.cell = cell;
  run.s.steps = 4;
  run.s.in = 3;
  run.s.units = 2;
  run.s.reset_after = reset_after;
  run.s.return_sequences = return_sequences;
  run.s.go_backwards = go_backwards;
  const int gu = RecurrentGates(run.s) * run.s.units;
  run.x = RandomFloats(run.n * run.s.steps * run.s.in, seed);
  run.kernel = RandomFloats(run.s.in * gu, seed + 1, -0.8f, 0.8f);
  run.recurrent = RandomFloats(run.s.units * gu, seed + 2, -0.8f, 0.8f);
  run.bias = RandomFloats(RecurrentBiasSize(run.s), seed + 3, -0.5f, 0.5f);
  run.ids = std::move(ids);
  return run;
}

// Every gradient of sum(r * y) against central differences in float32.
void ExpectGradientsMatchDifferences(Layer run, uint32_t seed) {
  const std::vector<float> r = RandomFloats(run.y_size(), seed);
  const std::vector<std::vector<float>> grads = run.Backward(r);
  std::vector<float>* inputs[] = {&run.x, &run.kernel, &run.recurrent, &run.bias};
  const char* names[] = {"gx", "gkernel", "grecurrent", "gbias"};
  for (int i = 0; i < 4; ++i) {
    auto loss = [&]() {
      std::vector<float> saved;
      return Dot(r, run.Forward(&saved).data());
    };
    EXPECT_TRUE(
        GradientsNear(grads[i].data(), NumericalGradient(loss, inputs[i], 1e-2f), 2e-3, 1e-2))
        << names[i];
  }
}

// Ids of 3 examples' 4 steps (padding 0): padded at the end, in the middle
// and at the start.
const std::vector<float> kIds = {5, 2, 0, 0, 1, 0, 3, 4, 0, 7, 8, 9};

TEST(RecurrentTest, LstmGradientsMatchDifferences) {
  ExpectGradientsMatchDifferences(RandomLayer(RecurrentCell::kLstm, true, /*return_sequences=*/true,
                                              /*go_backwards=*/true, kIds, 10),
                                  14);
  ExpectGradientsMatchDifferences(
      RandomLayer(RecurrentCell::kLstm, true, /*return_sequences=*/false, /*go_backwards=*/false,
                  {}, 20),
      24);
}

TEST(RecurrentTest, GruGradientsMatchDifferences) {
  ExpectGradientsMatchDifferences(
      RandomLayer(RecurrentCell::kGru, /*reset_after=*/true, /*return_sequences=*/false,
                  /*go_backwards=*/false, kIds, 30),
      34);
  ExpectGradientsMatchDifferences(
      RandomLayer(RecurrentCell::kGru, /*reset_after=*/false, /*return_sequences=*/true,
                  /*go_backwards=*/true, kIds, 40),
      44);
}

// Keras 3's masked steps: the state carried over, the output the previous
// step's (zeros before any), no gradient into the step's input.
TEST(RecurrentTest, MaskedStepRepeatsThePreviousOutput) {
  for (RecurrentCell cell : {RecurrentCell::kLstm, RecurrentCell::kGru}) {
    // Example 0: padding at 0, 2 and 3; example 1 all padding.
    Layer run = RandomLayer(cell, true, /*return_sequences=*/true, /*go_backwards=*/false,
                            {0, 4, 0, 0, 0, 0, 0, 0}, 50);
    run.n = 2;
    run.x.resize(run.n * run.s.steps * run.s.in);
    std::vector<float> saved;
    const std::vector<float> y = run.Forward(&saved);
    const int u = run.s.units;
    auto out = [&](int r, int p) {
      return std::vector<float>(y.begin() + (r * run.s.steps + p) * u,
                                y.begin() + (r * run.s.steps + p + 1) * u);
    };
    const std::vector<float> zeros(u, 0.0f);
    EXPECT_EQ(out(0, 0), zeros);
    EXPECT_NE(out(0, 1), zeros);
    EXPECT_EQ(out(0, 2), out(0, 1));
    EXPECT_EQ(out(0, 3), out(0, 1));
    for (int p = 0; p < run.s.steps; ++p) EXPECT_EQ(out(1, p), zeros);

    // The last output alone is the last unmasked step's too.
    Layer last = run;
    last.s.return_sequences = false;
    EXPECT_EQ(last.Forward(&saved), (std::vector<float>{out(0, 1)[0], out(0, 1)[1], 0, 0}));

    const std::vector<std::vector<float>> grads = run.Backward(RandomFloats(run.y_size(), 51));
    for (int t = 0; t < run.s.steps * run.n; ++t) {
      const bool masked = t != 1;
      for (int k = 0; k < run.s.in; ++k) {
        EXPECT_EQ(grads[0][t * run.s.in + k] == 0.0f, masked) << "step " << t;
      }
    }
  }
}

// go_backwards: output p is step steps - 1 - p's, the same as running the
// reversed sequence forwards.
TEST(RecurrentTest, GoBackwardsKeepsTheProcessingOrder) {
  Layer back = RandomLayer(RecurrentCell::kGru, true, /*return_sequences=*/true,
                           /*go_backwards=*/true, kIds, 60);
  Layer reversed = back;
  reversed.s.go_backwards = false;
  const int steps = back.s.steps, in = back.s.in;
  for (int r = 0; r < back.n; ++r) {
    for (int t = 0; t < steps; ++t) {
      reversed.ids[r * steps + t] = back.ids[r * steps + steps - 1 - t];
      std::copy_n(back.x.begin() + (r * steps + steps - 1 - t) * in, in,
                  reversed.x.begin() + (r * steps + t) * in);
    }
  }
  std::vector<float> saved;
  const std::vector<float> y = back.Forward(&saved);
  EXPECT_EQ(y, reversed.Forward(&saved));
  Layer forwards = back;
  forwards.s.go_backwards = false;
  EXPECT_NE(y, forwards.Forward(&saved));
}

TEST(RecurrentTest, GatesAndBiasSizes) {
  RecurrentShape s;
  s.units = 5;
  s.cell = RecurrentCell::kLstm;
  EXPECT_EQ(RecurrentGates(s), 4);
  EXPECT_EQ(RecurrentBiasSize(s), 20);
  s.cell = RecurrentCell::kGru;
  EXPECT_EQ(RecurrentGates(s), 3);
  s.reset_after = true;
  EXPECT_EQ(RecurrentBiasSize(s), 30);
  s.reset_after = false;
  EXPECT_EQ(RecurrentBiasSize(s), 15);
  s.use_bias = false;
  EXPECT_EQ(RecurrentBiasSize(s), 0);
  s.steps = 7;
  EXPECT_EQ(RecurrentSavedPerExample(s), 7 * 8 * 5);
  s.cell = RecurrentCell::kLstm;
  EXPECT_EQ(RecurrentSavedPerExample(s), 7 * 11 * 5);
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
