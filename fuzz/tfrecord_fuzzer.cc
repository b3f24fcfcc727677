// Fuzz target for TFRecord files and the tf.train.Example records in them
// (common/tfrecord.h ParseTFRecords, model/tf_example.h ParseTFExample),
// as a worker reads a user's TFRecord data. The first byte picks:
//   0  the rest is a TFRecord file: split (both CRCs checked), each record
//      parsed as an Example;
//   1  the rest is one serialized Example;
//   2  the rest, length-prefixed pieces, framed by the real writer
//      (AppendTFRecord), then cut at a fuzzed length (a file still being
//      written): the records whole before the cut must come back as they
//      were written, or the cut named as a DataLoss.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tfrecord.h"
#include "fuzz/fuzz_input.h"
#include "model/tf_example.h"

namespace {

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "tfrecord_fuzzer: contract broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  FuzzInput in(data, size);
  const uint8_t mode = in.Byte() % 3;
  if (mode == 0) {
    absl::StatusOr<std::vector<std::string>> records = ParseTFRecords(in.Rest(), "data.tfrecord");
    if (!records.ok()) return 0;
    for (const std::string& r : *records) (void)ParseTFExample(r);
    return 0;
  }
  if (mode == 1) {
    (void)ParseTFExample(in.Rest());
    return 0;
  }
  std::vector<std::string> written;
  std::string file;
  for (int i = 0; i < 8 && !in.empty(); ++i) {
    written.emplace_back(in.LengthPrefixed(512));
    AppendTFRecord(written.back(), &file);
  }
  const size_t cut = static_cast<size_t>(in.IntInRange(0, static_cast<int64_t>(file.size())));
  const bool whole = cut == file.size();
  absl::StatusOr<std::vector<std::string>> back =
      ParseTFRecords(std::string_view(file).substr(0, cut), "data.tfrecord");
  if (whole) {
    Require(back.ok(), "a file the writer made did not parse");
    Require(*back == written, "records changed through the writer and reader");
  } else if (back.ok()) {
    // A cut between records leaves a shorter valid file.
    Require(back->size() <= written.size(), "more records than were written");
    for (size_t i = 0; i < back->size(); ++i) Require((*back)[i] == written[i], "a record changed");
  }
  for (const std::string& r : written) (void)ParseTFExample(r);
  return 0;
}
