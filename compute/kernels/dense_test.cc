#include "compute/kernels/dense.h"

#include <algorithm>
#include <ostream>
#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
// Readable test names for the shape parameter.
void PrintTo(const DenseShape& s, std::ostream* os) {
  *os << "{batch " << s.batch << ", in " << s.in << ", out " << s.out << "}";
}

namespace {

using testing::Dot;
using testing::GradientsNear;
using testing::NumericalGradient;
using testing::RandomFloats;

class DenseTest : public ::testing::TestWithParam<DenseShape> {};

TEST_P(DenseTest, ForwardMatchesNaive) {
  const DenseShape s = GetParam();
  const auto x = RandomFloats(s.batch * s.in, 1);
  const auto w = RandomFloats(s.in * s.out, 2);
  const auto b = RandomFloats(s.out, 3);
  for (bool relu : {false, true}) {
    std::vector<float> y(s.batch * s.out);
    DenseForward<CpuDevice>()(CpuDevice(), s, x.data(), w.data(), b.data(),
                              relu, y.data());
    for (int n = 0; n < s.batch; ++n) {
      for (int o = 0; o < s.out; ++o) {
        double sum = b[o];
        for (int i = 0; i < s.in; ++i)
          sum += double{x[n * s.in + i]} * w[i * s.out + o];
        if (relu) sum = std::max(sum, 0.0);
        EXPECT_NEAR(y[n * s.out + o], sum, 1e-5) << n << "," << o;
      }
    }
  }
}

// The layer is linear in each of x, w and b, so central differences of
// L = sum(r * y) are exact up to float rounding.
TEST_P(DenseTest, BackwardMatchesFiniteDifferences) {
  const DenseShape s = GetParam();
  auto x = RandomFloats(s.batch * s.in, 4);
  auto w = RandomFloats(s.in * s.out, 5);
  auto b = RandomFloats(s.out, 6);
  const auto r = RandomFloats(s.batch * s.out, 7);
  std::vector<float> y(s.batch * s.out);
  auto loss = [&] {
    DenseForward<CpuDevice>()(CpuDevice(), s, x.data(), w.data(), b.data(),
                              false, y.data());
    return Dot(r, y.data());
  };
  std::vector<float> dw(s.in * s.out), db(s.out), dx(s.batch * s.in);
  DenseBackward<CpuDevice>()(CpuDevice(), s, x.data(), w.data(), r.data(),
                             false, dw.data(), db.data(), dx.data());
  const float eps = 1e-2f;
  EXPECT_TRUE(
      GradientsNear(dw.data(), NumericalGradient(loss, &w, eps), 1e-3, 1e-3));
  EXPECT_TRUE(
      GradientsNear(db.data(), NumericalGradient(loss, &b, eps), 1e-3, 1e-3));
  EXPECT_TRUE(
      GradientsNear(dx.data(), NumericalGradient(loss, &x, eps), 1e-3, 1e-3));
}

TEST_P(DenseTest, AccumulateAddsAndNullDxIsSkipped) {
  const DenseShape s = GetParam();
  const auto x = RandomFloats(s.batch * s.in, 8);
  const auto w = RandomFloats(s.in * s.out, 9);
  const auto dy = RandomFloats(s.batch * s.out, 10);
  std::vector<float> dw(s.in * s.out, 7.0f), db(s.out, 7.0f);
  DenseBackward<CpuDevice>()(CpuDevice(), s, x.data(), w.data(), dy.data(),
                             false, dw.data(), db.data(), nullptr);
  const std::vector<float> dw1 = dw, db1 = db;
  DenseBackward<CpuDevice>()(CpuDevice(), s, x.data(), w.data(), dy.data(),
                             true, dw.data(), db.data(), nullptr);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], 2 * dw1[i], 1e-5);
  for (size_t i = 0; i < db.size(); ++i) EXPECT_NEAR(db[i], 2 * db1[i], 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DenseTest,
                         ::testing::Values(DenseShape{3, 7, 5},
                                           DenseShape{5, 17, 11},
                                           DenseShape{1, 4, 10}));

}  // namespace
}  // namespace kernels
}  // namespace pscluster
