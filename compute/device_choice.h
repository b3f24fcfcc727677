// The --device flag of the worker and the evaluator: which processor runs
// the model. Parsing only; what a choice resolves to on this machine is
// compute/backend_factory.h's business. Plain values.
#ifndef PSCLUSTER_COMPUTE_DEVICE_CHOICE_H_
#define PSCLUSTER_COMPUTE_DEVICE_CHOICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pscluster {

struct DeviceChoice {
  enum class Kind {
    kAuto,  // a CUDA GPU when the driver reports one, else the CPU
    kCpu,
    kCuda,  // the CUDA device `ordinal`
  };
  Kind kind = Kind::kAuto;
  // kCuda: the device number as CUDA counts them (after
  // CUDA_VISIBLE_DEVICES), so several workers on one machine can each take
  // a different GPU.
  int ordinal = 0;

  // "auto", "cpu" or "cuda:N".
  std::string ToString() const;
  bool operator==(const DeviceChoice& o) const {
    return kind == o.kind && (kind != Kind::kCuda || ordinal == o.ordinal);
  }
};

// Devices numbers above this are refused as typos.
constexpr int kMaxCudaOrdinal = 255;

// "auto", "cpu", "cuda" (= "cuda:0") or "cuda:N" with N a decimal number in
// [0, kMaxCudaOrdinal]. InvalidArgument naming `text` and the accepted forms
// otherwise (case, spaces and signs included).
absl::StatusOr<DeviceChoice> ParseDevice(absl::string_view text);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_DEVICE_CHOICE_H_
