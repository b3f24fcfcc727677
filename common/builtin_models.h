// The model files shipped in models/, compiled into every binary (a
// genrule writes builtin_models.cc from them), so that --model=cnn works in
// a container that holds only the binaries. Read by common/keras_model.h.
#ifndef PSCLUSTER_COMMON_BUILTIN_MODELS_H_
#define PSCLUSTER_COMMON_BUILTIN_MODELS_H_

#include <vector>

namespace pscluster {

struct BuiltinModel {
  const char* name;  // the file's name without .json
  const char* json;  // its text
};

const std::vector<BuiltinModel>& BuiltinModels();

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_BUILTIN_MODELS_H_
