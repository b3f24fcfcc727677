// The values a Keras layer's config holds, read one option at a time for
// the Keras model readers (keras_model.h and the keras_* files beside it):
// activations, initializers, weight regularizers, dtype, window sizes,
// padding, and options the workers support only at their neutral value.
// Every refusal is InvalidArgument "<where>: <what>", `where` naming the
// layer, and quotes the option's JSON. Internal to model/; plain
// functions: thread-safe.
#ifndef PSCLUSTER_MODEL_KERAS_OPTIONS_H_
#define PSCLUSTER_MODEL_KERAS_OPTIONS_H_

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model_spec.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace keras {

using json = nlohmann::json;

// InvalidArgument "<where>: <what>", the form of every error here.
absl::Status Bad(const std::string& where, const std::string& what);

// `j` as JSON text, for error messages.
std::string Show(const json& j);

// An option that changes the math unless it has its neutral value (absent,
// null, or one of `neutral`).
absl::Status Neutral(const json& cfg, const std::string& where, const char* key,
                     std::initializer_list<json> neutral, const std::string& why);

// A Keras name in any of its spellings (snake_case, the class name,
// TensorFlow.js's camelCase) as one key: lower case, no underscores.
std::string SpellingKey(const std::string& name);

// A Keras object given by its name or as {"class_name": ..., "config":
// {...}} (class_name a string): its class and its config ({} when absent
// or not an object); false when `j` is neither form.
bool ClassAndConfig(const json& j, std::string* cls, json* cfg);

// Option `key` when it is a number, else `dflt`.
double Number(const json& cfg, const char* key, double dflt);

// Constraints change the update and activity regularizers the loss by
// the activations: refused. Weight regularizers are read by PenaltiesOf.
absl::Status NoConstraints(const json& cfg, const std::string& where);

// A layer's weight regularizers, by variable suffix: (l1, l2).
using LayerPenalties = std::vector<std::pair<std::string, std::pair<float, float>>>;

// The weight regularizers in `cfg`: option <var>_regularizer penalises
// variable <var> (kernel, bias, depthwise_kernel, ...).
absl::Status PenaltiesOf(const json& cfg, const std::string& where, LayerPenalties* out);

// Option 'dtype': float32 only, or, when `ids_ok` (an InputLayer, whose
// integer values, an Embedding's ids, the examples hold as float32, exact
// below 2^24), int32 or int64 too.
absl::Status CheckDtype(const json& cfg, const std::string& where, bool ids_ok);

// An int or a list of two ints, each in [1, 4096], as two values; `dflt`
// for both when absent.
absl::Status IntPair(const json& cfg, const std::string& where, const char* key, int dflt,
                     int* a, int* b);

// An integer option in [lo, hi], or InvalidArgument naming it.
absl::Status IntIn(const json& cfg, const std::string& where, const char* key, int dflt, int lo,
                   int hi, int* out);

// Option `key` (a name, or an object naming one): an activation; `absent`
// when absent or null.
absl::StatusOr<Activation> ActivationOf(const json& cfg, const std::string& where,
                                        const char* key = "activation",
                                        Activation absent = Activation::kNone);

// Option 'padding': valid (also when absent) or same.
absl::Status PaddingOf(const json& cfg, const std::string& where, Padding* out);

// Option 'data_format': channels_last only (activations are NHWC).
absl::Status ChannelsLast(const json& cfg, const std::string& where);

// A Keras initializer object ({"class_name": ..., "config": {...}}) or
// name, the value of option `key`; `dflt` when absent.
absl::StatusOr<Initializer> InitializerOf(const json& cfg, const std::string& where,
                                          const char* key, Initializer dflt);

}  // namespace keras
}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_KERAS_OPTIONS_H_
