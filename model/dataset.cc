#include "model/dataset.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/criteo_dataset.h"
#include "model/tfrecord_source.h"
#include "model/zip_archive.h"

namespace pscluster {
namespace {

// One NumPy array as read: its dtype descr, shape and raw bytes.
struct NpyArray {
  std::string descr;
  std::vector<int64_t> shape;
  std::string data;
};

absl::Status Bad(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// The value of 'key' in a .npy header dict ("{'descr': '<f4', ...}").
bool HeaderValue(const std::string& header, const std::string& key, std::string* value) {
  const size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return false;
  size_t colon = header.find(':', at);
  if (colon == std::string::npos) return false;
  size_t begin = header.find_first_not_of(' ', colon + 1);
  if (begin == std::string::npos) return false;
  size_t end;
  if (header[begin] == '(') {
    end = header.find(')', begin);
    if (end == std::string::npos) return false;
    ++end;
  } else if (header[begin] == '\'') {
    end = header.find('\'', begin + 1);
    if (end == std::string::npos) return false;
    ++end;
  } else {
    end = header.find_first_of(",}", begin);
    if (end == std::string::npos) return false;
  }
  *value = header.substr(begin, end - begin);
  return true;
}

// Parses .npy bytes (format 1.0, 2.0 or 3.0).
absl::StatusOr<NpyArray> ParseNpy(const std::string& bytes, const std::string& where) {
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0) {
    return Bad(where, "not a NumPy .npy array (no \\x93NUMPY magic)");
  }
  const int major = static_cast<uint8_t>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad(where, "truncated .npy header");
    header_len = 0;
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[8 + i]);
    offset = 12;
  } else {
    return Bad(where, absl::StrCat(".npy format version ", major, " is not read (1, 2 or 3)"));
  }
  if (offset + header_len > bytes.size()) return Bad(where, "truncated .npy header");
  const std::string header = bytes.substr(offset, header_len);
  NpyArray a;
  std::string descr, fortran, shape;
  if (!HeaderValue(header, "descr", &descr) || !HeaderValue(header, "fortran_order", &fortran) ||
      !HeaderValue(header, "shape", &shape) || descr.size() < 2) {
    return Bad(where, absl::StrCat(".npy header \"", absl::StripAsciiWhitespace(header),
                                   "\" lacks descr, fortran_order or shape"));
  }
  a.descr = descr.substr(1, descr.size() - 2);
  if (fortran != "False") {
    return Bad(where, "Fortran-order (column-major) arrays are not read: save it with "
                      "np.ascontiguousarray");
  }
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') {
    return Bad(where, absl::StrCat("bad shape \"", shape, "\" (not a tuple)"));
  }
  for (absl::string_view dim : absl::StrSplit(shape.substr(1, shape.size() - 2), ',')) {
    dim = absl::StripAsciiWhitespace(dim);
    if (dim.empty()) continue;
    int64_t d;
    if (!absl::SimpleAtoi(dim, &d) || d < 0 || d > (int64_t{1} << 40)) {
      return Bad(where, absl::StrCat("bad shape ", shape));
    }
    a.shape.push_back(d);
  }
  int item = 0;
  static const char* const kKnown[] = {"|u1", "<u1", "|i1", "<i1", "<u2", "<i2",
                                       "<i4", "<i8", "<f4"};
  for (const char* k : kKnown) {
    if (a.descr == k) item = a.descr[2] - '0';
  }
  if (item == 0) {
    return Bad(where, absl::StrCat("dtype '", a.descr,
                                   "' is not read (uint8 or float32 images; uint8, int16, "
                                   "uint16, int32 or int64 labels; little-endian)"));
  }
  // The shape's product, which a header may make overflow: then it is
  // more than any file holds.
  int64_t count = 1;
  bool overflow = false;
  for (int64_t d : a.shape) {
    if (d == 0) {
      count = 0;
      overflow = false;
      break;
    }
    if (!overflow && __builtin_mul_overflow(count, d, &count)) overflow = true;
  }
  const size_t data_at = offset + header_len;
  if (overflow || count > std::numeric_limits<int64_t>::max() / 8) {
    return Bad(where, absl::StrCat("truncated: shape ", shape, " of ", a.descr,
                                   " needs more bytes than the file holds (",
                                   bytes.size() - data_at, ")"));
  }
  const size_t want = static_cast<size_t>(count) * item;
  if (bytes.size() - data_at < want) {
    return Bad(where, absl::StrCat("truncated: shape ", shape, " of ", a.descr, " needs ", want,
                                   " bytes, the file holds ", bytes.size() - data_at));
  }
  if (bytes.size() - data_at > want) {
    return Bad(where, absl::StrCat(bytes.size() - data_at - want,
                                   " bytes after the array's data"));
  }
  a.data = bytes.substr(data_at);
  return a;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open it"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The member `name` of the .npz archive `archive` opened from `path`.
absl::StatusOr<std::string> ReadNpzMember(const ZipArchive& archive, const std::string& path,
                                          const std::string& name) {
  if (!archive.Has(name)) {
    return absl::NotFoundError(absl::StrCat(path, ": no member ", name,
                                            " (np.savez(path, x_train=..., y_train=..., "
                                            "x_test=..., y_test=...))"));
  }
  return archive.Read(name, std::numeric_limits<uint64_t>::max());
}

bool IsDir(const std::string& path) {
  return access((path + "/.").c_str(), F_OK) == 0;
}

// Whether folder `dir` holds a file whose name starts with `prefix`.
bool HasFileWithPrefix(const std::string& dir, const std::string& prefix) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    if (absl::StartsWith(e->d_name, prefix)) found = true;
  }
  closedir(d);
  return found;
}

bool NpyFolder(const std::string& path) {
  return access((path + "/x_train.npy").c_str(), F_OK) == 0 ||
         access((path + "/x_test.npy").c_str(), F_OK) == 0;
}

absl::Status ReadTargets(const std::string& yb, const std::string& ywhere, Dataset* d);

// The .npy bytes of labels, and where they are (for errors).
using LabelArrays = std::vector<std::pair<std::string, std::string>>;

// Images and labels (their .npy bytes: one array, or one per output) into
// a Dataset.
absl::StatusOr<Dataset> FromArrays(const std::string& xb, const std::string& xwhere,
                                   const LabelArrays& ys) {
  absl::StatusOr<NpyArray> x = ParseNpy(xb, xwhere);
  if (!x.ok()) return x.status();
  Dataset d;
  if (x->shape.size() < 2 || x->shape.size() > 4) {
    return Bad(xwhere, absl::StrCat("images of shape [", absl::StrJoin(x->shape, ","),
                                    "]; expected [N,H,W], [N,H,W,C] or [N,F]"));
  }
  if (x->shape[0] < 1 || x->shape[0] > (1 << 30)) return Bad(xwhere, "no examples");
  d.count = static_cast<int>(x->shape[0]);
  if (x->shape.size() == 2) {
    d.height = d.width = 1;
    d.channels = static_cast<int>(x->shape[1]);
  } else {
    d.height = static_cast<int>(x->shape[1]);
    d.width = static_cast<int>(x->shape[2]);
    d.channels = x->shape.size() == 4 ? static_cast<int>(x->shape[3]) : 1;
  }
  const int64_t n = int64_t{d.count} * d.height * d.width * d.channels;
  if (n == 0) return Bad(xwhere, "images of size 0");
  d.images.resize(n);
  if (x->descr == "<f4") {
    std::memcpy(d.images.data(), x->data.data(), n * sizeof(float));
  } else if (x->descr == "|u1" || x->descr == "<u1") {
    for (int64_t i = 0; i < n; ++i) d.images[i] = static_cast<uint8_t>(x->data[i]) / 255.0f;
  } else {
    return Bad(xwhere, absl::StrCat("images of dtype '", x->descr,
                                    "' are not read (uint8, scaled by 1/255, or float32)"));
  }
  if (ys.size() == 1) {
    if (absl::Status s = ReadTargets(ys[0].first, ys[0].second, &d); !s.ok()) return s;
    return d;
  }
  // One array per output: their columns side by side, in the outputs' order.
  std::vector<Dataset> each(ys.size());
  int per = 0;
  for (size_t k = 0; k < ys.size(); ++k) {
    each[k].count = d.count;
    if (absl::Status s = ReadTargets(ys[k].first, ys[k].second, &each[k]); !s.ok()) return s;
    per += each[k].targets_per_example;
  }
  d.targets_per_example = per;
  d.targets.reserve(int64_t{d.count} * per);
  for (int64_t i = 0; i < d.count; ++i) {
    for (const Dataset& e : each) {
      const float* t = &e.targets[i * e.targets_per_example];
      d.targets.insert(d.targets.end(), t, t + e.targets_per_example);
    }
  }
  return d;
}

// Labels `yb` (.npy bytes) of d->count examples into d's targets.
absl::Status ReadTargets(const std::string& yb, const std::string& ywhere, Dataset* dp) {
  Dataset& d = *dp;
  absl::StatusOr<NpyArray> y = ParseNpy(yb, ywhere);
  if (!y.ok()) return y.status();
  if (y->shape.empty() || y->shape.size() > 2 || y->shape[0] != d.count ||
      (y->shape.size() == 2 && y->shape[1] < 1)) {
    return Bad(ywhere, absl::StrCat("labels of shape [", absl::StrJoin(y->shape, ","),
                                    "] for ", d.count, " images; expected [", d.count, "] or [",
                                    d.count, ",K]"));
  }
  d.targets_per_example = y->shape.size() == 2 ? static_cast<int>(y->shape[1]) : 1;
  const int64_t values = int64_t{d.count} * d.targets_per_example;
  d.targets.resize(values);
  if (y->descr == "<f4" || y->descr == "<f8") {
    for (int64_t i = 0; i < values; ++i) {
      double v;
      if (y->descr == "<f4") {
        float f;
        std::memcpy(&f, y->data.data() + i * 4, 4);
        v = f;
      } else {
        std::memcpy(&v, y->data.data() + i * 8, 8);
      }
      if (!std::isfinite(v)) {
        return Bad(ywhere, absl::StrCat("target ", v, " at index ", i, " is not finite"));
      }
      d.targets[i] = static_cast<float>(v);
    }
    return absl::OkStatus();
  }
  const int item = y->descr[2] - '0';
  const bool is_signed = y->descr[1] == 'i';
  for (int64_t i = 0; i < values; ++i) {
    int64_t v = 0;
    const char* p = y->data.data() + i * item;
    if (item == 1) {
      v = is_signed ? static_cast<int8_t>(*p) : static_cast<uint8_t>(*p);
    } else if (item == 2) {
      uint16_t u;
      std::memcpy(&u, p, 2);
      v = is_signed ? static_cast<int16_t>(u) : u;
    } else if (item == 4) {
      int32_t s;
      std::memcpy(&s, p, 4);
      v = s;
    } else {
      std::memcpy(&v, p, 8);
    }
    if (v < 0 || v >= (int64_t{1} << 24)) {
      return Bad(ywhere, absl::StrCat("label ", v, " at index ", i,
                                      " is not a class index or count in [0, 2^24)"));
    }
    d.targets[i] = static_cast<float>(v);
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// The label arrays' names: "y_<part>", or, where `outputs` are given and
// the data has no "y_<part>" (has(name) says), "y_<part>_<output>" for
// each output.
std::vector<std::string> LabelNames(const std::string& part,
                                    const std::vector<std::string>& outputs,
                                    const std::function<bool(const std::string&)>& has) {
  if (outputs.empty() || has("y_" + part)) return {"y_" + part};
  std::vector<std::string> names;
  for (const std::string& o : outputs) names.push_back(absl::StrCat("y_", part, "_", o));
  return names;
}

}  // namespace

absl::StatusOr<Dataset> LoadDataset(const std::string& path, Split split,
                                    const std::vector<std::string>& outputs) {
  const std::string part = split == Split::kTrain ? "train" : "test";
  if (IsTFRecordFolder(path)) return LoadTFRecordDataset(path, split);
  if (IsCriteoFolder(path)) return LoadCriteoDataset(path, split);
  if (absl::EndsWith(path, ".npz")) {
    absl::StatusOr<std::unique_ptr<ZipArchive>> archive = ZipArchive::Open(path, "an .npz");
    if (!archive.ok()) return archive.status();
    absl::StatusOr<std::string> x = ReadNpzMember(**archive, path, "x_" + part + ".npy");
    if (!x.ok()) return x.status();
    LabelArrays ys;
    for (const std::string& name : LabelNames(
             part, outputs, [&](const std::string& n) { return (*archive)->Has(n + ".npy"); })) {
      absl::StatusOr<std::string> y = ReadNpzMember(**archive, path, name + ".npy");
      if (!y.ok()) return y.status();
      ys.emplace_back(*std::move(y), absl::StrCat(path, ": ", name));
    }
    return FromArrays(*x, absl::StrCat(path, ": x_", part), ys);
  }
  if (IsDir(path) && NpyFolder(path)) {
    const std::string xp = absl::StrCat(path, "/x_", part, ".npy");
    absl::StatusOr<std::string> x = ReadWholeFile(xp);
    if (!x.ok()) return x.status();
    LabelArrays ys;
    for (const std::string& name : LabelNames(part, outputs, [&](const std::string& n) {
           return access(absl::StrCat(path, "/", n, ".npy").c_str(), F_OK) == 0;
         })) {
      const std::string yp = absl::StrCat(path, "/", name, ".npy");
      absl::StatusOr<std::string> y = ReadWholeFile(yp);
      if (!y.ok()) return y.status();
      ys.emplace_back(*std::move(y), yp);
    }
    return FromArrays(*x, xp, ys);
  }
  return LoadMnist(path, split);
}

std::vector<std::string> OutputNames(const ModelSpec& spec) {
  std::vector<std::string> names;
  for (const OutputSpec& o : spec.outputs) names.push_back(o.name);
  return names;
}

absl::Status CheckDataFiles(const std::string& path, Split split) {
  const std::string part = split == Split::kTrain ? "train" : "test";
  if (IsTFRecordFolder(path)) {
    absl::StatusOr<TFRecordSchema> schema = ReadTFRecordSchema(path);
    if (!schema.ok()) return schema.status();
    absl::StatusOr<std::vector<std::string>> files = TFRecordSplitFiles(path, *schema, split);
    if (!files.ok()) return files.status();
    for (const std::string& f : *files) {
      if (access(f.c_str(), R_OK) != 0) {
        return absl::PermissionDeniedError(absl::StrCat(f, ": not readable"));
      }
    }
    return absl::OkStatus();
  }
  if (IsCriteoFolder(path)) return CheckCriteoFiles(path, split);
  if (absl::EndsWith(path, ".npz")) {
    // Reads the members: npz archives are small next to a run. Labels per
    // output (y_<part>_<output>) are checked once the model is known.
    absl::StatusOr<std::unique_ptr<ZipArchive>> archive = ZipArchive::Open(path, "an .npz");
    if (!archive.ok()) return archive.status();
    absl::StatusOr<std::string> m =
        ReadNpzMember(**archive, path, absl::StrCat("x_", part, ".npy"));
    if (!m.ok()) return m.status();
    if ((*archive)->HasPrefix(absl::StrCat("y_", part, "_"))) return absl::OkStatus();
    return ReadNpzMember(**archive, path, absl::StrCat("y_", part, ".npy")).status();
  }
  if (IsDir(path) && NpyFolder(path)) {
    for (const char* what : {"x_", "y_"}) {
      if (std::string(what) == "y_" &&
          access(absl::StrCat(path, "/y_", part, ".npy").c_str(), F_OK) != 0 &&
          HasFileWithPrefix(path, absl::StrCat("y_", part, "_"))) {
        continue;  // labels per output, checked once the model is known
      }
      const std::string p = absl::StrCat(path, "/", what, part, ".npy");
      if (access(p.c_str(), F_OK) != 0) return absl::NotFoundError(absl::StrCat(p, ": missing"));
      if (access(p.c_str(), R_OK) != 0) {
        return absl::PermissionDeniedError(absl::StrCat(p, ": not readable"));
      }
    }
    return absl::OkStatus();
  }
  return CheckMnistFiles(path, split);
}

namespace {

// Whether value `t` is a target of `loss` over `classes` outputs of model
// `model` (CheckTarget's rule for one loss).
absl::Status CheckTargetOf(LossKind loss, int classes, const std::string& model, float t) {
  switch (loss) {
    case LossKind::kSparseCategoricalCrossentropy:
      if (t >= 0 && t < classes && t == static_cast<float>(static_cast<int64_t>(t))) {
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(
          absl::StrCat("is not a class index: model \"", model, "\" has ", classes, " classes"));
    case LossKind::kCategoricalCrossentropy:
      if (t >= 0 && std::isfinite(t)) return absl::OkStatus();
      return absl::InvalidArgumentError("is not a class weight (one-hot or soft, >= 0)");
    case LossKind::kBinaryCrossentropy:
      if (t >= 0 && t <= 1) return absl::OkStatus();
      return absl::InvalidArgumentError("is not a binary label in [0, 1]");
    default:
      if (std::isfinite(t)) return absl::OkStatus();
      return absl::InvalidArgumentError("is not finite");
  }
}

}  // namespace

absl::Status CheckTarget(const ModelSpec& spec, float t, int column) {
  for (const OutputSpec& out : spec.outputs) {
    const LossGroup& g = out.group;
    if (column < g.targets_at || column >= g.targets_at + TargetsPerExample(g.loss, g.width)) {
      continue;
    }
    absl::Status s = CheckTargetOf(g.loss, g.width, spec.name, t);
    if (s.ok()) return s;
    return absl::InvalidArgumentError(absl::StrCat("(output '", out.name, "') ", s.message()));
  }
  return CheckTargetOf(spec.loss, spec.num_classes, spec.name, t);
}

namespace {

// The shape and label-count half of CheckDatasetFitsModel.
absl::Status CheckShapesFit(int height, int width, int channels, int targets_per_example,
                            const std::string& path, const ModelSpec& spec) {
  Dataset data;
  data.height = height;
  data.width = width;
  data.channels = channels;
  data.targets_per_example = targets_per_example;
  return CheckDatasetFitsModel(data, path, spec);  // no targets: shapes only
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenExampleSource(
    const std::string& path, Split split, const std::vector<std::string>& outputs) {
  if (IsTFRecordFolder(path)) {
    absl::StatusOr<std::unique_ptr<TFRecordSource>> source = TFRecordSource::Open(path, split);
    if (!source.ok()) return source.status();
    return std::unique_ptr<ExampleSource>(*std::move(source));
  }
  absl::StatusOr<Dataset> data = LoadDataset(path, split, outputs);
  if (!data.ok()) return data.status();
  return std::unique_ptr<ExampleSource>(new InMemoryExampleSource(*std::move(data)));
}

absl::Status CheckSourceFitsModel(ExampleSource* source, const std::string& path,
                                  const ModelSpec& spec) {
  if (const Dataset* data = source->in_memory(); data != nullptr) {
    return CheckDatasetFitsModel(*data, path, spec);
  }
  if (absl::Status s = CheckShapesFit(source->height(), source->width(), source->channels(),
                                      source->targets_per_example(), path, spec);
      !s.ok()) {
    return s;
  }
  source->set_target_check([spec](float t) { return CheckTarget(spec, t); });
  return absl::OkStatus();
}

absl::Status CheckDatasetFitsModel(const Dataset& data, const std::string& path,
                                   const ModelSpec& spec) {
  const bool flat_model = spec.input_height == 1 && spec.input_width == 1;
  // A [steps, features] model (1 x steps x features) reads [N, steps,
  // features] arrays and 28x28 IDX images, which load as steps x features x 1.
  const bool sequence_model = spec.input_height == 1 && spec.input_width > 1;
  const int64_t example = int64_t{data.height} * data.width * data.channels;
  const bool same_shape = data.height == spec.input_height && data.width == spec.input_width &&
                          data.channels == spec.input_channels;
  const bool as_steps = sequence_model && data.channels == 1 &&
                        data.height == spec.input_width && data.width == spec.input_channels;
  const bool fits = flat_model ? example == spec.input_channels : same_shape || as_steps;
  if (!fits) {
    return Bad(path, absl::StrCat("examples are ", data.height, "x", data.width, "x",
                                  data.channels, " but model \"", spec.name, "\" wants ",
                                  spec.input_height, "x", spec.input_width, "x",
                                  spec.input_channels));
  }
  const int want = TargetsOf(spec);
  if (data.targets_per_example != want && !spec.outputs.empty()) {
    std::vector<std::string> each;
    for (const OutputSpec& out : spec.outputs) {
      each.push_back(
          absl::StrCat(out.name, ": ", TargetsPerExample(out.group.loss, out.group.width)));
    }
    return Bad(
        path,
        absl::StrCat(data.targets_per_example, " label values per example but model \"", spec.name,
                     "\" has ", spec.outputs.size(), " outputs that want ", want, " (",
                     absl::StrJoin(each, ", "), "), as columns of y in the outputs' order"));
  }
  if (data.targets_per_example != want) {
    return Bad(path, absl::StrCat(data.targets_per_example, " label values per example but model \"",
                                  spec.name, "\" trains on ", LossName(spec.loss), " over ",
                                  spec.num_classes, " outputs: it wants ", want,
                                  want == 1 ? " (a class index)" : ""));
  }
  for (int64_t i = 0; i < static_cast<int64_t>(data.targets.size()); ++i) {
    const absl::Status s =
        CheckTarget(spec, data.targets[i], static_cast<int>(i % data.targets_per_example));
    if (!s.ok()) {
      return Bad(path, absl::StrCat("label ", data.targets[i], " of example ",
                                    i / data.targets_per_example, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace pscluster
