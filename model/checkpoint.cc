#include "model/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iterator>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/crc32c.h"
#include "common/errno_status.h"
#include "common/file_io.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace pscluster {
namespace {

constexpr char kManifestName[] = "checkpoint.json";
constexpr char kFilePrefix[] = "ckpt-";
constexpr char kFileSuffix[] = ".safetensors";
constexpr char kTempSuffix[] = ".tmp";
constexpr char kCrcKeyPrefix[] = "crc32c:";
// Written by SerializeSafetensors ("pt"), so not the caller's to set or see.
constexpr char kFormatKey[] = "format";

// One checkpoint file in the directory, by base name.
struct Entry {
  std::string file;
  int64_t step = 0;
};

std::string JoinPath(const std::string& dir, const std::string& name) {
  return absl::EndsWith(dir, "/") ? dir + name : absl::StrCat(dir, "/", name);
}

// The step of a checkpoint file name, or nullopt when `name` is not exactly
// what CheckpointFileName writes (so two names never claim one step).
std::optional<int64_t> StepOfFileName(const std::string& name) {
  if (!absl::StartsWith(name, kFilePrefix) ||
      !absl::EndsWith(name, kFileSuffix)) {
    return std::nullopt;
  }
  const size_t begin = sizeof(kFilePrefix) - 1;
  const size_t affixes = begin + sizeof(kFileSuffix) - 1;
  if (name.size() <= affixes) return std::nullopt;
  const std::string digits = name.substr(begin, name.size() - affixes);
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(digits, &step) || CheckpointFileName(step) != name) {
    return std::nullopt;
  }
  return step;
}

bool IsReservedKey(const std::string& key) {
  return key == kFormatKey || absl::StartsWith(key, kCrcKeyPrefix);
}

// Over the tensor's bytes in the file, whatever its dtype.
uint32_t TensorCrc(const NamedTensor& t) {
  return crc32c::Value(TensorBytes(t));
}

// Exactly 8 hex digits, as WriteCheckpoint stores them.
std::optional<uint32_t> ParseCrc(const std::string& hex) {
  if (hex.size() != 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : hex) {
    uint32_t d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return std::nullopt;
    }
    v = (v << 4) | d;
  }
  return v;
}

// What a directory listing found: checkpoint files by descending step, and
// temporary files a crashed WriteSafetensors left behind.
struct Listing {
  std::vector<Entry> checkpoints;
  std::vector<std::string> temp_files;
};

absl::StatusOr<Listing> ScanDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  Listing listing;
  // increment(ec), not ++: the latter throws on a directory read error.
  while (!ec && it != std::filesystem::directory_iterator()) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) {
      if (const std::optional<int64_t> step = StepOfFileName(name)) {
        listing.checkpoints.push_back({name, *step});
      } else if (absl::EndsWith(name, kTempSuffix) &&
                 StepOfFileName(
                     name.substr(0, name.size() - (sizeof(kTempSuffix) - 1)))) {
        listing.temp_files.push_back(name);
      }
    }
    it.increment(ec);
  }
  if (ec) {
    return ErrnoStatus(ec.value(),
                       absl::StrCat("cannot list checkpoint directory ", dir));
  }
  std::sort(listing.checkpoints.begin(), listing.checkpoints.end(),
            [](const Entry& a, const Entry& b) { return a.step > b.step; });
  return listing;
}

// The manifest's entries, newest first. NotFound when there is no manifest
// (or no directory); another error when there is one that cannot be read or
// does not hold a non-empty list of distinct, well-named checkpoints with
// "latest" first.
absl::StatusOr<std::vector<Entry>> ReadManifest(const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestName);
  if (::access(path.c_str(), F_OK) != 0 &&
      (errno == ENOENT || errno == ENOTDIR)) {
    return absl::NotFoundError(absl::StrCat("no ", path));
  }
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  auto bad = [&path](auto&&... parts) {
    return absl::DataLossError(absl::StrCat(path, ": ", parts...));
  };
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    return bad("not valid JSON: ", e.what());
  }
  if (!manifest.is_object()) return bad("not a JSON object");
  const auto list = manifest.find("checkpoints");
  if (list == manifest.end() || !list->is_array() || list->empty()) {
    return bad("has no non-empty \"checkpoints\" array");
  }
  std::vector<Entry> entries;
  std::set<std::string> seen;
  for (const nlohmann::json& item : *list) {
    if (!item.is_object()) return bad("a checkpoints entry is not an object");
    const auto file = item.find("file");
    const auto step = item.find("step");
    if (file == item.end() || !file->is_string() || step == item.end() ||
        !step->is_number_integer()) {
      return bad("checkpoints entry ", item.dump(),
                 " lacks a string \"file\" or an integer \"step\"");
    }
    Entry entry{file->get<std::string>(), step->get<int64_t>()};
    const std::optional<int64_t> named_step = StepOfFileName(entry.file);
    if (!named_step || *named_step != entry.step) {
      return bad("checkpoints entry ", item.dump(), " should name ",
                 CheckpointFileName(entry.step));
    }
    if (!seen.insert(entry.file).second) {
      return bad("lists ", entry.file, " twice");
    }
    entries.push_back(std::move(entry));
  }
  const auto latest = manifest.find("latest");
  if (latest == manifest.end() || !latest->is_string() ||
      latest->get<std::string>() != entries.front().file) {
    return bad("\"latest\" is not the first checkpoints entry ",
               entries.front().file);
  }
  return entries;
}

// The kept checkpoints, newest first: the manifest's when there is a usable
// one, else the directory scan's.
absl::StatusOr<std::vector<Entry>> Candidates(const std::string& dir) {
  absl::StatusOr<std::vector<Entry>> manifest = ReadManifest(dir);
  if (manifest.ok()) return manifest;
  if (!absl::IsNotFound(manifest.status())) {
    spdlog::warn("ignoring the checkpoint manifest ({}); scanning {} instead",
                 std::string(manifest.status().message()), dir);
  }
  absl::StatusOr<Listing> listing = ScanDir(dir);
  if (!listing.ok()) return listing.status();
  return std::move(listing->checkpoints);
}

std::string ManifestJson(const std::vector<Entry>& kept) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Entry& e : kept)
    list.push_back({{"file", e.file}, {"step", e.step}});
  nlohmann::ordered_json manifest = {{"latest", kept.front().file},
                                     {"checkpoints", std::move(list)}};
  return manifest.dump(2) + "\n";
}

// Deletes dir/name; a file already gone is fine, any other failure is logged
// (the next WriteCheckpoint tries again, as the file is then unlisted).
void RemoveQuietly(const std::string& dir, const std::string& name) {
  const std::string path = JoinPath(dir, name);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("cannot delete old checkpoint file: {}",
                 std::string(ErrnoStatus(errno, path).message()));
  }
}

}  // namespace

std::string CheckpointFileName(int64_t step) {
  return absl::StrFormat("%s%010d%s", kFilePrefix, step, kFileSuffix);
}

absl::Status WriteCheckpoint(const std::string& dir, const Checkpoint& ckpt,
                             int keep_last) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("checkpoint directory name is empty");
  }
  if (keep_last < 1) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint directory ", dir,
                                                   ": keep_last is ", keep_last,
                                                   "; it must be at least 1"));
  }
  if (ckpt.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint directory ", dir, ": step ", ckpt.step, " is negative"));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : ckpt.metadata) {
    if (IsReservedKey(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint directory ", dir, ": metadata key '", key,
          "' is reserved ('", kFormatKey, "' and '", kCrcKeyPrefix, "*')"));
    }
    metadata[key] = value;
  }
  // Stored unmasked: the CRC sits in the header, not inside the bytes it
  // covers, and plain CRC-32C is what other tools compute.
  for (const NamedTensor& t : ckpt.tensors) {
    metadata[kCrcKeyPrefix + t.name] = absl::StrFormat("%08x", TensorCrc(t));
  }

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return ErrnoStatus(ec.value(), "cannot create checkpoint directory " + dir);
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint directory ", dir, " exists and is not a directory"));
  }
  // Read what is kept before writing anything, so that a directory we cannot
  // list fails the call with nothing changed.
  absl::StatusOr<std::vector<Entry>> previous = Candidates(dir);
  if (!previous.ok()) return previous.status();
  absl::StatusOr<Listing> listing = ScanDir(dir);
  if (!listing.ok()) return listing.status();

  const Entry written{CheckpointFileName(ckpt.step), ckpt.step};
  absl::Status status =
      WriteSafetensors(JoinPath(dir, written.file), ckpt.tensors, metadata);
  if (!status.ok()) return status;

  // Older entries follow in their order; a listed file that is gone is
  // dropped rather than carried along.
  std::set<std::string> on_disk;
  for (const Entry& e : listing->checkpoints) on_disk.insert(e.file);
  std::vector<Entry> kept = {written};
  for (const Entry& e : *previous) {
    if (kept.size() == static_cast<size_t>(keep_last)) break;
    if (e.file != written.file && on_disk.count(e.file) != 0) {
      kept.push_back(e);
    }
  }
  const std::string manifest = ManifestJson(kept);
  status = WriteFileAtomically(JoinPath(dir, kManifestName), {manifest});
  if (!status.ok()) return status;

  // Prune what the manifest no longer lists, including files a crash left
  // unlisted (written but never listed, or unlisted but never deleted). The
  // unlinks are not fsynced: one that a crash undoes is retried next time.
  std::set<std::string> keep_files;
  for (const Entry& e : kept) keep_files.insert(e.file);
  std::set<std::string> remove;
  for (const Entry& e : *previous) remove.insert(e.file);
  for (const Entry& e : listing->checkpoints) remove.insert(e.file);
  for (const std::string& name : remove) {
    if (keep_files.count(name) == 0) RemoveQuietly(dir, name);
  }
  for (const std::string& name : listing->temp_files) {
    RemoveQuietly(dir, name);
  }
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string name =
      slash == std::string::npos ? path : path.substr(slash + 1);
  const std::optional<int64_t> step = StepOfFileName(name);
  if (!step) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not named like a checkpoint (", CheckpointFileName(0), ")"));
  }
  Checkpoint ckpt;
  ckpt.step = *step;
  absl::StatusOr<std::vector<NamedTensor>> tensors =
      ReadSafetensors(path, &ckpt.metadata);
  if (!tensors.ok()) return tensors.status();
  ckpt.tensors = std::move(*tensors);

  size_t crc_keys = 0;
  for (const auto& [key, value] : ckpt.metadata) {
    if (absl::StartsWith(key, kCrcKeyPrefix)) ++crc_keys;
  }
  for (const NamedTensor& t : ckpt.tensors) {
    const auto it = ckpt.metadata.find(kCrcKeyPrefix + t.name);
    if (it == ckpt.metadata.end()) {
      return absl::DataLossError(absl::StrCat(path, ": tensor '", t.name,
                                              "' has no ", kCrcKeyPrefix,
                                              " entry in the metadata"));
    }
    const std::optional<uint32_t> stored = ParseCrc(it->second);
    if (!stored) {
      return absl::DataLossError(absl::StrCat(path, ": tensor '", t.name,
                                              "' has CRC-32C '", it->second,
                                              "', not 8 hex digits"));
    }
    const uint32_t actual = TensorCrc(t);
    if (actual != *stored) {
      return absl::DataLossError(absl::StrFormat(
          "%s: tensor '%s' fails its CRC-32C check: stored %08x, data has "
          "%08x",
          path, t.name, *stored, actual));
    }
  }
  // Every tensor matched one key; a key left over names a lost tensor.
  if (crc_keys != ckpt.tensors.size()) {
    std::vector<std::string> lost;
    for (const auto& [key, value] : ckpt.metadata) {
      if (!absl::StartsWith(key, kCrcKeyPrefix)) continue;
      const std::string tensor = key.substr(sizeof(kCrcKeyPrefix) - 1);
      bool found = false;
      for (const NamedTensor& t : ckpt.tensors) found |= t.name == tensor;
      if (!found) lost.push_back("'" + tensor + "'");
    }
    return absl::DataLossError(absl::StrCat(
        path, ": the metadata has CRC-32Cs for tensors the file lacks: ",
        absl::StrJoin(lost, ", ")));
  }
  for (auto it = ckpt.metadata.begin(); it != ckpt.metadata.end();) {
    it = IsReservedKey(it->first) ? ckpt.metadata.erase(it) : std::next(it);
  }
  return ckpt;
}

absl::StatusOr<Checkpoint> ReadLatestCheckpoint(const std::string& dir) {
  absl::StatusOr<std::vector<Entry>> candidates = Candidates(dir);
  if (!candidates.ok()) return candidates.status();
  if (candidates->empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir));
  }
  std::vector<std::string> errors;
  for (const Entry& e : *candidates) {
    const std::string path = JoinPath(dir, e.file);
    absl::StatusOr<Checkpoint> ckpt = ReadCheckpoint(path);
    if (ckpt.ok()) return ckpt;
    // The message names the file.
    spdlog::warn("skipping checkpoint at step {}: {}", e.step,
                 std::string(ckpt.status().message()));
    errors.push_back(std::string(ckpt.status().message()));
  }
  return absl::DataLossError(
      absl::StrCat("no readable checkpoint in ", dir, " (", candidates->size(),
                   " tried): ", absl::StrJoin(errors, "; ")));
}

absl::StatusOr<std::vector<std::string>> ListCheckpoints(
    const std::string& dir) {
  absl::StatusOr<std::vector<Entry>> candidates = Candidates(dir);
  if (!candidates.ok()) return candidates.status();
  std::vector<std::string> paths;
  for (const Entry& e : *candidates) paths.push_back(JoinPath(dir, e.file));
  return paths;
}

}  // namespace pscluster
