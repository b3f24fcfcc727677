// layer_norm.h's LayerNormalization on the CPU, against a float64
// definition written here: the forward to float rounding, every gradient
// against central differences.
#include "compute/kernels/layer_norm.h"

#include <cmath>
#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

std::vector<double> LayerNormRef(int64_t rows, int c, double eps, const testing::Tensors& in) {
  std::vector<double> y(rows * c);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int k = 0; k < c; ++k) mean += in[0][r * c + k] / c;
    for (int k = 0; k < c; ++k) var += (in[0][r * c + k] - mean) * (in[0][r * c + k] - mean) / c;
    for (int k = 0; k < c; ++k) {
      double v = (in[0][r * c + k] - mean) / std::sqrt(var + eps);
      if (in.size() > 1 && !in[1].empty()) v *= in[1][k];
      if (in.size() > 2 && !in[2].empty()) v += in[2][k];
      y[r * c + k] = v;
    }
  }
  return y;
}

TEST(LayerNormTest, ForwardAndGradientsMatchFloat64) {
  const int64_t rows = 12;
  const int c = 7;
  const float eps = 1e-3f;
  for (bool affine : {true, false}) {
    SCOPED_TRACE(affine);
    std::vector<std::vector<float>> in = {RandomFloats(rows * c, 51, -2.0f, 3.0f)};
    if (affine) {
      in.push_back(RandomFloats(c, 52));
      in.push_back(RandomFloats(c, 53));
    }
    const testing::Reference ref = [&](const testing::Tensors& t) {
      return LayerNormRef(rows, c, eps, t);
    };
    std::vector<float> y(rows * c), mean(rows), rstd(rows);
    LayerNormForward(rows, c, in[0].data(), affine ? in[1].data() : nullptr,
                     affine ? in[2].data() : nullptr, eps, mean.data(), rstd.data(), y.data());
    EXPECT_TRUE(testing::OutputNear(y, ref(testing::ToDouble(in)), 2e-6, 2e-6));
    const std::vector<float> dy = RandomFloats(y.size(), 54);
    std::vector<float> dx(y.size()), dgamma(c), dbeta(c);
    LayerNormBackward(rows, c, in[0].data(), dy.data(), mean.data(), rstd.data(),
                      affine ? in[1].data() : nullptr, affine ? dgamma.data() : nullptr,
                      affine ? dbeta.data() : nullptr, dx.data());
    EXPECT_TRUE(GradientsNear(
        dx.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 0, dy), 1e-5, 1e-5));
    if (affine) {
      EXPECT_TRUE(GradientsNear(dgamma.data(),
                                testing::ReferenceGradient(ref, testing::ToDouble(in), 1, dy), 1e-5,
                                1e-5));
      EXPECT_TRUE(GradientsNear(
          dbeta.data(), testing::ReferenceGradient(ref, testing::ToDouble(in), 2, dy), 1e-5, 1e-5));
    }
  }
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
