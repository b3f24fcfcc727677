#include "compute/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace pscluster {
namespace kernels {
namespace {

// Example r's weights [tq, tv]: the softmax over the keys of q k^T, a
// masked key's score less 1e9 in float32 as Keras computes it.
void Weights(int r, const AttentionShape& s, const float* q, const float* k, StepMask key_mask,
             float* w) {
  for (int i = 0; i < s.tq; ++i) {
    const float* qi = q + (int64_t{r} * s.tq + i) * s.d;
    float* wi = w + int64_t{i} * s.tv;
    float top = -INFINITY;
    for (int j = 0; j < s.tv; ++j) {
      const float* kj = k + (int64_t{r} * s.tv + j) * s.d;
      double dot = 0;
      for (int c = 0; c < s.d; ++c) dot += double{qi[c]} * kj[c];
      float score = static_cast<float>(dot);
      if (key_mask.masked(r, s.tv, j)) score -= 1.0e9f;
      wi[j] = score;
      top = std::max(top, score);
    }
    double sum = 0;
    for (int j = 0; j < s.tv; ++j) sum += std::exp(double{wi[j]} - top);
    for (int j = 0; j < s.tv; ++j) {
      wi[j] = static_cast<float>(std::exp(double{wi[j]} - top) / sum);
    }
  }
}

}  // namespace

void AttentionForward(int n, const AttentionShape& s, const float* q, const float* k,
                      const float* v, StepMask query_mask, StepMask key_mask, float* y) {
  std::vector<float> w(int64_t{s.tq} * s.tv);
  std::vector<double> acc(s.dv);
  for (int r = 0; r < n; ++r) {
    Weights(r, s, q, k, key_mask, w.data());
    for (int i = 0; i < s.tq; ++i) {
      float* yi = y + (int64_t{r} * s.tq + i) * s.dv;
      if (query_mask.masked(r, s.tq, i)) {
        std::fill(yi, yi + s.dv, 0.0f);
        continue;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j < s.tv; ++j) {
        const float wij = w[int64_t{i} * s.tv + j];
        const float* vj = v + (int64_t{r} * s.tv + j) * s.dv;
        for (int c = 0; c < s.dv; ++c) acc[c] += double{wij} * vj[c];
      }
      for (int c = 0; c < s.dv; ++c) yi[c] = static_cast<float>(acc[c]);
    }
  }
}

void AttentionBackward(int n, const AttentionShape& s, const float* q, const float* k,
                       const float* v, StepMask query_mask, StepMask key_mask, const float* gy,
                       float* gq, float* gk, float* gv) {
  const bool shared = gk != nullptr && gk == gv;  // k and v are one input
  std::vector<float> w(int64_t{s.tq} * s.tv);
  std::vector<double> gw(s.tv), gs(s.tv);
  std::vector<double> dq(s.d), dk(int64_t{s.tv} * s.d), dv(int64_t{s.tv} * s.dv);
  for (int r = 0; r < n; ++r) {
    Weights(r, s, q, k, key_mask, w.data());
    std::fill(dk.begin(), dk.end(), 0.0);
    std::fill(dv.begin(), dv.end(), 0.0);
    for (int i = 0; i < s.tq; ++i) {
      const float* gyi = gy + (int64_t{r} * s.tq + i) * s.dv;
      const float* qi = q + (int64_t{r} * s.tq + i) * s.d;
      const float* wi = w.data() + int64_t{i} * s.tv;
      const bool dropped = query_mask.masked(r, s.tq, i);  // y's row is 0
      // gw_j = gy_i . v_j; gv_j += w_ij gy_i.
      double wgw = 0;
      for (int j = 0; j < s.tv; ++j) {
        const float* vj = v + (int64_t{r} * s.tv + j) * s.dv;
        double g = 0;
        for (int c = 0; c < s.dv; ++c) {
          if (!dropped) dv[int64_t{j} * s.dv + c] += double{wi[j]} * gyi[c];
          g += double{gyi[c]} * vj[c];
        }
        gw[j] = dropped ? 0.0 : g;
        wgw += wi[j] * gw[j];
      }
      // The softmax's gradient: gs_j = w_ij (gw_j - sum_l w_il gw_l);
      // gq_i = sum_j gs_j k_j, gk_j += gs_j q_i.
      std::fill(dq.begin(), dq.end(), 0.0);
      for (int j = 0; j < s.tv; ++j) {
        gs[j] = wi[j] * (gw[j] - wgw);
        const float* kj = k + (int64_t{r} * s.tv + j) * s.d;
        for (int c = 0; c < s.d; ++c) {
          dq[c] += gs[j] * kj[c];
          dk[int64_t{j} * s.d + c] += gs[j] * qi[c];
        }
      }
      if (gq != nullptr) {
        float* gqi = gq + (int64_t{r} * s.tq + i) * s.d;
        for (int c = 0; c < s.d; ++c) gqi[c] = static_cast<float>(dq[c]);
      }
    }
    if (gv != nullptr) {
      float* to = gv + int64_t{r} * s.tv * s.dv;
      for (int64_t e = 0; e < int64_t{s.tv} * s.dv; ++e) {
        to[e] = static_cast<float>(dv[e] + (shared ? dk[e] : 0.0));
      }
    }
    if (gk != nullptr && !shared) {
      float* to = gk + int64_t{r} * s.tv * s.d;
      for (int64_t e = 0; e < int64_t{s.tv} * s.d; ++e) to[e] = static_cast<float>(dk[e]);
    }
  }
}

}  // namespace kernels
}  // namespace pscluster
