#include "compute/kernels/conv2d.h"

#include <algorithm>
#include <ostream>
#include <vector>

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

using testing::Dot;
using testing::GradientsNear;
using testing::NumericalGradient;
using testing::RandomFloats;

// Naive NHWC/HWIO convolution in double.
std::vector<double> NaiveConv(const Conv2DShape& s, const std::vector<float>& x,
                              const std::vector<float>& w,
                              const std::vector<float>& b, bool relu) {
  std::vector<double> y(s.out_pixels() * s.out_c);
  for (int n = 0; n < s.batch; ++n)
    for (int i = 0; i < s.out_h(); ++i)
      for (int j = 0; j < s.out_w(); ++j)
        for (int o = 0; o < s.out_c; ++o) {
          double sum = b[o];
          for (int kh = 0; kh < s.kernel; ++kh)
            for (int kw = 0; kw < s.kernel; ++kw)
              for (int c = 0; c < s.in_c; ++c) {
                sum +=
                    double{
                        x[((n * s.in_h + i + kh) * s.in_w + j + kw) * s.in_c +
                          c]} *
                    w[((kh * s.kernel + kw) * s.in_c + c) * s.out_c + o];
              }
          y[((n * s.out_h() + i) * s.out_w() + j) * s.out_c + o] =
              relu ? std::max(sum, 0.0) : sum;
        }
  return y;
}

// Holds the tensors of one shape and runs the kernels on them.
struct ConvFixture {
  explicit ConvFixture(const Conv2DShape& shape)
      : s(shape),
        x(RandomFloats(int64_t{s.batch} * s.in_h * s.in_w * s.in_c, 11)),
        w(RandomFloats(s.patch_size() * s.out_c, 12)),
        b(RandomFloats(s.out_c, 13)),
        y(s.out_pixels() * s.out_c),
        workspace(std::max({Conv2DForward<CpuDevice>::WorkspaceSize(s),
                            Conv2DBackwardFilter<CpuDevice>::WorkspaceSize(s),
                            Conv2DBackwardInput<CpuDevice>::WorkspaceSize(s),
                            int64_t{1}})) {}

  void Forward(bool relu) {
    Conv2DForward<CpuDevice>()(CpuDevice(), s, x.data(), w.data(), b.data(),
                               relu, y.data(), workspace.data());
  }

  Conv2DShape s;
  std::vector<float> x, w, b, y, workspace;
};

class Conv2DTest : public ::testing::TestWithParam<Conv2DShape> {};

TEST_P(Conv2DTest, ForwardMatchesNaive) {
  ConvFixture f(GetParam());
  for (bool relu : {false, true}) {
    f.Forward(relu);
    const std::vector<double> want = NaiveConv(f.s, f.x, f.w, f.b, relu);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(f.y[i], want[i], 1e-4) << "relu=" << relu << " i=" << i;
    }
  }
}

// Convolution is linear in each of x, w and b, so central differences of
// L = sum(r * y) are exact up to float rounding.
TEST_P(Conv2DTest, BackwardMatchesFiniteDifferences) {
  ConvFixture f(GetParam());
  const Conv2DShape& s = f.s;
  const auto r = RandomFloats(f.y.size(), 14);
  auto loss = [&] {
    f.Forward(false);
    return Dot(r, f.y.data());
  };
  std::vector<float> dw(f.w.size()), db(f.b.size()), dx(f.x.size());
  loss();  // leaves the columns of x in the workspace
  Conv2DBackwardFilter<CpuDevice>()(CpuDevice(), s, f.x.data(), r.data(), false,
                                    /*columns_ready=*/true, dw.data(),
                                    db.data(), f.workspace.data());
  Conv2DBackwardInput<CpuDevice>()(CpuDevice(), s, f.w.data(), r.data(),
                                   dx.data(), f.workspace.data());
  const float eps = 1e-2f;
  EXPECT_TRUE(
      GradientsNear(dw.data(), NumericalGradient(loss, &f.w, eps), 2e-3, 1e-3));
  EXPECT_TRUE(
      GradientsNear(db.data(), NumericalGradient(loss, &f.b, eps), 2e-3, 1e-3));
  EXPECT_TRUE(
      GradientsNear(dx.data(), NumericalGradient(loss, &f.x, eps), 2e-3, 1e-3));
}

TEST_P(Conv2DTest, FilterGradAccumulatesAndRebuildsColumns) {
  ConvFixture f(GetParam());
  const Conv2DShape& s = f.s;
  const auto dy = RandomFloats(f.y.size(), 15);
  std::vector<float> dw1(f.w.size(), 5.0f), db1(f.b.size(), 5.0f);
  f.Forward(false);
  Conv2DBackwardFilter<CpuDevice>()(CpuDevice(), s, f.x.data(), dy.data(),
                                    false, true, dw1.data(), db1.data(),
                                    f.workspace.data());
  // Wipe the workspace: columns_ready = false must rebuild them.
  std::fill(f.workspace.begin(), f.workspace.end(), 123.0f);
  std::vector<float> dw2 = dw1, db2 = db1;
  Conv2DBackwardFilter<CpuDevice>()(CpuDevice(), s, f.x.data(), dy.data(), true,
                                    false, dw2.data(), db2.data(),
                                    f.workspace.data());
  for (size_t i = 0; i < dw1.size(); ++i)
    EXPECT_NEAR(dw2[i], 2 * dw1[i], 1e-4) << i;
  for (size_t i = 0; i < db1.size(); ++i)
    EXPECT_NEAR(db2[i], 2 * db1[i], 1e-4) << i;
}

// {batch, in_h, in_w, in_c, kernel, out_c}. in_c == 1 takes the direct
// path (32 filters: two 16-wide blocks; 13: one 8-wide block and a scalar
// tail; 28x28 rows: full 6-pixel tiles and a tail); the rest im2col + GEMM.
// The input gradient scatters for in_c = 8 (one 8-wide block), 32 (two
// 16-wide blocks) and 24 (one of each), else uses GEMM + col2im.
INSTANTIATE_TEST_SUITE_P(Shapes, Conv2DTest,
                         ::testing::Values(Conv2DShape{2, 9, 8, 1, 3, 32},
                                           Conv2DShape{1, 7, 11, 1, 2, 13},
                                           Conv2DShape{1, 28, 28, 1, 3, 8},
                                           Conv2DShape{2, 6, 5, 3, 3, 5},
                                           Conv2DShape{1, 7, 7, 8, 2, 16},
                                           Conv2DShape{2, 6, 9, 32, 3, 5},
                                           Conv2DShape{1, 5, 8, 24, 3, 7},
                                           Conv2DShape{1, 3, 3, 2, 3, 4}));

}  // namespace
}  // namespace kernels
}  // namespace pscluster
