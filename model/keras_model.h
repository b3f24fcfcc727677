// Keras model files -> ModelSpec (model/model_spec.h). Reads the JSON that
// `model.to_json()` writes in tf.keras / Keras 2.x and in Keras 3, that
// TensorFlow.js writes (`model.toJSON()`, or the `model.json` of
// `model.save()`, whose modelTopology it takes), and the config.json inside
// a `.keras` archive. Sequential models, and Functional ones whose graph is
// one chain. What the workers cannot run exactly as Keras would is refused
// with InvalidArgument naming the layer and the option, so that a chief
// refuses a model before any daemon trains. Plain functions: thread-safe.
#ifndef PSCLUSTER_MODEL_KERAS_MODEL_H_
#define PSCLUSTER_MODEL_KERAS_MODEL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/model_spec.h"

namespace pscluster {

// Parses a model file's JSON text. `source` (a path or a built-in name)
// starts every error message. The spec's variables carry the file's
// initializers. The loss (ModelSpec::loss) is `loss` when not empty (a
// Keras loss name: "sparse_categorical_crossentropy",
// "categorical_crossentropy", "binary_crossentropy", "mse", "mae" and their
// other spellings), else the file's compiled loss (Keras 3's
// compile_config, tf.keras's or TensorFlow.js's training_config), else
// binary cross-entropy for a sigmoid output and sparse categorical
// cross-entropy for any other. The output Dense layer's units are the
// classes or outputs (ModelSpec::num_classes); its activation must fit the
// loss (softmax or linear logits for categorical, sigmoid or linear for
// binary, no softmax for regression). A model with several outputs gets
// ModelSpec::outputs (each one's loss, weight and columns: `loss` may then
// be "<output>:<loss>,...") and a last node joining them. The spec holds
// what the backends run: a softmax no loss takes in becomes a Softmax
// node, and a MultiHeadAttention its projections around an Attention core.
absl::StatusOr<ModelSpec> ParseKerasModel(absl::string_view json,
                                          const std::string& source,
                                          const std::string& loss = "");

// The JSON text of a model: `name_or_path` is a built-in model's name
// (BuiltinModelNames()) or the path of a .json file or .keras archive.
// NotFound / InvalidArgument naming the path otherwise.
absl::StatusOr<std::string> ReadModelFile(const std::string& name_or_path);

// The spec a training plan names: ParseKerasModel(model_json, model, loss), or,
// for a plan without model_json (older chiefs), ModelByName(model).
absl::StatusOr<ModelSpec> PlanModelSpec(const std::string& model,
                                        const std::string& model_json,
                                        const std::string& loss = "");

// The models shipped in model/builtin/ and built into every binary:
// cnn, mlp, vgg_fashion, mlp_large, mlp_deep.
std::vector<std::string> BuiltinModelNames();

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_KERAS_MODEL_H_
