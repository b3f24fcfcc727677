// Fuzz target for Criteo click logs (model/criteo.h, model/criteo_dataset.h):
// the first byte picks the label columns (1 or 2) and the history field's
// most ids (0 to 64) a line is parsed with; then a length-prefixed
// criteo.json and the rest, train.txt. Each line is parsed on its own
// (ParseCriteoLine): a line that parses must read back to the same
// example after AppendCriteoLine writes it (labels, integers and their
// presence, ids, the history). The folder is then loaded as a dataset
// (LoadDataset), whose errors must name the file. Malformed input must fail
// with a status, never crash or over-read.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_input.h"
#include "model/criteo.h"
#include "model/dataset.h"

namespace pscluster {
namespace {

bool SameExample(const CriteoExample& a, const CriteoExample& b, int labels) {
  if (a.label != b.label || (labels == 2 && a.label2 != b.label2)) return false;
  if (a.integer_present != b.integer_present || a.categories != b.categories) return false;
  for (int i = 0; i < kCriteoIntegerFeatures; ++i) {
    if (a.has_integer(i) && a.integers[i] != b.integers[i]) return false;
  }
  if (a.history_length != b.history_length) return false;
  for (int k = 0; k < a.history_length; ++k) {
    if (a.history[k] != b.history[k]) return false;
  }
  return true;
}

void CheckLines(std::string_view text, int labels, int history) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    CriteoExample parsed;
    if (!ParseCriteoLine(absl::string_view(line.data(), line.size()), &parsed, labels, history)
             .ok()) {
      continue;
    }
    std::string written;
    AppendCriteoLine(parsed, &written, labels, history);
    CriteoExample again;
    const absl::Status s = ParseCriteoLine(written, &again, labels, history);
    if (!s.ok() || !SameExample(parsed, again, labels)) {
      std::fprintf(stderr, "criteo_fuzzer: a parsed line does not read back the same: %s\n",
                   std::string(s.message()).c_str());
      std::abort();
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
  const int labels = 1 + (mode & 1);
  const int history = (mode >> 1) % (kCriteoMaxHistory + 1);
  const std::string_view config = in.LengthPrefixed(256);
  const std::string_view train = in.Rest();
  CheckLines(train, labels, history);
  const fs::path dir = FreshFuzzDir("criteo");
  WriteFuzzFile(dir / "criteo.json", config);
  WriteFuzzFile(dir / "train.txt", train);
  absl::StatusOr<Dataset> d = LoadDataset(dir.string(), Split::kTrain);
  if (!d.ok() && d.status().message().find(dir.string()) == std::string::npos) {
    std::fprintf(stderr, "criteo_fuzzer: an error that names no file: %s\n",
                 std::string(d.status().message()).c_str());
    std::abort();
  }
  return 0;
}
