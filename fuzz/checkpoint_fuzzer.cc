// Fuzz target for our checkpoints as the chief restores them (model/
// checkpoint.h, chief/snapshot.h): a checkpoint directory is written from
// the input, its manifest (checkpoint.json) and up to three checkpoint
// files (safetensors with a CRC-32C per tensor), then read back as the
// chief does: ListCheckpoints, ReadCheckpoint of each, ReadLatestCheckpoint,
// and FromCheckpointFor a small model placed over 1 to 3 ps (resharding a
// checkpoint of another ps count). Malformed or corrupt files must fail
// with a status naming the file (or be skipped for an older one), never
// crash or allocate what a header claims. Round trips: a checkpoint that
// reads back is written again (WriteCheckpoint) and read equal, bit for
// bit; a snapshot restored is encoded again (ToCheckpoint) and restores
// equal.
// The input: the ps count, whether there is a manifest, the manifest,
// then the files (a step for the name, the bytes); fuzz/
// checkpoint_seeds.cc writes real ones so.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chief/snapshot.h"
#include "fuzz/checkpoint_seed_model.h"
#include "fuzz/fuzz_input.h"
#include "model/checkpoint.h"
#include "model/placement.h"

namespace pscluster {
namespace {

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "checkpoint_fuzzer: contract broken: %s\n", what);
  std::abort();
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool Same(const Checkpoint& a, const Checkpoint& b) {
  if (a.step != b.step || a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) {
    return false;
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    if (a.tensors[i].name != b.tensors[i].name || a.tensors[i].shape != b.tensors[i].shape ||
        !SameBits(a.tensors[i].values, b.tensors[i].values)) {
      return false;
    }
  }
  return true;
}

bool Same(const Snapshot& a, const Snapshot& b) {
  if (a.step != b.step || a.done_chunks != b.done_chunks ||
      a.chunks_per_epoch != b.chunks_per_epoch || a.generation != b.generation ||
      a.run_started_unix_ms != b.run_started_unix_ms || a.ps.size() != b.ps.size()) {
    return false;
  }
  for (size_t i = 0; i < a.ps.size(); ++i) {
    if (a.ps[i].SerializeAsString() != b.ps[i].SerializeAsString()) return false;
  }
  return true;
}

void Restore(const Checkpoint& c, int num_ps) {
  const ModelSpec& spec = CheckpointSeedModel();
  PlacementOptions popt;
  popt.min_shard_bytes = kCheckpointSeedShardBytes;
  const Placement placement = PlaceVariables(spec, num_ps, popt);
  absl::StatusOr<Snapshot> snap =
      FromCheckpointFor(c, spec, kCheckpointSeedShardBytes, placement);
  if (!snap.ok()) return;
  Require(static_cast<int>(snap->ps.size()) == num_ps, "a snapshot of another ps count");
  for (int i = 0; i < num_ps; ++i) {
    Require(static_cast<int64_t>(snap->ps[i].values().size()) ==
                placement.floats_of_ps[i] * static_cast<int64_t>(sizeof(float)),
            "a ps's values are not its placement's size");
  }
  absl::StatusOr<Snapshot> again =
      FromCheckpoint(ToCheckpoint(*snap, spec, UpdateMode::SYNC), placement);
  Require(again.ok(), "a restored snapshot, encoded again, does not restore");
  Require(Same(*snap, *again), "a snapshot changed through ToCheckpoint and back");
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  namespace fs = std::filesystem;
  FuzzInput in(data, size);
  const int num_ps = static_cast<int>(in.IntInRange(1, 3));
  const fs::path dir = FuzzScratchDir() / "ckpt";
  const fs::path again = FuzzScratchDir() / "again";
  fs::remove_all(dir);
  fs::remove_all(again);
  fs::create_directories(dir);
  if (in.Bool()) WriteFuzzFile(dir / "checkpoint.json", in.LengthPrefixed(4096));
  const int files = static_cast<int>(in.IntInRange(0, 3));
  for (int i = 0; i < files; ++i) {
    const int64_t step = in.Byte();
    WriteFuzzFile(dir / CheckpointFileName(step), in.LengthPrefixed(1 << 14));
  }

  absl::StatusOr<std::vector<std::string>> listed = ListCheckpoints(dir.string());
  Require(listed.ok(), "an existing directory could not be listed");
  for (const std::string& path : *listed) {
    absl::StatusOr<Checkpoint> c = ReadCheckpoint(path);
    Require(c.ok() || absl::IsNotFound(c.status()) ||
                c.status().message().find(path) != std::string::npos,
            "an error that does not name the checkpoint file");
  }
  absl::StatusOr<Checkpoint> latest = ReadLatestCheckpoint(dir.string());
  if (!latest.ok()) return 0;
  Restore(*latest, num_ps);
  if (!WriteCheckpoint(again.string(), *latest, 1).ok()) return 0;  // e.g. a name not UTF-8
  absl::StatusOr<Checkpoint> back = ReadLatestCheckpoint(again.string());
  Require(back.ok(), "a checkpoint written again does not read back");
  Require(Same(*latest, *back), "a checkpoint changed through a write and a read");
  return 0;
}
