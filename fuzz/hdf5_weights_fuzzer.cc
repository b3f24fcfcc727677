// Fuzz target for Keras weight files (model/keras_weights.h
// ParseKerasWeights, then initial_weights.h FlattenWeights): the input is
// a .weights.h5 (Keras 3, Keras 2.13-2.15) or Keras 2 .h5, read from
// memory through Debian's libhdf5 (its core driver: the same reading as a
// file opened by name) for the model of tests/fixtures/keras/
// keras3_small.json. Malformed files must fail with InvalidArgument naming
// the file, never crash or allocate what a dataspace claims beyond the
// model. libhdf5 itself is not instrumented (only its crashes show).
//
// libhdf5 reads in a forked child process, as in the daemons: a crash or
// an allocation spree of libhdf5's is then the refusal of the file it is
// there, and what this target finds is the child dying any other way
// (a sanitizer report in our reader: an internal error) or a wrong
// answer. The child's coverage comes back through fuzz/forked_reader.h.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fuzz/forked_reader.h"
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

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  pscluster::SetUpForkedReader();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  const ModelSpec& spec = KerasSmallModel();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ClearForkedCoverage();
  Hdf5ReadLimits limits;
  limits.memory_bytes = int64_t{512} << 20;
  limits.time = absl::Seconds(5);  // under libFuzzer's -timeout=10
  absl::StatusOr<std::vector<FileTensor>> tensors =
      ParseKerasWeights(bytes, kSource, spec, limits);
  MergeForkedCoverage();
  if (!tensors.ok()) {
    Require(!absl::IsInternal(tensors.status()),
            "the reading process died other than by libhdf5 crashing (its report is above)");
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
