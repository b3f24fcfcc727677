#include "compute/device_choice.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pscluster {

std::string DeviceChoice::ToString() const {
  switch (kind) {
    case Kind::kAuto:
      return "auto";
    case Kind::kCpu:
      return "cpu";
    case Kind::kCuda:
      return absl::StrCat("cuda:", ordinal);
  }
  return "?";
}

absl::StatusOr<DeviceChoice> ParseDevice(absl::string_view text) {
  DeviceChoice choice;
  if (text == "auto") return choice;
  if (text == "cpu") {
    choice.kind = DeviceChoice::Kind::kCpu;
    return choice;
  }
  if (text == "cuda") {
    choice.kind = DeviceChoice::Kind::kCuda;
    return choice;
  }
  constexpr absl::string_view kPrefix = "cuda:";
  if (absl::StartsWith(text, kPrefix)) {
    const absl::string_view digits = text.substr(kPrefix.size());
    int value = 0;
    bool ok = !digits.empty() && digits.size() <= 3;
    for (char c : digits) {
      ok = ok && absl::ascii_isdigit(static_cast<unsigned char>(c));
      if (ok) value = value * 10 + (c - '0');
    }
    if (ok && value <= kMaxCudaOrdinal) {
      choice.kind = DeviceChoice::Kind::kCuda;
      choice.ordinal = value;
      return choice;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "device \"", text, "\": the CUDA device number must be 0..",
        kMaxCudaOrdinal));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device \"", text,
                   "\" is not one of auto, cpu, cuda, cuda:N (N = 0, 1, ...)"));
}

}  // namespace pscluster
