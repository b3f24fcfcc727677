// The model of tests/fixtures/keras/keras3_small.json, built in code so
// that the weight-file fuzz targets need no file beside them: Conv2D(8,
// 3x3, same) BatchNormalization ReLU MaxPool(2) Conv2D(16, 3x3, same,
// relu) MaxPool(2) Dropout Flatten Dense(32, relu) Dense(10, softmax) over
// 8x8x1 inputs, with the fixture's layer names. The weight fixtures
// (keras3_small*.weights.h5, keras2_small.h5, keras3_small_trained.keras)
// are its weights.
#ifndef PSCLUSTER_FUZZ_KERAS_SMALL_MODEL_H_
#define PSCLUSTER_FUZZ_KERAS_SMALL_MODEL_H_

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_spec.h"

namespace pscluster {

inline const ModelSpec& KerasSmallModel() {
  static const ModelSpec* spec = [] {
    auto layer = [](LayerKind kind, const char* name) {
      LayerSpec l;
      l.kind = kind;
      l.name = name;
      return l;
    };
    auto conv = [&](const char* name, int filters, Activation activation) {
      LayerSpec l = layer(LayerKind::kConv2D, name);
      l.units = filters;
      l.window_h = l.window_w = 3;
      l.padding = Padding::kSame;
      l.activation = activation;
      return l;
    };
    auto pool = [&](const char* name) {
      LayerSpec l = layer(LayerKind::kMaxPool2D, name);
      l.window_h = l.window_w = l.stride_h = l.stride_w = 2;
      return l;
    };
    auto dense = [&](const char* name, int units, Activation activation) {
      LayerSpec l = layer(LayerKind::kDense, name);
      l.units = units;
      l.activation = activation;
      return l;
    };
    LayerSpec relu = layer(LayerKind::kActivation, "relu_a");
    relu.activation = Activation::kRelu;
    LayerSpec drop = layer(LayerKind::kDropout, "drop_b");
    drop.rate = 0.25f;
    std::vector<LayerSpec> layers = {
        conv("conv_a", 8, Activation::kNone), layer(LayerKind::kBatchNorm, "bn_a"), relu,
        pool("pool_a"), conv("conv_b", 16, Activation::kRelu), pool("pool_b"), drop,
        layer(LayerKind::kFlatten, "flatten"), dense("fc", 32, Activation::kRelu),
        dense("out", 10, Activation::kSoftmax)};
    absl::StatusOr<ModelSpec> built =
        BuildModelSpec("keras3_small", 8, 8, 1, 10, std::move(layers));
    if (!built.ok()) {
      std::fprintf(stderr, "the keras3_small model does not build\n");
      std::abort();
    }
    return new ModelSpec(*std::move(built));  // lives as long as the process
  }();
  return *spec;
}

}  // namespace pscluster

#endif  // PSCLUSTER_FUZZ_KERAS_SMALL_MODEL_H_
