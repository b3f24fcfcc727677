// Sigmoid and tanh over arrays, written so that the compiler vectorizes
// them (no calls, no branches): exp as Cephes's expf computes it (the
// argument split by ln 2 in two parts, a degree-5 polynomial, the power of
// two set in the exponent bits), within 2 ulp of expf over the floats; tanh
// from it above |x| = 0.625 and Cephes's odd polynomial below. The
// recurrent layers' gates (kernels/recurrent.h) spend most of their
// element-wise time in these; other layers keep ActivationValue's libm
// calls. Plain functions; thread-safe.
#ifndef PSCLUSTER_COMPUTE_KERNELS_VECTOR_MATH_H_
#define PSCLUSTER_COMPUTE_KERNELS_VECTOR_MATH_H_

#include <cstdint>

#include "compute/kernels/activation.h"

namespace pscluster {
namespace kernels {

// y[i] = exp(x[i]) for i < n; x beyond [-87.3, 88.3] is taken at those
// bounds (exp gives about 1.2e-38 and 2.0e38 there). NaN stays NaN.
void ExpArray(const float* x, float* y, int64_t n);

// y[i] = 1 / (1 + exp(-x[i])).
void SigmoidArray(const float* x, float* y, int64_t n);

// y[i] = tanh(x[i]).
void TanhArray(const float* x, float* y, int64_t n);

// y[i] = f(x[i]) (ActivationValue's), sigmoid and tanh by the two above;
// x and y may be the same array.
void ActivationArray(ActivationFn f, float alpha, const float* x, float* y, int64_t n);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_VECTOR_MATH_H_
