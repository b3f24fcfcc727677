// The model files shipped in model/builtin/, compiled into every binary (a
// genrule writes builtin_models.cc from them), so that --model=cnn works in
// a container that holds only the binaries. Read by model/keras_model.h.
#ifndef PSCLUSTER_MODEL_BUILTIN_MODELS_H_
#define PSCLUSTER_MODEL_BUILTIN_MODELS_H_

#include <vector>

namespace pscluster {

struct BuiltinModel {
  const char* name;  // the file's name without .json
  const char* json;  // its text
};

const std::vector<BuiltinModel>& BuiltinModels();

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_BUILTIN_MODELS_H_
