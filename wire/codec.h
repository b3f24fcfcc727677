// Wire encodings of float32 tensors for pushes and pulls
// (docs/communication.md): what a worker sends of a gradient, and what a
// ps sends of the weights, when the run trades precision for bytes. The ps
// keeps fp32 master weights and optimizer state whatever the wire carries.
//
//   kFloat32   4 bytes a value, exact.
//   kBfloat16  2 bytes: the top half of the float32, rounded to nearest
//              even; relative error <= 2^-8.
//   kFloat16   4-byte scale + 2 bytes a value: x * s in IEEE half, s the
//              power of two that brings the largest |x| to [2^14, 2^15), so
//              nothing overflows (65504) and the largest values keep half's
//              full precision; relative error <= 2^-11 for values within
//              2^-24 / s of the largest's scale, absolute error <= 2^-25 / s
//              below that.
//   kInt8      per block of kInt8Block values, a float32 scale (the block's
//              largest |x| / 127) and one signed byte a value, rounded to
//              nearest: error <= scale / 2 per value.
//   kTopK      4-byte count k, then k (uint32 index, float32 value) pairs:
//              the k = ceil(fraction * n) largest |x| (ties: lower index
//              first), in index order; the rest decode to 0.
//   kSign      4-byte scale (the mean |x|) + one bit a value (1: x >= 0):
//              decodes to +-scale (BytePS's onebit).
//
// kTopK and kSign lose most of the signal on each call; they are used with
// ErrorFeedback, which keeps what was not sent and adds it to the next call.
// Tensors of fewer than `min_elements` values go as kFloat32 whatever the
// codec (BytePS's size threshold): their bytes are few, their values often
// matter most (biases, BatchNormalization).
#ifndef PSCLUSTER_WIRE_CODEC_H_
#define PSCLUSTER_WIRE_CODEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/ps.pb.h"

namespace pscluster {

enum class Codec { kFloat32, kBfloat16, kFloat16, kInt8, kTopK, kSign };

constexpr int64_t kInt8Block = 256;

struct CodecOptions {
  Codec codec = Codec::kFloat32;
  double topk_fraction = 0.01;  // kTopK: in (0, 1]
  int64_t min_elements = 0;     // smaller tensors go as kFloat32
};

// "fp32", "bf16", "fp16", "int8", "topk", "sign".
const char* CodecName(Codec c);
// The codec a name (CodecName's) stands for; InvalidArgument naming the
// value and the choices otherwise.
absl::StatusOr<Codec> ParseCodec(absl::string_view name);
// The plan's enum (proto/ps.proto WireCodec) and back: one value each way.
Codec CodecFromProto(WireCodec c);
WireCodec CodecToProto(Codec c);

// Whether pushes of `c` carry error feedback (ErrorFeedback): topk, sign.
bool HasErrorFeedback(Codec c);
// Whether pulls of `c` send the change since the weights the worker holds
// rather than the weights: int8, topk, sign (too coarse for the weights).
bool PullsChanges(Codec c);

// The codec a tensor of n values is actually sent with under `o`.
Codec EffectiveCodec(const CodecOptions& o, int64_t n);

// Bytes Encode appends for n values.
int64_t EncodedBytes(const CodecOptions& o, int64_t n);

// Appends the encoding of x[0, n) to *out.
void Encode(const CodecOptions& o, const float* x, int64_t n, std::string* out);

// Encode, and writes to seen[0, n) what the receiver will Decode from it.
void EncodeSeen(const CodecOptions& o, const float* x, int64_t n, std::string* out, float* seen);

// Decodes exactly EncodedBytes(o, n) bytes at the front of `in` into
// y[0, n), and drops them from `in`. InvalidArgument, y unspecified, when
// `in` is too short or the bytes are malformed (an index out of range or
// out of order, a count above n, a scale that is not finite).
absl::Status Decode(const CodecOptions& o, absl::string_view* in, int64_t n, float* y);

// Appends the encoding of the change w - shadow[0, n) to *out and adds to
// shadow what the receiver decodes from it (a ps's change pulls): shadow
// then equals, bit for bit, the weights of a receiver that applied it with
// DecodeAdd, and what was not sent now is in the next change. `scratch` is
// the caller's, kept from call to call.
void EncodeChange(const CodecOptions& o, const float* w, float* shadow, int64_t n,
                  std::string* out, std::vector<float>* scratch);

// Decode, added to y[0, n) instead of stored (applying a change pull). For
// kTopK only the k values sent are touched. On an error y may be partly
// updated (the caller's copy is then void: a worker fails the step).
absl::Status DecodeAdd(const CodecOptions& o, absl::string_view* in, int64_t n, float* y);

// One tensor of a message holding several, encoded one after another (a
// ps's shards): `size` values, sent as fp32 whatever the codec when
// `exact` (BatchNormalization's moving statistics: batch statistics, not
// gradients, that a sparse or coarse code would corrupt).
struct WirePiece {
  int64_t size = 0;
  bool exact = false;
};

// Encodes x (the pieces' values, concatenated) piece by piece onto *out.
void EncodePieces(const CodecOptions& o, const std::vector<WirePiece>& pieces, const float* x,
                  std::string* out);
// Decodes `bytes`, the pieces' encodings concatenated, into out (the
// pieces' values, concatenated). `reversed`: the encodings come last piece
// first (out's order stays the pieces'). InvalidArgument naming the piece
// when the bytes are malformed or are not exactly that.
absl::Status DecodePieces(const CodecOptions& o, const std::vector<WirePiece>& pieces,
                          absl::string_view bytes, float* out, bool reversed = false);

// Top-k's working memory, kept by callers that encode again and again.
struct TopKScratch {
  std::vector<uint32_t> sample;
  std::vector<uint32_t> index;
  std::vector<uint64_t> ranked;
  std::vector<uint64_t> order;
  // Encodes of a large tensor (65536 values or more) that ranked all of
  // it, because no threshold from the sample kept k candidates: the slow
  // path, which a sample that sees the whole tensor should almost never
  // take.
  int64_t full_scans = 0;
};

// Error feedback for one sender: Encode(x) sends c = x + r (r the residual
// from earlier calls, 0 at first) and keeps r = c - decode(encode(c))
// exactly as the receiver will decode it. Ranges [offset, offset + n) of a
// tensor of `size` values are independent, so a sender can encode shards
// separately. Not thread-safe, but calls on disjoint ranges, each with a
// scratch of its own, may run at once.
class ErrorFeedback {
 public:
  explicit ErrorFeedback(int64_t size) : residual_(size, 0.0f) {}

  // Appends the encoding of x + residual[offset, offset + n) to *out and
  // updates that part of the residual.
  void Encode(const CodecOptions& o, const float* x, int64_t offset, int64_t n,
              std::string* out) {
    Encode(o, x, offset, n, out, &topk_);
  }
  void Encode(const CodecOptions& o, const float* x, int64_t offset, int64_t n,
              std::string* out, TopKScratch* scratch);

  const std::vector<float>& residual() const { return residual_; }
  // Forgets every residual (after a restore: the gradients they belong to
  // are void).
  void Reset();

 private:
  std::vector<float> residual_;
  TopKScratch topk_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WIRE_CODEC_H_
