#include "compute/testing/float64_reference.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "compute/graph_plan.h"
#include "compute/kernels/dropout.h"

namespace pscluster {
namespace reference {
namespace {

constexpr double kEps32 = 1.0 / (1 << 23);

// An activation [batch, h, w, c] (NHWC): values, magnitudes, term count.
struct Act {
  int h = 1, w = 1, c = 0;
  std::vector<double> v, m;
  double n = 0;
  int64_t per() const { return int64_t{h} * w * c; }
  void Resize(int batch, int hh, int ww, int cc) {
    h = hh, w = ww, c = cc;
    v.assign(static_cast<size_t>(batch) * per(), 0.0);
    m.assign(v.size(), 0.0);
  }
};

// A variable's values and |values|, and where its gradient goes.
struct Var {
  std::vector<double> v, a;
  int64_t offset = -1;
};

// What a layer's backward pass needs beyond its input and output.
struct Saved {
  std::vector<int64_t> argmax;  // max pooling: input index per output
  // BatchNormalization, per channel and per element.
  std::vector<double> mean, mean_m, var, var_m, inv;
  std::vector<double> xhat, xhat_m;
  double stats_n = 0;
};

struct Window {
  int out_h = 0, out_w = 0, pad_top = 0, pad_left = 0;
};

Window WindowOf(const LayerSpec& l, int in_h, int in_w) {
  Window win;
  if (l.padding == Padding::kValid) {
    win.out_h = (in_h - l.window_h) / l.stride_h + 1;
    win.out_w = (in_w - l.window_w) / l.stride_w + 1;
  } else {
    win.out_h = (in_h + l.stride_h - 1) / l.stride_h;
    win.out_w = (in_w + l.stride_w - 1) / l.stride_w;
    win.pad_top = std::max((win.out_h - 1) * l.stride_h + l.window_h - in_h, 0) / 2;
    win.pad_left = std::max((win.out_w - 1) * l.stride_w + l.window_w - in_w, 0) / 2;
  }
  return win;
}

// A pooling layer's window: global average pooling is one window over the
// whole input.
LayerSpec PoolGeometry(const LayerSpec& l, int in_h, int in_w) {
  LayerSpec g = l;
  if (l.kind == LayerKind::kGlobalAvgPool2D) {
    g.window_h = g.stride_h = in_h;
    g.window_w = g.stride_w = in_w;
    g.padding = Padding::kValid;
  }
  return g;
}

class Reference {
 public:
  Reference(const ModelSpec& spec, const float* params, int batch, uint64_t seed, uint64_t step_key)
      : spec_(spec), params_(params), batch_(batch), seed_(seed), step_key_(step_key) {
    result_.grads.assign(spec.num_parameters, 0.0);
    result_.grad_scale.assign(spec.num_parameters, 0.0);
    result_.grad_terms.assign(spec.num_parameters, 0.0);
  }

  absl::StatusOr<ReferenceStep> Run(const float* images, const float* labels);

 private:
  // Run's three parts: the layers forward into acts_; the mean softmax
  // cross-entropy of the logits and its gradient there; the layers
  // backward from that gradient.
  absl::Status Forward(const float* images);
  Act SoftmaxLoss(const float* labels);
  absl::Status Backward(Act grad);
  // A softmax at the end is the loss's: the last layer gives logits.
  bool SoftmaxLast(size_t i) const {
    return i + 1 == spec_.layers.size() && spec_.layers[i].activation == Activation::kSoftmax;
  }

  absl::StatusOr<Var> Find(const LayerSpec& l, const char* what, bool required) const;
  void SetGrad(const Var& var, int64_t i, double g, double scale, double terms) {
    result_.grads[var.offset + i] = g;
    result_.grad_scale[var.offset + i] = scale;
    result_.grad_terms[var.offset + i] = terms;
  }

  void ConvForward(const LayerSpec& l, const Var& k, const Var* b, const Act& x, Act* y);
  void ConvBackward(const LayerSpec& l, const Var& k, const Var* b, const Act& x, const Act& dy,
                    Act* dx);
  void DenseForward(const Var& k, const Var* b, int units, const Act& x, Act* y);
  void DenseBackward(const Var& k, const Var* b, const Act& x, const Act& dy, Act* dx);
  void PoolForward(const LayerSpec& l, const Act& x, Act* y, Saved* s);
  void PoolBackward(const LayerSpec& l, const Act& x, const Act& dy, const Saved& s, Act* dx);
  absl::Status BnForward(const LayerSpec& l, const Act& x, Act* y, Saved* s);
  absl::Status BnBackward(const LayerSpec& l, const Act& dy, const Saved& s, Act* dx);
  static void ActivationForward(Activation a, Act* y);
  static void ActivationBackward(Activation a, const Act& y, Act* dy);
  void DropoutApply(float rate, size_t op, const Act& x, Act* y) const;

  const ModelSpec& spec_;
  const float* params_;
  const int batch_;
  const uint64_t seed_, step_key_;
  ReferenceStep result_;
  std::vector<Act> acts_;        // acts_[i] is layer i's input, acts_[i + 1] its output
  std::vector<Saved> saved_;     // per layer, what its backward needs
  std::vector<size_t> op_index_;  // per layer, its op's index (Dropout's key)
};

absl::StatusOr<Var> Reference::Find(const LayerSpec& l, const char* what, bool required) const {
  const std::string name = absl::StrCat(l.name, "/", what);
  for (const VariableSpec& v : spec_.variables) {
    if (v.name != name) continue;
    Var var;
    var.offset = v.offset;
    var.v.assign(params_ + v.offset, params_ + v.offset + v.size);
    var.a.resize(var.v.size());
    for (size_t i = 0; i < var.v.size(); ++i) var.a[i] = std::fabs(var.v[i]);
    return var;
  }
  if (!required) return Var();
  return absl::InvalidArgumentError(
      absl::StrCat("reference: model ", spec_.name, " has no variable ", name));
}

// y = x * k + b (HWIO kernel); magnitudes through |x| * |k| + |b|.
void Reference::ConvForward(const LayerSpec& l, const Var& k, const Var* b, const Act& x, Act* y) {
  const Window win = WindowOf(l, x.h, x.w);
  const int co = l.units, ci = x.c;
  y->Resize(batch_, win.out_h, win.out_w, co);
  y->n = x.n + l.window_h * l.window_w * ci + (b ? 1 : 0);
  for (int n = 0; n < batch_; ++n) {
    for (int oy = 0; oy < win.out_h; ++oy) {
      for (int ox = 0; ox < win.out_w; ++ox) {
        double* yv = &y->v[((int64_t{n} * win.out_h + oy) * win.out_w + ox) * co];
        double* ym = &y->m[((int64_t{n} * win.out_h + oy) * win.out_w + ox) * co];
        if (b) {
          for (int o = 0; o < co; ++o) yv[o] = b->v[o], ym[o] = b->a[o];
        }
        for (int ky = 0; ky < l.window_h; ++ky) {
          const int iy = oy * l.stride_h + ky - win.pad_top;
          if (iy < 0 || iy >= x.h) continue;
          for (int kx = 0; kx < l.window_w; ++kx) {
            const int ix = ox * l.stride_w + kx - win.pad_left;
            if (ix < 0 || ix >= x.w) continue;
            const int64_t at = ((int64_t{n} * x.h + iy) * x.w + ix) * ci;
            for (int i = 0; i < ci; ++i) {
              const double xv = x.v[at + i], xm = x.m[at + i];
              const double* kv = &k.v[((int64_t{ky} * l.window_w + kx) * ci + i) * co];
              const double* ka = &k.a[((int64_t{ky} * l.window_w + kx) * ci + i) * co];
              for (int o = 0; o < co; ++o) {
                yv[o] += xv * kv[o];
                ym[o] += xm * ka[o];
              }
            }
          }
        }
      }
    }
  }
}

void Reference::ConvBackward(const LayerSpec& l, const Var& k, const Var* b, const Act& x,
                             const Act& dy, Act* dx) {
  const Window win = WindowOf(l, x.h, x.w);
  const int co = l.units, ci = x.c;
  const int64_t positions = int64_t{batch_} * win.out_h * win.out_w;
  std::vector<double> dk(k.v.size(), 0.0), dk_m(k.v.size(), 0.0);
  if (dx) {
    dx->Resize(batch_, x.h, x.w, ci);
    dx->n = dy.n + l.window_h * l.window_w * co;
  }
  for (int n = 0; n < batch_; ++n) {
    for (int oy = 0; oy < win.out_h; ++oy) {
      for (int ox = 0; ox < win.out_w; ++ox) {
        const int64_t out_at = ((int64_t{n} * win.out_h + oy) * win.out_w + ox) * co;
        const double* gv = &dy.v[out_at];
        const double* gm = &dy.m[out_at];
        for (int ky = 0; ky < l.window_h; ++ky) {
          const int iy = oy * l.stride_h + ky - win.pad_top;
          if (iy < 0 || iy >= x.h) continue;
          for (int kx = 0; kx < l.window_w; ++kx) {
            const int ix = ox * l.stride_w + kx - win.pad_left;
            if (ix < 0 || ix >= x.w) continue;
            const int64_t at = ((int64_t{n} * x.h + iy) * x.w + ix) * ci;
            for (int i = 0; i < ci; ++i) {
              const int64_t kat = ((int64_t{ky} * l.window_w + kx) * ci + i) * co;
              const double xv = x.v[at + i], xm = x.m[at + i];
              double sv = 0, sm = 0;
              for (int o = 0; o < co; ++o) {
                dk[kat + o] += xv * gv[o];
                dk_m[kat + o] += xm * gm[o];
                sv += gv[o] * k.v[kat + o];
                sm += gm[o] * k.a[kat + o];
              }
              if (dx) dx->v[at + i] += sv, dx->m[at + i] += sm;
            }
          }
        }
      }
    }
  }
  const double terms = std::max(x.n, dy.n) + positions;
  for (size_t i = 0; i < dk.size(); ++i) SetGrad(k, i, dk[i], dk_m[i], terms);
  if (b) {
    for (int o = 0; o < co; ++o) {
      double sv = 0, sm = 0;
      for (int64_t p = 0; p < positions; ++p) sv += dy.v[p * co + o], sm += dy.m[p * co + o];
      SetGrad(*b, o, sv, sm, dy.n + positions);
    }
  }
}

void Reference::DenseForward(const Var& k, const Var* b, int units, const Act& x, Act* y) {
  const int64_t in = x.per();
  y->Resize(batch_, 1, 1, units);
  y->n = x.n + in + (b ? 1 : 0);
  for (int n = 0; n < batch_; ++n) {
    double* yv = &y->v[int64_t{n} * units];
    double* ym = &y->m[int64_t{n} * units];
    if (b) {
      for (int o = 0; o < units; ++o) yv[o] = b->v[o], ym[o] = b->a[o];
    }
    for (int64_t i = 0; i < in; ++i) {
      const double xv = x.v[n * in + i], xm = x.m[n * in + i];
      const double* kv = &k.v[i * units];
      const double* ka = &k.a[i * units];
      for (int o = 0; o < units; ++o) yv[o] += xv * kv[o], ym[o] += xm * ka[o];
    }
  }
}

void Reference::DenseBackward(const Var& k, const Var* b, const Act& x, const Act& dy, Act* dx) {
  const int64_t in = x.per();
  const int units = dy.c;
  std::vector<double> dk(k.v.size(), 0.0), dk_m(k.v.size(), 0.0);
  if (dx) {
    dx->Resize(batch_, x.h, x.w, x.c);
    dx->n = dy.n + units;
  }
  for (int n = 0; n < batch_; ++n) {
    const double* gv = &dy.v[int64_t{n} * units];
    const double* gm = &dy.m[int64_t{n} * units];
    for (int64_t i = 0; i < in; ++i) {
      const double xv = x.v[n * in + i], xm = x.m[n * in + i];
      double sv = 0, sm = 0;
      for (int o = 0; o < units; ++o) {
        dk[i * units + o] += xv * gv[o];
        dk_m[i * units + o] += xm * gm[o];
        sv += gv[o] * k.v[i * units + o];
        sm += gm[o] * k.a[i * units + o];
      }
      if (dx) dx->v[n * in + i] = sv, dx->m[n * in + i] = sm;
    }
  }
  const double terms = std::max(x.n, dy.n) + batch_;
  for (size_t i = 0; i < dk.size(); ++i) SetGrad(k, i, dk[i], dk_m[i], terms);
  if (b) {
    for (int o = 0; o < units; ++o) {
      double sv = 0, sm = 0;
      for (int n = 0; n < batch_; ++n) sv += dy.v[n * units + o], sm += dy.m[n * units + o];
      SetGrad(*b, o, sv, sm, dy.n + batch_);
    }
  }
}

// Max pooling keeps the argmax (the first of equal values); average pooling
// divides by the window's cells inside the input (Keras "same"); global
// average pooling is one window over the whole input.
void Reference::PoolForward(const LayerSpec& l, const Act& x, Act* y, Saved* s) {
  const bool global = l.kind == LayerKind::kGlobalAvgPool2D;
  const LayerSpec g = PoolGeometry(l, x.h, x.w);
  const Window win = WindowOf(g, x.h, x.w);
  const int c = x.c;
  y->Resize(batch_, win.out_h, win.out_w, c);
  const bool max = l.kind == LayerKind::kMaxPool2D;
  y->n = x.n + (max ? 0 : g.window_h * g.window_w);
  if (max) s->argmax.assign(y->v.size(), -1);
  for (int n = 0; n < batch_; ++n) {
    for (int oy = 0; oy < win.out_h; ++oy) {
      for (int ox = 0; ox < win.out_w; ++ox) {
        for (int ch = 0; ch < c; ++ch) {
          const int64_t out = ((int64_t{n} * win.out_h + oy) * win.out_w + ox) * c + ch;
          double best = -INFINITY, best_m = 0, sum = 0, sum_m = 0;
          int64_t arg = -1;
          int cells = 0;
          for (int ky = 0; ky < g.window_h; ++ky) {
            const int iy = oy * g.stride_h + ky - win.pad_top;
            if (iy < 0 || iy >= x.h) continue;
            for (int kx = 0; kx < g.window_w; ++kx) {
              const int ix = ox * g.stride_w + kx - win.pad_left;
              if (ix < 0 || ix >= x.w) continue;
              const int64_t at = ((int64_t{n} * x.h + iy) * x.w + ix) * c + ch;
              ++cells;
              sum += x.v[at], sum_m += x.m[at];
              best_m = std::max(best_m, x.m[at]);
              if (x.v[at] > best) best = x.v[at], arg = at;
            }
          }
          if (max) {
            y->v[out] = best, y->m[out] = best_m;
            s->argmax[out] = arg;
          } else {
            y->v[out] = sum / cells, y->m[out] = sum_m / cells;
          }
        }
      }
    }
  }
  if (global) y->h = y->w = 1;
}

void Reference::PoolBackward(const LayerSpec& l, const Act& x, const Act& dy, const Saved& s,
                             Act* dx) {
  dx->Resize(batch_, x.h, x.w, x.c);
  dx->n = dy.n + 1;
  if (l.kind == LayerKind::kMaxPool2D) {
    for (size_t out = 0; out < dy.v.size(); ++out) {
      dx->v[s.argmax[out]] += dy.v[out];
      dx->m[s.argmax[out]] += dy.m[out];
    }
    return;
  }
  const LayerSpec g = PoolGeometry(l, x.h, x.w);
  const Window win = WindowOf(g, x.h, x.w);
  const int c = x.c;
  for (int n = 0; n < batch_; ++n) {
    for (int oy = 0; oy < win.out_h; ++oy) {
      for (int ox = 0; ox < win.out_w; ++ox) {
        std::vector<int64_t> cells;
        for (int ky = 0; ky < g.window_h; ++ky) {
          const int iy = oy * g.stride_h + ky - win.pad_top;
          if (iy < 0 || iy >= x.h) continue;
          for (int kx = 0; kx < g.window_w; ++kx) {
            const int ix = ox * g.stride_w + kx - win.pad_left;
            if (ix >= 0 && ix < x.w) cells.push_back(((int64_t{n} * x.h + iy) * x.w + ix) * c);
          }
        }
        for (int ch = 0; ch < c; ++ch) {
          const int64_t out = ((int64_t{n} * win.out_h + oy) * win.out_w + ox) * c + ch;
          for (int64_t at : cells) {
            dx->v[at + ch] += dy.v[out] / cells.size();
            dx->m[at + ch] += dy.m[out] / cells.size();
          }
        }
      }
    }
  }
}

// Training-mode BatchNormalization over the last axis. The statistics'
// magnitudes allow for E[x^2] - mean^2 (cancellation) and for the error
// the inputs carry.
absl::Status Reference::BnForward(const LayerSpec& l, const Act& x, Act* y, Saved* s) {
  const int c = x.c;
  const int64_t rows = static_cast<int64_t>(batch_) * x.h * x.w;
  absl::StatusOr<Var> gamma = Find(l, "gamma", l.scale);
  absl::StatusOr<Var> beta = Find(l, "beta", l.center);
  absl::StatusOr<Var> mean_slot = Find(l, "moving_mean", true);
  absl::StatusOr<Var> var_slot = Find(l, "moving_variance", true);
  for (const auto* st : {&gamma, &beta, &mean_slot, &var_slot}) {
    if (!st->ok()) return st->status();
  }
  s->mean.assign(c, 0.0), s->mean_m.assign(c, 0.0);
  s->var.assign(c, 0.0), s->var_m.assign(c, 0.0), s->inv.assign(c, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int ch = 0; ch < c; ++ch) s->mean[ch] += x.v[r * c + ch], s->mean_m[ch] += x.m[r * c + ch];
  }
  for (int ch = 0; ch < c; ++ch) s->mean[ch] /= rows, s->mean_m[ch] /= rows;
  for (int64_t r = 0; r < rows; ++r) {
    for (int ch = 0; ch < c; ++ch) {
      const double d = x.v[r * c + ch] - s->mean[ch], xm = x.m[r * c + ch];
      s->var[ch] += d * d;
      s->var_m[ch] += xm * xm + 2 * std::fabs(d) * (xm + s->mean_m[ch]);
    }
  }
  s->stats_n = x.n + rows;
  const double eps = l.epsilon;  // the float the kernels use, widened
  for (int ch = 0; ch < c; ++ch) {
    s->var[ch] /= rows, s->var_m[ch] /= rows;
    s->inv[ch] = 1.0 / std::sqrt(s->var[ch] + eps);
    SetGrad(*mean_slot, ch, s->mean[ch], s->mean_m[ch], s->stats_n);
    SetGrad(*var_slot, ch, s->var[ch], s->var_m[ch], s->stats_n);
  }
  y->Resize(batch_, x.h, x.w, c);
  y->n = s->stats_n + 4;
  s->xhat.resize(x.v.size()), s->xhat_m.resize(x.v.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int ch = 0; ch < c; ++ch) {
      const int64_t i = r * c + ch;
      const double inv = s->inv[ch];
      const double xhat = (x.v[i] - s->mean[ch]) * inv;
      const double xhat_m =
          inv * (x.m[i] + s->mean_m[ch]) + std::fabs(xhat) * 0.5 * inv * inv * s->var_m[ch];
      s->xhat[i] = xhat, s->xhat_m[i] = xhat_m;
      const double g = l.scale ? gamma->v[ch] : 1.0, b = l.center ? beta->v[ch] : 0.0;
      y->v[i] = g * xhat + b;
      y->m[i] = std::fabs(g) * xhat_m + std::fabs(b);
    }
  }
  return absl::OkStatus();
}

absl::Status Reference::BnBackward(const LayerSpec& l, const Act& dy, const Saved& s, Act* dx) {
  const int c = dy.c;
  const int64_t rows = static_cast<int64_t>(batch_) * dy.h * dy.w;
  absl::StatusOr<Var> gamma = Find(l, "gamma", l.scale);
  absl::StatusOr<Var> beta = Find(l, "beta", l.center);
  if (!gamma.ok()) return gamma.status();
  if (!beta.ok()) return beta.status();
  std::vector<double> db(c, 0.0), db_m(c, 0.0), dg(c, 0.0), dg_m(c, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int ch = 0; ch < c; ++ch) {
      const int64_t i = r * c + ch;
      db[ch] += dy.v[i], db_m[ch] += dy.m[i];
      dg[ch] += dy.v[i] * s.xhat[i];
      dg_m[ch] += dy.m[i] * std::fabs(s.xhat[i]) + std::fabs(dy.v[i]) * s.xhat_m[i];
    }
  }
  const double db_n = dy.n + rows, dg_n = std::max(dy.n, s.stats_n) + rows;
  for (int ch = 0; ch < c; ++ch) {
    if (l.scale) SetGrad(*gamma, ch, dg[ch], dg_m[ch], dg_n);
    if (l.center) SetGrad(*beta, ch, db[ch], db_m[ch], db_n);
  }
  if (!dx) return absl::OkStatus();
  dx->Resize(batch_, dy.h, dy.w, c);
  dx->n = std::max(db_n, dg_n) + 3;
  for (int64_t r = 0; r < rows; ++r) {
    for (int ch = 0; ch < c; ++ch) {
      const int64_t i = r * c + ch;
      const double g = l.scale ? gamma->v[ch] : 1.0, inv = s.inv[ch];
      const double v = g * inv * (dy.v[i] - db[ch] / rows - s.xhat[i] * dg[ch] / rows);
      dx->v[i] = v;
      dx->m[i] = std::fabs(g) * inv *
                     (dy.m[i] + db_m[ch] / rows + std::fabs(s.xhat[i]) * dg_m[ch] / rows +
                      s.xhat_m[i] * std::fabs(dg[ch]) / rows) +
                 std::fabs(v) * 0.5 * inv * inv * s.var_m[ch];
    }
  }
  return absl::OkStatus();
}

// In place on a layer's output; the magnitude of tanh and sigmoid adds
// their own rounding (relative to the value).
void Reference::ActivationForward(Activation a, Act* y) {
  for (size_t i = 0; i < y->v.size(); ++i) {
    double& v = y->v[i];
    double& m = y->m[i];
    switch (a) {
      case Activation::kRelu:
        v = std::max(v, 0.0);
        break;
      case Activation::kTanh:
        v = std::tanh(v);
        m = m + std::fabs(v);
        break;
      case Activation::kSigmoid:
        v = 1.0 / (1.0 + std::exp(-v));
        m = 0.25 * m + v;
        break;
      default:
        break;
    }
  }
}

// dy (in place) becomes d(loss)/d(pre-activation), from the output y.
void Reference::ActivationBackward(Activation a, const Act& y, Act* dy) {
  for (size_t i = 0; i < dy->v.size(); ++i) {
    const double yv = y.v[i], ym = y.m[i], g = dy->v[i];
    switch (a) {
      case Activation::kRelu:
        if (!(yv > 0)) dy->v[i] = 0, dy->m[i] = 0;
        break;
      case Activation::kTanh:
        dy->v[i] = g * (1 - yv * yv);
        dy->m[i] = dy->m[i] * (1 - yv * yv) + std::fabs(g) * 2 * std::fabs(yv) * ym;
        break;
      case Activation::kSigmoid:
        dy->v[i] = g * yv * (1 - yv);
        dy->m[i] = dy->m[i] * yv * (1 - yv) + std::fabs(g) * std::fabs(1 - 2 * yv) * ym;
        break;
      default:
        break;
    }
  }
}

// Inverted dropout with the engines' mask (the same function of the key and
// of the element's index in the whole batch); also its own backward pass.
void Reference::DropoutApply(float rate, size_t op, const Act& x, Act* y) const {
  const uint64_t key = DropoutKey(seed_, step_key_, op);
  const uint32_t threshold = kernels::DropoutThreshold(rate);
  const double scale = 1.0 / (1.0 - static_cast<double>(rate));
  *y = x;
  y->n = x.n + 1;
  for (size_t i = 0; i < x.v.size(); ++i) {
    if (kernels::DropoutKeeps(key, static_cast<int64_t>(i), threshold)) {
      y->v[i] = x.v[i] * scale, y->m[i] = x.m[i] * scale;
    } else {
      y->v[i] = 0, y->m[i] = 0;
    }
  }
}

absl::Status Reference::Forward(const float* images) {
  const std::vector<LayerSpec>& layers = spec_.layers;
  acts_.assign(layers.size() + 1, Act());
  saved_.assign(layers.size(), Saved());
  op_index_.assign(layers.size(), 0);
  Act& in = acts_[0];
  in.Resize(batch_, spec_.input_height, spec_.input_width, spec_.input_channels);
  for (size_t i = 0; i < in.v.size(); ++i) in.v[i] = images[i], in.m[i] = std::fabs(images[i]);
  size_t op = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    const Act& x = acts_[i];
    Act* y = &acts_[i + 1];
    op_index_[i] = op;
    if (l.kind != LayerKind::kFlatten) ++op;
    switch (l.kind) {
      case LayerKind::kConv2D:
      case LayerKind::kDense: {
        absl::StatusOr<Var> k = Find(l, "kernel", true);
        if (!k.ok()) return k.status();
        absl::StatusOr<Var> b = Find(l, "bias", l.use_bias);
        if (!b.ok()) return b.status();
        if (l.kind == LayerKind::kConv2D) {
          ConvForward(l, *k, l.use_bias ? &*b : nullptr, x, y);
        } else {
          DenseForward(*k, l.use_bias ? &*b : nullptr, l.units, x, y);
        }
        if (!SoftmaxLast(i)) ActivationForward(l.activation, y);
        break;
      }
      case LayerKind::kMaxPool2D:
      case LayerKind::kAvgPool2D:
      case LayerKind::kGlobalAvgPool2D:
        PoolForward(l, x, y, &saved_[i]);
        break;
      case LayerKind::kFlatten:
        *y = x;
        y->c = x.per(), y->h = y->w = 1;
        break;
      case LayerKind::kDropout:
        DropoutApply(l.rate, op_index_[i], x, y);
        break;
      case LayerKind::kActivation:
        *y = x;
        if (!SoftmaxLast(i)) ActivationForward(l.activation, y);
        break;
      case LayerKind::kBatchNorm: {
        absl::Status st = BnForward(l, x, y, &saved_[i]);
        if (!st.ok()) return st;
        break;
      }
    }
  }
  return absl::OkStatus();
}

Act Reference::SoftmaxLoss(const float* labels) {
  const Act& z = acts_.back();
  const int k = z.c;
  Act dz;
  dz.Resize(batch_, 1, 1, k);
  dz.n = z.n + k;
  double loss = 0, loss_m = 0;
  result_.correct = 0;
  result_.top_gap_in_roundings.assign(batch_, 0.0);
  std::vector<double> p(k);
  for (int n = 0; n < batch_; ++n) {
    const double* zv = &z.v[int64_t{n} * k];
    const double* zm = &z.m[int64_t{n} * k];
    const int label = static_cast<int>(labels[n]);
    int top = 0;
    for (int j = 1; j < k; ++j) top = zv[j] > zv[top] ? j : top;
    int second = top == 0 ? 1 : 0;
    for (int j = 0; j < k; ++j) {
      if (j != top && zv[j] > zv[second]) second = j;
    }
    if (top == label) ++result_.correct;
    if (k > 1) {
      result_.top_gap_in_roundings[n] =
          (zv[top] - zv[second]) / (std::sqrt(z.n) * kEps32 * (zm[top] + zm[second]));
    }
    double sum = 0, pm = 0;
    for (int j = 0; j < k; ++j) sum += std::exp(zv[j] - zv[top]);
    for (int j = 0; j < k; ++j) p[j] = std::exp(zv[j] - zv[top]) / sum, pm += p[j] * zm[j];
    const double l = std::log(sum) + zv[top] - zv[label];
    loss += l / batch_;
    loss_m += (pm + zm[label] + std::fabs(l)) / batch_;
    for (int j = 0; j < k; ++j) {
      dz.v[int64_t{n} * k + j] = (p[j] - (j == label ? 1.0 : 0.0)) / batch_;
      dz.m[int64_t{n} * k + j] = (p[j] + (j == label ? 1.0 : 0.0) + p[j] * (zm[j] + pm)) / batch_;
    }
  }
  result_.loss = loss;
  result_.loss_scale = loss_m;
  result_.loss_terms = z.n + k + batch_;
  return dz;
}

absl::Status Reference::Backward(Act grad) {
  const std::vector<LayerSpec>& layers = spec_.layers;
  for (size_t i = layers.size(); i-- > 0;) {
    const LayerSpec& l = layers[i];
    const Act& x = acts_[i];
    const Act& y = acts_[i + 1];
    // Whether anything below has parameters (else dx is not needed).
    bool below = false;
    for (size_t j = 0; j < i; ++j) {
      below = below || layers[j].kind == LayerKind::kConv2D ||
              layers[j].kind == LayerKind::kDense || layers[j].kind == LayerKind::kBatchNorm;
    }
    Act dx;
    switch (l.kind) {
      case LayerKind::kConv2D:
      case LayerKind::kDense: {
        if (!SoftmaxLast(i)) ActivationBackward(l.activation, y, &grad);
        absl::StatusOr<Var> kv = Find(l, "kernel", true);
        absl::StatusOr<Var> b = Find(l, "bias", l.use_bias);
        const Var* bp = l.use_bias ? &*b : nullptr;
        if (l.kind == LayerKind::kConv2D) {
          ConvBackward(l, *kv, bp, x, grad, below ? &dx : nullptr);
        } else {
          DenseBackward(*kv, bp, x, grad, below ? &dx : nullptr);
        }
        break;
      }
      case LayerKind::kMaxPool2D:
      case LayerKind::kAvgPool2D:
      case LayerKind::kGlobalAvgPool2D:
        PoolBackward(l, x, grad, saved_[i], &dx);
        break;
      case LayerKind::kFlatten:
        dx = std::move(grad);
        dx.h = x.h, dx.w = x.w, dx.c = x.c;
        break;
      case LayerKind::kDropout:
        DropoutApply(l.rate, op_index_[i], grad, &dx);
        break;
      case LayerKind::kActivation:
        if (!SoftmaxLast(i)) ActivationBackward(l.activation, y, &grad);
        dx = std::move(grad);
        break;
      case LayerKind::kBatchNorm: {
        absl::Status st = BnBackward(l, grad, saved_[i], below ? &dx : nullptr);
        if (!st.ok()) return st;
        break;
      }
    }
    if (!below) break;
    grad = std::move(dx);
  }
  return absl::OkStatus();
}

absl::StatusOr<ReferenceStep> Reference::Run(const float* images, const float* labels) {
  if (absl::Status st = Forward(images); !st.ok()) return st;
  // dz, the loss's gradient at the logits, becomes each layer's output
  // gradient in turn.
  if (absl::Status st = Backward(SoftmaxLoss(labels)); !st.ok()) return st;
  return std::move(result_);
}

}  // namespace

absl::StatusOr<ReferenceStep> TrainStep(const ModelSpec& spec, const float* params,
                                        const float* images, const float* labels, int batch,
                                        uint64_t seed, uint64_t step_key) {
  if (batch < 1) return absl::InvalidArgumentError("reference: batch must be positive");
  if (spec.loss != LossKind::kSparseCategoricalCrossentropy) {
    return absl::InvalidArgumentError(
        "reference: it trains on sparse categorical cross-entropy only");
  }
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const std::vector<int>& in = spec.layers[i].inputs;
    if (!in.empty() && in != std::vector<int>{static_cast<int>(i) - 1}) {
      return absl::InvalidArgumentError(absl::StrCat("reference: layer ", spec.layers[i].name,
                                                     " is not in a chain; it runs chains only"));
    }
  }
  return Reference(spec, params, batch, seed, step_key).Run(images, labels);
}

}  // namespace reference
}  // namespace pscluster
