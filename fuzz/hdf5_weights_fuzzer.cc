// Fuzz target for Keras weight files (model/keras_weights.h
// ParseKerasWeights, then initial_weights.h FlattenWeights): the input is
// a .weights.h5 (Keras 3, Keras 2.13-2.15) or Keras 2 .h5, read from
// memory through Debian's libhdf5 (its core driver: the same reading as a
// file opened by name) for the model of tests/fixtures/keras/
// keras3_small.json. Malformed files must fail with InvalidArgument naming
// the file, never crash or allocate what a dataspace claims beyond the
// model. libhdf5 itself is not instrumented (only its crashes show).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fuzz/keras_small_model.h"
#include "model/initial_weights.h"
#include "model/keras_weights.h"

namespace {

constexpr const char* kSource = "fuzz.weights.h5";

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "hdf5_weights_fuzzer: contract broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  const ModelSpec& spec = KerasSmallModel();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<FileTensor>> tensors = ParseKerasWeights(bytes, kSource, spec);
  if (!tensors.ok()) {
    Require(tensors.status().message().find(kSource) != std::string::npos,
            "an error that does not name the file");
    return 0;
  }
  for (const FileTensor& t : *tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) {
      Require(d >= 0 && !__builtin_mul_overflow(n, d, &n), "a tensor's shape overflows");
    }
    Require(t.dtype != "float32" || static_cast<int64_t>(t.values.size()) == n,
            "a float32 tensor's values are not its shape's product");
  }
  absl::StatusOr<std::vector<float>> flat = FlattenWeights(*tensors, spec, kSource);
  Require(!flat.ok() || static_cast<int64_t>(flat->size()) == spec.num_parameters,
          "the flattened weights are not the model's parameters");
  return 0;
}
