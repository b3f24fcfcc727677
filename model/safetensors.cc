#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/errno_status.h"
#include "common/file_io.h"
#include "nlohmann/json.hpp"

namespace pscluster {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; add byte swapping");

constexpr char kMetadataKey[] = "__metadata__";
constexpr char kF32[] = "F32";
constexpr char kI64[] = "I64";
// The reference implementation's limit; a larger header means corruption.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// product(shape), or false when a dimension is negative or the product
// exceeds `limit`.
bool NumElements(const std::vector<int64_t>& shape, uint64_t limit,
                 uint64_t* out) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > limit / static_cast<uint64_t>(d)) {
      // Overflow unless a later dimension is zero.
      if (std::find(shape.begin(), shape.end(), 0) == shape.end()) return false;
      n = 0;
      break;
    }
    n *= static_cast<uint64_t>(d);
  }
  *out = n;
  return true;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

uint64_t ElementBytes(NamedTensor::Dtype dtype) {
  return dtype == NamedTensor::Dtype::kI64 ? sizeof(int64_t) : sizeof(float);
}

// The JSON header, padded, preceded by its 8-byte length: everything before
// the data section.
absl::StatusOr<std::string> EncodeHeader(
    const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty()) {
      return absl::InvalidArgumentError(
          "safetensors: a tensor has an empty name");
    }
    if (t.name == kMetadataKey) {
      return absl::InvalidArgumentError(
          "safetensors: tensor name '__metadata__' is reserved");
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor name '", t.name, "' is repeated"));
    }
    const uint64_t element = ElementBytes(t.dtype);
    uint64_t count = 0;
    if (!NumElements(t.shape, std::numeric_limits<uint64_t>::max() / element,
                     &count)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor '", t.name, "' has shape ", ShapeString(t.shape),
          " with a negative or too large dimension"));
    }
    const bool ints = t.dtype == NamedTensor::Dtype::kI64;
    const size_t held = ints ? t.ints.size() : t.values.size();
    const size_t other = ints ? t.values.size() : t.ints.size();
    if (count != held) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor '", t.name, "' has shape ", ShapeString(t.shape),
          " (", count, " values) but ", held, " values"));
    }
    if (other != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor '", t.name, "' is ", DtypeName(t.dtype),
          " but also holds ", other, " ", ints ? kF32 : kI64, " values"));
    }
    const uint64_t end = offset + element * count;
    header[t.name] = {{"dtype", DtypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, end}}};
    offset = end;
  }
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  if (metadata.count("format") == 0) meta["format"] = "pt";
  for (const auto& [key, value] : metadata) meta[key] = value;
  header[kMetadataKey] = std::move(meta);

  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {
    // type_error 316: a name or metadata string is not valid UTF-8.
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: cannot encode the header: ", e.what()));
  }
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  out += json;
  return out;
}

// Reads a JSON integer that must be >= 0.
bool GetUnsigned(const nlohmann::json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

struct Entry {
  std::string name;
  NamedTensor::Dtype dtype = NamedTensor::Dtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

// DataLoss "<source>: <parts...>": what a bad file gets.
template <typename... Parts>
absl::Status Corrupt(const std::string& source, const Parts&... parts) {
  return absl::DataLossError(absl::StrCat(source, ": ", parts...));
}

// The JSON header: checks the 8-byte length against the file and the limit,
// and that the header is a JSON object. `*header_len` receives the length.
absl::StatusOr<nlohmann::json> ParseHeader(std::string_view bytes,
                                           const std::string& source,
                                           uint64_t* header_len) {
  if (bytes.size() < 8) {
    return Corrupt(source, "file is ", bytes.size(),
                   " bytes, too short for the 8-byte header length");
  }
  *header_len = 0;
  for (int i = 0; i < 8; ++i) {
    *header_len |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i]))
                   << (8 * i);
  }
  if (*header_len > bytes.size() - 8) {
    return Corrupt(source, "header length ", *header_len, " exceeds the ",
                   bytes.size() - 8, " bytes after the length field");
  }
  if (*header_len > kMaxHeaderBytes) {
    return Corrupt(source, "header length ", *header_len,
                   " exceeds the limit of ", kMaxHeaderBytes);
  }
  const std::string_view header_text = bytes.substr(8, *header_len);
  if (header_text.empty() || header_text[0] != '{') {
    return Corrupt(source, "header does not start with '{'");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text.begin(), header_text.end());
  } catch (const nlohmann::json::exception& e) {
    return Corrupt(source, "header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) {
    return Corrupt(source, "header is not a JSON object");
  }
  return header;
}

// The "__metadata__" entry's string values, added to `meta`.
absl::Status ParseMetadata(const nlohmann::json& value,
                           const std::string& source,
                           std::map<std::string, std::string>* meta) {
  if (!value.is_object()) {
    return Corrupt(source, "__metadata__ is not an object");
  }
  for (const auto& [mkey, mvalue] : value.items()) {
    if (!mvalue.is_string()) {
      return Corrupt(source, "__metadata__ value of '", mkey,
                     "' is not a string");
    }
    (*meta)[mkey] = mvalue.get<std::string>();
  }
  return absl::OkStatus();
}

// Tensor `key`'s header entry: an F32 or I64 dtype, a shape of
// non-negative integers, and data_offsets [begin, end] that hold 4 (F32) or
// 8 (I64) bytes per value.
absl::StatusOr<Entry> ParseEntry(const std::string& key,
                                 const nlohmann::json& value,
                                 const std::string& source) {
  const std::string where = absl::StrCat("tensor '", key, "'");
  if (!value.is_object()) {
    return Corrupt(source, where, " is not a JSON object");
  }
  const auto dtype = value.find("dtype");
  const auto shape = value.find("shape");
  const auto offsets = value.find("data_offsets");
  if (dtype == value.end() || !dtype->is_string()) {
    return Corrupt(source, where, " has no string dtype");
  }
  Entry entry;
  entry.name = key;
  if (dtype->get<std::string>() == kI64) {
    entry.dtype = NamedTensor::Dtype::kI64;
  } else if (dtype->get<std::string>() != kF32) {
    return absl::UnimplementedError(absl::StrCat(
        source, ": ", where, " has dtype ", dtype->get<std::string>(),
        "; only F32 and I64 are supported"));
  }
  if (shape == value.end() || !shape->is_array()) {
    return Corrupt(source, where, " has no shape array");
  }
  for (const auto& d : *shape) {
    uint64_t dim = 0;
    if (!GetUnsigned(d, &dim) ||
        dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Corrupt(source, where, " has shape ", shape->dump(),
                     ": dimensions must be non-negative integers");
    }
    entry.shape.push_back(static_cast<int64_t>(dim));
  }
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !GetUnsigned((*offsets)[0], &entry.begin) ||
      !GetUnsigned((*offsets)[1], &entry.end)) {
    return Corrupt(source, where, " has data_offsets ",
                   offsets == value.end() ? "missing" : offsets->dump(),
                   "; expected [begin, end] of non-negative integers");
  }
  if (entry.begin > entry.end) {
    return Corrupt(source, where, " has data_offsets [", entry.begin, ", ",
                   entry.end, "] with begin > end");
  }
  const uint64_t element = ElementBytes(entry.dtype);
  uint64_t count = 0;
  if (!NumElements(entry.shape, std::numeric_limits<uint64_t>::max() / element,
                   &count) ||
      entry.end - entry.begin != element * count) {
    return Corrupt(source, where, " has shape ", ShapeString(entry.shape),
                   " but data_offsets [", entry.begin, ", ", entry.end,
                   "] hold ", entry.end - entry.begin, " bytes, not ", element,
                   " per ", dtype->get<std::string>(), " value");
  }
  return entry;
}

// Every header entry in the header's order: the tensors' entries, and
// "__metadata__" into `meta`.
absl::StatusOr<std::vector<Entry>> ParseEntries(
    const nlohmann::json& header, const std::string& source,
    std::map<std::string, std::string>* meta) {
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (absl::Status s = ParseMetadata(value, source, meta); !s.ok()) {
        return s;
      }
      continue;
    }
    absl::StatusOr<Entry> entry = ParseEntry(key, value, source);
    if (!entry.ok()) return entry.status();
    entries.push_back(std::move(*entry));
  }
  return entries;
}

// That `entries`, sorted by data offset, tile the `data_size`-byte data
// section: no gap, no overlap, nothing after the last.
absl::Status CheckTiling(const std::vector<Entry>& entries, uint64_t data_size,
                         const std::string& source) {
  uint64_t expected_begin = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.end > data_size) {
      return Corrupt(source, "tensor '", e.name, "' data_offsets [", e.begin,
                     ", ", e.end, "] run past the ", data_size,
                     "-byte data section");
    }
    if (e.begin < expected_begin) {
      return Corrupt(source, "tensor '", e.name, "' data_offsets [", e.begin,
                     ", ", e.end, "] overlap tensor '", entries[i - 1].name,
                     "' [", entries[i - 1].begin, ", ", entries[i - 1].end,
                     "]");
    }
    if (e.begin > expected_begin) {
      return Corrupt(
          source, "bytes [", expected_begin, ", ", e.begin,
          ") of the data section belong to no tensor (before tensor '", e.name,
          "')");
    }
    expected_begin = e.end;
  }
  if (expected_begin != data_size) {
    return Corrupt(source, "bytes [", expected_begin, ", ", data_size,
                   ") of the data section belong to no tensor");
  }
  return absl::OkStatus();
}

}  // namespace

const char* DtypeName(NamedTensor::Dtype dtype) {
  return dtype == NamedTensor::Dtype::kI64 ? kI64 : kF32;
}

std::string_view TensorBytes(const NamedTensor& t) {
  if (t.dtype == NamedTensor::Dtype::kI64) {
    return {reinterpret_cast<const char*>(t.ints.data()),
            t.ints.size() * sizeof(int64_t)};
  }
  return {reinterpret_cast<const char*>(t.values.data()),
          t.values.size() * sizeof(float)};
}

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> out = EncodeHeader(tensors, metadata);
  if (!out.ok()) return out;
  for (const NamedTensor& t : tensors) out->append(TensorBytes(t));
  return out;
}

absl::Status WriteSafetensors(
    const std::string& path, const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> header = EncodeHeader(tensors, metadata);
  if (!header.ok()) {
    return absl::Status(header.status().code(),
                        absl::StrCat(path, ": ", header.status().message()));
  }
  // Tensor data goes straight from the caller's vectors: no second copy of
  // the model in memory.
  std::vector<std::string_view> pieces = {*header};
  for (const NamedTensor& t : tensors) pieces.push_back(TensorBytes(t));
  return WriteFileAtomically(path, pieces);
}

absl::StatusOr<std::vector<NamedTensor>> ParseSafetensors(
    std::string_view bytes, const std::string& source,
    std::map<std::string, std::string>* metadata) {
  uint64_t header_len = 0;
  absl::StatusOr<nlohmann::json> header =
      ParseHeader(bytes, source, &header_len);
  if (!header.ok()) return header.status();
  std::map<std::string, std::string> meta;
  absl::StatusOr<std::vector<Entry>> entries =
      ParseEntries(*header, source, &meta);
  if (!entries.ok()) return entries.status();

  const std::string_view data = bytes.substr(8 + header_len);
  std::sort(entries->begin(), entries->end(),
            [](const Entry& a, const Entry& b) {
              return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
            });
  if (absl::Status s = CheckTiling(*entries, data.size(), source); !s.ok()) {
    return s;
  }

  std::vector<NamedTensor> tensors(entries->size());
  for (size_t i = 0; i < entries->size(); ++i) {
    Entry& e = (*entries)[i];
    NamedTensor& t = tensors[i];
    t.name = std::move(e.name);
    t.shape = std::move(e.shape);
    t.dtype = e.dtype;
    void* dest = nullptr;
    if (e.dtype == NamedTensor::Dtype::kI64) {
      t.ints.resize((e.end - e.begin) / sizeof(int64_t));
      dest = t.ints.data();
    } else {
      t.values.resize((e.end - e.begin) / sizeof(float));
      dest = t.values.data();
    }
    // An empty tensor's vector may hold no memory (data() null), which
    // memcpy must not see even for 0 bytes.
    if (e.end > e.begin) {
      std::memcpy(dest, data.data() + e.begin, e.end - e.begin);
    }
  }
  if (metadata != nullptr) *metadata = std::move(meta);
  return tensors;
}

absl::StatusOr<std::vector<NamedTensor>> ReadSafetensors(
    const std::string& path, std::map<std::string, std::string>* metadata) {
  absl::StatusOr<std::string> bytes = ReadWholeFile(path);
  if (!bytes.ok()) return bytes.status();
  return ParseSafetensors(*bytes, path, metadata);
}

}  // namespace pscluster
