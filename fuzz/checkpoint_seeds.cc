// Writes checkpoint_fuzzer's seeds into the folder named by argv[1]: real
// checkpoints of CheckpointSeedModel() over 2 ps (Adam's slots), written by
// WriteCheckpoint at steps 40 and 41 (keep_last 2), packed as the fuzzer
// reads its input; and variations (restored over 1 and 3 ps, no manifest,
// the newest file's CRC broken, a truncated manifest).
//   bazel run //fuzz:checkpoint_seeds -- $PWD/fuzz/corpus/checkpoint_fuzzer
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "chief/snapshot.h"
#include "fuzz/checkpoint_seed_model.h"
#include "model/checkpoint.h"
#include "model/placement.h"

namespace pscluster {
namespace {

std::string Floats(int64_t n, float first) {
  std::string out(static_cast<size_t>(n) * sizeof(float), '\0');
  for (int64_t k = 0; k < n; ++k) {
    const float v = first + 0.25f * static_cast<float>(k);
    std::memcpy(&out[k * sizeof(float)], &v, sizeof v);
  }
  return out;
}

std::string Read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Two bytes, as FuzzInput::IntInRange reads a length below 65536.
std::string Length(size_t n) {
  return std::string{static_cast<char>(n >> 8), static_cast<char>(n & 0xff)};
}

std::string Pack(int num_ps, const std::string* manifest,
                 const std::vector<std::pair<int, std::string>>& files) {
  std::string out;
  out += static_cast<char>(num_ps - 1);
  out += static_cast<char>(manifest != nullptr);
  if (manifest != nullptr) out += Length(manifest->size()) + *manifest;
  out += static_cast<char>(files.size());
  for (const auto& [step, bytes] : files) {
    out += static_cast<char>(step);
    out += Length(bytes.size()) + bytes;
  }
  return out;
}

int Main(const std::filesystem::path& out) {
  const ModelSpec& spec = CheckpointSeedModel();
  PlacementOptions popt;
  popt.min_shard_bytes = kCheckpointSeedShardBytes;
  const Placement placement = PlaceVariables(spec, 2, popt);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "checkpoint_seeds";
  std::filesystem::remove_all(dir);
  for (int64_t step : {40, 41}) {
    Snapshot snap;
    snap.step = step;
    snap.done_chunks = "0-9,12-13";
    snap.chunks_per_epoch = 16;
    snap.generation = 3;
    snap.run_started_unix_ms = 1700000000123;
    for (int i = 0; i < 2; ++i) {
      ShardState s;
      s.set_layout_fingerprint(placement.fingerprint);
      s.set_version(step + i);
      s.set_generation(3);
      s.set_optimizer_iterations(step);
      const int64_t n = placement.floats_of_ps[i];
      s.set_values(Floats(n, 100.0f * i + step));
      for (const char* name : {"m", "v"}) {
        SlotValues* slot = s.add_slots();
        slot->set_name(name);
        slot->set_values(Floats(n, name[0] + 10.0f * i));
      }
      snap.ps.push_back(std::move(s));
    }
    const absl::Status written = WriteCheckpoint(dir.string(), ToCheckpoint(snap, spec, SYNC), 2);
    if (!written.ok()) {
      std::fprintf(stderr, "%s\n", written.ToString().c_str());
      return 1;
    }
  }
  const std::string manifest = Read(dir / "checkpoint.json");
  const std::string older = Read(dir / CheckpointFileName(40));
  const std::string newer = Read(dir / CheckpointFileName(41));
  std::string broken = newer;
  broken[broken.size() - 2] ^= 0x10;  // a bit of the last value
  const std::string truncated = manifest.substr(0, manifest.size() / 2);
  const std::vector<std::pair<std::string, std::string>> seeds = {
      {"two_ps", Pack(2, &manifest, {{40, older}, {41, newer}})},
      {"resharded_to_one_ps", Pack(1, &manifest, {{40, older}, {41, newer}})},
      {"resharded_to_three_ps", Pack(3, &manifest, {{41, newer}})},
      {"no_manifest", Pack(2, nullptr, {{40, older}, {41, newer}})},
      {"newest_crc_broken", Pack(2, &manifest, {{40, older}, {41, broken}})},
      {"manifest_truncated", Pack(2, &truncated, {{40, older}, {41, newer}})},
      {"manifest_names_a_missing_file", Pack(2, &manifest, {{40, older}})},
  };
  for (const auto& [name, bytes] : seeds) {
    std::ofstream(out / name, std::ios::binary) << bytes;
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: checkpoint_seeds <folder>\n");
    return 2;
  }
  return pscluster::Main(argv[1]);
}
