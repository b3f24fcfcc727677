#include "model/keras_dialects.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pscluster {
namespace keras {

absl::StatusOr<ModelEnvelope> ReadEnvelope(absl::string_view text, const std::string& source) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Bad(source, "not a JSON object (expected what Keras's model.to_json() writes)");
  }
  // The compiled loss: Keras 3's compile_config (a .keras archive's
  // config.json), tf.keras's and TensorFlow.js's training_config.
  json loss, loss_weights;
  for (const json* d : {&doc, doc.contains("modelTopology") ? &doc["modelTopology"] : nullptr}) {
    if (d == nullptr || !d->is_object()) continue;
    for (const char* key : {"compile_config", "training_config", "trainingConfig"}) {
      if (d->contains(key) && (*d)[key].is_object() && (*d)[key].contains("loss")) {
        const json& compiled = (*d)[key];
        loss = compiled["loss"];
        for (const char* weights : {"loss_weights", "lossWeights"}) {
          if (compiled.contains(weights)) loss_weights = compiled[weights];
        }
      }
    }
  }
  if (doc.contains("modelTopology")) doc = doc["modelTopology"];  // tfjs model.json
  if (doc.is_object() && doc.contains("model_config")) doc = doc["model_config"];
  if (!doc.is_object() || !doc.contains("class_name") || !doc["class_name"].is_string()) {
    return Bad(source, "no top-level class_name (expected a Keras model's JSON)");
  }
  ModelEnvelope model;
  model.cls = doc["class_name"].get<std::string>();
  const std::string& cls = model.cls;
  const json& config = doc.contains("config") ? doc["config"] : json();
  if (config.is_array()) {
    model.layers = config;  // very old Keras: the config is the layer list
  } else if (config.is_object() && config.contains("layers")) {
    model.layers = config["layers"];
  }
  if (!model.layers.is_array() || model.layers.empty()) {
    return Bad(source, absl::StrCat("model \"", cls, "\" has no layer list"));
  }
  model.config = config;
  model.loss = loss;
  model.loss_weights = loss_weights;
  const std::string version = doc.value("keras_version", std::string());
  model.keras3 = absl::StartsWith(version, "3") ||
                 (model.layers[0].is_object() && model.layers[0].contains("module"));
  model.functional = cls == "Functional" || cls == "Model";
  if (cls != "Sequential" && !model.functional) {
    return Bad(source, absl::StrCat("class_name \"", cls,
                                    "\" is not supported (Sequential or Functional)"));
  }
  model.model_name = config.is_object() && config.contains("name") && config["name"].is_string()
                         ? config["name"].get<std::string>()
                         : source;
  return model;
}

bool DeclaredShape(const json& layer, const json& cfg, std::vector<json>* out) {
  for (const char* key : {"batch_shape", "batch_input_shape"}) {
    auto it = cfg.find(key);
    if (it != cfg.end() && it->is_array() && !it->empty()) {
      out->assign(it->begin() + 1, it->end());
      return true;
    }
  }
  auto it = cfg.find("input_shape");  // tf.keras's InputLayer sometimes
  if (it != cfg.end() && it->is_array()) {
    out->assign(it->begin(), it->end());
    return true;
  }
  if (layer.contains("build_config") && layer["build_config"].is_object() &&
      layer["build_config"].contains("input_shape") &&
      layer["build_config"]["input_shape"].is_array() &&
      !layer["build_config"]["input_shape"].empty()) {
    const json& s = layer["build_config"]["input_shape"];
    out->assign(s.begin() + 1, s.end());
    return true;
  }
  return false;
}

}  // namespace keras
}  // namespace pscluster
