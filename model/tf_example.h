// A decoder of tf.train.Example (tensorflow/core/example/example.proto,
// feature.proto) from its protobuf wire format, without TensorFlow or
// generated code:
//
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                           Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }
//   FloatList { repeated float value = 1 [packed]; }   Int64List likewise.
//
// Packed and unpacked repeated numbers are both read (a parser must accept
// either); unknown fields are skipped; a later map entry for a key replaces
// an earlier one, as protobuf's maps do. Plain functions: thread-safe.
#ifndef PSCLUSTER_MODEL_TF_EXAMPLE_H_
#define PSCLUSTER_MODEL_TF_EXAMPLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pscluster {

struct TFFeature {
  enum class Kind { kNone, kBytes, kFloat, kInt64 };
  Kind kind = Kind::kNone;  // kNone: a Feature with no list set
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

// Name of a kind for messages: "bytes_list", "float_list", "int64_list", "no list".
const char* TFFeatureKindName(TFFeature::Kind kind);

using TFExample = std::map<std::string, TFFeature, std::less<>>;

// The features of the serialized Example `bytes`. InvalidArgument saying
// what is malformed ("not a tf.train.Example: ...") otherwise.
absl::StatusOr<TFExample> ParseTFExample(std::string_view bytes);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_TF_EXAMPLE_H_
