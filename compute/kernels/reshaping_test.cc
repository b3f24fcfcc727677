// reshaping.h's ZeroPadding2D on the CPU: the forward against its
// definition, the backward against central differences.
#include "compute/kernels/reshaping.h"

#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::GradientsNear;
using testing::RandomFloats;

TEST(ZeroPad2DTest, ForwardAndBackward) {
  const PaddingShape s{2, 3, 4, 3, 1, 2, 0, 3};
  const std::vector<float> x = RandomFloats(2 * 3 * 4 * 3, 1);
  const testing::Reference ref = [&](const testing::Tensors& in) {
    std::vector<double> y(int64_t{2} * s.out_h() * s.out_w() * 3, 0.0);
    for (int n = 0; n < 2; ++n)
      for (int h = 0; h < 3; ++h)
        for (int w = 0; w < 4; ++w)
          for (int c = 0; c < 3; ++c)
            y[((n * s.out_h() + h + 1) * s.out_w() + w) * 3 + c] =
                in[0][((n * 3 + h) * 4 + w) * 3 + c];
    return y;
  };
  std::vector<float> y(int64_t{2} * s.out_h() * s.out_w() * 3, -7.0f), dx(x.size(), -7.0f);
  ZeroPad2DForward(s, x.data(), y.data());
  EXPECT_TRUE(testing::OutputNear(y, ref(testing::ToDouble({x})), 0, 0));
  const std::vector<float> dy = RandomFloats(y.size(), 2);
  ZeroPad2DBackward(s, dy.data(), dx.data());
  EXPECT_TRUE(GradientsNear(
      dx.data(), testing::ReferenceGradient(ref, testing::ToDouble({x}), 0, dy), 1e-9, 1e-9));
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
