#include "compute/kernels/recurrent.h"

#include <algorithm>
#include <vector>

#include "compute/kernels/activation_math.h"
#include "compute/kernels/cpu_blas.h"
#include "compute/kernels/vector_math.h"

namespace pscluster {
namespace kernels {
namespace {

// Where a step's floats lie in `saved`: processed step p (go_backwards reads
// step steps - 1 - p) of example r at (p * n + r) * step, so that a step's
// states of the whole batch are one strided matrix for the GEMMs:
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

// C[m, n] (row stride ldc) += or = A[m, k] B[k, n] (row-major, strides lda,
// ldb), A or B transposed as asked: cpu_blas's sgemm.
void Gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
          bool add, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!add) {
      for (int i = 0; i < m; ++i)
        std::fill(c + static_cast<int64_t>(i) * ldc, c + i * ldc + n, 0.0f);
    }
    return;
  }
  CpuGemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, add ? 1.0f : 0.0f, c, ldc);
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
  const int u = l.u, gu = l.gu, width = static_cast<int>(l.step);
  const bool lstm = s.cell == RecurrentCell::kLstm;
  const bool has_bias = s.use_bias && bias != nullptr;
  const float* rec_bias = has_bias && !lstm && s.reset_after ? bias + gu : nullptr;
  const int64_t rows = static_cast<int64_t>(n) * s.steps;
  // The input's share of every gate for every step, in one GEMM: row
  // r * steps + t.
  std::vector<float> xw(static_cast<size_t>(rows * gu));
  Gemm(false, false, static_cast<int>(rows), gu, s.in, x, s.in, kernel, gu, false, xw.data(), gu);
  if (has_bias) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int j = 0; j < gu; ++j) xw[i * gu + j] += bias[j];
    }
  }
  const std::vector<float> zeros(static_cast<size_t>(n) * u, 0.0f);
  std::vector<float> rec(static_cast<size_t>(n) * gu), rh(static_cast<size_t>(n) * u);
  const float* h_prev = zeros.data();
  const float* c_prev = zeros.data();
  int ld = u;  // the previous states' row stride: u for the zeros, then width
  // The recurrent product's columns: every gate's, but a GRU without
  // reset_after multiplies (r h), not h, into its candidate's.
  const int rec_cols = !lstm && !s.reset_after ? 2 * u : gu;
  for (int p = 0; p < s.steps; ++p) {
    const int t = InputStep(s, p);
    float* sp = saved + static_cast<int64_t>(p) * n * width;
    Gemm(false, false, n, rec_cols, u, h_prev, ld, recurrent_kernel, gu, false, rec.data(), gu);
    for (int r = 0; r < n; ++r) {
      float* st = sp + static_cast<int64_t>(r) * width;
      float* pre = st + l.pre;
      float* act = st + l.act;
      float* h = st + l.h;
      const float* hp = h_prev + static_cast<int64_t>(r) * ld;
      const float* xt = xw.data() + (static_cast<int64_t>(r) * s.steps + t) * gu;
      float* rr = rec.data() + static_cast<int64_t>(r) * gu;
      if (mask.masked(r, s.steps, t)) {
        // Keras's RNN keeps the states (and repeats the previous output).
        std::fill(st, st + l.h, 0.0f);
        std::copy(hp, hp + u, h);
        if (lstm) std::copy(c_prev + static_cast<int64_t>(r) * ld, c_prev + r * ld + u, st + l.c);
        continue;
      }
      if (lstm) {
        // The gates' activations over arrays (kernels/vector_math.h):
        // i and f, then c's candidate, then o.
        const float* cp = c_prev + static_cast<int64_t>(r) * ld;
        for (int j = 0; j < gu; ++j) pre[j] = xt[j] + rr[j];
        ActivationArray(s.recurrent_activation, s.alpha, pre, act, 2 * u);
        ActivationArray(s.activation, s.alpha, pre + 2 * u, act + 2 * u, u);
        ActivationArray(s.recurrent_activation, s.alpha, pre + 3 * u, act + 3 * u, u);
        float* c = st + l.c;
        float* ac = st + l.ac;
        for (int k = 0; k < u; ++k) c[k] = act[u + k] * cp[k] + act[k] * act[2 * u + k];
        ActivationArray(s.activation, s.alpha, c, ac, u);
        for (int k = 0; k < u; ++k) h[k] = act[3 * u + k] * ac[k];
        continue;
      }
      // GRU: z and r from x W + b + h U (+ rb); reset_after keeps h Uh
      // (+ rbh) for the candidate, which then waits for its r.
      float* hr = st + l.hr;
      if (rec_bias != nullptr) {
        for (int j = 0; j < gu; ++j) rr[j] += rec_bias[j];
      }
      for (int j = 0; j < 2 * u; ++j) pre[j] = xt[j] + rr[j];
      ActivationArray(s.recurrent_activation, s.alpha, pre, act, 2 * u);
      const float* rg = act + u;
      for (int k = 0; k < u; ++k) hr[k] = s.reset_after ? rr[2 * u + k] : rg[k] * hp[k];
    }
    if (!lstm) {
      // The candidate: reset_after's r (h Uh + rbh), or (r h) Uh, one GEMM
      // for the batch.
      if (!s.reset_after) {
        Gemm(false, false, n, u, u, sp + l.hr, width, recurrent_kernel + 2 * u, gu, false,
             rh.data(), u);
      }
      for (int r = 0; r < n; ++r) {
        if (mask.masked(r, s.steps, t)) continue;
        float* st = sp + static_cast<int64_t>(r) * width;
        float* pre = st + l.pre;
        float* act = st + l.act;
        const float* hr = st + l.hr;
        const float* hp = h_prev + static_cast<int64_t>(r) * ld;
        const float* xt = xw.data() + (static_cast<int64_t>(r) * s.steps + t) * gu;
        for (int k = 0; k < u; ++k) {
          pre[2 * u + k] = xt[2 * u + k] + (s.reset_after ? act[u + k] * hr[k] : rh[r * u + k]);
        }
        ActivationArray(s.activation, s.alpha, pre + 2 * u, act + 2 * u, u);
        for (int k = 0; k < u; ++k) {
          st[l.h + k] = act[k] * hp[k] + (1.0f - act[k]) * act[2 * u + k];
        }
      }
    }
    if (s.return_sequences) {
      for (int r = 0; r < n; ++r) {
        const float* h = sp + static_cast<int64_t>(r) * width + l.h;
        std::copy(h, h + u, y + (static_cast<int64_t>(r) * s.steps + p) * u);
      }
    }
    h_prev = sp + l.h;
    c_prev = sp + l.c;
    ld = width;
  }
  if (!s.return_sequences) {
    for (int r = 0; r < n; ++r) {
      const float* h = h_prev + static_cast<int64_t>(r) * ld;
      std::copy(h, h + u, y + static_cast<int64_t>(r) * u);
    }
  }
}

void RecurrentBackward(int n, const RecurrentShape& s, const float* x, const float* kernel,
                       const float* recurrent_kernel, const float* bias, StepMask mask,
                       const float* saved, const float* gy, float* gx, float* gkernel,
                       float* grecurrent, float* gbias) {
  const Layout l = MakeLayout(s);
  const int u = l.u, gu = l.gu, width = static_cast<int>(l.step);
  const bool lstm = s.cell == RecurrentCell::kLstm;
  const bool has_bias = s.use_bias && bias != nullptr && gbias != nullptr;
  const bool reset_after = !lstm && s.reset_after;  // the bias's second row too
  const int64_t rows = static_cast<int64_t>(n) * s.steps;
  const std::vector<float> zeros(static_cast<size_t>(n) * u, 0.0f);
  // The gates' input gradients of every step (zeros where masked), row
  // r * steps + t: the input's share is one GEMM each way after the loop.
  // A step's rows, stride steps * gu, are also what multiplies the
  // recurrent kernel, but for reset_after, whose candidate column there is
  // r times it: `drec` holds that step's.
  std::vector<float> dxg(static_cast<size_t>(rows * gu), 0.0f);
  const int dxg_ld = s.steps * gu;
  std::vector<float> drec(reset_after ? static_cast<size_t>(n) * gu : 0);
  std::vector<float> dhr(static_cast<size_t>(n) * u);  // GRU v2: d(r h)
  std::vector<float> dh(static_cast<size_t>(n) * u, 0.0f), dc(static_cast<size_t>(n) * u, 0.0f);
  std::vector<float> dh_prev(static_cast<size_t>(n) * u);
  std::vector<double> gb(has_bias ? RecurrentBiasSize(s) : 0, 0.0);
  std::fill(grecurrent, grecurrent + static_cast<int64_t>(u) * gu, 0.0f);
  if (!s.return_sequences) std::copy(gy, gy + static_cast<int64_t>(n) * u, dh.begin());
  for (int p = s.steps - 1; p >= 0; --p) {
    const int t = InputStep(s, p);
    const float* sp = saved + static_cast<int64_t>(p) * n * width;
    const float* h_prev = p > 0 ? sp - static_cast<int64_t>(n) * width + l.h : zeros.data();
    const int ld = p > 0 ? width : u;
    float* dg_step = dxg.data() + static_cast<int64_t>(t) * gu;  // row r at r * dxg_ld
    // Example r's saved step, previous state and gates' gradients.
    struct Row {
      const float *st, *pre, *act, *hp;
      float* dg;
    };
    auto row = [&](int r) {
      const float* st = sp + static_cast<int64_t>(r) * width;
      return Row{st, st + l.pre, st + l.act, h_prev + static_cast<int64_t>(r) * ld,
                 dg_step + static_cast<int64_t>(r) * dxg_ld};
    };
    if (s.return_sequences) {
      for (int r = 0; r < n; ++r) {
        const float* g = gy + (static_cast<int64_t>(r) * s.steps + p) * u;
        for (int k = 0; k < u; ++k) dh[r * u + k] += g[k];
      }
    }
    if (reset_after) std::fill(drec.begin(), drec.end(), 0.0f);
    for (int r = 0; r < n; ++r) {
      float* dhp = dh_prev.data() + static_cast<int64_t>(r) * u;
      const float* dhr_row = dh.data() + static_cast<int64_t>(r) * u;
      // A masked step passes dh (and dc) back unchanged.
      if (mask.masked(r, s.steps, t)) {
        std::copy(dhr_row, dhr_row + u, dhp);
        continue;
      }
      const Row w = row(r);
      auto rslope = [&](int j) {
        return ActivationSlope(s.recurrent_activation, s.alpha, w.pre[j], w.act[j]);
      };
      const float* st = w.st;
      if (lstm) {
        const float* cp = p > 0 ? sp - static_cast<int64_t>(n) * width + r * width + l.c
                                : zeros.data() + static_cast<int64_t>(r) * u;
        const float* c = st + l.c;
        const float* ac = st + l.ac;
        float* dcr = dc.data() + static_cast<int64_t>(r) * u;
        for (int k = 0; k < u; ++k) {
          const float i = w.act[k], f = w.act[u + k], g = w.act[2 * u + k], o = w.act[3 * u + k];
          const float dct =
              dcr[k] + dhr_row[k] * o * ActivationSlope(s.activation, s.alpha, c[k], ac[k]);
          w.dg[k] = dct * g * rslope(k);
          w.dg[u + k] = dct * cp[k] * rslope(u + k);
          w.dg[2 * u + k] =
              dct * i * ActivationSlope(s.activation, s.alpha, w.pre[2 * u + k], w.act[2 * u + k]);
          w.dg[3 * u + k] = dhr_row[k] * ac[k] * rslope(3 * u + k);
          dcr[k] = dct * f;
          dhp[k] = 0.0f;
        }
        continue;
      }
      const float* hr = st + l.hr;
      float* dr = reset_after ? drec.data() + static_cast<int64_t>(r) * gu : nullptr;
      for (int k = 0; k < u; ++k) {
        const float z = w.act[k], g = w.act[2 * u + k];
        const float dpg =
            dhr_row[k] * (1.0f - z) * ActivationSlope(s.activation, s.alpha, w.pre[2 * u + k], g);
        w.dg[k] = dhr_row[k] * (w.hp[k] - g) * rslope(k);
        w.dg[2 * u + k] = dpg;  // r's gradient, without reset_after, after the GEMM below
        dhp[k] = dhr_row[k] * z;
        if (reset_after) {
          w.dg[u + k] = dpg * hr[k] * rslope(u + k);
          dr[k] = w.dg[k];
          dr[u + k] = w.dg[u + k];
          dr[2 * u + k] = dpg * w.act[u + k];
        }
      }
    }
    if (!lstm && !reset_after) {
      // d(r h) = dpg Uh^T for the batch; then r's gradient and h's through it.
      Gemm(false, true, n, u, u, dg_step + 2 * u, dxg_ld, recurrent_kernel + 2 * u, gu, false,
           dhr.data(), u);
      for (int r = 0; r < n; ++r) {
        if (mask.masked(r, s.steps, t)) continue;
        const Row w = row(r);
        for (int k = 0; k < u; ++k) {
          const float d = dhr[r * u + k];
          w.dg[u + k] =
              d * w.hp[k] *
              ActivationSlope(s.recurrent_activation, s.alpha, w.pre[u + k], w.act[u + k]);
          dh_prev[r * u + k] += d * w.act[u + k];
        }
      }
      // Uh's gradient: (r h)^T dpg; z's and r's columns: h^T [dz, dr].
      Gemm(true, false, u, u, n, sp + l.hr, width, dg_step + 2 * u, dxg_ld, true,
           grecurrent + 2 * u, gu);
      Gemm(true, false, u, 2 * u, n, h_prev, ld, dg_step, dxg_ld, true, grecurrent, gu);
      Gemm(false, true, n, u, 2 * u, dg_step, dxg_ld, recurrent_kernel, gu, true, dh_prev.data(),
           u);
    } else {
      const float* rec = reset_after ? drec.data() : dg_step;
      const int rec_ld = reset_after ? gu : dxg_ld;
      Gemm(true, false, u, gu, n, h_prev, ld, rec, rec_ld, true, grecurrent, gu);
      Gemm(false, true, n, u, gu, rec, rec_ld, recurrent_kernel, gu, true, dh_prev.data(), u);
    }
    if (has_bias) {
      for (int r = 0; r < n; ++r) {
        if (mask.masked(r, s.steps, t)) continue;
        const float* dg = row(r).dg;
        for (int j = 0; j < gu; ++j) gb[j] += dg[j];
        if (reset_after) {
          const float* dr = drec.data() + static_cast<int64_t>(r) * gu;
          for (int j = 0; j < gu; ++j) gb[gu + j] += dr[j];
        }
      }
    }
    dh.swap(dh_prev);
  }
  // The input's share, for all steps in one GEMM each: gW = x^T D, gx = D W^T.
  Gemm(true, false, s.in, gu, static_cast<int>(rows), x, s.in, dxg.data(), gu, false, gkernel, gu);
  if (gx != nullptr) {
    Gemm(false, true, static_cast<int>(rows), s.in, gu, dxg.data(), gu, kernel, gu, false, gx,
         s.in);
  }
  if (has_bias) {
    std::transform(gb.begin(), gb.end(), gbias, [](double v) { return static_cast<float>(v); });
  }
}

}  // namespace kernels
}  // namespace pscluster
