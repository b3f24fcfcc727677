// Every wire encoding round-trips within its stated bound (wire/codec.h),
// writes exactly EncodedBytes, keeps non-finite values visible, refuses
// malformed input, and error feedback carries the residual exactly.
#include "wire/codec.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

// Gradient-like values: mostly small, a few large, spanning decades.
std::vector<float> Values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-6.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = g(rng) * std::pow(10.0f, decade(rng));
  return x;
}

std::vector<float> RoundTrip(const CodecOptions& o, const std::vector<float>& x) {
  std::string bytes = "prefix";
  Encode(o, x.data(), static_cast<int64_t>(x.size()), &bytes);
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), 6 + EncodedBytes(o, x.size()))
      << CodecName(o.codec);
  absl::string_view in(bytes);
  in.remove_prefix(6);
  std::vector<float> y(x.size(), NAN);
  absl::Status s = Decode(o, &in, static_cast<int64_t>(x.size()), y.data());
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(in.empty()) << CodecName(o.codec) << " left " << in.size() << " bytes";
  return y;
}

CodecOptions With(Codec c) {
  CodecOptions o;
  o.codec = c;
  return o;
}

TEST(CodecTest, NamesParseBackAndBadOnesAreRefused) {
  for (Codec c : {Codec::kFloat32, Codec::kBfloat16, Codec::kFloat16, Codec::kInt8, Codec::kTopK,
                  Codec::kSign}) {
    EXPECT_EQ(*ParseCodec(CodecName(c)), c);
  }
  absl::StatusOr<Codec> bad = ParseCodec("int4");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'int4'"), absl::string_view::npos);
}

// An empty tensor's values may be a null pointer (an empty vector's data()):
// every codec encodes and decodes it without touching memory (UBSan once
// caught fp32's memcpy from null, found by fuzz/codec_fuzzer).
TEST(CodecTest, EmptyTensorFromNullPointers) {
  for (Codec c : {Codec::kFloat32, Codec::kBfloat16, Codec::kFloat16, Codec::kInt8, Codec::kTopK,
                  Codec::kSign}) {
    CodecOptions o;
    o.codec = c;
    std::string bytes;
    Encode(o, nullptr, 0, &bytes);
    EXPECT_EQ(static_cast<int64_t>(bytes.size()), EncodedBytes(o, 0)) << CodecName(c);
    absl::string_view in(bytes);
    EXPECT_TRUE(Decode(o, &in, 0, nullptr).ok()) << CodecName(c);
    EXPECT_TRUE(in.empty()) << CodecName(c);
  }
}

TEST(CodecTest, Float32IsExact) {
  const std::vector<float> x = Values(1000, 1);
  EXPECT_EQ(RoundTrip(With(Codec::kFloat32), x), x);
}

TEST(CodecTest, Bfloat16WithinHalfAnUlp) {
  const std::vector<float> x = Values(5000, 2);
  const std::vector<float> y = RoundTrip(With(Codec::kBfloat16), x);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_LE(std::fabs(y[i] - x[i]), std::ldexp(std::fabs(x[i]), -8)) << i;
  }
  EXPECT_EQ(static_cast<int64_t>(2 * x.size()), EncodedBytes(With(Codec::kBfloat16), x.size()));
}

TEST(CodecTest, Float16ScaledNeverOverflowsAndKeepsHalfPrecision) {
  for (float big : {1e-6f, 1.0f, 7e4f, 3e8f}) {  // below, inside and far above half's range
    std::vector<float> x = Values(3000, 3);
    for (float& v : x) v *= big;
    float m = 0;
    for (float v : x) m = std::max(m, std::fabs(v));
    const std::vector<float> y = RoundTrip(With(Codec::kFloat16), x);
    int k = 0;
    std::frexp(m, &k);
    const float scale = std::ldexp(1.0f, 15 - k);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << big << " " << i;
      // Relative 2^-11 for normal halves, absolute 2^-25 / scale below.
      const float bound = std::max(std::ldexp(std::fabs(x[i]), -11), std::ldexp(1.0f, -25) / scale);
      ASSERT_LE(std::fabs(y[i] - x[i]), bound) << big << " " << x[i] << " -> " << y[i];
    }
  }
}

TEST(CodecTest, Int8WithinHalfAStepOfItsBlock) {
  const std::vector<float> x = Values(1000, 4);  // 3 full blocks and a partial one
  const std::vector<float> y = RoundTrip(With(Codec::kInt8), x);
  for (size_t b = 0; b < x.size(); b += kInt8Block) {
    float m = 0;
    for (size_t i = b; i < std::min(x.size(), b + kInt8Block); ++i) m = std::max(m, std::fabs(x[i]));
    const float step = m / 127.0f;
    for (size_t i = b; i < std::min(x.size(), b + kInt8Block); ++i) {
      ASSERT_LE(std::fabs(y[i] - x[i]), step * 0.5f * (1 + 1e-5f)) << i;
    }
  }
  EXPECT_EQ(EncodedBytes(With(Codec::kInt8), 1000), 1000 + 4 * 4);
}

TEST(CodecTest, TopKSendsTheLargestExactlyAndZeroElsewhere) {
  std::vector<float> x = Values(1000, 5);
  x[17] = 50.0f;
  x[400] = -60.0f;
  CodecOptions o = With(Codec::kTopK);
  o.topk_fraction = 0.01;  // k = 10
  const std::vector<float> y = RoundTrip(o, x);
  std::vector<float> sorted;
  for (float v : x) sorted.push_back(std::fabs(v));
  std::sort(sorted.rbegin(), sorted.rend());
  int sent = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i]) >= sorted[9]) {
      EXPECT_EQ(y[i], x[i]) << i;
      ++sent;
    } else {
      EXPECT_EQ(y[i], 0.0f) << i;
    }
  }
  EXPECT_EQ(sent, 10);
  EXPECT_EQ(y[400], -60.0f);
  EXPECT_EQ(EncodedBytes(o, 1000), 4 + 8 * 10);
}

// Large tensors take the sampled-threshold path: still exactly the top k
// (ties to the lower index), whatever the distribution.
TEST(CodecTest, TopKOfLargeTensorsIsExact) {
  for (int shape = 0; shape < 3; ++shape) {
    std::vector<float> x = Values(200000, 20 + shape);
    if (shape == 1) {
      for (size_t i = 0; i < x.size(); i += 7) x[i] = 0.5f;  // many ties
    } else if (shape == 2) {
      for (size_t i = 150000; i < x.size(); ++i) x[i] *= 1000.0f;  // a dense tail of big ones
    }
    CodecOptions o = With(Codec::kTopK);
    o.topk_fraction = 0.003;  // k = 600
    const std::vector<float> y = RoundTrip(o, x);
    std::vector<uint32_t> order(x.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
    std::vector<bool> top(x.size(), false);
    for (int j = 0; j < 600; ++j) top[order[j]] = true;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(y[i], top[i] ? x[i] : 0.0f) << "shape " << shape << " index " << i;
    }
  }
}

// A Dense kernel's gradient has structure along its rows: here every
// 128th column is large, fewer values than k. Samples spaced evenly by a
// divisor of the row length would all fall in those columns and set a
// threshold only they pass, and top-k would rank the whole tensor; the
// sample must see every column.
TEST(CodecTest, TopKSampleSeesPastAMatrixsColumns) {
  constexpr int64_t kRows = 64, kCols = 4096, n = kRows * kCols;
  std::vector<float> x = Values(n, 31);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; c += 128) x[r * kCols + c] = 10.0f + r + c * 1e-3f;
  }
  CodecOptions o = With(Codec::kTopK);
  o.topk_fraction = 0.01;  // k = 2622 > the 2048 large values
  ErrorFeedback feedback(n);
  TopKScratch scratch;
  std::string bytes;
  feedback.Encode(o, x.data(), 0, n, &bytes, &scratch);
  EXPECT_EQ(scratch.full_scans, 0);
  // Still exactly the top k: what was sent is x minus what was kept back.
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  const int64_t k = 2622;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](uint32_t a, uint32_t b) {
    return std::fabs(x[a]) != std::fabs(x[b]) ? std::fabs(x[a]) > std::fabs(x[b]) : a < b;
  });
  std::vector<bool> top(n, false);
  for (int64_t j = 0; j < k; ++j) top[order[j]] = true;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(feedback.residual()[i], top[i] ? 0.0f : x[i]) << i;
  }
}

TEST(CodecTest, SignSendsTheMeanMagnitudeWithEachSign) {
  const std::vector<float> x = Values(1001, 6);
  double mean = 0;
  for (float v : x) mean += std::fabs(v);
  mean /= x.size();
  const std::vector<float> y = RoundTrip(With(Codec::kSign), x);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_FLOAT_EQ(std::fabs(y[i]), static_cast<float>(mean)) << i;
    ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i])) << i;
  }
  EXPECT_EQ(EncodedBytes(With(Codec::kSign), 1001), 4 + 126);
}

// A push sent while backprop runs carries the ps's shards last first:
// decoding them reversed gives what the ps's order gives, for every codec
// and with exact pieces (moving statistics, small tensors) among them.
TEST(CodecTest, PiecesDecodeTheSameInEitherOrder) {
  const std::vector<WirePiece> pieces = {{3000, false}, {7, true}, {5000, false}, {20, false}};
  int64_t total = 0;
  for (const WirePiece& p : pieces) total += p.size;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(total);
  for (float& v : x) v = normal(rng);
  for (Codec codec : {Codec::kFloat32, Codec::kBfloat16, Codec::kFloat16, Codec::kInt8,
                      Codec::kTopK, Codec::kSign}) {
    CodecOptions o;
    o.codec = codec;
    o.min_elements = 100;
    std::string forward;
    EncodePieces(o, pieces, x.data(), &forward);
    std::string backward;
    std::vector<int64_t> offset = {0};
    for (const WirePiece& p : pieces) offset.push_back(offset.back() + p.size);
    const CodecOptions exact;
    for (size_t k = pieces.size(); k-- > 0;) {
      Encode(pieces[k].exact ? exact : o, x.data() + offset[k], pieces[k].size, &backward);
    }
    ASSERT_EQ(forward.size(), backward.size()) << CodecName(codec);
    std::vector<float> a(total, NAN), b(total, NAN);
    ASSERT_TRUE(DecodePieces(o, pieces, forward, a.data()).ok()) << CodecName(codec);
    ASSERT_TRUE(DecodePieces(o, pieces, backward, b.data(), /*reversed=*/true).ok())
        << CodecName(codec);
    EXPECT_EQ(a, b) << CodecName(codec);
    // Read in the wrong order, the bytes do not decode to the same values.
    std::vector<float> c(total, NAN);
    const absl::Status wrong = DecodePieces(o, pieces, backward, c.data());
    EXPECT_TRUE(!wrong.ok() || c != a) << CodecName(codec);
  }
}

TEST(CodecTest, SmallTensorsGoAsFloat32) {
  CodecOptions o = With(Codec::kSign);
  o.min_elements = 100;
  const std::vector<float> x = Values(99, 7);
  EXPECT_EQ(EffectiveCodec(o, 99), Codec::kFloat32);
  EXPECT_EQ(RoundTrip(o, x), x);
  EXPECT_EQ(EffectiveCodec(o, 100), Codec::kSign);
}

// A NaN or Inf in a gradient must still reach the ps's check for
// non-finite gradients, whatever the encoding.
TEST(CodecTest, NonFiniteValuesStayNonFinite) {
  for (Codec c : {Codec::kFloat32, Codec::kBfloat16, Codec::kFloat16, Codec::kInt8, Codec::kTopK,
                  Codec::kSign}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY}) {
      std::vector<float> x = Values(300, 8);
      x[123] = bad;
      const std::vector<float> y = RoundTrip(With(c), x);
      bool any = false;
      for (float v : y) any |= !std::isfinite(v);
      EXPECT_TRUE(any) << CodecName(c) << " lost " << bad;
    }
  }
}

TEST(CodecTest, MalformedInputIsRefused) {
  const std::vector<float> x = Values(64, 9);
  for (Codec c : {Codec::kFloat32, Codec::kBfloat16, Codec::kFloat16, Codec::kInt8, Codec::kTopK,
                  Codec::kSign}) {
    std::string bytes;
    Encode(With(c), x.data(), 64, &bytes);
    bytes.pop_back();
    absl::string_view in(bytes);
    std::vector<float> y(64);
    EXPECT_FALSE(Decode(With(c), &in, 64, y.data()).ok()) << CodecName(c) << ": truncated";
  }
  // Top-k: an index out of range, and indices out of order.
  std::string bytes;
  auto put = [&bytes](uint32_t v) { bytes.append(reinterpret_cast<const char*>(&v), 4); };
  put(2);
  put(70);
  put(0);
  put(3);
  put(0);
  absl::string_view in(bytes);
  std::vector<float> y(64);
  EXPECT_FALSE(Decode(With(Codec::kTopK), &in, 64, y.data()).ok());
  bytes.clear();
  put(2);
  put(5);
  put(0);
  put(3);
  put(0);
  in = bytes;
  EXPECT_FALSE(Decode(With(Codec::kTopK), &in, 64, y.data()).ok());
}

// Error feedback: each call sends c = x + r and keeps r = c - decode(sent)
// exactly; over many steps, what arrived plus the residual is what was
// meant to be sent (up to float addition).
TEST(CodecTest, ErrorFeedbackCarriesTheResidualExactly) {
  for (Codec c : {Codec::kTopK, Codec::kSign, Codec::kInt8}) {
    CodecOptions o = With(c);
    o.topk_fraction = 0.05;
    ErrorFeedback ef(500);
    std::vector<double> meant(500, 0.0), arrived(500, 0.0);
    for (int step = 0; step < 20; ++step) {
      const std::vector<float> g = Values(500, 100 + step);
      // Two shards, encoded separately.
      std::string bytes;
      const std::vector<float> before = ef.residual();
      ef.Encode(o, g.data(), 0, 200, &bytes);
      ef.Encode(o, g.data() + 200, 200, 300, &bytes);
      absl::string_view in(bytes);
      std::vector<float> got(500);
      ASSERT_TRUE(Decode(o, &in, 200, got.data()).ok());
      ASSERT_TRUE(Decode(o, &in, 300, got.data() + 200).ok());
      ASSERT_TRUE(in.empty());
      for (int i = 0; i < 500; ++i) {
        const float sent = g[i] + before[i];
        ASSERT_EQ(ef.residual()[i], sent - got[i]) << CodecName(c) << " step " << step;
        meant[i] += g[i];
        arrived[i] += got[i];
      }
    }
    for (int i = 0; i < 500; ++i) {
      EXPECT_NEAR(arrived[i] + ef.residual()[i], meant[i], 1e-3 * (1 + std::fabs(meant[i])))
          << CodecName(c) << " " << i;
    }
    ef.Reset();
    for (float r : ef.residual()) ASSERT_EQ(r, 0.0f);
  }
}

// What EncodeSeen reports is what Decode makes of the same bytes, bit for
// bit, non-finite values and every codec included: error feedback and
// change pulls rest on it.
TEST(CodecTest, SeenIsWhatTheReceiverDecodes) {
  for (Codec c : {Codec::kFloat32, Codec::kBfloat16, Codec::kFloat16, Codec::kInt8, Codec::kTopK,
                  Codec::kSign}) {
    for (int64_t n : {1, 7, 255, 257, 70001}) {
      std::vector<float> x = Values(n, 20 + static_cast<uint32_t>(n));
      if (n > 100) {
        x[5] = NAN;
        x[n - 3] = -INFINITY;
        x[n / 2] = -0.0f;
        x[n / 3] = 1e-44f;  // subnormal
      }
      CodecOptions o = With(c);
      o.topk_fraction = 0.02;
      std::string bytes;
      std::vector<float> seen(n, 7.0f), decoded(n, 8.0f);
      EncodeSeen(o, x.data(), n, &bytes, seen.data());
      ASSERT_EQ(static_cast<int64_t>(bytes.size()), EncodedBytes(o, n));
      absl::string_view in(bytes);
      ASSERT_TRUE(Decode(o, &in, n, decoded.data()).ok());
      ASSERT_EQ(std::memcmp(seen.data(), decoded.data(), n * sizeof(float)), 0)
          << CodecName(c) << " n=" << n;
    }
  }
}

// A ps's change pulls: after every step the ps's shadow equals, bit for
// bit, the weights of a worker that applied each change with DecodeAdd;
// and what one change leaves out, a later one sends (the shadow follows
// the weights).
TEST(CodecTest, ChangePullsKeepTheShadowEqualToTheReceiver) {
  for (Codec c : {Codec::kBfloat16, Codec::kFloat16, Codec::kInt8, Codec::kTopK, Codec::kSign}) {
    CodecOptions o = With(c);
    o.topk_fraction = 0.1;
    const int64_t n = 3000;
    std::vector<float> w = Values(n, 40), shadow(n, 0.0f), worker(n, 0.0f), scratch;
    // The first pull sends the weights themselves; here both start equal.
    shadow = w;
    worker = w;
    for (int step = 0; step < 30; ++step) {
      const std::vector<float> g = Values(n, 50 + step);
      for (int64_t i = 0; i < n; ++i) w[i] -= 0.01f * g[i];
      std::string bytes = "x";
      EncodeChange(o, w.data(), shadow.data(), n, &bytes, &scratch);
      ASSERT_EQ(static_cast<int64_t>(bytes.size()), 1 + EncodedBytes(o, n));
      absl::string_view in(bytes);
      in.remove_prefix(1);
      ASSERT_TRUE(DecodeAdd(o, &in, n, worker.data()).ok());
      ASSERT_TRUE(in.empty());
      ASSERT_EQ(std::memcmp(shadow.data(), worker.data(), n * sizeof(float)), 0)
          << CodecName(c) << " step " << step;
    }
    // With the weights still, further changes bring the worker to them.
    double before = 0, after = 0;
    for (int64_t i = 0; i < n; ++i) before += std::fabs(w[i] - worker[i]);
    for (int step = 0; step < 40; ++step) {
      std::string bytes;
      EncodeChange(o, w.data(), shadow.data(), n, &bytes, &scratch);
      absl::string_view in(bytes);
      ASSERT_TRUE(DecodeAdd(o, &in, n, worker.data()).ok());
    }
    for (int64_t i = 0; i < n; ++i) after += std::fabs(w[i] - worker[i]);
    EXPECT_LT(after, before / 4) << CodecName(c) << ": " << before << " -> " << after;
  }
}

// DecodeAdd adds exactly what Decode decodes; top-k touches only the
// values it sent (a -0 elsewhere stays -0).
TEST(CodecTest, DecodeAddAddsWhatDecodeDecodes) {
  for (Codec c : {Codec::kFloat32, Codec::kBfloat16, Codec::kFloat16, Codec::kInt8, Codec::kTopK,
                  Codec::kSign}) {
    const int64_t n = 1000;
    const std::vector<float> x = Values(n, 60);
    std::vector<float> y = Values(n, 61);
    y[999] = -0.0f;
    std::string bytes;
    CodecOptions o = With(c);
    o.topk_fraction = 0.01;
    Encode(o, x.data(), n, &bytes);
    std::vector<float> decoded(n), added = y;
    absl::string_view in(bytes);
    ASSERT_TRUE(Decode(o, &in, n, decoded.data()).ok());
    in = bytes;
    ASSERT_TRUE(DecodeAdd(o, &in, n, added.data()).ok());
    ASSERT_TRUE(in.empty());
    for (int64_t i = 0; i < n; ++i) {
      if (c == Codec::kTopK && decoded[i] == 0.0f) {
        ASSERT_EQ(std::memcmp(&added[i], &y[i], sizeof(float)), 0) << i;
      } else {
        ASSERT_EQ(added[i], y[i] + decoded[i]) << CodecName(c) << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace pscluster
