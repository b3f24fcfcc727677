#include "wire/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// Multi-byte values are little-endian, as on every machine we build for.
// Stores go into a buffer sized beforehand (EncodedBytes): no std::string
// append per value, so that the encoders' loops vectorise.
template <typename T>
void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

template <typename T>
T Get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

uint16_t ToBfloat16(float f) {
  const uint32_t b = Bits(f);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((b >> 16) | 0x40);  // NaN
  return static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

float FromBfloat16(uint16_t h) { return FromBits(uint32_t{h} << 16); }

// IEEE binary16, rounded to nearest even, subnormals included: the F16C
// instructions where the build targets them (-march=x86-64-v3), else by
// hand. (They differ only in the bits of a NaN; both decode to NaN.)
#if defined(__F16C__)
uint16_t ToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
float FromHalf(uint16_t h) { return _cvtsh_ss(h); }
#else
uint16_t ToHalf(float f) {
  const uint32_t b = Bits(f);
  const uint32_t sign = (b >> 16) & 0x8000u;
  const uint32_t abs = b & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return static_cast<uint16_t>(sign | (abs > 0x7F800000u ? 0x7E00u : 0x7C00u));
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 2^16: inf
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal half (or 0)
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: 0
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (abs - 0x38000000u) >> 13;  // exponent rebiased 127 -> 15
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry to inf
  return static_cast<uint16_t>(sign | h);
}

float FromHalf(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign != 0 ? -v : v;
  }
  if (exp == 31) return FromBits(sign | 0x7F800000u | (mant << 13));
  return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}
#endif

int64_t TopKCount(const CodecOptions& o, int64_t n) {
  if (n == 0) return 0;
  const double k = std::ceil(o.topk_fraction * static_cast<double>(n));
  return std::clamp<int64_t>(static_cast<int64_t>(k), 1, n);
}

absl::Status Malformed(Codec c, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed ", CodecName(c), " tensor: ", what));
}

}  // namespace

const char* CodecName(Codec c) {
  switch (c) {
    case Codec::kFloat32:
      return "fp32";
    case Codec::kBfloat16:
      return "bf16";
    case Codec::kFloat16:
      return "fp16";
    case Codec::kInt8:
      return "int8";
    case Codec::kTopK:
      return "topk";
    case Codec::kSign:
      return "sign";
  }
  return "?";
}

absl::StatusOr<Codec> ParseCodec(absl::string_view name) {
  for (Codec c : {Codec::kFloat32, Codec::kBfloat16, Codec::kFloat16, Codec::kInt8,
                  Codec::kTopK, Codec::kSign}) {
    if (name == CodecName(c)) return c;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", name, "' is not a wire encoding: fp32, bf16, fp16, int8, topk or sign"));
}

Codec CodecFromProto(WireCodec c) {
  switch (c) {
    case WIRE_BF16:
      return Codec::kBfloat16;
    case WIRE_FP16:
      return Codec::kFloat16;
    case WIRE_INT8:
      return Codec::kInt8;
    case WIRE_TOPK:
      return Codec::kTopK;
    case WIRE_SIGN:
      return Codec::kSign;
    default:  // WIRE_FP32, and what a newer plan might hold
      return Codec::kFloat32;
  }
}

WireCodec CodecToProto(Codec c) {
  switch (c) {
    case Codec::kFloat32:
      return WIRE_FP32;
    case Codec::kBfloat16:
      return WIRE_BF16;
    case Codec::kFloat16:
      return WIRE_FP16;
    case Codec::kInt8:
      return WIRE_INT8;
    case Codec::kTopK:
      return WIRE_TOPK;
    case Codec::kSign:
      return WIRE_SIGN;
  }
  return WIRE_FP32;
}

bool HasErrorFeedback(Codec c) { return c == Codec::kTopK || c == Codec::kSign; }

bool PullsChanges(Codec c) { return c == Codec::kInt8 || HasErrorFeedback(c); }

Codec EffectiveCodec(const CodecOptions& o, int64_t n) {
  return n < o.min_elements ? Codec::kFloat32 : o.codec;
}

int64_t EncodedBytes(const CodecOptions& o, int64_t n) {
  switch (EffectiveCodec(o, n)) {
    case Codec::kFloat32:
      return 4 * n;
    case Codec::kBfloat16:
      return 2 * n;
    case Codec::kFloat16:
      return 4 + 2 * n;
    case Codec::kInt8:
      return n + 4 * ((n + kInt8Block - 1) / kInt8Block);
    case Codec::kTopK:
      return 4 + 8 * TopKCount(o, n);
    case Codec::kSign:
      return 4 + (n + 7) / 8;
  }
  return 0;
}

namespace {

// std::nearbyint for |v| < 2^22 in the default rounding mode (to nearest,
// ties to even) without a library call: adding 1.5 * 2^23 leaves no bits
// below the units.
inline float RoundHalfEven(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

// |x| as an integer key that orders like the float: NaN ranks with
// infinity, -0 with +0 (top-k's order).
inline uint32_t AbsKey(float x) {
  const uint32_t a = Bits(x) & 0x7FFFFFFFu;
  return a > 0x7F800000u ? 0x7F800000u : a;
}

// splitmix64's finalizer: a fixed, well-mixed hash of x.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The largest |x| in bits (the largest finite |x| when it is below
// 0x7F800000, else some value is not finite). Integer max: vectorises.
inline uint32_t MaxAbsBits(const float* x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, Bits(x[i]) & 0x7FFFFFFFu);
  return m;
}

// The largest finite |x| (0 when none is).
inline float MaxFiniteAbs(const float* x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = Bits(x[i]) & 0x7FFFFFFFu;
    m = std::max(m, a < 0x7F800000u ? a : 0u);
  }
  return FromBits(m);
}

// The k top-k indices of c[0, n) (largest |c|, NaN first, ties to the
// lower index), ascending, in scratch->index.
void TopKIndices(const float* c, int64_t n, int64_t k, TopKScratch* scratch) {
  // One integer per candidate that orders as top-k does, descending: the
  // key, then the complement of the index. Ranking these touches no c[].
  auto rank = [c](int64_t i) {
    return (uint64_t{AbsKey(c[i])} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
  };
  std::vector<uint32_t>& index = scratch->index;
  index.clear();
  if (k == 0) return;  // an empty tensor
  std::vector<uint64_t>& ranked = scratch->ranked;  // candidates, ascending index
  ranked.clear();
  // The exact top k, found without sorting all n: a threshold from a
  // sample (as DGC does) keeps the candidates at or above it; when they
  // are at least k, the top k are among them (everything left out is
  // below every candidate). Else a lower threshold, and at last all n.
  if (k < n && n >= 65536) {
    // One sample per stratum of n / m values, at a fixed pseudo-random
    // place in it: evenly spaced samples fall in the same few columns of a
    // matrix whose row length divides the stride (a Dense kernel's rows
    // are 4096 wide: every sample came from 2 of its columns), and a
    // threshold from them may keep far fewer than k candidates.
    const int64_t m = std::min<int64_t>(n, std::max<int64_t>(4096, 40 * n / k));
    std::vector<uint32_t>& sample = scratch->sample;
    sample.resize(m);
    for (int64_t j = 0; j < m; ++j) {
      const int64_t lo = j * n / m, span = (j + 1) * n / m - lo;
      sample[j] = AbsKey(c[lo + static_cast<int64_t>(Mix64(static_cast<uint64_t>(j)) %
                                                     static_cast<uint64_t>(span))]);
    }
    // Twice the expected share, so that the candidates rarely fall short;
    // if they do, four times as many, then eight, before all n.
    int64_t r = 0;
    for (int64_t share = 2; share <= 16 && static_cast<int64_t>(ranked.size()) < k;
         share *= 4) {
      const int64_t next = std::min<int64_t>(m - 1, share * k * m / n + 1);
      if (next < r) break;
      // Elements before r are already the largest; rank only the rest.
      std::nth_element(sample.begin() + r, sample.begin() + next, sample.end(),
                       std::greater<>());
      r = next;
      const uint32_t threshold = sample[r];
      ranked.clear();
      ranked.reserve(static_cast<size_t>(3 * share / 2 * k));
      // Branch-free: a block's candidates are written down, then kept.
      constexpr int64_t kBlock = 4096;
      uint32_t found[kBlock];
      for (int64_t b = 0; b < n; b += kBlock) {
        const int64_t len = std::min(kBlock, n - b);
        int64_t count = 0;
        for (int64_t i = 0; i < len; ++i) {
          found[count] = static_cast<uint32_t>(i);
          count += AbsKey(c[b + i]) >= threshold;
        }
        for (int64_t j = 0; j < count; ++j) ranked.push_back(rank(b + found[j]));
      }
      if (r == m - 1) break;  // the sample's smallest: nothing lower to try
    }
  }
  if (static_cast<int64_t>(ranked.size()) < k) {
    if (k < n && n >= 65536) ++scratch->full_scans;
    ranked.resize(n);
    for (int64_t i = 0; i < n; ++i) ranked[i] = rank(i);
  }
  // The k-th rank, from a copy; then the candidates at or above it, still
  // in index order (ranks are distinct: exactly k).
  std::vector<uint64_t>& order = scratch->order;
  order.assign(ranked.begin(), ranked.end());
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), std::greater<>());
  const uint64_t kth = order[k - 1];
  index.reserve(k);
  for (uint64_t v : ranked) {
    if (v >= kth) index.push_back(0xFFFFFFFFu - static_cast<uint32_t>(v));
  }
}

// The mean |c|, summed in double over eight lanes in a fixed order (the
// same bits on every run and machine).
float MeanAbs(const float* c, int64_t n) {
  if (n == 0) return 0.0f;
  double lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) lane[j] += std::fabs(c[i + j]);
  }
  for (; i < n; ++i) lane[i % 8] += std::fabs(c[i]);
  const double sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                     ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  return static_cast<float>(sum / static_cast<double>(n));
}

// Every encoder: writes the encoding of c[0, n) under `codec`
// (EncodedBytes bytes) at `out` and calls seen(i, v) with the value v the
// receiver decodes for c[i], for increasing i, after the last read of c[i]
// (so that seen may overwrite c[i]); kTopK calls it only for the k values
// it sends (the others decode to 0).
template <typename Seen>
void EncodeTo(Codec codec, const CodecOptions& o, const float* c, int64_t n, char* out,
              TopKScratch* scratch, Seen&& seen) {
  switch (codec) {
    case Codec::kFloat32:
      // An empty tensor may come as null pointers, which memcpy must not see.
      if (n > 0) std::memcpy(out, c, 4 * n);
      for (int64_t i = 0; i < n; ++i) seen(i, c[i]);
      return;
    case Codec::kBfloat16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = ToBfloat16(c[i]);
        Store<uint16_t>(out + 2 * i, h);
        seen(i, FromBfloat16(h));
      }
      return;
    case Codec::kFloat16: {
      const float m = MaxFiniteAbs(c, n);
      int e = 0;
      if (m > 0.0f) {
        int k = 0;
        std::frexp(m, &k);  // m in [2^(k-1), 2^k)
        e = std::clamp(15 - k, -126, 126);
      }
      const float scale = std::ldexp(1.0f, e);
      const float inv = 1.0f / scale;
      Store<float>(out, scale);
      int64_t i = 0;
#if defined(__F16C__)
      for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(
            _mm256_mul_ps(_mm256_loadu_ps(c + i), _mm256_set1_ps(scale)),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4 + 2 * i), h);
        float back[8];
        _mm256_storeu_ps(back, _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(inv)));
        for (int j = 0; j < 8; ++j) seen(i + j, back[j]);
      }
#endif
      for (; i < n; ++i) {
        const uint16_t h = ToHalf(c[i] * scale);
        Store<uint16_t>(out + 4 + 2 * i, h);
        seen(i, FromHalf(h) * inv);
      }
      return;
    }
    case Codec::kInt8:
      for (int64_t b = 0; b < n; b += kInt8Block) {
        const int64_t len = std::min(kInt8Block, n - b);
        const uint32_t m = MaxAbsBits(c + b, len);
        // A block holding NaN or Inf decodes to NaN: the ps's policy for
        // non-finite gradients (--nonfinite_gradients) still sees it.
        const float scale = m >= 0x7F800000u ? NAN : FromBits(m) / 127.0f;
        Store<float>(out, scale);
        // The block's bytes on the stack first: seen's stores cannot alias
        // them, so both loops vectorise.
        int8_t q[kInt8Block] = {};
        if (scale > 0.0f) {
          // |c / scale| <= 127 * 1.5 even for subnormal blocks: in range
          // for RoundHalfEven.
          for (int64_t i = 0; i < len; ++i) {
            const float r = std::min(std::max(RoundHalfEven(c[b + i] / scale), -127.0f), 127.0f);
            q[i] = static_cast<int8_t>(r);
          }
        }
        for (int64_t i = 0; i < len; ++i) seen(b + i, static_cast<float>(q[i]) * scale);
        std::memcpy(out + 4, q, len);
        out += 4 + len;
      }
      return;
    case Codec::kTopK: {
      const int64_t k = TopKCount(o, n);
      TopKIndices(c, n, k, scratch);
      const std::vector<uint32_t>* index = &scratch->index;
      Store<uint32_t>(out, static_cast<uint32_t>(k));
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t i = (*index)[j];
        const float v = c[i];
        Store<uint32_t>(out + 4 + 8 * j, i);
        Store<float>(out + 8 + 8 * j, v);
        seen(i, v);
      }
      return;
    }
    case Codec::kSign: {
      const float scale = MeanAbs(c, n);
      Store<float>(out, scale);
      for (int64_t b = 0; b < n; b += 8) {
        const int64_t len = std::min<int64_t>(8, n - b);
        uint32_t byte = 0;
        for (int64_t j = 0; j < len; ++j) byte |= ((~Bits(c[b + j])) >> 31) << j;
        out[4 + b / 8] = static_cast<char>(byte);
        for (int64_t j = 0; j < len; ++j) seen(b + j, (byte >> j) & 1u ? scale : -scale);
      }
      return;
    }
  }
}

// Appends EncodedBytes(o, n) bytes to *out; returns where they start.
char* Grow(const CodecOptions& o, int64_t n, std::string* out) {
  const size_t at = out->size();
  out->resize(at + static_cast<size_t>(EncodedBytes(o, n)));
  return out->data() + at;
}

// Decode's checks and values: calls put(i, v) for each decoded value; for
// kTopK only for the k values sent (the caller zeroes the rest, or not).
template <typename Put>
absl::Status DecodeTo(const CodecOptions& o, absl::string_view* in, int64_t n, Put&& put) {
  const Codec codec = EffectiveCodec(o, n);
  const char* p = in->data();
  if (codec == Codec::kTopK) {
    // The count comes first; the size follows from it.
    if (in->size() < 4) return Malformed(codec, "no count");
    const int64_t k = Get<uint32_t>(p);
    if (k > n) return Malformed(codec, absl::StrCat("count ", k, " above the ", n, " values"));
    if (in->size() < static_cast<size_t>(4 + 8 * k)) {
      return Malformed(codec, absl::StrCat(in->size(), " bytes for ", k, " values"));
    }
    int64_t last = -1;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = Get<uint32_t>(p + 4 + 8 * j);
      if (i <= last || i >= n) {
        return Malformed(codec, absl::StrCat("index ", i, " out of order or range"));
      }
      put(i, Get<float>(p + 8 + 8 * j));
      last = i;
    }
    in->remove_prefix(4 + 8 * k);
    return absl::OkStatus();
  }
  const int64_t bytes = EncodedBytes(o, n);
  if (static_cast<int64_t>(in->size()) < bytes) {
    return Malformed(codec, absl::StrCat(in->size(), " bytes, ", bytes, " needed for ", n,
                                         " values"));
  }
  switch (codec) {
    case Codec::kFloat32:
      for (int64_t i = 0; i < n; ++i) put(i, Get<float>(p + 4 * i));
      break;
    case Codec::kBfloat16:
      for (int64_t i = 0; i < n; ++i) put(i, FromBfloat16(Get<uint16_t>(p + 2 * i)));
      break;
    case Codec::kFloat16: {
      const float scale = Get<float>(p);
      if (!(scale > 0.0f) || !std::isfinite(scale)) {
        return Malformed(codec, absl::StrCat("scale ", scale));
      }
      const float inv = 1.0f / scale;
      int64_t i = 0;
#if defined(__F16C__)
      for (; i + 8 <= n; i += 8) {
        float v[8];
        _mm256_storeu_ps(v, _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(
                                              reinterpret_cast<const __m128i*>(p + 4 + 2 * i))),
                                          _mm256_set1_ps(inv)));
        for (int j = 0; j < 8; ++j) put(i + j, v[j]);
      }
#endif
      for (; i < n; ++i) put(i, FromHalf(Get<uint16_t>(p + 4 + 2 * i)) * inv);
      break;
    }
    case Codec::kInt8:
      for (int64_t b = 0, at = 0; b < n; b += kInt8Block) {
        const int64_t len = std::min(kInt8Block, n - b);
        const float scale = Get<float>(p + at);
        const int8_t* q = reinterpret_cast<const int8_t*>(p + at + 4);
        for (int64_t i = 0; i < len; ++i) put(b + i, static_cast<float>(q[i]) * scale);
        at += 4 + len;
      }
      break;
    case Codec::kSign: {
      const float scale = Get<float>(p);
      for (int64_t b = 0; b < n; b += 8) {
        const uint32_t byte = static_cast<uint8_t>(p[4 + b / 8]);
        const int64_t len = std::min<int64_t>(8, n - b);
        for (int64_t j = 0; j < len; ++j) put(b + j, (byte >> j) & 1u ? scale : -scale);
      }
      break;
    }
    case Codec::kTopK:
      break;  // above
  }
  in->remove_prefix(bytes);
  return absl::OkStatus();
}

}  // namespace

void Encode(const CodecOptions& o, const float* x, int64_t n, std::string* out) {
  TopKScratch scratch;
  EncodeTo(EffectiveCodec(o, n), o, x, n, Grow(o, n, out), &scratch, [](int64_t, float) {});
}

absl::Status Decode(const CodecOptions& o, absl::string_view* in, int64_t n, float* y) {
  if (EffectiveCodec(o, n) == Codec::kTopK) std::fill(y, y + n, 0.0f);
  return DecodeTo(o, in, n, [y](int64_t i, float v) { y[i] = v; });
}

absl::Status DecodeAdd(const CodecOptions& o, absl::string_view* in, int64_t n, float* y) {
  return DecodeTo(o, in, n, [y](int64_t i, float v) { y[i] += v; });
}

void EncodePieces(const CodecOptions& o, const std::vector<WirePiece>& pieces, const float* x,
                  std::string* out) {
  const CodecOptions exact;
  for (const WirePiece& p : pieces) {
    Encode(p.exact ? exact : o, x, p.size, out);
    x += p.size;
  }
}

absl::Status DecodePieces(const CodecOptions& o, const std::vector<WirePiece>& pieces,
                          absl::string_view bytes, float* out, bool reversed) {
  const CodecOptions exact;
  std::vector<int64_t> offset(pieces.size() + 1, 0);
  for (size_t i = 0; i < pieces.size(); ++i) offset[i + 1] = offset[i] + pieces[i].size;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const size_t i = reversed ? pieces.size() - 1 - k : k;
    absl::Status s =
        Decode(pieces[i].exact ? exact : o, &bytes, pieces[i].size, out + offset[i]);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("tensor ", i, ": ", s.message()));
  }
  if (!bytes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes.size(), " bytes left over after the ", pieces.size(), " tensors"));
  }
  return absl::OkStatus();
}

void EncodeSeen(const CodecOptions& o, const float* x, int64_t n, std::string* out, float* seen) {
  const Codec codec = EffectiveCodec(o, n);
  if (codec == Codec::kTopK) std::fill(seen, seen + n, 0.0f);
  TopKScratch scratch;
  EncodeTo(codec, o, x, n, Grow(o, n, out), &scratch,
           [seen](int64_t i, float v) { seen[i] = v; });
}

void EncodeChange(const CodecOptions& o, const float* w, float* shadow, int64_t n,
                  std::string* out, std::vector<float>* scratch) {
  scratch->resize(n);
  float* d = scratch->data();
  for (int64_t i = 0; i < n; ++i) d[i] = w[i] - shadow[i];
  TopKScratch topk;
  EncodeTo(EffectiveCodec(o, n), o, d, n, Grow(o, n, out), &topk,
           [shadow](int64_t i, float v) { shadow[i] += v; });
}

void ErrorFeedback::Encode(const CodecOptions& o, const float* x, int64_t offset, int64_t n,
                           std::string* out, TopKScratch* scratch) {
  // In place: r becomes c = x + r, is encoded, and becomes c - decode(c),
  // exactly what the receiver lacks.
  float* r = residual_.data() + offset;
  for (int64_t i = 0; i < n; ++i) r[i] = x[i] + r[i];
  EncodeTo(EffectiveCodec(o, n), o, r, n, Grow(o, n, out), scratch,
           [r](int64_t i, float v) { r[i] = r[i] - v; });
}

void ErrorFeedback::Reset() { std::fill(residual_.begin(), residual_.end(), 0.0f); }

}  // namespace pscluster
