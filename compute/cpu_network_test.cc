#include "compute/cpu_network.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "compute/testing/arriving_weights_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

// A small CNN on 12x12x1 inputs: conv(filters1, 3, relu) pool 2 conv(8, 3, relu) pool 2 flatten
// dense(10). With filters1 a multiple of 8 the first conv and pool run as
// one fused kernel; otherwise they run unfused, and the second conv's input
// gradient takes the GEMM + col2im path (in_c not a multiple of 8).
ModelSpec SmallCnn(int filters1) {
  auto layer = [](LayerKind kind, const char* name, int units, int k, int pool,
                  Activation act) {
    LayerSpec l;
    l.kind = kind;
    l.name = name;
    l.units = units;
    l.window_h = l.window_w = k > 0 ? k : pool;
    if (pool > 0) l.stride_h = l.stride_w = pool;
    l.activation = act;
    return l;
  };
  // 12 -conv-> 10 -pool-> 5 -conv-> 3 -pool-> 1: 8 features.
  absl::StatusOr<ModelSpec> spec = BuildModelSpec(
      "small_cnn", 12, 12, 1, 10,
      {layer(LayerKind::kConv2D, "conv1", filters1, 3, 0, Activation::kRelu),
       layer(LayerKind::kMaxPool2D, "pool1", 0, 0, 2, Activation::kNone),
       layer(LayerKind::kConv2D, "conv2", 8, 3, 0, Activation::kRelu),
       layer(LayerKind::kMaxPool2D, "pool2", 0, 0, 2, Activation::kNone),
       layer(LayerKind::kFlatten, "flatten", 0, 0, 0, Activation::kNone),
       layer(LayerKind::kDense, "dense", 10, 0, 0, Activation::kNone)});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Flatten, Dense(hidden, relu), Dense(10) on 28x28x1: with hidden = 1400,
// 1,113,010 parameters (4.5 MB), too many to stay in cache.
ModelSpec WideMlp(int hidden) {
  auto dense = [](const char* name, int units, Activation act) {
    LayerSpec l;
    l.kind = LayerKind::kDense;
    l.name = name;
    l.units = units;
    l.activation = act;
    return l;
  };
  LayerSpec flatten;
  flatten.kind = LayerKind::kFlatten;
  flatten.name = "flatten";
  absl::StatusOr<ModelSpec> spec =
      BuildModelSpec("wide_mlp", 28, 28, 1, 10,
                     {flatten, dense("hidden", hidden, Activation::kRelu),
                      dense("out", 10, Activation::kNone)});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// A model, its parameters and a random batch for it.
struct Problem {
  Problem(const std::string& model, int batch, uint64_t seed)
      : Problem(*ModelByName(model), batch, seed) {}

  Problem(const ModelSpec& model, int batch, uint64_t seed) : batch(batch) {
    spec = model;
    params = InitialParameters(spec, seed);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
    std::uniform_real_distribution<float> bias(-0.1f, 0.1f);
    // Non-zero biases, so their gradients are exercised in a generic state.
    for (const VariableSpec& v : spec.variables) {
      if (v.initializer.kind == Initializer::Kind::kZeros) {
        for (int64_t i = 0; i < v.size; ++i) params[v.offset + i] = bias(rng);
      }
    }
    images.resize(int64_t{batch} * spec.input_height * spec.input_width *
                  spec.input_channels);
    for (float& p : images) p = pixel(rng);
    labels.resize(batch);
    for (float& l : labels)
      l = static_cast<float>(rng() % spec.num_classes);
  }

  std::unique_ptr<CpuNetwork> Make(int threads, int max_batch = 64) const {
    CpuNetworkOptions options;
    options.max_batch = max_batch;
    options.num_threads = threads;
    auto net = CpuNetwork::Create(spec, options);
    EXPECT_TRUE(net.ok()) << net.status();
    return net.ok() ? *std::move(net) : nullptr;
  }

  ModelSpec spec;
  int batch;
  std::vector<float> params, images;
  std::vector<float> labels;
};

// Runs TrainStep and returns the gradient.
std::vector<float> Gradient(CpuNetwork& net, const Problem& p,
                            float* loss = nullptr, int* correct = nullptr) {
  std::vector<float> grads(p.spec.num_parameters, NAN);
  float l = 0;
  int c = 0;
  absl::Status st =
      net.TrainStep(p.params.data(), p.images.data(), p.labels.data(), p.batch,
                    grads.data(), &l, &c);
  EXPECT_TRUE(st.ok()) << st;
  if (loss != nullptr) *loss = l;
  if (correct != nullptr) *correct = c;
  return grads;
}

// An independent, naive double-precision forward pass over the spec's
// layers: the oracle for the loss and, through finite differences with a
// tiny step, for the gradient.
double ReferenceMeanLoss(const Problem& p, const std::vector<double>& params) {
  const ModelSpec& spec = p.spec;
  auto var = [&](const std::string& name) {
    for (const VariableSpec& v : spec.variables) {
      if (v.name == name) return params.data() + v.offset;
    }
    ADD_FAILURE() << "no variable " << name;
    return params.data();
  };
  double total = 0;
  const int64_t image_size =
      int64_t{spec.input_height} * spec.input_width * spec.input_channels;
  for (int n = 0; n < p.batch; ++n) {
    int h = spec.input_height, w = spec.input_width, c = spec.input_channels;
    std::vector<double> a(p.images.begin() + n * image_size,
                          p.images.begin() + (n + 1) * image_size);
    for (const LayerSpec& l : spec.layers) {
      const bool relu = l.activation == Activation::kRelu;
      std::vector<double> out;
      if (l.kind == LayerKind::kConv2D) {
        const int k = l.window_h, oh = h - k + 1, ow = w - k + 1;
        const double* kernel = var(l.name + "/kernel");
        const double* bias = var(l.name + "/bias");
        out.assign(int64_t{oh} * ow * l.units, 0.0);
        for (int i = 0; i < oh; ++i)
          for (int j = 0; j < ow; ++j)
            for (int o = 0; o < l.units; ++o) {
              double z = bias[o];
              for (int kh = 0; kh < k; ++kh)
                for (int kw = 0; kw < k; ++kw)
                  for (int ci = 0; ci < c; ++ci)
                    z += a[((i + kh) * w + j + kw) * c + ci] *
                         kernel[((kh * k + kw) * c + ci) * l.units + o];
              out[(i * ow + j) * l.units + o] = relu ? std::max(z, 0.0) : z;
            }
        h = oh, w = ow, c = l.units;
      } else if (l.kind == LayerKind::kMaxPool2D) {
        const int q = l.window_h, oh = h / q, ow = w / q;
        out.assign(int64_t{oh} * ow * c, -1e300);
        for (int i = 0; i < oh * q; ++i)
          for (int j = 0; j < ow * q; ++j)
            for (int ci = 0; ci < c; ++ci) {
              double& m = out[((i / q) * ow + j / q) * c + ci];
              m = std::max(m, a[(i * w + j) * c + ci]);
            }
        h = oh, w = ow;
      } else if (l.kind == LayerKind::kDense) {
        const int in = h * w * c;
        const double* kernel = var(l.name + "/kernel");
        const double* bias = var(l.name + "/bias");
        out.assign(l.units, 0.0);
        for (int o = 0; o < l.units; ++o) {
          double z = bias[o];
          for (int i = 0; i < in; ++i) z += a[i] * kernel[i * l.units + o];
          out[o] = relu ? std::max(z, 0.0) : z;
        }
        h = w = 1, c = l.units;
      } else {
        continue;  // Flatten: NHWC is already flat
      }
      a = std::move(out);
    }
    double zmax = a[0], sum = 0;
    for (double z : a) zmax = std::max(zmax, z);
    for (double z : a) sum += std::exp(z - zmax);
    total += std::log(sum) + zmax - a[static_cast<int>(p.labels[n])];
  }
  return total / p.batch;
}

// Checks about 2 * per_variable parameters spread over every variable (from
// both ends) against central differences of the double-precision reference
// loss. The step is tiny, so crossing a ReLU or max-pool kink is unlikely,
// and the tolerance is that of a float gradient.
void CheckAgainstFiniteDifferences(const Problem& p, int per_variable) {
  auto net = p.Make(1);
  ASSERT_NE(net, nullptr);
  float loss = 0;
  const std::vector<float> grads = Gradient(*net, p, &loss);
  std::vector<double> params(p.params.begin(), p.params.end());
  EXPECT_NEAR(loss, ReferenceMeanLoss(p, params), 1e-5);
  const double eps = 1e-6;
  int checked = 0, bad = 0;
  for (const VariableSpec& v : p.spec.variables) {
    const int64_t stride = std::max<int64_t>(1, v.size / per_variable);
    for (int64_t j = 0; j < v.size; j += stride) {
      for (int64_t i : {v.offset + j, v.offset + (v.size - 1 - j)}) {
        const double saved = params[i];
        params[i] = saved + eps;
        const double up = ReferenceMeanLoss(p, params);
        params[i] = saved - eps;
        const double down = ReferenceMeanLoss(p, params);
        params[i] = saved;
        const double numeric = (up - down) / (2 * eps);
        ++checked;
        if (std::fabs(grads[i] - numeric) > 2e-5 + 1e-3 * std::fabs(numeric)) {
          ++bad;
          ADD_FAILURE() << v.name << "[" << i - v.offset << "]: analytic "
                        << grads[i] << " numeric " << numeric;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << checked;
  EXPECT_GE(checked, 2 * static_cast<int>(p.spec.variables.size()) *
                         std::min(per_variable, 10));
}

TEST(CpuNetworkTest, MlpGradientMatchesFiniteDifferences) {
  CheckAgainstFiniteDifferences(Problem("mlp", 5, 1), 16);
}

TEST(CpuNetworkTest, CnnGradientMatchesFiniteDifferences) {
  CheckAgainstFiniteDifferences(Problem("cnn", 2, 2), 8);
}

TEST(CpuNetworkTest, UnfusedFirstLayerMatchesFiniteDifferences) {
  CheckAgainstFiniteDifferences(Problem(SmallCnn(6), 3, 10), 12);
}

TEST(CpuNetworkTest, FusedFirstLayerMatchesFiniteDifferences) {
  CheckAgainstFiniteDifferences(Problem(SmallCnn(8), 3, 11), 12);
}

// Weights beyond the cache: one pass per thread instead of micro-batches.
TEST(CpuNetworkTest, WideMlpGradientMatchesFiniteDifferences) {
  const Problem p(WideMlp(1400), 5, 12);
  EXPECT_EQ(p.Make(1)->micro_batch(), 64);  // the whole of max_batch
  EXPECT_EQ(p.Make(2)->micro_batch(), 32);
  EXPECT_EQ(Problem("cnn", 5, 12).Make(1)->micro_batch(), 8);
  CheckAgainstFiniteDifferences(p, 6);
}

// The gradient of the batch is the size-weighted mean of its halves': tests
// the sum over micro-batches and the 1 / batch scaling.
TEST(CpuNetworkTest, GradientIsMeanOverExamples) {
  Problem whole("cnn", 40, 3);
  Problem first = whole, second = whole;
  first.batch = second.batch = 20;
  const int64_t image = 28 * 28;
  first.images.resize(20 * image);
  second.images.erase(second.images.begin(),
                      second.images.begin() + 20 * image);
  first.labels.resize(20);
  second.labels.erase(second.labels.begin(), second.labels.begin() + 20);
  auto net = whole.Make(1);
  float loss = 0, loss1 = 0, loss2 = 0;
  const std::vector<float> g = Gradient(*net, whole, &loss);
  const std::vector<float> g1 = Gradient(*net, first, &loss1);
  const std::vector<float> g2 = Gradient(*net, second, &loss2);
  EXPECT_NEAR(loss, (loss1 + loss2) / 2, 1e-5);
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], (g1[i] + g2[i]) / 2, 1e-6 + 1e-4 * std::fabs(g[i])) << i;
  }
}

TEST(CpuNetworkTest, TwoThreadsMatchOne) {
  for (const std::string model : {"cnn", "mlp", "wide_mlp"}) {
    // Odd: uneven shares, several micro-batches.
    Problem p = model == "wide_mlp" ? Problem(WideMlp(1400), 37, 4) : Problem(model, 37, 4);
    auto one = p.Make(1);
    auto two = p.Make(2);
    float loss1 = 0, loss2 = 0;
    int correct1 = 0, correct2 = 0;
    const std::vector<float> g1 = Gradient(*one, p, &loss1, &correct1);
    const std::vector<float> g2 = Gradient(*two, p, &loss2, &correct2);
    EXPECT_NEAR(loss1, loss2, 1e-5) << model;
    EXPECT_EQ(correct1, correct2) << model;
    for (size_t i = 0; i < g1.size(); ++i) {
      ASSERT_NEAR(g1[i], g2[i], 1e-6 + 1e-4 * std::fabs(g1[i]))
          << model << " " << i;
    }
  }
}

// What the gradient listener was told: each `from` with a copy of the
// gradient's suffix [from, end) at that moment.
struct ListenerLog {
  std::vector<int64_t> from;
  std::vector<std::vector<float>> suffix;
};

// Runs a TrainStep with a listener on `net` and checks what it said: each
// suffix it called final was final (bit-identical to the step's result),
// the marks fell, the last was 0, and the gradient is the one a step
// without a listener computes.
void CheckListener(CpuNetwork& net, const float* params, const float* images,
                   const float* labels, int batch, const std::string& what) {
  const int64_t n = net.spec().num_parameters;
  std::vector<float> plain(n), grads(n, NAN);
  float loss = 0;
  int correct = 0;
  ASSERT_TRUE(net.TrainStep(params, images, labels, batch, plain.data(), &loss, &correct, 5).ok());
  ListenerLog log;
  net.set_gradient_listener([&](int64_t from) {
    log.from.push_back(from);
    log.suffix.emplace_back(grads.begin() + from, grads.end());
  });
  ASSERT_TRUE(net.TrainStep(params, images, labels, batch, grads.data(), &loss, &correct, 5).ok());
  net.set_gradient_listener(nullptr);
  ASSERT_FALSE(log.from.empty()) << what;
  EXPECT_EQ(log.from.back(), 0) << what;
  for (size_t k = 0; k < log.from.size(); ++k) {
    if (k > 0) EXPECT_LT(log.from[k], log.from[k - 1]) << what << " call " << k;
    const std::vector<float> final_suffix(grads.begin() + log.from[k], grads.end());
    ASSERT_EQ(log.suffix[k], final_suffix) << what << ": the suffix from " << log.from[k]
                                           << " changed after it was called final";
  }
  EXPECT_EQ(grads, plain) << what;
}

TEST(CpuNetworkTest, GradientListenerIsToldOnlyWhatIsFinal) {
  for (const std::string model : {"cnn", "mlp", "wide_mlp"}) {
    Problem p = model == "wide_mlp" ? Problem(WideMlp(1400), 37, 4) : Problem(model, 37, 4);
    for (int threads : {1, 2, 3}) {
      auto net = p.Make(threads);
      CheckListener(*net, p.params.data(), p.images.data(), p.labels.data(), p.batch,
                    model + " on " + std::to_string(threads) + " threads");
    }
  }
}

TEST(CpuNetworkTest, ForwardWaitsForEachLayersWeightsAsTheyArrive) {
  for (const std::string model : {"cnn", "mlp", "wide_mlp"}) {
    Problem p = model == "wide_mlp" ? Problem(WideMlp(1400), 37, 4) : Problem(model, 37, 4);
    for (int threads : {1, 2, 3}) {
      auto net = p.Make(threads);
      testing_models::CheckStepOnArrivingWeights(
          *net, p.params.data(), p.images.data(), p.labels.data(), p.batch,
          model + " on " + std::to_string(threads) + " threads");
    }
  }
}

TEST(CpuNetworkTest, MoreThreadsThanExamples) {
  Problem p("cnn", 2, 5);
  auto one = p.Make(1);
  auto three = p.Make(3);
  const std::vector<float> g1 = Gradient(*one, p);
  const std::vector<float> g3 = Gradient(*three, p);
  for (size_t i = 0; i < g1.size(); ++i) {
    ASSERT_NEAR(g1[i], g3[i], 1e-6 + 1e-4 * std::fabs(g1[i])) << i;
  }
}

TEST(CpuNetworkTest, RepeatedStepsAreBitIdentical) {
  Problem p("cnn", 33, 6);
  auto net = p.Make(2);
  EXPECT_EQ(Gradient(*net, p), Gradient(*net, p));
}

TEST(CpuNetworkTest, EvaluateMatchesTrainStep) {
  Problem p("cnn", 24, 7);
  auto net = p.Make(2);
  float loss = 0;
  int correct = 0;
  Gradient(*net, p, &loss, &correct);
  double loss_sum = 0;
  int eval_correct = -1;
  ASSERT_TRUE(net->Evaluate(p.params.data(), p.images.data(), p.labels.data(),
                            p.batch, &loss_sum, &eval_correct)
                  .ok());
  EXPECT_NEAR(loss_sum / p.batch, loss, 1e-5);
  EXPECT_GT(loss, 1.0);  // about log(10) at initialisation
  EXPECT_EQ(eval_correct, correct);
}

TEST(CpuNetworkTest, BatchAboveMaxIsInvalidArgument) {
  Problem p("mlp", 9, 8);
  auto net = p.Make(2, /*max_batch=*/8);
  std::vector<float> grads(p.spec.num_parameters);
  float loss = 0;
  int correct = 0;
  absl::Status st =
      net->TrainStep(p.params.data(), p.images.data(), p.labels.data(), 9,
                     grads.data(), &loss, &correct);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("9"), std::string::npos) << st;
  EXPECT_NE(st.message().find("8"), std::string::npos) << st;
  double loss_sum = 0;
  EXPECT_EQ(net->Evaluate(p.params.data(), p.images.data(), p.labels.data(), 9,
                          &loss_sum, &correct)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(net->TrainStep(p.params.data(), p.images.data(), p.labels.data(), 0,
                           grads.data(), &loss, &correct)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuNetworkTest, LabelOutOfRangeIsInvalidArgument) {
  Problem p("mlp", 4, 9);
  p.labels[2] = 10;
  auto net = p.Make(1);
  std::vector<float> grads(p.spec.num_parameters);
  float loss = 0;
  int correct = 0;
  absl::Status st =
      net->TrainStep(p.params.data(), p.images.data(), p.labels.data(), p.batch,
                     grads.data(), &loss, &correct);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("label 10"), std::string::npos) << st;
}

TEST(CpuNetworkTest, CreateRejectsBadOptionsAndSpecs) {
  const ModelSpec cnn = *ModelByName("cnn");
  CpuNetworkOptions options;
  options.max_batch = 0;
  EXPECT_EQ(CpuNetwork::Create(cnn, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = CpuNetworkOptions();
  options.num_threads = 0;
  EXPECT_EQ(CpuNetwork::Create(cnn, options).status().code(),
            absl::StatusCode::kInvalidArgument);

  ModelSpec no_flatten = *ModelByName("mlp");
  no_flatten.layers.erase(no_flatten.layers.begin());  // Flatten
  EXPECT_EQ(CpuNetwork::Create(no_flatten, CpuNetworkOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);

  ModelSpec bad_shape = cnn;
  bad_shape.variables[0].shape = {3, 3, 1, 31};
  auto st = CpuNetwork::Create(bad_shape, CpuNetworkOptions()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("conv1/kernel"), std::string::npos) << st;
}

}  // namespace
}  // namespace pscluster
