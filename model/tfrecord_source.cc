#include "model/tfrecord_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "model/tf_example.h"

namespace pscluster {
namespace {

std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

bool IsTFRecordFolder(const std::string& dir) {
  return access(Join(dir, kTFRecordSchemaFile).c_str(), F_OK) == 0;
}

absl::StatusOr<TFRecordSchema> ReadTFRecordSchema(const std::string& dir) {
  const std::string path = Join(dir, kTFRecordSchemaFile);
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  TFRecordSchema schema;
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  try {
    const nlohmann::json j = nlohmann::json::parse(*text);
    if (!j.is_object()) return bad("not a JSON object");
    for (const auto& [key, value] : j.items()) {
      if (key == "image" || key == "label" || key == "train" || key == "test") {
        if (!value.is_string() || value.get<std::string>().empty()) {
          return bad(absl::StrCat("\"", key, "\" is ", value.dump(), ", not a non-empty string"));
        }
      } else if (key != "shape") {
        return bad(absl::StrCat("unknown key \"", key,
                                "\" (image, label, shape, train, test)"));
      }
    }
    if (j.contains("image")) schema.image = j["image"].get<std::string>();
    if (j.contains("label")) schema.label = j["label"].get<std::string>();
    if (j.contains("train")) schema.train_prefix = j["train"].get<std::string>();
    if (j.contains("test")) schema.test_prefix = j["test"].get<std::string>();
    if (!j.contains("shape")) return bad("no \"shape\": [height, width, channels]");
    const nlohmann::json& s = j["shape"];
    bool ok = s.is_array() && (s.size() == 3 || s.size() == 2 || s.size() == 1);
    std::vector<int64_t> dims;
    for (size_t i = 0; ok && i < s.size(); ++i) {
      ok = s[i].is_number_integer() && s[i].get<int64_t>() >= 1 && s[i].get<int64_t>() <= 65536;
      if (ok) dims.push_back(s[i].get<int64_t>());
    }
    if (ok && dims.size() == 1) dims = {1, 1, dims[0]};      // [F]: flat examples
    if (ok && dims.size() == 2) dims.push_back(1);            // [H, W]: one channel
    if (ok && dims[0] * dims[1] * dims[2] > (int64_t{1} << 26)) ok = false;
    if (!ok) {
      return bad(absl::StrCat("\"shape\" is ", s.dump(),
                              ": expected [H, W, C], [H, W] or [F] of positive integers"));
    }
    schema.height = static_cast<int>(dims[0]);
    schema.width = static_cast<int>(dims[1]);
    schema.channels = static_cast<int>(dims[2]);
  } catch (const nlohmann::json::exception& e) {
    return bad(absl::StrCat("not valid JSON: ", e.what()));
  }
  return schema;
}

absl::StatusOr<std::vector<std::string>> TFRecordSplitFiles(const std::string& dir,
                                                            const TFRecordSchema& schema,
                                                            Split split) {
  const std::string& prefix = split == Split::kTrain ? schema.train_prefix : schema.test_prefix;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return absl::NotFoundError(absl::StrCat(dir, ": cannot list: ", std::strerror(errno)));
  }
  std::vector<std::string> files;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (absl::StartsWith(name, prefix) && absl::EndsWith(name, ".tfrecord")) {
      files.push_back(Join(dir, name));
    }
  }
  closedir(d);
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat("no ", Join(dir, prefix), "*.tfrecord files (",
                                            split == Split::kTrain ? "train" : "test",
                                            " split, ", kTFRecordSchemaFile, ")"));
  }
  std::sort(files.begin(), files.end());
  return files;
}

absl::StatusOr<std::unique_ptr<TFRecordSource>> TFRecordSource::Open(const std::string& dir,
                                                                     Split split) {
  absl::StatusOr<TFRecordSchema> schema = ReadTFRecordSchema(dir);
  if (!schema.ok()) return schema.status();
  absl::StatusOr<std::vector<std::string>> files = TFRecordSplitFiles(dir, *schema, split);
  if (!files.ok()) return files.status();
  std::unique_ptr<TFRecordSource> source(new TFRecordSource(*std::move(schema), *files));
  for (uint32_t f = 0; f < source->files_.size(); ++f) {
    const std::string& path = source->files_[f];
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      const std::string why = absl::StrCat(path, ": cannot open: ", std::strerror(error));
      return error == ENOENT ? absl::NotFoundError(why) : absl::PermissionDeniedError(why);
    }
    source->fds_.push_back(fd);
    source->first_record_.push_back(static_cast<int64_t>(source->index_.size()));
    if (absl::Status s = IndexTFRecordFile(fd, path, f, &source->index_); !s.ok()) return s;
    if (source->index_.size() > static_cast<size_t>(1 << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": over 2^30 records in the split; not read"));
    }
  }
  if (source->index_.empty()) {
    return absl::DataLossError(absl::StrCat(dir, ": the ", split == Split::kTrain ? "train" : "test",
                                            " split's ", source->files_.size(),
                                            " files hold no records"));
  }
  source->index_.shrink_to_fit();
  return source;
}

TFRecordSource::~TFRecordSource() {
  for (int fd : fds_) close(fd);
}

absl::Status TFRecordSource::DecodeOne(int32_t index, std::string* buffer, float* image,
                                       float* target) const {
  const TFRecordRef& ref = index_[static_cast<size_t>(index)];
  const std::string& path = files_[ref.file];
  const int64_t record = index - first_record_[ref.file];
  if (absl::Status s = ReadTFRecordAt(fds_[ref.file], path, ref, record, buffer); !s.ok()) {
    return s;
  }
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(
        absl::StrCat(path, ": record ", record, " (byte offset ", ref.offset, "): ", what));
  };
  absl::StatusOr<TFExample> example = ParseTFExample(*buffer);
  if (!example.ok()) return bad(std::string(example.status().message()));
  const size_t pixels = static_cast<size_t>(ExampleSource::pixels());
  auto image_it = example->find(schema_.image);
  if (image_it == example->end()) {
    return bad(absl::StrCat("no image feature \"", schema_.image, "\""));
  }
  const TFFeature& im = image_it->second;
  if (im.kind == TFFeature::Kind::kBytes) {
    if (im.bytes.size() != 1 || im.bytes[0].size() != pixels) {
      return bad(absl::StrCat("image feature \"", schema_.image, "\" holds ", im.bytes.size(),
                              " bytes value(s) of ", im.bytes.empty() ? 0 : im.bytes[0].size(),
                              " bytes; the schema's shape ", schema_.height, "x", schema_.width,
                              "x", schema_.channels, " wants one of ", pixels));
    }
    const uint8_t* p = reinterpret_cast<const uint8_t*>(im.bytes[0].data());
    for (size_t i = 0; i < pixels; ++i) image[i] = p[i] / 255.0f;
  } else if (im.kind == TFFeature::Kind::kFloat) {
    if (im.floats.size() != pixels) {
      return bad(absl::StrCat("image feature \"", schema_.image, "\" holds ", im.floats.size(),
                              " floats; the schema's shape ", schema_.height, "x", schema_.width,
                              "x", schema_.channels, " wants ", pixels));
    }
    std::copy(im.floats.begin(), im.floats.end(), image);
  } else {
    return bad(absl::StrCat("image feature \"", schema_.image, "\" is a ",
                            TFFeatureKindName(im.kind), ", not a bytes_list or float_list"));
  }
  auto label_it = example->find(schema_.label);
  if (label_it == example->end()) {
    return bad(absl::StrCat("no label feature \"", schema_.label, "\""));
  }
  const TFFeature& lab = label_it->second;
  if (lab.kind != TFFeature::Kind::kInt64 || lab.ints.size() != 1) {
    return bad(absl::StrCat("label feature \"", schema_.label, "\" is a ",
                            TFFeatureKindName(lab.kind), " of ",
                            lab.bytes.size() + lab.floats.size() + lab.ints.size(),
                            " values, not an int64_list of one class index"));
  }
  const int64_t label = lab.ints[0];
  if (label < 0 || label >= (int64_t{1} << 24)) {
    return bad(absl::StrCat("label ", label, " is out of range: not a class index in [0, 2^24)"));
  }
  *target = static_cast<float>(label);
  if (target_check_) {
    if (absl::Status s = target_check_(*target); !s.ok()) {
      return bad(absl::StrCat("label ", label, " is out of range: ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status TFRecordSource::Gather(const int32_t* indices, int n, float* images,
                                    float* targets) const {
  std::string buffer;
  const size_t pixels = static_cast<size_t>(ExampleSource::pixels());
  for (int i = 0; i < n; ++i) {
    if (indices[i] < 0 || indices[i] >= count()) {
      return absl::OutOfRangeError(
          absl::StrCat("example ", indices[i], " of a split of ", count()));
    }
    if (absl::Status s = DecodeOne(indices[i], &buffer, images + size_t(i) * pixels, targets + i);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> LoadTFRecordDataset(const std::string& dir, Split split) {
  absl::StatusOr<std::unique_ptr<TFRecordSource>> source = TFRecordSource::Open(dir, split);
  if (!source.ok()) return source.status();
  const TFRecordSource& s = **source;
  Dataset d;
  d.count = s.count();
  d.height = s.height();
  d.width = s.width();
  d.channels = s.channels();
  d.images.resize(static_cast<size_t>(d.count) * s.pixels());
  d.targets.resize(static_cast<size_t>(d.count));
  std::vector<int32_t> all(static_cast<size_t>(d.count));
  for (int i = 0; i < d.count; ++i) all[i] = i;
  if (absl::Status st = s.Gather(all.data(), d.count, d.images.data(), d.targets.data());
      !st.ok()) {
    return st;
  }
  return d;
}

}  // namespace pscluster
