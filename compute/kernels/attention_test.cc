#include "compute/kernels/attention.h"

#include <vector>

#include "compute/kernels/testing/gradient_check.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

using testing::Dot;
using testing::GradientsNear;
using testing::NumericalGradient;
using testing::RandomFloats;

constexpr int kN = 3;
const AttentionShape kShape{2, 4, 3, 5};  // tq, tv, d, dv

// Ids of 3 examples' 4 keys (padding 0): one padded at the end, none, one
// all padding (Keras then weighs every key alike).
const std::vector<float> kKeyIds = {4, 9, 0, 0, 1, 2, 3, 5, 0, 0, 0, 0};
// Ids of their 2 queries: the first example's second query is padding.
const std::vector<float> kQueryIds = {7, 0, 3, 1, 2, 8};

// Every gradient of sum(r * y) by central differences, with both masks,
// with keys of their own and with the value as the key (whose gradient is
// then both). Not with every key masked: float32's scores less 1e9 are then
// all -1e9 (a step of 64), flat to any difference, where Keras's gradient
// (and ours) is the softmax's at the unmasked scores; the float64 reference
// of graph_cpu_engine_test checks that case.
TEST(AttentionTest, GradientsMatchDifferences) {
  const std::vector<float> key_ids = {4, 9, 0, 0, 1, 2, 3, 5, 0, 6, 0, 0};
  std::vector<float> q = RandomFloats(kN * kShape.tq * kShape.d, 1);
  std::vector<float> k = RandomFloats(kN * kShape.tv * kShape.d, 2);
  std::vector<float> v = RandomFloats(kN * kShape.tv * kShape.dv, 3);
  const std::vector<float> r = RandomFloats(kN * kShape.tq * kShape.dv, 4);
  const StepMask qm{kQueryIds.data(), 0}, km{key_ids.data(), 0};
  std::vector<float> y(r.size());
  auto loss = [&]() {
    AttentionForward(kN, kShape, q.data(), k.data(), v.data(), qm, km, y.data());
    return Dot(r, y.data());
  };
  std::vector<float> gq(q.size()), gk(k.size()), gv(v.size());
  AttentionBackward(kN, kShape, q.data(), k.data(), v.data(), qm, km, r.data(), gq.data(),
                    gk.data(), gv.data());
  EXPECT_TRUE(GradientsNear(gq.data(), NumericalGradient(loss, &q, 1e-2f), 2e-3, 1e-2));
  EXPECT_TRUE(GradientsNear(gk.data(), NumericalGradient(loss, &k, 1e-2f), 2e-3, 1e-2));
  EXPECT_TRUE(GradientsNear(gv.data(), NumericalGradient(loss, &v, 1e-2f), 2e-3, 1e-2));

  // The value as the key: d = dv.
  const AttentionShape same{2, 4, 5, 5};
  std::vector<float> q5 = RandomFloats(kN * same.tq * same.d, 5);
  std::vector<float> x = RandomFloats(kN * same.tv * same.d, 6);
  auto self_loss = [&]() {
    AttentionForward(kN, same, q5.data(), x.data(), x.data(), qm, km, y.data());
    return Dot(r, y.data());
  };
  std::vector<float> gx(x.size());
  AttentionBackward(kN, same, q5.data(), x.data(), x.data(), qm, km, r.data(), nullptr, gx.data(),
                    gx.data());
  EXPECT_TRUE(GradientsNear(gx.data(), NumericalGradient(self_loss, &x, 1e-2f), 2e-3, 1e-2));
}

// A masked query's row is 0 (Keras multiplies by the query's mask); a
// masked key weighs nothing unless every key is masked, when all weigh
// alike: the output is then the values' mean.
TEST(AttentionTest, MasksAsKerasAppliesThem) {
  const std::vector<float> q = RandomFloats(kN * kShape.tq * kShape.d, 7);
  std::vector<float> k = RandomFloats(kN * kShape.tv * kShape.d, 8);
  std::vector<float> v = RandomFloats(kN * kShape.tv * kShape.dv, 9);
  const StepMask qm{kQueryIds.data(), 0}, km{kKeyIds.data(), 0};
  std::vector<float> y(kN * kShape.tq * kShape.dv);
  AttentionForward(kN, kShape, q.data(), k.data(), v.data(), qm, km, y.data());
  for (int c = 0; c < kShape.dv; ++c) EXPECT_EQ(y[kShape.dv + c], 0.0f);  // example 0, query 1
  // Example 0's padded keys (2 and 3) changed: the same output.
  std::vector<float> y2(y.size());
  for (int j : {2, 3}) {
    for (int c = 0; c < kShape.d; ++c) k[(0 * kShape.tv + j) * kShape.d + c] += 5.0f;
    for (int c = 0; c < kShape.dv; ++c) v[(0 * kShape.tv + j) * kShape.dv + c] -= 3.0f;
  }
  AttentionForward(kN, kShape, q.data(), k.data(), v.data(), qm, km, y2.data());
  for (int e = 0; e < kShape.tq * kShape.dv; ++e) EXPECT_NEAR(y2[e], y[e], 1e-6) << e;
  // Example 2, all keys masked: each query row is the mean of the values.
  for (int i = 0; i < kShape.tq; ++i) {
    for (int c = 0; c < kShape.dv; ++c) {
      double mean = 0;
      for (int j = 0; j < kShape.tv; ++j) mean += v[(2 * kShape.tv + j) * kShape.dv + c];
      EXPECT_NEAR(y2[(2 * kShape.tq + i) * kShape.dv + c], mean / kShape.tv, 1e-6);
    }
  }
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
