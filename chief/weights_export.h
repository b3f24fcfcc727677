// The trained weights as a safetensors file (model/safetensors.h): one
// float32 tensor per variable under its Keras name and in its Keras layout
// (model/model_spec.h: conv kernels HWIO, dense kernels [in, out]; an
// unbounded embedding table as its rows and their ids), with
// metadata model, steps, epochs, layout=keras and, when the run was
// evaluated, test_accuracy. Plain functions; thread-safe.
#ifndef PSCLUSTER_CHIEF_WEIGHTS_EXPORT_H_
#define PSCLUSTER_CHIEF_WEIGHTS_EXPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/model_spec.h"
#include "model/safetensors.h"

namespace pscluster {

// The flat parameter vector (spec.num_parameters values) as one tensor per
// variable, in the model's order; an unbounded sparse table's rows
// ([n, width], VariableSpec::row_ids) followed by their ids, int64 [n],
// as "<variable>/ids".
std::vector<NamedTensor> VariablesOf(const ModelSpec& spec, const std::vector<float>& flat);

// Writes VariablesOf(spec, flat) to `path` atomically; errors name the
// file. InvalidArgument when `flat` does not hold spec.num_parameters
// values.
absl::Status ExportWeights(const std::string& path, const ModelSpec& spec,
                           const std::vector<float>& flat, int64_t steps, int epochs,
                           std::optional<double> test_accuracy);

}  // namespace pscluster

#endif  // PSCLUSTER_CHIEF_WEIGHTS_EXPORT_H_
