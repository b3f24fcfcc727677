#include "common/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// Multi-byte values are little-endian, as on every machine we build for.
template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
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

// IEEE binary16, rounded to nearest even, subnormals included.
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

// The largest finite |x|, and whether some value is not finite.
float MaxAbs(const float* x, int64_t n, bool* nonfinite) {
  float m = 0.0f;
  *nonfinite = false;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (!std::isfinite(a)) {
      *nonfinite = true;
    } else if (a > m) {
      m = a;
    }
  }
  return m;
}

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

void Encode(const CodecOptions& o, const float* x, int64_t n, std::string* out) {
  const Codec codec = EffectiveCodec(o, n);
  out->reserve(out->size() + EncodedBytes(o, n));
  switch (codec) {
    case Codec::kFloat32:
      out->append(reinterpret_cast<const char*>(x), 4 * n);
      return;
    case Codec::kBfloat16:
      for (int64_t i = 0; i < n; ++i) Put<uint16_t>(out, ToBfloat16(x[i]));
      return;
    case Codec::kFloat16: {
      bool nonfinite = false;
      const float m = MaxAbs(x, n, &nonfinite);
      int e = 0;
      if (m > 0.0f) {
        int k = 0;
        std::frexp(m, &k);  // m in [2^(k-1), 2^k)
        e = std::clamp(15 - k, -126, 126);
      }
      const float scale = std::ldexp(1.0f, e);
      Put<float>(out, scale);
      for (int64_t i = 0; i < n; ++i) Put<uint16_t>(out, ToHalf(x[i] * scale));
      return;
    }
    case Codec::kInt8:
      for (int64_t b = 0; b < n; b += kInt8Block) {
        const int64_t len = std::min(kInt8Block, n - b);
        bool nonfinite = false;
        const float m = MaxAbs(x + b, len, &nonfinite);
        // A block holding NaN or Inf decodes to NaN: the ps's policy for
        // non-finite gradients (--nonfinite_gradients) still sees it.
        const float scale = nonfinite ? NAN : m / 127.0f;
        Put<float>(out, scale);
        for (int64_t i = 0; i < len; ++i) {
          const float q = scale > 0.0f ? std::nearbyint(x[b + i] / scale) : 0.0f;
          Put<int8_t>(out, static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
        }
      }
      return;
    case Codec::kTopK: {
      const int64_t k = TopKCount(o, n);
      auto key = [x](uint32_t i) {
        const float a = std::fabs(x[i]);
        return std::isnan(a) ? INFINITY : a;
      };
      auto before = [&](uint32_t a, uint32_t b) {
        const float ka = key(a), kb = key(b);
        return ka > kb || (ka == kb && a < b);
      };
      // The exact top k, found without sorting all n: a threshold from an
      // evenly spaced sample (as DGC does) keeps the candidates at or above
      // it; when they are at least k, the top k are among them (everything
      // left out is below every candidate). Else, all n.
      std::vector<uint32_t> index;
      if (k < n && n >= 65536) {
        const int64_t m = std::min<int64_t>(n, std::max<int64_t>(4096, 40 * n / k));
        std::vector<float> sample(m);
        for (int64_t j = 0; j < m; ++j) sample[j] = key(static_cast<uint32_t>(j * n / m));
        // Twice the expected share, so that the candidates rarely fall short.
        const int64_t rank = std::min<int64_t>(m - 1, 2 * k * m / n + 1);
        std::nth_element(sample.begin(), sample.begin() + rank, sample.end(), std::greater<>());
        const float threshold = sample[rank];
        for (int64_t i = 0; i < n; ++i) {
          if (key(static_cast<uint32_t>(i)) >= threshold) index.push_back(static_cast<uint32_t>(i));
        }
      }
      if (static_cast<int64_t>(index.size()) < k) {
        index.resize(n);
        std::iota(index.begin(), index.end(), 0u);
      }
      if (static_cast<int64_t>(index.size()) > k) {
        std::nth_element(index.begin(), index.begin() + k, index.end(), before);
      }
      std::sort(index.begin(), index.begin() + k);
      Put<uint32_t>(out, static_cast<uint32_t>(k));
      for (int64_t j = 0; j < k; ++j) {
        Put<uint32_t>(out, index[j]);
        Put<float>(out, x[index[j]]);
      }
      return;
    }
    case Codec::kSign: {
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += std::fabs(x[i]);
      Put<float>(out, n > 0 ? static_cast<float>(sum / n) : 0.0f);
      for (int64_t b = 0; b < n; b += 8) {
        uint8_t byte = 0;
        for (int64_t i = b; i < std::min(n, b + 8); ++i) {
          if (!std::signbit(x[i])) byte |= static_cast<uint8_t>(1u << (i - b));
        }
        Put<uint8_t>(out, byte);
      }
      return;
    }
  }
}

absl::Status Decode(const CodecOptions& o, absl::string_view* in, int64_t n, float* y) {
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
    std::fill(y, y + n, 0.0f);
    int64_t last = -1;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = Get<uint32_t>(p + 4 + 8 * j);
      if (i <= last || i >= n) {
        return Malformed(codec, absl::StrCat("index ", i, " out of order or range"));
      }
      y[i] = Get<float>(p + 8 + 8 * j);
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
      std::memcpy(y, p, 4 * n);
      break;
    case Codec::kBfloat16:
      for (int64_t i = 0; i < n; ++i) y[i] = FromBfloat16(Get<uint16_t>(p + 2 * i));
      break;
    case Codec::kFloat16: {
      const float scale = Get<float>(p);
      if (!(scale > 0.0f) || !std::isfinite(scale)) {
        return Malformed(codec, absl::StrCat("scale ", scale));
      }
      const float inv = 1.0f / scale;
      for (int64_t i = 0; i < n; ++i) y[i] = FromHalf(Get<uint16_t>(p + 4 + 2 * i)) * inv;
      break;
    }
    case Codec::kInt8:
      for (int64_t b = 0, at = 0; b < n; b += kInt8Block) {
        const int64_t len = std::min(kInt8Block, n - b);
        const float scale = Get<float>(p + at);
        for (int64_t i = 0; i < len; ++i) {
          y[b + i] = static_cast<float>(Get<int8_t>(p + at + 4 + i)) * scale;
        }
        at += 4 + len;
      }
      break;
    case Codec::kSign: {
      const float scale = Get<float>(p);
      for (int64_t i = 0; i < n; ++i) {
        const bool positive = (static_cast<uint8_t>(p[4 + i / 8]) >> (i % 8)) & 1u;
        y[i] = positive ? scale : -scale;
      }
      break;
    }
    case Codec::kTopK:
      break;  // above
  }
  in->remove_prefix(bytes);
  return absl::OkStatus();
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
                          absl::string_view bytes, float* out) {
  const CodecOptions exact;
  for (size_t i = 0; i < pieces.size(); ++i) {
    absl::Status s = Decode(pieces[i].exact ? exact : o, &bytes, pieces[i].size, out);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("tensor ", i, ": ", s.message()));
    out += pieces[i].size;
  }
  if (!bytes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes.size(), " bytes left over after the ", pieces.size(), " tensors"));
  }
  return absl::OkStatus();
}

void EncodeSeen(const CodecOptions& o, const float* x, int64_t n, std::string* out, float* seen) {
  const size_t start = out->size();
  Encode(o, x, n, out);
  absl::string_view sent(out->data() + start, out->size() - start);
  // Decoding what was just encoded cannot fail.
  if (!Decode(o, &sent, n, seen).ok()) std::fill(seen, seen + n, 0.0f);
}

void ErrorFeedback::Encode(const CodecOptions& o, const float* x, int64_t offset, int64_t n,
                           std::string* out) {
  scratch_.resize(n);
  float* r = residual_.data() + offset;
  for (int64_t i = 0; i < n; ++i) scratch_[i] = x[i] + r[i];
  // r becomes exactly what the receiver lacks.
  EncodeSeen(o, scratch_.data(), n, out, r);
  for (int64_t i = 0; i < n; ++i) r[i] = scratch_[i] - r[i];
}

void ErrorFeedback::Reset() { std::fill(residual_.begin(), residual_.end(), 0.0f); }

}  // namespace pscluster
