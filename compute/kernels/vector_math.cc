#include "compute/kernels/vector_math.h"

#include <cstring>

#include "compute/kernels/activation_math.h"

namespace pscluster {
namespace kernels {
namespace {

// exp(x) for x in [-87.3, 88.3] (clamped): x = k ln2 + r, |r| <= ln2 / 2,
// exp(r) by Cephes's polynomial, times 2^k set in the exponent bits. k is
// rounded to nearest by adding and taking away 1.5 * 2^23 (no call to
// floor, which SSE2 cannot vectorize).
inline float Exp(float x) {
  x = x > 88.3f ? 88.3f : x;  // (NaN passes both and stays NaN below)
  x = x < -87.3f ? -87.3f : x;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float k = (x * kLog2e + kRound) - kRound;
  float r = x - k * 0.693359375f;  // ln 2's leading bits: exact product
  r = r - k * -2.12194440e-4f;     // and the rest
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // (NaN's k is taken as 0 for the cast, which is undefined for NaN; p
  // carries the NaN.)
  const int32_t bits = (static_cast<int32_t>(k == k ? k : 0.0f) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline float Sigmoid(float x) { return 1.0f / (1.0f + Exp(-x)); }

// Cephes's tanhf: x + x^3 P(x^2) below |x| = 0.625, 1 - 2 / (exp(2|x|) + 1)
// (with x's sign) above; both computed, one kept.
inline float Tanh(float x) {
  const float a = x < 0.0f ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float big = 1.0f - 2.0f / (Exp(2.0f * a) + 1.0f);
  const float signed_big = x < 0.0f ? -big : big;
  return a < 0.625f ? small : signed_big;
}

}  // namespace

void ExpArray(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Exp(x[i]);
}

void SigmoidArray(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Sigmoid(x[i]);
}

void TanhArray(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Tanh(x[i]);
}

void ActivationArray(ActivationFn f, float alpha, const float* x, float* y, int64_t n) {
  switch (f) {
    case ActivationFn::kSigmoid:
      SigmoidArray(x, y, n);
      return;
    case ActivationFn::kTanh:
      TanhArray(x, y, n);
      return;
    default:
      for (int64_t i = 0; i < n; ++i) y[i] = ActivationValue(f, alpha, x[i]);
  }
}

}  // namespace kernels
}  // namespace pscluster
