#include "compute/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace pscluster {
namespace kernels {
namespace {

// Whether score (i, j) of example r is masked.
bool Masked(const AttentionShape& s, const StepMask& query_mask, const StepMask& key_mask, int r,
            int i, int j) {
  return key_mask.masked(r, s.tv, j) || (s.multi_head && query_mask.masked(r, s.tq, i));
}

// Example r's weights of head h [tq, tv]: the softmax over the keys of
// (q * scale) k^T, a masked score less 1e9 in float32 as Keras computes it.
void Weights(int r, int h, const AttentionShape& s, const float* q, const float* k,
             const StepMask& query_mask, const StepMask& key_mask, float* w) {
  const int dh = s.d / s.heads;
  for (int i = 0; i < s.tq; ++i) {
    const float* qi = q + (int64_t{r} * s.tq + i) * s.d + h * dh;
    float* wi = w + int64_t{i} * s.tv;
    float top = -INFINITY;
    for (int j = 0; j < s.tv; ++j) {
      const float* kj = k + (int64_t{r} * s.tv + j) * s.d + h * dh;
      double dot = 0;
      for (int c = 0; c < dh; ++c) dot += double{qi[c] * s.scale} * kj[c];
      float score = static_cast<float>(dot);
      if (Masked(s, query_mask, key_mask, r, i, j)) score -= 1.0e9f;
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

// Whether the Attention layer zeroes example r's query row i.
bool Zeroed(const AttentionShape& s, const StepMask& query_mask, int r, int i) {
  return !s.multi_head && query_mask.masked(r, s.tq, i);
}

}  // namespace

void AttentionForward(int n, const AttentionShape& s, const float* q, const float* k,
                      const float* v, StepMask query_mask, StepMask key_mask, float* y) {
  const int dvh = s.dv / s.heads;
  std::vector<float> w(int64_t{s.tq} * s.tv);
  std::vector<double> acc(dvh);
  for (int r = 0; r < n; ++r) {
    for (int h = 0; h < s.heads; ++h) {
      Weights(r, h, s, q, k, query_mask, key_mask, w.data());
      for (int i = 0; i < s.tq; ++i) {
        float* yi = y + (int64_t{r} * s.tq + i) * s.dv + h * dvh;
        if (Zeroed(s, query_mask, r, i)) {
          std::fill(yi, yi + dvh, 0.0f);
          continue;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j < s.tv; ++j) {
          const float wij = w[int64_t{i} * s.tv + j];
          const float* vj = v + (int64_t{r} * s.tv + j) * s.dv + h * dvh;
          for (int c = 0; c < dvh; ++c) acc[c] += double{wij} * vj[c];
        }
        for (int c = 0; c < dvh; ++c) yi[c] = static_cast<float>(acc[c]);
      }
    }
  }
}

void AttentionBackward(int n, const AttentionShape& s, const float* q, const float* k,
                       const float* v, StepMask query_mask, StepMask key_mask, const float* gy,
                       float* gq, float* gk, float* gv) {
  const bool shared = gk != nullptr && gk == gv;  // k and v are one input
  const int dh = s.d / s.heads, dvh = s.dv / s.heads;
  std::vector<float> w(int64_t{s.tq} * s.tv);
  std::vector<double> gw(s.tv), gs(s.tv);
  std::vector<double> dq(int64_t{s.tq} * s.d), dk(int64_t{s.tv} * s.d), dv(int64_t{s.tv} * s.dv);
  for (int r = 0; r < n; ++r) {
    std::fill(dq.begin(), dq.end(), 0.0);
    std::fill(dk.begin(), dk.end(), 0.0);
    std::fill(dv.begin(), dv.end(), 0.0);
    for (int h = 0; h < s.heads; ++h) {
      Weights(r, h, s, q, k, query_mask, key_mask, w.data());
      for (int i = 0; i < s.tq; ++i) {
        const float* gyi = gy + (int64_t{r} * s.tq + i) * s.dv + h * dvh;
        const float* qi = q + (int64_t{r} * s.tq + i) * s.d + h * dh;
        const float* wi = w.data() + int64_t{i} * s.tv;
        const bool dropped = Zeroed(s, query_mask, r, i);  // y's row is 0
        // gw_j = gy_i . v_j; gv_j += w_ij gy_i.
        double wgw = 0;
        for (int j = 0; j < s.tv; ++j) {
          const float* vj = v + (int64_t{r} * s.tv + j) * s.dv + h * dvh;
          double g = 0;
          for (int c = 0; c < dvh; ++c) {
            if (!dropped) dv[int64_t{j} * s.dv + h * dvh + c] += double{wi[j]} * gyi[c];
            g += double{gyi[c]} * vj[c];
          }
          gw[j] = dropped ? 0.0 : g;
          wgw += wi[j] * gw[j];
        }
        // The softmax's gradient: gs_j = w_ij (gw_j - sum_l w_il gw_l);
        // gq_i = scale sum_j gs_j k_j, gk_j += gs_j (q_i scale).
        for (int j = 0; j < s.tv; ++j) {
          gs[j] = wi[j] * (gw[j] - wgw);
          const float* kj = k + (int64_t{r} * s.tv + j) * s.d + h * dh;
          for (int c = 0; c < dh; ++c) {
            dq[int64_t{i} * s.d + h * dh + c] += gs[j] * kj[c] * s.scale;
            dk[int64_t{j} * s.d + h * dh + c] += gs[j] * double{qi[c] * s.scale};
          }
        }
      }
    }
    if (gq != nullptr) {
      float* to = gq + int64_t{r} * s.tq * s.d;
      for (int64_t e = 0; e < int64_t{s.tq} * s.d; ++e) to[e] = static_cast<float>(dq[e]);
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
