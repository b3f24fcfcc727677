#include "model/keras_optimizer.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

std::string ReadFixture(const std::string& name) {
  std::ifstream in("tests/fixtures/optimizers/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

CompiledOptimizer Read(const std::string& json) {
  absl::StatusOr<std::optional<CompiledOptimizer>> o = ReadCompiledOptimizer(json, "m.json");
  EXPECT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o.ok() && o->has_value());
  return o.ok() && o->has_value() ? **o : CompiledOptimizer();
}

std::string Refused(const std::string& json) {
  absl::StatusOr<std::optional<CompiledOptimizer>> o = ReadCompiledOptimizer(json, "m.json");
  EXPECT_FALSE(o.ok());
  EXPECT_TRUE(o.ok() || o.status().code() == absl::StatusCode::kInvalidArgument);
  return o.ok() ? "" : std::string(o.status().message());
}

// A Keras 3 model file (a .keras archive's config.json) compiled with
// `optimizer`, as Keras 3's serialize_keras_object writes it.
std::string Keras3(const std::string& cls, const std::string& config) {
  return R"({"module": "keras", "class_name": "Sequential", "config": {"layers": []},
    "compile_config": {"optimizer": {"module": "keras.optimizers", "class_name": ")" +
         cls + R"(", "config": )" + config + R"(, "registered_name": null},
    "loss": "mse", "loss_weights": null, "metrics": null, "run_eagerly": false}})";
}

// Keras 3's get_config of every optimizer: its base options, then its own.
std::string Base(const std::string& own) {
  return R"({"name": "x", "learning_rate": 0.01, "weight_decay": null, "clipnorm": null,
    "global_clipnorm": null, "clipvalue": null, "use_ema": false, "ema_momentum": 0.99,
    "ema_overwrite_frequency": null, "loss_scale_factor": null,
    "gradient_accumulation_steps": null)" +
         (own.empty() ? "" : ", " + own) + "}";
}

TEST(KerasOptimizerTest, TensorFlowJsFilesAsTfjsWritesThem) {
  CompiledOptimizer o = Read(ReadFixture("tfjs_adam.json"));
  EXPECT_EQ(o.keras_class, "Adam");
  EXPECT_EQ(o.name, "adam");
  EXPECT_DOUBLE_EQ(o.learning_rate, 0.002);
  EXPECT_DOUBLE_EQ(o.beta1, 0.85);
  EXPECT_DOUBLE_EQ(o.beta2, 0.995);
  EXPECT_DOUBLE_EQ(o.epsilon, 1e-8);
  o = Read(ReadFixture("tfjs_sgd.json"));
  EXPECT_EQ(o.name, "sgd");
  EXPECT_DOUBLE_EQ(o.learning_rate, 0.05);
  o = Read(ReadFixture("tfjs_momentum.json"));
  EXPECT_EQ(o.name, "momentum");
  EXPECT_DOUBLE_EQ(o.momentum, 0.8);
  o = Read(ReadFixture("tfjs_adagrad.json"));
  EXPECT_EQ(o.name, "adagrad");
  EXPECT_DOUBLE_EQ(o.learning_rate, 0.02);
  EXPECT_DOUBLE_EQ(o.initial_accumulator_value, 0.25);
  EXPECT_DOUBLE_EQ(o.epsilon, 1e-7);  // tfjs's backend epsilon, Keras's default
  o = Read(ReadFixture("tfjs_rmsprop.json"));
  EXPECT_EQ(o.keras_class, "RMSProp");
  EXPECT_EQ(o.name, "rmsprop");
  EXPECT_DOUBLE_EQ(o.learning_rate, 0.003);
  EXPECT_DOUBLE_EQ(o.rho, 0.95);  // tfjs calls it decay
  EXPECT_DOUBLE_EQ(o.momentum, 0.5);
  EXPECT_DOUBLE_EQ(o.epsilon, 1e-6);
  EXPECT_TRUE(o.centered);
}

TEST(KerasOptimizerTest, Keras3CompileConfigs) {
  CompiledOptimizer o = Read(Keras3(
      "AdamW", Base(R"("beta_1": 0.9, "beta_2": 0.98, "epsilon": 1e-07, "amsgrad": false)")));
  EXPECT_EQ(o.name, "adamw");
  EXPECT_DOUBLE_EQ(o.weight_decay, 0.004);  // AdamW's default, the file's null
  EXPECT_DOUBLE_EQ(o.beta2, 0.98);
  o = Read(Keras3("AdamW", R"({"learning_rate": 0.001, "weight_decay": 0.05})"));
  EXPECT_DOUBLE_EQ(o.weight_decay, 0.05);
  o = Read(Keras3("SGD", Base(R"("momentum": 0.9, "nesterov": false)")));
  EXPECT_EQ(o.name, "momentum");
  EXPECT_DOUBLE_EQ(o.momentum, 0.9);
  o = Read(Keras3("SGD", Base(R"("momentum": 0.0, "nesterov": false, "weight_decay": 0.01)")));
  EXPECT_EQ(o.name, "sgd");
  EXPECT_DOUBLE_EQ(o.weight_decay, 0.01);
  o = Read(Keras3("RMSprop", Base(R"("rho": 0.8, "momentum": 0.0, "epsilon": 1e-07,
                                     "centered": false)")));
  EXPECT_EQ(o.name, "rmsprop");
  EXPECT_DOUBLE_EQ(o.rho, 0.8);
  EXPECT_FALSE(o.centered);
  o = Read(Keras3("Ftrl", Base(R"("learning_rate_power": -0.6, "initial_accumulator_value": 0.2,
      "l1_regularization_strength": 0.01, "l2_regularization_strength": 0.02,
      "l2_shrinkage_regularization_strength": 0.03, "beta": 0.5)")));
  EXPECT_EQ(o.name, "ftrl");
  EXPECT_DOUBLE_EQ(o.learning_rate_power, -0.6);
  EXPECT_DOUBLE_EQ(o.initial_accumulator_value, 0.2);
  EXPECT_DOUBLE_EQ(o.l1, 0.01);
  EXPECT_DOUBLE_EQ(o.l2, 0.02);
  EXPECT_DOUBLE_EQ(o.l2_shrinkage, 0.03);
  EXPECT_DOUBLE_EQ(o.beta, 0.5);
  o = Read(Keras3("Adagrad", Base(R"("initial_accumulator_value": 0.1, "epsilon": 1e-07)")));
  EXPECT_EQ(o.name, "adagrad");
  o = Read(Keras3("Adam", Base(R"("clipnorm": 1.5)")));
  EXPECT_DOUBLE_EQ(o.clipnorm, 1.5);
  o = Read(Keras3("Adam", Base(R"("global_clipnorm": 2.0)")));
  EXPECT_DOUBLE_EQ(o.global_clipnorm, 2.0);
}

TEST(KerasOptimizerTest, AnExponentialDecayScheduleIsTheRate) {
  const CompiledOptimizer o = Read(Keras3("Adam", R"({"learning_rate": {"module":
      "keras.optimizers.schedules", "class_name": "ExponentialDecay", "config": {
      "initial_learning_rate": 0.1, "decay_steps": 500, "decay_rate": 0.9, "staircase": false,
      "name": "ExponentialDecay"}, "registered_name": null}})"));
  EXPECT_DOUBLE_EQ(o.learning_rate, 0.1);
  EXPECT_DOUBLE_EQ(o.decay_rate, 0.9);
  EXPECT_EQ(o.decay_steps, 500);
}

TEST(KerasOptimizerTest, TfKerasTrainingConfigs) {
  // tf.keras 2.11+ (its new optimizers) and the legacy ones of before.
  CompiledOptimizer o = Read(R"({"class_name": "Sequential", "config": {"layers": []},
      "training_config": {"loss": "mse", "optimizer_config": {"class_name": "Custom>Adam",
      "config": {"name": "Adam", "weight_decay": null, "clipnorm": null, "global_clipnorm": null,
      "clipvalue": null, "use_ema": false, "ema_momentum": 0.99, "ema_overwrite_frequency": null,
      "jit_compile": true, "is_legacy_optimizer": false, "learning_rate": 0.0005,
      "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-07, "amsgrad": false}}}})");
  EXPECT_EQ(o.keras_class, "Custom>Adam");
  EXPECT_EQ(o.name, "adam");
  EXPECT_DOUBLE_EQ(o.learning_rate, 0.0005);
  o = Read(R"({"class_name": "Sequential", "config": {"layers": []},
      "training_config": {"loss": "mse", "optimizer_config": {"class_name": "RMSprop",
      "config": {"name": "RMSprop", "learning_rate": 0.001, "decay": 0.0, "rho": 0.9,
      "momentum": 0.0, "epsilon": 1e-07, "centered": false}}}})");
  EXPECT_EQ(o.name, "rmsprop");
  EXPECT_DOUBLE_EQ(o.rho, 0.9);
}

TEST(KerasOptimizerTest, AFileWithoutACompiledOptimizerHasNone) {
  for (const char* json :
       {R"({"class_name": "Sequential", "config": {"layers": []}})",
        R"({"class_name": "Sequential", "compile_config": null})",
        R"({"compile_config": {"loss": "mse", "optimizer": null}})", "not json"}) {
    absl::StatusOr<std::optional<CompiledOptimizer>> o = ReadCompiledOptimizer(json, "m.json");
    ASSERT_TRUE(o.ok()) << json;
    EXPECT_FALSE(o->has_value()) << json;
  }
}

TEST(KerasOptimizerTest, WhatTheClusterCannotFollowIsRefusedNamingIt) {
  EXPECT_EQ(Refused(Keras3("Nadam", Base(""))),
            "m.json: the compiled optimizer Nadam is not one this cluster applies (SGD, Adam, "
            "AdamW, Adagrad, RMSprop, Ftrl); give --optimizer to train with another");
  EXPECT_EQ(Refused(Keras3("Adam", Base(R"("amsgrad": true)"))),
            "m.json: the compiled optimizer Adam: amsgrad=true is not followed (Adam without "
            "AMSGrad only)");
  EXPECT_EQ(Refused(Keras3("SGD", Base(R"("momentum": 0.9, "nesterov": true)"))),
            "m.json: the compiled optimizer SGD: nesterov=true is not followed (plain momentum "
            "only)");
  EXPECT_EQ(Refused(Keras3("Adam", Base(R"("clipvalue": 0.5)"))),
            "m.json: the compiled optimizer Adam: clipvalue=0.5 is not followed (clipnorm and "
            "global_clipnorm are)");
  EXPECT_NE(Refused(Keras3("Adam", Base(R"("use_ema": true)"))).find("use_ema=true"),
            std::string::npos);
  EXPECT_NE(Refused(Keras3("Adam", Base(R"("gradient_accumulation_steps": 4)")))
                .find("gradient_accumulation_steps=4"),
            std::string::npos);
  EXPECT_NE(Refused(Keras3("Adam", Base(R"("loss_scale_factor": 128.0)")))
                .find("loss_scale_factor=128.0"),
            std::string::npos);
  EXPECT_EQ(Refused(R"({"training_config": {"optimizer_config": {"class_name": "RMSprop",
      "config": {"learning_rate": 0.001, "decay": 0.01, "rho": 0.9}}}})"),
            "m.json: the compiled optimizer RMSprop: decay=0.01 (Keras 2's time-based decay) is "
            "not followed; an ExponentialDecay schedule is");
  EXPECT_NE(Refused(Keras3("Adam", R"({"learning_rate": {"class_name": "PiecewiseConstantDecay",
      "config": {}}})"))
                .find("is a schedule this cluster does not follow"),
            std::string::npos);
  EXPECT_EQ(Refused(Keras3("Adam", R"({"learning_rate": {"class_name": "ExponentialDecay",
      "config": {"initial_learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.5,
      "staircase": true}}})")),
            "learning_rate's ExponentialDecay: staircase=true is not followed (smooth decay only)");
  EXPECT_EQ(Refused(Keras3("Adam", R"({"learning_rate": "fast"})")),
            "m.json: the compiled optimizer Adam: learning_rate=\"fast\" is a schedule this "
            "cluster does not follow (a number or ExponentialDecay)");
  EXPECT_EQ(Refused(Keras3("Adam", R"({"beta_1": "high"})")),
            "m.json: the compiled optimizer Adam: beta_1=\"high\" is not a number");
  EXPECT_EQ(Refused(Keras3("Adam", R"({"clipnorm": 1, "global_clipnorm": 2})")),
            "m.json: the compiled optimizer Adam: clipnorm=1 and global_clipnorm are both set "
            "(Keras refuses that too)");
  EXPECT_NE(Refused(R"({"compile_config": {"optimizer": 7}})").find("has no class_name"),
            std::string::npos);
}

}  // namespace
}  // namespace pscluster
