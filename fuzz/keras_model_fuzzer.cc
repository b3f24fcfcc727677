// Fuzz target for Keras model JSON (model/keras_model.h ParseKerasModel):
// the input is the file, as `--model` hands it to the chief (tf.keras /
// Keras 2 and Keras 3 `to_json()`, TensorFlow.js `toJSON()` and
// `model.json`, a .keras archive's config.json). Malformed or hostile
// files must fail with InvalidArgument naming the source, never crash,
// recurse without bound or allocate what a shape claims. A model that
// parses must hold together: its graph checks out (NodeShapes), its
// variables tile the parameters, and a loss named on the command line
// instead of the file's is refused or taken, never a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "model/keras_model.h"
#include "model/model_spec.h"

namespace {

constexpr const char* kSource = "fuzz/model.json";

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "keras_model_fuzzer: contract broken: %s\n", what);
  std::abort();
}

void CheckSpec(const pscluster::ModelSpec& spec) {
  Require(pscluster::NodeShapes(spec).ok(), "a parsed model's graph does not check out");
  Require(spec.num_classes > 0, "a parsed model has no outputs");
  int64_t offset = 0;
  for (const pscluster::VariableSpec& v : spec.variables) {
    Require(v.offset == offset, "variables do not tile the parameters");
    int64_t size = 1;
    for (int64_t d : v.shape) {
      Require(d >= 0 && !__builtin_mul_overflow(size, d, &size), "a shape overflows");
    }
    Require(size == v.size, "a variable's size is not its shape's product");
    Require(!__builtin_add_overflow(offset, size, &offset), "the parameters overflow");
  }
  Require(offset == spec.num_parameters, "num_parameters is not the variables' total");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ModelSpec> spec = ParseKerasModel(json, kSource);
  if (!spec.ok()) {
    Require(spec.status().message().find(kSource) != absl::string_view::npos,
            "an error that does not name the file");
    return 0;
  }
  CheckSpec(*spec);
  for (const char* loss : {"categorical_crossentropy", "binary_crossentropy", "mse"}) {
    absl::StatusOr<ModelSpec> with = ParseKerasModel(json, kSource, loss);
    if (with.ok()) CheckSpec(*with);
  }
  return 0;
}
