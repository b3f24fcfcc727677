// The model *spec*: the layer list, the variables with names, shapes and
// initializers, and where each variable sits in the flat parameter vector.
// Every daemon derives the same spec from the model's name, so the chief,
// the parameter servers and the workers agree on layout without exchanging
// it. Plain value types: safe to share between threads once built.
#ifndef PSCLUSTER_COMMON_MODEL_SPEC_H_
#define PSCLUSTER_COMMON_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pscluster {

enum class LayerKind { kConv2D, kMaxPool2D, kFlatten, kDense };
enum class Activation { kNone, kRelu };

// One layer. Activations are NHWC; convolutions are "valid" with stride 1;
// pooling windows are square with stride equal to the window.
struct LayerSpec {
  LayerKind kind;
  std::string name;      // "conv1"; variables are "<name>/kernel", "<name>/bias"
  int units = 0;         // kConv2D: filters; kDense: output units
  int kernel_size = 0;   // kConv2D: square kernel side
  int pool_size = 0;     // kMaxPool2D: window side (and stride)
  Activation activation = Activation::kNone;
};

enum class Initializer { kGlorotUniform, kZeros };

// A variable and its place in the flat parameter vector. Kernel layouts
// follow Keras: Conv2D is [kh, kw, in, out] (HWIO), Dense is [in, out].
struct VariableSpec {
  std::string name;
  std::vector<int64_t> shape;
  Initializer initializer;
  int64_t fan_in = 0;   // for Glorot
  int64_t fan_out = 0;
  int64_t offset = 0;   // first element in the flat parameter vector
  int64_t size = 0;     // number of elements
};

struct ModelSpec {
  std::string name;
  int input_height = 0;
  int input_width = 0;
  int input_channels = 0;
  int num_classes = 0;
  std::vector<LayerSpec> layers;
  std::vector<VariableSpec> variables;  // in layer order, kernel before bias
  int64_t num_parameters = 0;
};

// Names accepted by ModelByName, for --help texts and error messages.
std::vector<std::string> KnownModels();

// "cnn": the seeds' CNN for 28x28x1 inputs, 121,930 parameters:
//   Conv2D(32,3,relu) MaxPool2 Conv2D(64,3,relu) MaxPool2 Flatten
//   Dense(64,relu) Dense(10).
// "mlp": Flatten Dense(32,relu) Dense(10), small and fast for tests.
// InvalidArgument naming the model when it is unknown.
absl::StatusOr<ModelSpec> ModelByName(const std::string& name);

// Keras defaults: Glorot-uniform kernels, zero biases. Deterministic in
// `seed`: every variable draws from its own stream derived from the seed
// and the variable's name, so adding a variable does not shift the others.
std::vector<float> InitialParameters(const ModelSpec& spec, uint64_t seed);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_MODEL_SPEC_H_
