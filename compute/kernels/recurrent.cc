#include "compute/kernels/recurrent.h"

#include <algorithm>
#include <vector>

#include "compute/kernels/activation_math.h"

namespace pscluster {
namespace kernels {
namespace {

// Where a step's floats lie in `saved`, per example and per processed step
// p (in processing order: go_backwards reads step steps - 1 - p):
//   pre   [G u]  the gates' inputs (pre-activations),
//   act   [G u]  their activations,
//   LSTM: c [u], a(c) [u], h [u] after the step;
//   GRU:  hr [u] (reset_after: h Uh + rbh; else r h), h [u] after the step.
// At a masked step pre, act (and hr, a(c)) are zeros and the states are the
// carried ones, so the state before step p is always step p - 1's.
struct Layout {
  int u = 0, gu = 0;  // units, G * units
  int64_t pre = 0, act = 0, c = 0, ac = 0, hr = 0, h = 0, step = 0;
};

Layout MakeLayout(const RecurrentShape& s) {
  Layout l;
  l.u = s.units;
  l.gu = RecurrentGates(s) * s.units;
  l.pre = 0;
  l.act = l.gu;
  if (s.cell == RecurrentCell::kLstm) {
    l.c = 2 * l.gu;
    l.ac = l.c + l.u;
    l.h = l.ac + l.u;
  } else {
    l.hr = 2 * l.gu;
    l.h = l.hr + l.u;
  }
  l.step = l.h + l.u;
  return l;
}

// The step that processed step p reads.
int InputStep(const RecurrentShape& s, int p) { return s.go_backwards ? s.steps - 1 - p : p; }

// acc[j] = sum_k v[k] m[k * ld + j] for j < cols, k < rows.
void VecMat(const float* v, int rows, const float* m, int ld, int cols, double* acc) {
  std::fill(acc, acc + cols, 0.0);
  for (int k = 0; k < rows; ++k) {
    const double vk = v[k];
    const float* mk = m + static_cast<int64_t>(k) * ld;
    for (int j = 0; j < cols; ++j) acc[j] += vk * mk[j];
  }
}

// out[k] += sum_j d[j] m[k * ld + j] for k < rows, j < cols (d times m^T).
void AddVecMatT(const double* d, const float* m, int ld, int rows, int cols, double* out) {
  for (int k = 0; k < rows; ++k) {
    const float* mk = m + static_cast<int64_t>(k) * ld;
    double sum = 0.0;
    for (int j = 0; j < cols; ++j) sum += d[j] * mk[j];
    out[k] += sum;
  }
}

// g[k * ld + j] += v[k] d[j] for k < rows, j < cols.
void AddOuter(const float* v, int rows, const double* d, int cols, double* g, int ld) {
  for (int k = 0; k < rows; ++k) {
    const double vk = v[k];
    if (vk == 0.0) continue;
    double* gk = g + static_cast<int64_t>(k) * ld;
    for (int j = 0; j < cols; ++j) gk[j] += vk * d[j];
  }
}

// xw[t * gu + j] = x[t] W[:, j] + b[j] for every step of one example: the
// input's share of every gate, in one pass before the recurrence.
void InputProjection(const RecurrentShape& s, int gu, const float* x, const float* kernel,
                     const float* input_bias, double* xw) {
  for (int t = 0; t < s.steps; ++t) {
    double* row = xw + static_cast<int64_t>(t) * gu;
    VecMat(x + static_cast<int64_t>(t) * s.in, s.in, kernel, gu, gu, row);
    if (input_bias != nullptr) {
      for (int j = 0; j < gu; ++j) row[j] += input_bias[j];
    }
  }
}

}  // namespace

int RecurrentGates(const RecurrentShape& s) { return s.cell == RecurrentCell::kLstm ? 4 : 3; }

int64_t RecurrentBiasSize(const RecurrentShape& s) {
  if (!s.use_bias) return 0;
  const int64_t gu = static_cast<int64_t>(RecurrentGates(s)) * s.units;
  return s.cell == RecurrentCell::kGru && s.reset_after ? 2 * gu : gu;
}

int64_t RecurrentSavedPerExample(const RecurrentShape& s) {
  return static_cast<int64_t>(s.steps) * MakeLayout(s).step;
}

void RecurrentForward(int n, const RecurrentShape& s, const float* x, const float* kernel,
                      const float* recurrent_kernel, const float* bias, StepMask mask, float* y,
                      float* saved) {
  const Layout l = MakeLayout(s);
  const int u = l.u, gu = l.gu;
  const bool lstm = s.cell == RecurrentCell::kLstm;
  const bool has_bias = s.use_bias && bias != nullptr;
  const float* input_bias = has_bias ? bias : nullptr;
  const float* rec_bias = has_bias && !lstm && s.reset_after ? bias + gu : nullptr;
  const int64_t per_example = RecurrentSavedPerExample(s);
  const std::vector<float> zeros(u, 0.0f);
  std::vector<double> xw(static_cast<int64_t>(s.steps) * gu), rec(gu), rh(u);
  std::vector<float> reset_h(u);

  for (int r = 0; r < n; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * s.steps * s.in;
    float* sv = saved + r * per_example;
    InputProjection(s, gu, xr, kernel, input_bias, xw.data());
    const float* h_prev = zeros.data();
    const float* c_prev = zeros.data();
    for (int p = 0; p < s.steps; ++p) {
      const int t = InputStep(s, p);
      float* st = sv + static_cast<int64_t>(p) * l.step;
      float* pre = st + l.pre;
      float* act = st + l.act;
      float* h = st + l.h;
      if (mask.masked(r, s.steps, t)) {
        // Keras's RNN keeps the states (and repeats the previous output).
        std::fill(st, st + l.h, 0.0f);
        std::copy(h_prev, h_prev + u, h);
        if (lstm) std::copy(c_prev, c_prev + u, st + l.c);
      } else if (lstm) {
        const double* xt = xw.data() + static_cast<int64_t>(t) * gu;
        VecMat(h_prev, u, recurrent_kernel, gu, gu, rec.data());
        for (int j = 0; j < gu; ++j) {
          pre[j] = static_cast<float>(xt[j] + rec[j]);
          const ActivationFn f = j >= 2 * u && j < 3 * u ? s.activation : s.recurrent_activation;
          act[j] = ActivationValue(f, s.alpha, pre[j]);
        }
        float* c = st + l.c;
        float* ac = st + l.ac;
        for (int k = 0; k < u; ++k) {
          c[k] = act[u + k] * c_prev[k] + act[k] * act[2 * u + k];
          ac[k] = ActivationValue(s.activation, s.alpha, c[k]);
          h[k] = act[3 * u + k] * ac[k];
        }
      } else {
        const double* xt = xw.data() + static_cast<int64_t>(t) * gu;
        float* hr = st + l.hr;
        // z and r: x W + b + h U (+ rb); reset_after also h Uh (+ rbh).
        VecMat(h_prev, u, recurrent_kernel, gu, s.reset_after ? gu : 2 * u, rec.data());
        if (rec_bias != nullptr) {
          for (int j = 0; j < gu; ++j) rec[j] += rec_bias[j];
        }
        for (int j = 0; j < 2 * u; ++j) {
          pre[j] = static_cast<float>(xt[j] + rec[j]);
          act[j] = ActivationValue(s.recurrent_activation, s.alpha, pre[j]);
        }
        const float* z = act;
        const float* rg = act + u;
        if (s.reset_after) {
          for (int k = 0; k < u; ++k) {
            hr[k] = static_cast<float>(rec[2 * u + k]);
            pre[2 * u + k] = static_cast<float>(xt[2 * u + k] + rg[k] * hr[k]);
          }
        } else {
          for (int k = 0; k < u; ++k) hr[k] = rg[k] * h_prev[k];
          VecMat(hr, u, recurrent_kernel + 2 * u, gu, u, rh.data());
          for (int k = 0; k < u; ++k) pre[2 * u + k] = static_cast<float>(xt[2 * u + k] + rh[k]);
        }
        for (int k = 0; k < u; ++k) {
          const float g = ActivationValue(s.activation, s.alpha, pre[2 * u + k]);
          act[2 * u + k] = g;
          h[k] = z[k] * h_prev[k] + (1.0f - z[k]) * g;
        }
      }
      if (s.return_sequences) {
        std::copy(h, h + u, y + (static_cast<int64_t>(r) * s.steps + p) * u);
      }
      h_prev = h;
      if (lstm) c_prev = st + l.c;
    }
    if (!s.return_sequences) std::copy(h_prev, h_prev + u, y + static_cast<int64_t>(r) * u);
  }
}

void RecurrentBackward(int n, const RecurrentShape& s, const float* x, const float* kernel,
                       const float* recurrent_kernel, const float* bias, StepMask mask,
                       const float* saved, const float* gy, float* gx, float* gkernel,
                       float* grecurrent, float* gbias) {
  const Layout l = MakeLayout(s);
  const int u = l.u, gu = l.gu;
  const bool lstm = s.cell == RecurrentCell::kLstm;
  const bool has_bias = s.use_bias && bias != nullptr && gbias != nullptr;
  const bool rec_bias = !lstm && s.reset_after;  // the bias's second row
  const int64_t per_example = RecurrentSavedPerExample(s);
  const std::vector<float> zeros(u, 0.0f);
  std::vector<double> gk(static_cast<int64_t>(s.in) * gu, 0.0);
  std::vector<double> gu_acc(static_cast<int64_t>(u) * gu, 0.0);
  std::vector<double> gb(has_bias ? RecurrentBiasSize(s) : 0, 0.0);
  // Per example: the gates' input gradients by input step (zeros where
  // masked), then the state gradients carried back through the steps.
  std::vector<double> dx_gates(static_cast<int64_t>(s.steps) * gu);
  std::vector<double> dh(u), dc(u), dh_prev(u), drec(gu), drh(u), gx_row(s.in);

  for (int r = 0; r < n; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * s.steps * s.in;
    const float* sv = saved + r * per_example;
    std::fill(dx_gates.begin(), dx_gates.end(), 0.0);
    std::fill(dh.begin(), dh.end(), 0.0);
    std::fill(dc.begin(), dc.end(), 0.0);
    if (!s.return_sequences && s.steps > 0) {
      for (int k = 0; k < u; ++k) dh[k] = gy[static_cast<int64_t>(r) * u + k];
    }
    for (int p = s.steps - 1; p >= 0; --p) {
      const int t = InputStep(s, p);
      if (s.return_sequences) {
        const float* g = gy + (static_cast<int64_t>(r) * s.steps + p) * u;
        for (int k = 0; k < u; ++k) dh[k] += g[k];
      }
      // A masked step passes dh (and dc) back unchanged.
      if (mask.masked(r, s.steps, t)) continue;
      const float* st = sv + static_cast<int64_t>(p) * l.step;
      const float* before = p > 0 ? st - l.step : nullptr;
      const float* h_prev = before != nullptr ? before + l.h : zeros.data();
      const float* pre = st + l.pre;
      const float* act = st + l.act;
      double* dxg = dx_gates.data() + static_cast<int64_t>(t) * gu;
      if (lstm) {
        const float* c_prev = before != nullptr ? before + l.c : zeros.data();
        const float* c = st + l.c;
        const float* ac = st + l.ac;
        for (int k = 0; k < u; ++k) {
          const float i = act[k], f = act[u + k], g = act[2 * u + k], o = act[3 * u + k];
          const double dct =
              dc[k] + dh[k] * o * ActivationSlope(s.activation, s.alpha, c[k], ac[k]);
          const auto rslope = [&](int j) {
            return ActivationSlope(s.recurrent_activation, s.alpha, pre[j], act[j]);
          };
          dxg[k] = dct * g * rslope(k);
          dxg[u + k] = dct * c_prev[k] * rslope(u + k);
          dxg[2 * u + k] =
              dct * i * ActivationSlope(s.activation, s.alpha, pre[2 * u + k], act[2 * u + k]);
          dxg[3 * u + k] = dh[k] * ac[k] * rslope(3 * u + k);
          dc[k] = dct * f;
        }
        AddOuter(h_prev, u, dxg, gu, gu_acc.data(), gu);
        std::fill(dh_prev.begin(), dh_prev.end(), 0.0);
        AddVecMatT(dxg, recurrent_kernel, gu, u, gu, dh_prev.data());
      } else {
        const float* hr = st + l.hr;
        // drec: the gradient of the recurrent products' sums (h U + rb).
        for (int k = 0; k < u; ++k) {
          const float z = act[k], g = act[2 * u + k];
          const double dpg =
              dh[k] * (1.0 - z) * ActivationSlope(s.activation, s.alpha, pre[2 * u + k], g);
          dxg[k] =
              dh[k] * (h_prev[k] - g) * ActivationSlope(s.recurrent_activation, s.alpha, pre[k], z);
          dxg[2 * u + k] = dpg;
          dh_prev[k] = dh[k] * z;
        }
        if (s.reset_after) {
          for (int k = 0; k < u; ++k) {
            const float rg = act[u + k];
            const double dpg = dxg[2 * u + k];
            dxg[u + k] =
                dpg * hr[k] * ActivationSlope(s.recurrent_activation, s.alpha, pre[u + k], rg);
            drec[k] = dxg[k];
            drec[u + k] = dxg[u + k];
            drec[2 * u + k] = dpg * rg;
          }
          AddOuter(h_prev, u, drec.data(), gu, gu_acc.data(), gu);
          AddVecMatT(drec.data(), recurrent_kernel, gu, u, gu, dh_prev.data());
        } else {
          // d(r h) = dpg Uh^T.
          std::fill(drh.begin(), drh.end(), 0.0);
          AddVecMatT(dxg + 2 * u, recurrent_kernel + 2 * u, gu, u, u, drh.data());
          for (int k = 0; k < u; ++k) {
            const float rg = act[u + k];
            dxg[u + k] = drh[k] * h_prev[k] *
                         ActivationSlope(s.recurrent_activation, s.alpha, pre[u + k], rg);
            dh_prev[k] += drh[k] * rg;
          }
          AddOuter(h_prev, u, dxg, 2 * u, gu_acc.data(), gu);
          AddOuter(hr, u, dxg + 2 * u, u, gu_acc.data() + 2 * u, gu);
          AddVecMatT(dxg, recurrent_kernel, gu, u, 2 * u, dh_prev.data());
        }
        if (has_bias && rec_bias) {
          for (int j = 0; j < gu; ++j) gb[gu + j] += drec[j];
        }
      }
      if (has_bias) {
        for (int j = 0; j < gu; ++j) gb[j] += dxg[j];
      }
      dh.swap(dh_prev);
    }
    // The input's share, for all steps in one pass: gW += x^T D, gx = D W^T.
    for (int t = 0; t < s.steps; ++t) {
      const double* dxg = dx_gates.data() + static_cast<int64_t>(t) * gu;
      const float* xt = xr + static_cast<int64_t>(t) * s.in;
      AddOuter(xt, s.in, dxg, gu, gk.data(), gu);
      if (gx != nullptr) {
        std::fill(gx_row.begin(), gx_row.end(), 0.0);
        AddVecMatT(dxg, kernel, gu, s.in, gu, gx_row.data());
        float* gxt = gx + (static_cast<int64_t>(r) * s.steps + t) * s.in;
        for (int k = 0; k < s.in; ++k) gxt[k] = static_cast<float>(gx_row[k]);
      }
    }
  }
  std::transform(gk.begin(), gk.end(), gkernel, [](double v) { return static_cast<float>(v); });
  std::transform(gu_acc.begin(), gu_acc.end(), grecurrent,
                 [](double v) { return static_cast<float>(v); });
  if (has_bias) {
    std::transform(gb.begin(), gb.end(), gbias, [](double v) { return static_cast<float>(v); });
  }
}

}  // namespace kernels
}  // namespace pscluster
