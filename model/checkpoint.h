// The checkpoint directory the chief writes and every task restores from:
//
//   dir/ckpt-0000000100.safetensors   one file per checkpoint (safetensors,
//                                     loadable by PyTorch/NumPy), with a
//                                     CRC-32C of each tensor's bytes in its
//                                     "__metadata__": "crc32c:<name>" ->
//                                     8 lower-case hex digits
//   dir/checkpoint.json               the manifest: {"latest": "<file>",
//                                     "checkpoints": [{"file": ..., "step":
//                                     ...}, ...]}, newest first
//
// "Newest" means most recently written. That is normally the highest step,
// but a chief that restarted from an older checkpoint (say the newest was
// corrupt) writes lower steps than some it keeps, and those count as newer.
// Without a usable manifest, higher steps count as newer.
//
// Plain functions, safe to call from any thread. One directory must have one
// writer at a time; readers may run beside it (a file pruned under a reader is
// skipped like a missing one).
#ifndef PSCLUSTER_MODEL_CHECKPOINT_H_
#define PSCLUSTER_MODEL_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/safetensors.h"

namespace pscluster {

struct Checkpoint {
  int64_t step = 0;  // global step it was taken at; >= 0
  // Free-form (the chief stores JSON strings here). "format" and keys that
  // start with "crc32c:" are reserved for the file format.
  std::map<std::string, std::string> metadata;
  std::vector<NamedTensor> tensors;  // come back in the order written
};

// "ckpt-0000000100.safetensors" for step 100: the step zero-padded to 10
// digits (more when it needs more).
std::string CheckpointFileName(int64_t step);

// Writes dir/CheckpointFileName(ckpt.step) atomically (via WriteSafetensors),
// replacing one of the same step; then rewrites dir/checkpoint.json
// atomically (temp file, fsync, rename, fsync the directory) to list it
// first, followed by the previously kept checkpoints, `keep_last` (>= 1) in
// all; then deletes the checkpoint files it no longer lists and stale
// temporary files. Creates `dir` and its parents when missing.
// InvalidArgument for keep_last < 1, a negative step, a reserved metadata key
// or a tensor SerializeSafetensors rejects; errors name the path. A file that
// cannot be pruned is logged, not returned: the checkpoint itself is safe, and
// the next write retries.
absl::Status WriteCheckpoint(const std::string& dir, const Checkpoint& ckpt,
                             int keep_last);

// Reads one checkpoint file, verifying every tensor against its CRC-32C
// (DataLoss naming the file and tensor on a mismatch or a missing CRC). The
// step comes from the file name; the reserved metadata keys are removed.
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

// The newest checkpoint that ReadCheckpoint accepts: the manifest's entries
// newest first, or, when the manifest is missing or unusable (logged), the
// ckpt-*.safetensors files in `dir` by descending step. A newer one that is
// missing or corrupt is skipped with a warning naming it and why. Temporary
// files (*.tmp) are never considered. NotFound naming `dir` when there is no
// candidate; DataLoss naming `dir` and each candidate's error when none reads
// back.
absl::StatusOr<Checkpoint> ReadLatestCheckpoint(const std::string& dir);

// The kept checkpoints' paths (dir/<file>), newest first, from the manifest
// or else the directory scan as above. Empty for an empty directory; NotFound
// when `dir` does not exist.
absl::StatusOr<std::vector<std::string>> ListCheckpoints(
    const std::string& dir);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_CHECKPOINT_H_
