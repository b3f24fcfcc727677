#include "model/initial_weights.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/safetensors.h"

namespace pscluster {
namespace {

std::string Shape(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Mismatches listed in full up to this many; the rest are counted.
constexpr size_t kListed = 20;

// The safetensors file's tensors, each for the variable of its name.
absl::StatusOr<std::vector<FileTensor>> ReadSafetensorsFile(const std::string& path) {
  absl::StatusOr<std::vector<NamedTensor>> named = ReadSafetensors(path);
  if (!named.ok()) {
    // A dtype other than F32 and I64 (Unimplemented, naming tensor and dtype) or a
    // damaged file: the user's file either way.
    if (absl::IsNotFound(named.status())) return named.status();
    return absl::InvalidArgumentError(named.status().message());
  }
  std::vector<FileTensor> out;
  for (NamedTensor& n : *named) {
    FileTensor t;
    t.variable = n.name;
    t.where = absl::StrCat("tensor '", n.name, "'");
    t.shape = std::move(n.shape);
    // An I64 tensor keeps no values: FlattenWeights refuses it by dtype.
    t.dtype = n.dtype == NamedTensor::Dtype::kI64 ? "int64" : "float32";
    t.values = std::move(n.values);
    out.push_back(std::move(t));
  }
  return out;
}

// The first 8 bytes of `path` ("" when it cannot be read).
std::string Magic(const std::string& path) {
  std::string m(8, '\0');
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  m.resize(std::fread(m.data(), 1, m.size(), f));
  std::fclose(f);
  return m;
}

}  // namespace

absl::StatusOr<std::vector<float>> FlattenWeights(const std::vector<FileTensor>& tensors,
                                                  const ModelSpec& spec,
                                                  const std::string& source) {
  std::map<std::string, const FileTensor*> by_variable;
  std::vector<std::string> problems;
  for (const FileTensor& t : tensors) {
    if (t.variable.empty()) {
      problems.push_back(
          absl::StrCat("file tensor ", t.where, " ", Shape(t.shape), " is no variable's"));
      continue;
    }
    auto [it, fresh] = by_variable.emplace(t.variable, &t);
    if (!fresh) {
      problems.push_back(absl::StrCat("variable '", t.variable, "' is in the file twice (",
                                      it->second->where, " and ", t.where, ")"));
    }
  }
  std::vector<float> flat(spec.num_parameters);
  std::map<std::string, bool> known;
  for (const VariableSpec& v : spec.variables) {
    known[v.name] = true;
    auto it = by_variable.find(v.name);
    if (it == by_variable.end()) {
      problems.push_back(absl::StrCat("variable '", v.name, "' ", Shape(v.shape),
                                      " is absent from the file"));
      continue;
    }
    const FileTensor& t = *it->second;
    if (t.shape != v.shape) {
      problems.push_back(absl::StrCat("variable '", v.name, "' has shape ", Shape(v.shape),
                                      " in the model but ", Shape(t.shape), " in the file (",
                                      t.where, ")"));
      continue;
    }
    if (t.dtype != "float32") {
      problems.push_back(absl::StrCat("variable '", v.name, "' is ", t.dtype, " in the file (",
                                      t.where, "); float32 is needed"));
      continue;
    }
    if (static_cast<int64_t>(t.values.size()) != v.size) {
      problems.push_back(absl::StrCat("variable '", v.name, "': ", t.values.size(),
                                      " values in the file (", t.where, ") for ", v.size));
      continue;
    }
    std::copy(t.values.begin(), t.values.end(), flat.begin() + v.offset);
  }
  for (const auto& [name, t] : by_variable) {
    if (!known.count(name)) {
      problems.push_back(absl::StrCat("file tensor ", t->where, " ", Shape(t->shape),
                                      " is for '", name, "', which the model lacks"));
    }
  }
  if (problems.empty()) return flat;
  const size_t n = problems.size();
  if (n > kListed) {
    problems.resize(kListed);
    problems.push_back(absl::StrCat("and ", n - kListed, " more"));
  }
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", n, n == 1 ? " mismatch" : " mismatches",
                                                 " with model '", spec.name, "': ",
                                                 absl::StrJoin(problems, "; ")));
}

absl::StatusOr<std::vector<float>> LoadInitialWeights(const std::string& path,
                                                      const ModelSpec& spec) {
  const std::string magic = Magic(path);
  absl::StatusOr<std::vector<FileTensor>> tensors;
  if (absl::EndsWith(path, ".safetensors")) {
    tensors = ReadSafetensorsFile(path);
  } else if (absl::EndsWith(path, ".keras") || absl::EndsWith(path, ".h5") ||
             absl::EndsWith(path, ".hdf5") || absl::StartsWith(magic, "\x89HDF")) {
    tensors = ReadKerasWeights(path, spec);
  } else if (absl::StartsWith(magic, "PK\x03\x04")) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a zip archive; name it .keras to read it as a Keras archive"));
  } else if (magic.empty()) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot read it"));
  } else {
    tensors = ReadSafetensorsFile(path);
  }
  if (!tensors.ok()) return tensors.status();
  return FlattenWeights(*tensors, spec, path);
}

}  // namespace pscluster
