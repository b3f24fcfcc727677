#include "compute/kernels/testing/gradient_check.h"

#include <cmath>
#include <random>

namespace pscluster {
namespace kernels {
namespace testing {

std::vector<float> RandomFloats(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double Dot(const std::vector<float>& r, const float* y) {
  double sum = 0.0;
  for (size_t i = 0; i < r.size(); ++i) sum += double{r[i]} * y[i];
  return sum;
}

std::vector<double> NumericalGradient(const std::function<double()>& loss,
                                      std::vector<float>* x, float eps) {
  std::vector<double> grad(x->size());
  for (size_t i = 0; i < x->size(); ++i) {
    const float saved = (*x)[i];
    (*x)[i] = saved + eps;
    const double up = loss();
    (*x)[i] = saved - eps;
    const double down = loss();
    (*x)[i] = saved;
    grad[i] = (up - down) / (2.0 * eps);
  }
  return grad;
}

::testing::AssertionResult GradientsNear(const float* analytic,
                                         const std::vector<double>& numeric,
                                         double atol, double rtol) {
  int bad = 0;
  ::testing::AssertionResult result = ::testing::AssertionFailure();
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double diff = std::fabs(analytic[i] - numeric[i]);
    if (!(diff <= atol + rtol * std::fabs(numeric[i]))) {
      if (bad < 8) {
        result << "\n  [" << i << "] analytic " << analytic[i] << " numeric "
               << numeric[i];
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return result << "\n  " << bad << " of " << numeric.size()
                << " elements differ";
}

Tensors ToDouble(const std::vector<std::vector<float>>& in) {
  Tensors out;
  for (const auto& v : in) out.emplace_back(v.begin(), v.end());
  return out;
}

::testing::AssertionResult OutputNear(const std::vector<float>& y, const std::vector<double>& ref,
                                      double atol, double rtol) {
  if (y.size() != ref.size()) {
    return ::testing::AssertionFailure() << "size " << y.size() << " vs " << ref.size();
  }
  return GradientsNear(y.data(), ref, atol, rtol);
}

std::vector<double> ReferenceGradient(const Reference& f, Tensors inputs, int which,
                                      const std::vector<float>& r) {
  const double eps = 1e-6;
  auto loss = [&]() {
    const std::vector<double> y = f(inputs);
    double s = 0.0;
    for (size_t i = 0; i < y.size(); ++i) s += r[i] * y[i];
    return s;
  };
  std::vector<double> grad(inputs[which].size());
  for (size_t i = 0; i < grad.size(); ++i) {
    const double saved = inputs[which][i];
    inputs[which][i] = saved + eps;
    const double up = loss();
    inputs[which][i] = saved - eps;
    const double down = loss();
    inputs[which][i] = saved;
    grad[i] = (up - down) / (2 * eps);
  }
  return grad;
}

}  // namespace testing
}  // namespace kernels
}  // namespace pscluster
