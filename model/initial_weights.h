// Initial weights from a file (the chief's --initial_weights): a .keras
// archive, a Keras .weights.h5 / Keras 2 .h5 (model/keras_weights.h) or a
// safetensors file (model/safetensors.h; what chief/weights_export.h
// writes), checked against the model and laid out as its flat parameter
// vector. Every variable must be in the file once, with the model's shape,
// as float32; every weight tensor in the file must be some variable's.
// Plain functions; thread-safe.
#ifndef PSCLUSTER_MODEL_INITIAL_WEIGHTS_H_
#define PSCLUSTER_MODEL_INITIAL_WEIGHTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/keras_weights.h"
#include "model/model_spec.h"

namespace pscluster {

// The flat parameter vector (spec.num_parameters values) from `tensors`.
// InvalidArgument "<source>: N mismatches with model '<name>': ..." naming
// each one: a variable absent from the file, a file tensor no variable
// takes, a variable given twice, a shape that differs (both shown), a dtype
// other than float32 (the file's named).
absl::StatusOr<std::vector<float>> FlattenWeights(const std::vector<FileTensor>& tensors,
                                                  const ModelSpec& spec,
                                                  const std::string& source);

// Reads `path` by its kind (.keras, .h5 / .hdf5, .safetensors; otherwise
// by its first bytes) and flattens it. NotFound for a missing file;
// InvalidArgument for an unreadable one or a mismatch.
absl::StatusOr<std::vector<float>> LoadInitialWeights(const std::string& path,
                                                      const ModelSpec& spec);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_INITIAL_WEIGHTS_H_
