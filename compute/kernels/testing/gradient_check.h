// Test helpers: random inputs and central finite differences for checking
// the CPU kernels' gradients. testonly.
#ifndef PSCLUSTER_COMPUTE_KERNELS_TESTING_GRADIENT_CHECK_H_
#define PSCLUSTER_COMPUTE_KERNELS_TESTING_GRADIENT_CHECK_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace testing {

// n floats uniform in [lo, hi), deterministic in `seed`.
std::vector<float> RandomFloats(int64_t n, uint32_t seed, float lo = -1.0f,
                                float hi = 1.0f);

// sum_i r[i] * y[i] in double: the scalar "loss" whose gradient w.r.t. y is
// r, used to drive a kernel's backward pass.
double Dot(const std::vector<float>& r, const float* y);

// d loss / d x[i] by central differences (loss(x + eps e_i) -
// loss(x - eps e_i)) / 2 eps, for every i; `loss` reads *x, which is
// restored afterwards.
std::vector<double> NumericalGradient(const std::function<double()>& loss,
                                      std::vector<float>* x, float eps);

// Success when |analytic[i] - numeric[i]| <= atol + rtol * |numeric[i]| for
// all i; otherwise lists the first mismatches.
::testing::AssertionResult GradientsNear(const float* analytic,
                                         const std::vector<double>& numeric,
                                         double atol, double rtol);

}  // namespace testing
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_TESTING_GRADIENT_CHECK_H_
