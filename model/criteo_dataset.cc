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

std::string CriteoConfigJson(int64_t buckets, int labels, int history) {
  std::string more = labels == 1 ? "" : absl::StrCat(", \"labels\": ", labels);
  if (history > 0) absl::StrAppend(&more, ", \"history\": ", history);
  if (buckets == kCriteoInt64Ids) return absl::StrCat("{\"ids\": \"int64\"", more, "}\n");
  return absl::StrCat("{\"buckets\": ", buckets, more, "}\n");
}

int64_t CriteoInt64Id(int feature, int64_t id) {
  return static_cast<int64_t>(CriteoFeatureKey(feature, id) >> 1);
}

absl::StatusOr<int64_t> ReadCriteoBuckets(const std::string& dir) {
  absl::StatusOr<CriteoConfig> config = ReadCriteoConfig(dir);
  if (!config.ok()) return config.status();
  return config->buckets;
}

absl::StatusOr<CriteoConfig> ReadCriteoConfig(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kCriteoConfigFile);
  CriteoConfig config;
  if (!Exists(path)) return config;
  std::ifstream in(path);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(path, ": not readable"));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a JSON object (expected {\"buckets\": N} or {\"ids\": \"int64\"})"));
  }
  if (const auto labels = j.find("labels"); labels != j.end()) {
    if (!labels->is_number_integer() || labels->get<int64_t>() < 1 ||
        labels->get<int64_t>() > kCriteoMaxLabels) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": \"labels\" is ", labels->dump(), ", not 1 or 2"));
    }
    config.labels = labels->get<int>();
  }
  if (const auto history = j.find("history"); history != j.end()) {
    if (!history->is_number_integer() || history->get<int64_t>() < 1 ||
        history->get<int64_t>() > kCriteoMaxHistory) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": \"history\" is ", history->dump(),
                                                     ", not an integer in [1, ", kCriteoMaxHistory,
                                                     "]"));
    }
    if (j.contains("ids")) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": \"history\" needs \"buckets\" (the item's rows), not \"ids\""));
    }
    config.history = history->get<int>();
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
    config.buckets = kCriteoInt64Ids;
    return config;
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
  config.buckets = buckets;
  return config;
}

absl::StatusOr<std::string> CriteoSplitFile(const std::string& dir, Split split) {
  const std::string plain = absl::StrCat(dir, "/", SplitName(split), ".txt");
  if (Exists(plain)) return plain;
  if (Exists(plain + ".gz")) return plain + ".gz";
  return absl::NotFoundError(absl::StrCat(plain, " (or ", plain, ".gz): missing"));
}

absl::Status CheckCriteoFiles(const std::string& dir, Split split) {
  if (absl::StatusOr<CriteoConfig> c = ReadCriteoConfig(dir); !c.ok()) return c.status();
  absl::StatusOr<std::string> file = CriteoSplitFile(dir, split);
  if (!file.ok()) return file.status();
  if (access(file->c_str(), R_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(*file, ": not readable"));
  }
  return absl::OkStatus();
}

void CriteoExampleValues(const CriteoExample& example, int64_t buckets, float* values, int64_t* ids,
                         int history) {
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
  if (history <= 0) return;
  auto row = [&](int64_t id) {
    if (id == kCriteoMissingId) return 0.0f;
    return static_cast<float>(1 +
                              CriteoBucket(kCriteoItemFeature, id, static_cast<uint64_t>(buckets)));
  };
  float* item = values + kCriteoExampleValues;
  item[0] = row(example.categories[kCriteoItemFeature]);
  for (int k = 0; k < history; ++k) {
    item[1 + k] = k < example.history_length ? row(example.history[k]) : 0.0f;
  }
}

absl::StatusOr<Dataset> LoadCriteoDataset(const std::string& dir, Split split) {
  absl::StatusOr<CriteoConfig> config = ReadCriteoConfig(dir);
  if (!config.ok()) return config.status();
  const int64_t* buckets = &config->buckets;
  absl::StatusOr<std::string> path = CriteoSplitFile(dir, split);
  if (!path.ok()) return path.status();
  absl::StatusOr<std::unique_ptr<CriteoReader>> reader =
      CriteoReader::Open(*path, config->labels, config->history);
  if (!reader.ok()) return reader.status();
  const int per = CriteoValuesPerExample(config->history);
  Dataset data;
  data.height = data.width = 1;
  data.channels = per;
  data.targets_per_example = config->labels;
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
    data.images.resize(data.images.size() + per);
    data.ids.resize(data.ids.size() + data.ids_per_example);
    CriteoExampleValues(example, *buckets, &data.images[data.images.size() - per],
                        data.ids.data() + data.ids.size() - data.ids_per_example, config->history);
    data.targets.push_back(example.label);
    if (config->labels == 2) data.targets.push_back(example.label2);
    ++data.count;
  }
  if (data.count == 0) return absl::InvalidArgumentError(absl::StrCat(*path, ": no examples"));
  data.images.shrink_to_fit();
  data.targets.shrink_to_fit();
  data.ids.shrink_to_fit();
  return data;
}

}  // namespace pscluster
