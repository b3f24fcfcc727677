// rescaling.h's Rescaling on the CPU, both ways.
#include "compute/kernels/rescaling.h"

#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

TEST(RescaleTest, ForwardAndBackward) {
  const std::vector<float> x = {0.0f, 127.5f, 255.0f};
  std::vector<float> y(3), dx(3);
  RescaleForward(3, 1.0f / 127.5f, -1.0f, x.data(), y.data());
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_NEAR(y[1], 0.0f, 1e-7f);  // 127.5 * fl(1 / 127.5) - 1
  EXPECT_NEAR(y[2], 1.0f, 2e-7f);
  const std::vector<float> dy = {1.0f, 2.0f, -4.0f};
  RescaleBackward(3, 0.5f, dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0.5f, 1.0f, -2.0f}));
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
