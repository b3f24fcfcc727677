// The layer classes of a Keras model file that the workers run: one table
// keyed by Keras class name (every name Keras writes for a class), each
// entry pointing at the parser of that class's config. A parser checks
// every option against what the workers compute and fills the layer's
// LayerSpec and the initializers of its variables; what they cannot run
// exactly as Keras would is refused with InvalidArgument naming the layer
// and the option. Internal to model/; plain functions: thread-safe.
#ifndef PSCLUSTER_MODEL_KERAS_LAYERS_H_
#define PSCLUSTER_MODEL_KERAS_LAYERS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "model/keras_options.h"
#include "model/model_spec.h"

namespace pscluster {
namespace keras {

// The file's initializers of one layer, by variable suffix ("kernel", ...).
using LayerInits = std::vector<std::pair<std::string, Initializer>>;

// One layer's options, parsed.
struct LayerOptions {
  bool input = false;  // an InputLayer: it has no spec
  LayerSpec spec;
  LayerInits inits;
  LayerPenalties penalties;
};

// The options of layer `name` of class `type` (its config `cfg`): its
// LayerSpec and initializers, or `input` for an InputLayer. `where` names
// the layer in errors; a class not in the table is refused, naming those
// that are.
absl::Status ParseLayerOptions(const std::string& type, const json& cfg, const std::string& name,
                               const std::string& where, LayerOptions* out);

}  // namespace keras
}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_KERAS_LAYERS_H_
