// The dense optimizers step by step against TensorFlow.js's own
// (tests/fixtures/optimizers/tfjs_trajectories.json, written by
// make_tfjs_trajectories.js with npm @tensorflow/tfjs): from the same
// values, the same gradients, every step's values must agree. TensorFlow.js
// writes Keras's rules for SGD, momentum, Adagrad and RMSprop (plain and
// with momentum); not for centered RMSprop, where it takes
// sqrt(ms - (mg^2 + epsilon)) and Keras sqrt(ms - mg^2 + epsilon). Its Adam adds epsilon after the
// bias correction of the second moment where Keras adds it before, which moves a value by about
// epsilon * lr / sqrt(v): a few float32 ulps at epsilon 1e-8. Centered RMSprop, AdamW and FTRL are
// checked against Keras's formulas in float64 (optimizer_test.cc).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "update/optimizer.h"

namespace pscluster {
namespace {

nlohmann::json ReadTrajectories() {
  std::ifstream in("tests/fixtures/optimizers/tfjs_trajectories.json");
  EXPECT_TRUE(in.good()) << "tests/fixtures/optimizers/tfjs_trajectories.json";
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

OptimizerOptions FromJson(const nlohmann::json& j) {
  OptimizerOptions o;
  o.name = j.at("name").get<std::string>();
  o.learning_rate = j.at("learning_rate").get<float>();
  o.momentum = j.value("momentum", o.momentum);
  o.beta1 = j.value("beta1", o.beta1);
  o.beta2 = j.value("beta2", o.beta2);
  o.epsilon = j.value("epsilon", o.epsilon);
  o.rho = j.value("rho", o.rho);
  o.centered = j.value("centered", o.centered);
  o.initial_accumulator_value = j.value("initial_accumulator_value", o.initial_accumulator_value);
  return o;
}

TEST(OptimizerTfjsTest, EveryStepIsTensorFlowJsStep) {
  const nlohmann::json file = ReadTrajectories();
  ASSERT_FALSE(file.is_discarded());
  ASSERT_GE(file.at("cases").size(), 7u);
  for (const nlohmann::json& c : file.at("cases")) {
    const OptimizerOptions o = FromJson(c.at("options"));
    SCOPED_TRACE(c.at("options").dump());
    std::vector<float> p = c.at("values").get<std::vector<float>>();
    const std::vector<float> start = p;
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(o, p.size());
    ASSERT_TRUE(opt.ok()) << opt.status();
    double worst = 0;  // the largest error, as a share of the tolerance
    int step = 0;
    for (const nlohmann::json& s : c.at("steps")) {
      ++step;
      const std::vector<float> g = s.at("gradient").get<std::vector<float>>();
      const std::vector<float> want = s.at("values").get<std::vector<float>>();
      ASSERT_EQ(g.size(), p.size());
      (*opt)->Apply(g.data(), p.data());
      for (size_t i = 0; i < p.size(); ++i) {
        // Within a millionth of how far the value has moved from its start,
        // plus half a float32 ulp of the value per step so far (both sides
        // round each step, each in its own order): measured at most 0.81
        // of that. Adam within 5 times it (measured 2.6): the epsilon.
        const double moved = std::fabs(double{want[i]} - start[i]);
        const double tol = 1e-6 * moved + step * 6e-8 * std::max(1.0, std::fabs(double{want[i]}));
        worst = std::max(worst, std::fabs(double{p[i]} - want[i]) / tol);
        ASSERT_NEAR(p[i], want[i], tol * (o.name == "adam" ? 5 : 1))
            << "value " << i << " after step " << step;
      }
    }
    std::printf("%-60s worst error %.3f of the tolerance\n", c.at("options").dump().c_str(), worst);
  }
}

}  // namespace
}  // namespace pscluster
