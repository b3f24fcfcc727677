// Fuzz target for the data files a user hands a worker, an evaluator or
// the chief (model/dataset.h LoadDataset and CheckDataFiles), built twice:
//   npy_fuzzer  the first byte picks an .npz archive (the rest of the
//               input is the archive) or a folder of .npy files (the rest
//               is x_train, y_train, x_test, y_test, each length-prefixed);
//   idx_fuzzer  a folder of MNIST IDX files (images and labels of both
//               splits, each length-prefixed), raw or gzip (the first
//               byte's low bit: the files are then named *.gz, and their
//               bytes are taken as they are, so a seed holds real gzip).
// The files are written to a folder of this process's under $TMPDIR and
// read back by the real loaders (an .npz or folder also as the labels of a
// model with outputs "x" and "y", y_train_x and y_train_y). Malformed files must fail with a status
// naming the file, never crash, over-read or allocate what a header claims
// beyond the file's size.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "fuzz/fuzz_input.h"
#include "model/dataset.h"

namespace pscluster {
namespace {

constexpr size_t kMaxFileBytes = 1 << 16;

void Load(const std::string& path) {
  for (Split split : {Split::kTrain, Split::kTest}) {
    (void)CheckDataFiles(path, split);
    // Labels per output (y_<split>_x, y_<split>_y) where y_<split> is
    // absent: the stitching of several label arrays.
    (void)LoadDataset(path, split, {"x", "y"});
    absl::StatusOr<Dataset> d = LoadDataset(path, split);
    if (!d.ok() && d.status().message().find(path) == std::string::npos &&
        d.status().message().find("x_") == std::string::npos) {
      // Errors name the file; a NotFound for an absent member may name
      // the member only.
      if (!absl::IsNotFound(d.status())) {
        std::fprintf(stderr, "dataset_fuzzer: an error that names no file: %s\n",
                     std::string(d.status().message()).c_str());
        std::abort();
      }
    }
  }
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  namespace fs = std::filesystem;
  FuzzInput in(data, size);
  const uint8_t mode = in.Byte();
  const fs::path dir = FreshFuzzDir("data");
#ifdef PSCLUSTER_FUZZ_IDX
  const bool gz = (mode & 1) != 0;
  for (const char* stem : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    WriteFuzzFile(dir / (std::string(stem) + (gz ? ".gz" : "")),
                  in.LengthPrefixed(kMaxFileBytes));
  }
  Load(dir.string());
#else
  if (mode % 2 == 0) {
    const fs::path npz = dir / "data.npz";
    WriteFuzzFile(npz, in.Rest());
    Load(npz.string());
  } else {
    for (const char* name : {"x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy"}) {
      WriteFuzzFile(dir / name, in.LengthPrefixed(kMaxFileBytes));
    }
    Load(dir.string());
  }
#endif
  return 0;
}
