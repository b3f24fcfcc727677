// Fuzz target for TensorBoard event files as our reader opens them
// (common/tensorboard_writer.h ListEventFiles and ReadEventFile: TFRecords
// with both CRCs, each a tensorflow.Event): the input is the file, in a
// log directory of its own. A malformed file must fail with DataLoss
// naming it, never crash or allocate what a record's length claims. Round
// trip: the scalars of a file that reads, written again by the real
// TensorBoardWriter, read back as they were (steps, tags, value bits).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensorboard_writer.h"
#include "fuzz/fuzz_input.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/tensorboard_event.pb.h"

namespace pscluster {
namespace {

using Scalars = std::vector<std::pair<int64_t, std::vector<std::pair<std::string, float>>>>;

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "event_file_fuzzer: contract broken: %s\n", what);
  std::abort();
}

// The events AddScalars could have written: a summary of simple values
// with tags.
Scalars ScalarsOf(const std::vector<tensorflow::Event>& events) {
  Scalars out;
  for (const tensorflow::Event& e : events) {
    if (!e.has_summary() || e.summary().value().empty()) continue;
    std::vector<std::pair<std::string, float>> values;
    for (const tensorflow::Summary::Value& v : e.summary().value()) {
      if (v.tag().empty() || !v.has_simple_value()) break;
      values.emplace_back(v.tag(), v.simple_value());
    }
    if (values.size() == static_cast<size_t>(e.summary().value_size())) {
      out.emplace_back(e.step(), std::move(values));
    }
  }
  return out;
}

bool SameBits(const Scalars& a, const Scalars& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || a[i].second.size() != b[i].second.size()) return false;
    for (size_t j = 0; j < a[i].second.size(); ++j) {
      if (a[i].second[j].first != b[i].second[j].first ||
          std::memcmp(&a[i].second[j].second, &b[i].second[j].second, sizeof(float)) != 0) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  namespace fs = std::filesystem;
  // Tags that are not UTF-8 fail the parse; protobuf logs each.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  const fs::path logdir = FuzzScratchDir() / "logs";
  const fs::path again = FuzzScratchDir() / "again";
  fs::remove_all(logdir);
  fs::remove_all(again);
  fs::create_directories(logdir);
  const std::string path = (logdir / "events.out.tfevents.1700000000.fuzz").string();
  WriteFuzzFile(path, std::string_view(reinterpret_cast<const char*>(data), size));

  absl::StatusOr<std::vector<std::string>> files = ListEventFiles(logdir.string());
  Require(files.ok() && files->size() == 1 && (*files)[0] == path, "the event file is not listed");
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile(path);
  if (!events.ok()) {
    Require(events.status().message().find(path) != std::string::npos,
            "an error that does not name the file");
    return 0;
  }
  const Scalars scalars = ScalarsOf(*events);
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer =
      TensorBoardWriter::Create(again.string());
  Require(writer.ok(), "no writer");
  for (const auto& [step, values] : scalars) {
    Require((*writer)->AddScalars(step, values).ok(), "scalars read were not written");
  }
  Require((*writer)->Close().ok(), "the writer did not close");
  absl::StatusOr<std::vector<tensorflow::Event>> back = ReadEventFile((*writer)->path());
  Require(back.ok(), "an event file written does not read back");
  Require(SameBits(scalars, ScalarsOf(*back)), "scalars changed through a write and a read");
  return 0;
}
