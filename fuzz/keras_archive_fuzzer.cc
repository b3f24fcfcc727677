// Fuzz target for .keras archives (zip, via libzip) as users hand them in:
// the input is written to a file model.keras and read by the same calls
// as the chief's --initial_weights (LoadInitialWeights: the archive's
// model.weights.h5 through libhdf5, checked against the model of tests/
// fixtures/keras/keras3_small.json) and --model (ReadModelFile: the
// archive's config.json, then ParseKerasModel), and KerasArchiveHasWeights.
// Malformed archives must fail with a status naming the file, never crash
// or allocate what an entry's header claims. libhdf5 reads in a forked
// child process (model/keras_weights.h), whose coverage comes back through
// fuzz/forked_reader.h; the child dying other than by libhdf5 crashing
// (a sanitizer report in our reader) is an internal error, and fatal here.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/forked_reader.h"
#include "fuzz/keras_small_model.h"
#include "model/initial_weights.h"
#include "model/keras_model.h"
#include "model/keras_weights.h"

namespace {

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "keras_archive_fuzzer: contract broken: %s\n", what);
  std::abort();
}

void RequireNamed(const absl::Status& s, const std::string& path) {
  Require(s.ok() || s.message().find(path) != std::string::npos,
          "an error that does not name the archive");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  pscluster::SetUpForkedReader();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  const ModelSpec& spec = KerasSmallModel();
  const std::string path = (FuzzScratchDir() / "model.keras").string();
  WriteFuzzFile(path, std::string_view(reinterpret_cast<const char*>(data), size));

  ClearForkedCoverage();
  absl::StatusOr<std::vector<float>> weights = LoadInitialWeights(path, spec);
  MergeForkedCoverage();
  Require(!absl::IsInternal(weights.status()),
          "the reading process died other than by libhdf5 crashing (its report is above)");
  RequireNamed(weights.status(), path);
  Require(!weights.ok() || static_cast<int64_t>(weights->size()) == spec.num_parameters,
          "the initial weights are not the model's parameters");
  RequireNamed(KerasArchiveHasWeights(path).status(), path);
  absl::StatusOr<std::string> config = ReadModelFile(path);
  RequireNamed(config.status(), path);
  if (config.ok()) RequireNamed(ParseKerasModel(*config, path).status(), path);
  return 0;
}
