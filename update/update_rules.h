// Keras 3's per-coordinate update rules that the dense Optimizer
// (update/optimizer.h) and the per-row SparseOptimizer
// (update/sparse_optimizer.h) both apply: one coordinate's gradient `g`,
// its value `w` and its slots, in float32, term by term as Keras's
// update_step writes them (docs/sparse_optimizers.md has the formulas).
// Header-only, so that each caller's loop inlines them and vectorises.
#ifndef PSCLUSTER_UPDATE_UPDATE_RULES_H_
#define PSCLUSTER_UPDATE_UPDATE_RULES_H_

#include <algorithm>
#include <cmath>

namespace pscluster {

// Adagrad: acc += g^2; w -= lr g / sqrt(acc + epsilon). Keras 3 puts
// epsilon inside the square root (TensorFlow's ApplyAdagradV2 kernel, and
// Keras 2, add it to the root instead).
inline void AdagradStep(float g, float* w, float* acc, float lr, float epsilon) {
  const float a = *acc + g * g;
  *acc = a;
  *w -= (lr * g) / std::sqrt(a + epsilon);
}

// FTRL's constants at one step's rate, derived once per step.
struct FtrlTerms {
  float lr;
  float neg_power;     // -learning_rate_power, >= 0
  bool power_is_half;  // neg_power == 0.5: sqrt, exact, instead of pow
  float l1;
  float two_l2;         // 2 * (l2 + beta / (2 * lr)), Keras's 2 * l2_reg
  float two_shrinkage;  // 2 * l2_shrinkage_regularization_strength
};

inline FtrlTerms MakeFtrlTerms(float lr, float learning_rate_power, float l1, float l2,
                               float l2_shrinkage, float beta) {
  const double l2_reg = l2 + beta / (2.0 * lr);
  return FtrlTerms{lr,
                   -learning_rate_power,
                   learning_rate_power == -0.5f,
                   l1,
                   static_cast<float>(2.0 * l2_reg),
                   2.0f * l2_shrinkage};
}

inline float FtrlPower(const FtrlTerms& t, float n) {
  return t.power_is_half ? std::sqrt(n) : std::pow(n, t.neg_power);
}

// FTRL-proximal (keras.optimizers.Ftrl, TensorFlow's ApplyFtrlV2):
// g' = g + 2 shrinkage w; n' = acc + g^2;
// linear += g' - (n'^p - acc^p) / lr * w;
// w = (clip(linear, -l1, l1) - linear) / (n'^p / lr + 2 l2'); acc = n'.
inline void FtrlStep(float g, float* w, float* acc, float* linear, const FtrlTerms& t) {
  const float g_shrunk = g + t.two_shrinkage * *w;
  const float n = *acc + g * g;
  const float p_new = FtrlPower(t, n);
  const float sigma = (p_new - FtrlPower(t, *acc)) / t.lr;
  const float z = *linear + (g_shrunk - sigma * *w);
  const float quadratic = p_new / t.lr + t.two_l2;
  *linear = z;
  *acc = n;
  *w = (std::clamp(z, -t.l1, t.l1) - z) / quadratic;
}

}  // namespace pscluster

#endif  // PSCLUSTER_UPDATE_UPDATE_RULES_H_
