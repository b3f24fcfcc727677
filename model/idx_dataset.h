// MNIST-style IDX files (gzip-compressed or raw) and the deterministic
// shuffling and sharding every worker derives the same way. Plain
// functions and value types: safe to call from any thread.
//
// IDX: a big-endian header, then unsigned bytes. Images: magic 0x00000803,
// count, rows, cols, then count*rows*cols pixels. Labels: magic 0x00000801,
// count, then count labels.
#ifndef PSCLUSTER_MODEL_IDX_DATASET_H_
#define PSCLUSTER_MODEL_IDX_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pscluster {

struct IdxImages {
  int count = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;  // count * height * width, row-major
};

// Reads one IDX image file; gzip is detected from the content, not the name.
// Errors name `path` and what is wrong (bad magic, truncated or trailing
// data, corrupt gzip, implausible dimensions).
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path);
absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path);

struct Dataset {
  int count = 0, height = 0, width = 0, channels = 1;
  std::vector<float> images;  // count * height * width * channels, NHWC
  // count * targets_per_example: a class index per example (as a float),
  // or the values the model's outputs are trained towards (one-hot or soft
  // class weights, binary labels, regression targets).
  std::vector<float> targets;
  int targets_per_example = 1;
  // Ids too large for a float32 (a Criteo folder of int64 keys, model/
  // criteo_dataset.h): values [ids_first, ids_first + ids_per_example) of
  // every example are ids, given here (count * ids_per_example) and 0 in
  // `images`. ids_per_example 0: none; ids, if any, are the float values.
  std::vector<int64_t> ids;
  int ids_per_example = 0;
  int ids_first = 0;
};

enum class Split { kTrain, kTest };

// Reads "<dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz", falling back
// to the uncompressed name without ".gz". Checks that image and label counts
// agree and that labels are digits; NotFound naming both names tried when a
// file is absent, InvalidArgument naming the file otherwise.
absl::StatusOr<Dataset> LoadMnist(const std::string& dir, Split split);

// Cheap check of what LoadMnist needs, for start-up: both files of `split`
// are there (NotFound, as LoadMnist says it) and can be opened for reading
// (PermissionDenied naming the file). Their contents are not read.
absl::Status CheckMnistFiles(const std::string& dir, Split split);

// A permutation of 0..count-1 for `epoch`: the same on every machine and
// compiler (splitmix64 and Fisher-Yates with unbiased rejection sampling,
// no <random> distributions). Different epochs and seeds shuffle
// independently. Empty for count <= 0.
std::vector<int32_t> EpochPermutation(int count, uint64_t seed, int epoch);

// The elements of `perm` at positions shard, shard + num_shards, ...: the
// shards partition `perm` and their sizes differ by at most one. Empty when
// num_shards <= 0 or shard is outside [0, num_shards).
std::vector<int32_t> ShardOf(const std::vector<int32_t>& perm, int shard,
                             int num_shards);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_IDX_DATASET_H_
