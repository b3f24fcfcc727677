// Writes event_file_fuzzer's seeds into the folder named by argv[1]: an
// event file of a short run written by the real TensorBoardWriter (the
// file_version event, then loss, accuracy and throughput scalars), and
// the same cut inside a record and with a payload bit flipped.
//   bazel run //fuzz:event_file_seeds -- $PWD/fuzz/corpus/event_file_fuzzer
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "common/tensorboard_writer.h"

int main(int argc, char** argv) {
  using namespace pscluster;
  if (argc != 2) {
    std::fprintf(stderr, "usage: event_file_seeds <folder>\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  const std::filesystem::path logdir = std::filesystem::temp_directory_path() / "event_seeds";
  std::filesystem::remove_all(logdir);
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Create(logdir);
  if (!writer.ok()) return 1;
  for (int64_t step = 0; step < 3; ++step) {
    if (!(*writer)
             ->AddScalars(step * 100, {{"loss", 2.3f / (step + 1)},
                                       {"accuracy", 0.1f + 0.3f * step},
                                       {"examples_per_sec", 1234.5f}})
             .ok()) {
      return 1;
    }
  }
  if (!(*writer)->AddScalar(300, "eval/accuracy", 0.97f).ok() || !(*writer)->Close().ok()) {
    return 1;
  }
  std::ifstream in((*writer)->path(), std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  const std::string file = s.str();
  std::string flipped = file;
  flipped[flipped.size() - 6] ^= 0x04;  // in the last record's payload
  std::ofstream(out / "run", std::ios::binary) << file;
  std::ofstream(out / "cut_in_a_record", std::ios::binary) << file.substr(0, file.size() - 9);
  std::ofstream(out / "payload_bit_flipped", std::ios::binary) << flipped;
  std::filesystem::remove_all(logdir);
  return 0;
}
