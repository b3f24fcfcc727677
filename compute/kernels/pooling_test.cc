// pooling.h's GlobalMaxPooling2D on the CPU against its float64
// definition, and its ties, which share the gradient.
#include "compute/kernels/pooling.h"

#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

TEST(GlobalMaxPoolTest, ForwardAndGradientMatchFloat64) {
  const int batch = 3, pixels = 20, c = 4;
  const std::vector<float> x = RandomFloats(batch * pixels * c, 41);
  const testing::Reference ref = [&](const testing::Tensors& in) {
    std::vector<double> y(batch * c, -1e300);
    for (int n = 0; n < batch; ++n)
      for (int p = 0; p < pixels; ++p)
        for (int k = 0; k < c; ++k)
          y[n * c + k] = std::max(y[n * c + k], in[0][(n * pixels + p) * c + k]);
    return y;
  };
  std::vector<float> y(batch * c), count(batch * c), dx(x.size());
  GlobalMaxPoolForward(batch, pixels, c, x.data(), y.data(), count.data());
  EXPECT_TRUE(testing::OutputNear(y, ref(testing::ToDouble({x})), 0, 0));
  EXPECT_EQ(count, std::vector<float>(batch * c, 1.0f));
  const std::vector<float> dy = RandomFloats(y.size(), 42);
  GlobalMaxPoolBackward(batch, pixels, c, x.data(), y.data(), count.data(), dy.data(), dx.data());
  EXPECT_TRUE(GradientsNear(
      dx.data(), testing::ReferenceGradient(ref, testing::ToDouble({x}), 0, dy), 1e-8, 1e-8));
}

// Ties share the gradient, as TensorFlow's reduce_max gradient does.
TEST(GlobalMaxPoolTest, TiesSplitTheGradient) {
  const std::vector<float> x = {0.0f, 2.0f, 2.0f, -1.0f, 2.0f, 0.5f};  // [1, 6 pixels, 1]
  std::vector<float> y(1), count(1), dx(6);
  const std::vector<float> dy = {3.0f};
  GlobalMaxPoolForward(1, 6, 1, x.data(), y.data(), count.data());
  EXPECT_EQ(y[0], 2.0f);
  EXPECT_EQ(count[0], 3.0f);
  GlobalMaxPoolBackward(1, 6, 1, x.data(), y.data(), count.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0.0f, 1.0f, 1.0f, 0.0f, 1.0f, 0.0f}));
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
