// Model weights in the safetensors format (https://github.com/huggingface/
// safetensors), readable by `safetensors.numpy.load_file` / PyTorch:
//
//   uint64 N                 little-endian length of the header
//   N bytes of JSON          {"<name>": {"dtype": "F32", "shape": [...],
//                              "data_offsets": [begin, end]}, ...,
//                             "__metadata__": {"format": "pt", ...}}
//                            padded with spaces so that 8 + N is a multiple of
//                            8
//   the data section         each tensor's row-major little-endian bytes at
//                            [begin, end) of this section, tensors back to back
//
// "dtype" is "F32" (float32) or "I64" (int64, 8 bytes a value): those two
// are written and read; other dtypes are refused. Plain functions: safe to
// call from any thread, but one path must have one writer at a time.
#ifndef PSCLUSTER_MODEL_SAFETENSORS_H_
#define PSCLUSTER_MODEL_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pscluster {

// One tensor: float32 values by default, int64 values (ids, counters) when
// dtype is kI64. Only the dtype's vector holds values; the other is empty.
struct NamedTensor {
  enum class Dtype { kF32, kI64 };

  std::string name;
  std::vector<int64_t> shape;  // row-major; {} is a scalar (one value)
  std::vector<float> values;   // product(shape) values when dtype is kF32
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> ints;  // product(shape) values when dtype is kI64
};

// "F32" or "I64": the dtype's name in the file.
const char* DtypeName(NamedTensor::Dtype dtype);

// `t`'s data as the file holds it (its dtype's vector, little-endian): what
// a checksum of the tensor covers.
std::string_view TensorBytes(const NamedTensor& t);

// The file's bytes for `tensors`, laid out in the given order. `metadata`
// becomes "__metadata__"; "format": "pt" is added unless `metadata` sets
// "format". InvalidArgument naming the tensor when a name is empty, repeated
// or "__metadata__", a dimension is negative, the dtype's value count does
// not match the shape, the other dtype's vector is not empty, or a name or
// metadata string is not valid UTF-8.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// Writes SerializeSafetensors' bytes to `path` atomically: to path + ".tmp",
// fsync, rename over `path`, fsync the directory. On error `path` is left as
// it was and the temporary file is removed; the status names the file.
absl::Status WriteSafetensors(
    const std::string& path, const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// Parses a whole safetensors file held in memory; `source` names it in
// errors. Validates that the header length fits in the file, the header is
// a JSON object, each entry has a dtype, a shape of non-negative integers and
// two data_offsets with begin <= end, end - begin == 4 (F32) or 8 (I64) *
// product(shape), and that the tensors tile the data section exactly (no
// gap, no overlap, nothing after the last). DataLoss naming the tensor and
// value for a bad file; Unimplemented for a dtype other than F32 and I64.
// Tensors come back in data-offset order; `metadata`, if not null, receives
// "__metadata__".
absl::StatusOr<std::vector<NamedTensor>> ParseSafetensors(
    std::string_view bytes, const std::string& source,
    std::map<std::string, std::string>* metadata = nullptr);

// Reads and parses the file at `path` (NotFound etc. naming it).
absl::StatusOr<std::vector<NamedTensor>> ReadSafetensors(
    const std::string& path,
    std::map<std::string, std::string>* metadata = nullptr);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_SAFETENSORS_H_
