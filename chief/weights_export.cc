#include "chief/weights_export.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace pscluster {

std::vector<NamedTensor> VariablesOf(const ModelSpec& spec, const std::vector<float>& flat) {
  std::vector<NamedTensor> out;
  for (const VariableSpec& v : spec.variables) {
    NamedTensor t;
    t.name = v.name;
    t.shape = v.shape;
    t.values.assign(flat.begin() + v.offset, flat.begin() + v.offset + v.size);
    out.push_back(std::move(t));
    if (v.table_rows == kUnboundedTable) {  // its rows' ids beside it
      NamedTensor ids;
      ids.name = v.name + "/ids";
      ids.dtype = NamedTensor::Dtype::kI64;
      ids.shape = {static_cast<int64_t>(v.row_ids.size())};
      ids.ints = v.row_ids;
      out.push_back(std::move(ids));
    }
  }
  return out;
}

absl::Status ExportWeights(const std::string& path, const ModelSpec& spec,
                           const std::vector<float>& flat, int64_t steps, int epochs,
                           std::optional<double> test_accuracy) {
  if (static_cast<int64_t>(flat.size()) != spec.num_parameters) {
    return absl::InvalidArgumentError(absl::StrCat("exporting ", path, ": ", flat.size(),
                                                   " values for model ", spec.name, " of ",
                                                   spec.num_parameters, " parameters"));
  }
  std::map<std::string, std::string> meta = {{"model", spec.name},
                                             {"steps", absl::StrCat(steps)},
                                             {"epochs", absl::StrCat(epochs)},
                                             {"layout", "keras"}};
  if (test_accuracy) meta["test_accuracy"] = absl::StrCat(*test_accuracy);
  return WriteSafetensors(path, VariablesOf(spec, flat), meta);
}

}  // namespace pscluster
