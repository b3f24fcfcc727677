// Test helpers: random inputs and central finite differences for checking
// the CPU kernels' gradients, against float32 losses or float64 references
// written in the tests. testonly; stateless.
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

// A layer's float64 definition, written in a test: its output from its
// inputs (weights included), all in double.
using Tensors = std::vector<std::vector<double>>;
using Reference = std::function<std::vector<double>(const Tensors&)>;

Tensors ToDouble(const std::vector<std::vector<float>>& in);

// Success when |y[i] - ref[i]| <= atol + rtol |ref[i]| everywhere.
::testing::AssertionResult OutputNear(const std::vector<float>& y, const std::vector<double>& ref,
                                      double atol, double rtol);

// d (sum r . reference(inputs)) / d inputs[which], central differences in
// double with step 1e-6 (truncation ~1e-12, cancellation ~1e-10 here).
std::vector<double> ReferenceGradient(const Reference& f, Tensors inputs, int which,
                                      const std::vector<float>& r);

}  // namespace testing
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_TESTING_GRADIENT_CHECK_H_
