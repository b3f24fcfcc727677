// Fuzz target for the wire codecs' decoders (wire/codec.h) as a ps and a
// worker receive them: Decode (a push's gradient), DecodeAdd (a change
// pull) and DecodePieces (a message of several shards, in order or
// reversed), on bytes from the input. The first bytes pick the codec
// (fp32, bf16, fp16, int8 blocks, top-k, sign), top-k's fraction, the
// size threshold, the tensor's size and its pieces; the rest is the
// encoding as it arrived. Malformed bytes must fail with a status, never
// read or write out of bounds; an accepted encoding consumes no more than
// it was given. Every fourth input also encodes values made from the
// input and requires that they decode.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_input.h"
#include "wire/codec.h"

namespace pscluster {
namespace {

constexpr int64_t kMaxValues = 4096;

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "codec_fuzzer: contract broken: %s\n", what);
  std::abort();
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  FuzzInput in(data, size);
  static constexpr Codec kCodecs[] = {Codec::kFloat32, Codec::kBfloat16, Codec::kFloat16,
                                      Codec::kInt8,    Codec::kTopK,     Codec::kSign};
  CodecOptions o;
  o.codec = in.Pick(kCodecs);
  o.topk_fraction = (1 + in.IntInRange(0, 255)) / 256.0;
  o.min_elements = in.IntInRange(0, 3) == 0 ? in.IntInRange(0, 64) : 0;
  const uint8_t mode = in.Byte();
  // Pieces: 1 to 4 of them, sizes small, some exact.
  std::vector<WirePiece> pieces(static_cast<size_t>(in.IntInRange(1, 4)));
  int64_t n = 0;
  for (WirePiece& p : pieces) {
    p.size = in.IntInRange(0, kMaxValues / 4);
    p.exact = in.IntInRange(0, 3) == 0;
    n += p.size;
  }
  std::vector<float> y(static_cast<size_t>(n) + 1, 0.0f);
  if (mode % 4 == 3) {
    // Round trip: values from the input, encoded, must decode.
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) {
      v = in.Float();
      if (!std::isfinite(v)) v = 0.0f;
    }
    std::string bytes;
    EncodePieces(o, pieces, x.data(), &bytes);
    Require(DecodePieces(o, pieces, bytes, y.data(), false).ok(), "an encoding did not decode");
    return 0;
  }
  const std::string bytes(in.Rest());
  switch (mode % 4) {
    case 0: {
      absl::string_view view(bytes);
      if (Decode(o, &view, n, y.data()).ok()) {
        Require(view.size() <= bytes.size(), "Decode consumed more than it had");
      }
      break;
    }
    case 1: {
      absl::string_view view(bytes);
      if (DecodeAdd(o, &view, n, y.data()).ok()) {
        Require(view.size() <= bytes.size(), "DecodeAdd consumed more than it had");
      }
      break;
    }
    case 2:
      (void)DecodePieces(o, pieces, bytes, y.data(), (mode & 4) != 0);
      break;
  }
  return 0;
}
