#include "common/model_spec.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pscluster {
namespace {

// Walks the layers over the input shape, deriving each variable's shape
// and its offset in the flat vector.
ModelSpec Build(std::string name, int h, int w, int c, int num_classes,
                std::vector<LayerSpec> layers) {
  ModelSpec spec;
  spec.name = std::move(name);
  spec.input_height = h;
  spec.input_width = w;
  spec.input_channels = c;
  spec.num_classes = num_classes;
  spec.layers = std::move(layers);
  int64_t offset = 0;
  auto add = [&](const std::string& var, std::vector<int64_t> shape,
                 Initializer init, int64_t fan_in, int64_t fan_out) {
    VariableSpec v;
    v.name = var;
    v.shape = std::move(shape);
    v.initializer = init;
    v.fan_in = fan_in;
    v.fan_out = fan_out;
    v.size = 1;
    for (int64_t d : v.shape) v.size *= d;
    v.offset = offset;
    offset += v.size;
    spec.variables.push_back(std::move(v));
  };
  int64_t flat = 0;  // features after Flatten
  for (const LayerSpec& l : spec.layers) {
    switch (l.kind) {
      case LayerKind::kConv2D: {
        const int64_t k = l.kernel_size;
        add(l.name + "/kernel", {k, k, c, l.units},
            Initializer::kGlorotUniform, k * k * c, k * k * l.units);
        add(l.name + "/bias", {l.units}, Initializer::kZeros, 0, 0);
        h = h - l.kernel_size + 1;
        w = w - l.kernel_size + 1;
        c = l.units;
        break;
      }
      case LayerKind::kMaxPool2D:
        h /= l.pool_size;
        w /= l.pool_size;
        break;
      case LayerKind::kFlatten:
        flat = static_cast<int64_t>(h) * w * c;
        break;
      case LayerKind::kDense: {
        add(l.name + "/kernel", {flat, l.units}, Initializer::kGlorotUniform,
            flat, l.units);
        add(l.name + "/bias", {l.units}, Initializer::kZeros, 0, 0);
        flat = l.units;
        break;
      }
    }
  }
  spec.num_parameters = offset;
  return spec;
}

LayerSpec Conv(const char* name, int filters, int k) {
  return {LayerKind::kConv2D, name, filters, k, 0, Activation::kRelu};
}
LayerSpec Pool(const char* name, int p) {
  return {LayerKind::kMaxPool2D, name, 0, 0, p, Activation::kNone};
}
LayerSpec Flatten() {
  return {LayerKind::kFlatten, "flatten", 0, 0, 0, Activation::kNone};
}
LayerSpec Dense(const char* name, int units, Activation a) {
  return {LayerKind::kDense, name, units, 0, 0, a};
}

}  // namespace

std::vector<std::string> KnownModels() { return {"cnn", "mlp"}; }

absl::StatusOr<ModelSpec> ModelByName(const std::string& name) {
  if (name == "cnn") {
    return Build("cnn", 28, 28, 1, 10,
                 {Conv("conv1", 32, 3), Pool("pool1", 2), Conv("conv2", 64, 3),
                  Pool("pool2", 2), Flatten(),
                  Dense("dense1", 64, Activation::kRelu),
                  Dense("dense2", 10, Activation::kNone)});
  }
  if (name == "mlp") {
    return Build("mlp", 28, 28, 1, 10,
                 {Flatten(), Dense("dense1", 32, Activation::kRelu),
                  Dense("dense2", 10, Activation::kNone)});
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model \"", name,
                   "\"; known: ", absl::StrJoin(KnownModels(), ", ")));
}

std::vector<float> InitialParameters(const ModelSpec& spec, uint64_t seed) {
  std::vector<float> params(spec.num_parameters, 0.0f);
  for (const VariableSpec& v : spec.variables) {
    if (v.initializer != Initializer::kGlorotUniform) continue;
    // FNV-1a of the name, mixed with the seed: one stream per variable.
    uint64_t h = 1469598103934665603ull ^ seed;
    for (char ch : v.name) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
    std::mt19937_64 rng(h);
    const double limit = std::sqrt(6.0 / static_cast<double>(v.fan_in + v.fan_out));
    std::uniform_real_distribution<double> dist(-limit, limit);
    for (int64_t i = 0; i < v.size; ++i) {
      params[v.offset + i] = static_cast<float>(dist(rng));
    }
  }
  return params;
}

}  // namespace pscluster
