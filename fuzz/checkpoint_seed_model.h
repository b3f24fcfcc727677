// The model checkpoint_fuzzer restores into and checkpoint_seeds writes its
// seeds for: Flatten, Dense(3, relu), Dense(2) over 2x2x1 inputs (23
// parameters), placed in pieces of kCheckpointSeedShardBytes, so that each
// variable is split over the ps.
#ifndef PSCLUSTER_FUZZ_CHECKPOINT_SEED_MODEL_H_
#define PSCLUSTER_FUZZ_CHECKPOINT_SEED_MODEL_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_spec.h"

namespace pscluster {

inline constexpr int64_t kCheckpointSeedShardBytes = 8;

inline const ModelSpec& CheckpointSeedModel() {
  static const ModelSpec* spec = [] {
    std::vector<LayerSpec> layers(3);
    layers[0].kind = LayerKind::kFlatten;
    layers[0].name = "flatten";
    layers[1].name = "hidden";
    layers[1].units = 3;
    layers[1].activation = Activation::kRelu;
    layers[2].name = "out";
    layers[2].units = 2;
    absl::StatusOr<ModelSpec> built = BuildModelSpec("fuzz_tiny", 2, 2, 1, 2, std::move(layers));
    if (!built.ok()) {
      std::fprintf(stderr, "the checkpoint seed model does not build\n");
      std::abort();
    }
    return new ModelSpec(*std::move(built));  // lives as long as the process
  }();
  return *spec;
}

}  // namespace pscluster

#endif  // PSCLUSTER_FUZZ_CHECKPOINT_SEED_MODEL_H_
