#include "compute/kernels/conv2d_maxpool.h"

#include <algorithm>
#include <ostream>
#include <vector>

#include "compute/kernels/bias_activation.h"
#include "compute/kernels/conv2d.h"
#include "compute/kernels/maxpool2d.h"
#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
// Readable test names for the shape parameter.
void PrintTo(const Conv2DShape& s, std::ostream* os) {
  *os << "{batch " << s.batch << ", " << s.in_h << "x" << s.in_w << "x"
      << s.in_c << ", kernel " << s.kernel << ", out_c " << s.out_c << "}";
}

namespace {

using testing::RandomFloats;

constexpr int kPool = 2;

// The unfused composition, which the other kernel tests check against
// naive code and finite differences, is the oracle here.
struct Unfused {
  explicit Unfused(const Conv2DShape& s)
      : s(s),
        pool{s.batch, s.out_h(), s.out_w(), s.out_c, kPool},
        conv_out(s.out_pixels() * s.out_c),
        pooled(pool.out_size()),
        argmax(pool.out_size()) {}

  void Forward(const std::vector<float>& x, const std::vector<float>& w,
               const std::vector<float>& b, bool relu) {
    Conv2DForward<CpuDevice>()(CpuDevice(), s, x.data(), w.data(), b.data(),
                               relu, conv_out.data(), nullptr);
    MaxPool2DForward<CpuDevice>()(CpuDevice(), pool, conv_out.data(),
                                  pooled.data(), argmax.data());
  }

  void BackwardFilter(const std::vector<float>& x, const std::vector<float>& dp,
                      std::vector<float>* dw, std::vector<float>* db) {
    std::vector<float> dconv(conv_out.size());
    MaxPool2DBackward<CpuDevice>()(CpuDevice(), pool, dp.data(), argmax.data(),
                                   dconv.data());
    Conv2DBackwardFilter<CpuDevice>()(CpuDevice(), s, x.data(), dconv.data(),
                                      false, true, dw->data(), db->data(),
                                      nullptr);
  }

  Conv2DShape s;
  MaxPool2DShape pool;
  std::vector<float> conv_out, pooled;
  std::vector<int32_t> argmax;
};

class Conv2DMaxPoolTest : public ::testing::TestWithParam<Conv2DShape> {};

TEST_P(Conv2DMaxPoolTest, MatchesUnfusedKernels) {
  const Conv2DShape s = GetParam();
  ASSERT_TRUE(Conv2DMaxPoolForward<CpuDevice>::Supports(s, kPool));
  const auto x =
      RandomFloats(int64_t{s.batch} * s.in_h * s.in_w, 31, 0.0f, 1.0f);
  const auto w = RandomFloats(9 * s.out_c, 32);
  const auto b = RandomFloats(s.out_c, 33, -0.2f, 0.2f);
  for (bool relu : {false, true}) {
    Unfused ref(s);
    ref.Forward(x, w, b, relu);
    std::vector<float> pooled(ref.pooled.size(), -7.0f);
    std::vector<int32_t> argmax(ref.argmax.size(), -1);
    Conv2DMaxPoolForward<CpuDevice>()(CpuDevice(), s, kPool, x.data(), w.data(),
                                      b.data(), relu, pooled.data(),
                                      argmax.data());
    for (size_t i = 0; i < pooled.size(); ++i) {
      ASSERT_NEAR(pooled[i], ref.pooled[i], 1e-5)
          << "relu=" << relu << " i=" << i;
      ASSERT_EQ(argmax[i], ref.argmax[i]) << "relu=" << relu << " i=" << i;
    }

    // A pooled gradient with the ReLU gradient applied, as the contract asks.
    auto dp = RandomFloats(pooled.size(), 34);
    if (relu)
      ReluGrad<CpuDevice>()(CpuDevice(), dp.size(), pooled.data(), dp.data());
    std::vector<float> want_dw(w.size()), want_db(b.size());
    ref.BackwardFilter(x, dp, &want_dw, &want_db);
    std::vector<float> dw(w.size(), 3.0f), db(b.size(), 3.0f);
    Conv2DMaxPoolBackwardFilter<CpuDevice>()(CpuDevice(), s, kPool, x.data(),
                                             dp.data(), argmax.data(), false,
                                             dw.data(), db.data());
    for (size_t i = 0; i < dw.size(); ++i)
      ASSERT_NEAR(dw[i], want_dw[i], 1e-4) << i;
    for (size_t i = 0; i < db.size(); ++i)
      ASSERT_NEAR(db[i], want_db[i], 1e-4) << i;

    // accumulate adds a second copy.
    Conv2DMaxPoolBackwardFilter<CpuDevice>()(CpuDevice(), s, kPool, x.data(),
                                             dp.data(), argmax.data(), true,
                                             dw.data(), db.data());
    for (size_t i = 0; i < dw.size(); ++i)
      ASSERT_NEAR(dw[i], 2 * want_dw[i], 2e-4) << i;
    for (size_t i = 0; i < db.size(); ++i)
      ASSERT_NEAR(db[i], 2 * want_db[i], 2e-4) << i;
  }
}

// {batch, in_h, in_w, in_c, kernel, out_c}: the CNN's first layer, and a
// 6x7 conv output whose last column is dropped by the pooling.
INSTANTIATE_TEST_SUITE_P(Shapes, Conv2DMaxPoolTest,
                         ::testing::Values(Conv2DShape{2, 28, 28, 1, 3, 32},
                                           Conv2DShape{3, 8, 9, 1, 3, 8}));

TEST(Conv2DMaxPoolSupportsTest, OnlyTheFusedGeometry) {
  EXPECT_FALSE(
      Conv2DMaxPoolForward<CpuDevice>::Supports({1, 28, 28, 2, 3, 32}, 2));
  EXPECT_FALSE(
      Conv2DMaxPoolForward<CpuDevice>::Supports({1, 28, 28, 1, 5, 32}, 2));
  EXPECT_FALSE(
      Conv2DMaxPoolForward<CpuDevice>::Supports({1, 28, 28, 1, 3, 32}, 3));
  EXPECT_FALSE(
      Conv2DMaxPoolForward<CpuDevice>::Supports({1, 28, 28, 1, 3, 12}, 2));
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
