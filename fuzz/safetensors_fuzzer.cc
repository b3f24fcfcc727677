// Fuzz target for model.safetensors as users hand it in (model/
// safetensors.h ParseSafetensors): the input is the file. A file that
// parses must serialize back (SerializeSafetensors) to bytes that parse to
// the same tensors and metadata. Malformed files must fail with a status,
// never crash, over-read or allocate what the header claims.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/safetensors.h"

namespace {

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "safetensors_fuzzer: contract broken: %s\n", what);
  std::abort();
}

bool Same(const std::vector<pscluster::NamedTensor>& a,
          const std::vector<pscluster::NamedTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].shape != b[i].shape ||
        a[i].values.size() != b[i].values.size()) {
      return false;
    }
    // Bitwise: NaN payloads travel as they are.
    for (size_t j = 0; j < a[i].values.size(); ++j) {
      if (std::memcmp(&a[i].values[j], &b[i].values[j], sizeof(float)) != 0) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> metadata;
  absl::StatusOr<std::vector<NamedTensor>> tensors =
      ParseSafetensors(bytes, "model.safetensors", &metadata);
  if (!tensors.ok()) return 0;
  absl::StatusOr<std::string> again = SerializeSafetensors(*tensors, metadata);
  if (!again.ok()) return 0;  // e.g. a name that is not UTF-8: refused on the way out
  std::map<std::string, std::string> metadata2;
  absl::StatusOr<std::vector<NamedTensor>> back =
      ParseSafetensors(*again, "again.safetensors", &metadata2);
  Require(back.ok(), "serialized tensors did not parse");
  Require(Same(*tensors, *back), "tensors changed through a round trip");
  return 0;
}
