#include "model/criteo_dataset.h"

#include <unistd.h>

#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::string SplitName(Split split) { return split == Split::kTrain ? "train" : "test"; }

}  // namespace

bool IsCriteoFolder(const std::string& dir) {
  for (const char* name : {"/train.txt", "/train.txt.gz", "/test.txt", "/test.txt.gz"}) {
    if (Exists(dir + name)) return true;
  }
  return false;
}

std::string CriteoConfigJson(int64_t buckets) {
  if (buckets == kCriteoInt64Ids) return "{\"ids\": \"int64\"}\n";
  return absl::StrCat("{\"buckets\": ", buckets, "}\n");
}

int64_t CriteoInt64Id(int feature, int64_t id) {
  return static_cast<int64_t>(CriteoFeatureKey(feature, id) >> 1);
}

absl::StatusOr<int64_t> ReadCriteoBuckets(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kCriteoConfigFile);
  if (!Exists(path)) return kCriteoDefaultBuckets;
  std::ifstream in(path);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(path, ": not readable"));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a JSON object (expected {\"buckets\": N} or {\"ids\": \"int64\"})"));
  }
  if (const auto ids = j.find("ids"); ids != j.end()) {
    if (j.contains("buckets")) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": give \"buckets\" or \"ids\", not both"));
    }
    if (!ids->is_string() || ids->get<std::string>() != "int64") {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": \"ids\" is ", ids->dump(), ", not \"int64\""));
    }
    return kCriteoInt64Ids;
  }
  const auto it = j.find("buckets");
  if (it == j.end() || !it->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": \"buckets\" is missing or not an integer"));
  }
  const int64_t buckets = it->get<int64_t>();
  if (buckets < 1 || buckets > kCriteoMaxBuckets) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": \"buckets\" ", buckets, " is not in [1, 2^24]: rows are float32"));
  }
  return buckets;
}

absl::StatusOr<std::string> CriteoSplitFile(const std::string& dir, Split split) {
  const std::string plain = absl::StrCat(dir, "/", SplitName(split), ".txt");
  if (Exists(plain)) return plain;
  if (Exists(plain + ".gz")) return plain + ".gz";
  return absl::NotFoundError(absl::StrCat(plain, " (or ", plain, ".gz): missing"));
}

absl::Status CheckCriteoFiles(const std::string& dir, Split split) {
  if (absl::StatusOr<int64_t> b = ReadCriteoBuckets(dir); !b.ok()) return b.status();
  absl::StatusOr<std::string> file = CriteoSplitFile(dir, split);
  if (!file.ok()) return file.status();
  if (access(file->c_str(), R_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(*file, ": not readable"));
  }
  return absl::OkStatus();
}

void CriteoExampleValues(const CriteoExample& example, int64_t buckets, float* values,
                         int64_t* ids) {
  for (int i = 0; i < kCriteoIntegerFeatures; ++i) {
    values[i] = example.has_integer(i) ? CriteoIntegerTransform(example.integers[i]) : 0.0f;
  }
  if (buckets == kCriteoInt64Ids) {
    for (int c = 0; c < kCriteoCategoricalFeatures; ++c) {
      values[kCriteoIntegerFeatures + c] = 0.0f;
      ids[c] = CriteoInt64Id(c, example.categories[c]);
    }
    return;
  }
  for (int c = 0; c < kCriteoCategoricalFeatures; ++c) {
    values[kCriteoIntegerFeatures + c] =
        static_cast<float>(CriteoBucket(c, example.categories[c], static_cast<uint64_t>(buckets)));
  }
}

absl::StatusOr<Dataset> LoadCriteoDataset(const std::string& dir, Split split) {
  absl::StatusOr<int64_t> buckets = ReadCriteoBuckets(dir);
  if (!buckets.ok()) return buckets.status();
  absl::StatusOr<std::string> path = CriteoSplitFile(dir, split);
  if (!path.ok()) return path.status();
  absl::StatusOr<std::unique_ptr<CriteoReader>> reader = CriteoReader::Open(*path);
  if (!reader.ok()) return reader.status();
  Dataset data;
  data.height = data.width = 1;
  data.channels = kCriteoExampleValues;
  data.targets_per_example = 1;
  if (*buckets == kCriteoInt64Ids) {
    data.ids_first = kCriteoIntegerFeatures;
    data.ids_per_example = kCriteoCategoricalFeatures;
  }
  CriteoExample example;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&example);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (data.count == std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(*path, ": more than ", data.count, " lines: split the data"));
    }
    data.images.resize(data.images.size() + kCriteoExampleValues);
    data.ids.resize(data.ids.size() + data.ids_per_example);
    CriteoExampleValues(example, *buckets, &data.images[data.images.size() - kCriteoExampleValues],
                        data.ids.data() + data.ids.size() - data.ids_per_example);
    data.targets.push_back(example.label);
    ++data.count;
  }
  if (data.count == 0) return absl::InvalidArgumentError(absl::StrCat(*path, ": no examples"));
  data.images.shrink_to_fit();
  data.targets.shrink_to_fit();
  data.ids.shrink_to_fit();
  return data;
}

}  // namespace pscluster
