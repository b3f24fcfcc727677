// The dialects of a Keras model file, read into one form: the JSON of
// tf.keras / Keras 2.x's and Keras 3's model.to_json(), a .keras archive's
// config.json (Keras 3: the model under model_config, the loss under
// compile_config), TensorFlow.js's model.json (the model under
// modelTopology, the loss under trainingConfig) and very old Keras (the
// config is the layer list). What the dialects spell differently per layer
// (the declared input shape) is read here too. Internal to model/; plain
// functions: thread-safe.
#ifndef PSCLUSTER_MODEL_KERAS_DIALECTS_H_
#define PSCLUSTER_MODEL_KERAS_DIALECTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/keras_options.h"

namespace pscluster {
namespace keras {

// A model file's JSON unwrapped down to the model: tfjs's model.json
// (modelTopology), Keras 3's .keras config (model_config), the model itself.
struct ModelEnvelope {
  std::string cls;  // the model's class_name
  bool functional = false;
  json layers;             // a non-empty array
  json config;             // the model's config (output_layers, ...)
  json loss;               // the compiled loss, if the file has one (else null)
  json loss_weights;       // its loss_weights (a list or a dict by output), else null
  bool keras3 = false;     // written by Keras 3 (its hard_sigmoid differs)
  std::string model_name;  // config.name, else the source
};

// The model in `text`, a Sequential or Functional one; InvalidArgument
// starting with `source` for anything else.
absl::StatusOr<ModelEnvelope> ReadEnvelope(absl::string_view text, const std::string& source);

// The input shape a layer config declares, if any, without the batch:
// [H, W, C] or [F]. `layer` is the layer's entry, `cfg` its config.
bool DeclaredShape(const json& layer, const json& cfg, std::vector<json>* out);

}  // namespace keras
}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_KERAS_DIALECTS_H_
