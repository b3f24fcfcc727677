#include "compute/graph_cpu_engine.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "compute/graph_merges.h"
#include "compute/graph_plan.h"
#include "compute/kernels/activation.h"
#include "compute/kernels/attention.h"
#include "compute/kernels/batch_norm.h"
#include "compute/kernels/convolution.h"
#include "compute/kernels/cpu_blas.h"
#include "compute/kernels/depthwise_convolution.h"
#include "compute/kernels/device.h"
#include "compute/kernels/dropout.h"
#include "compute/kernels/embedding.h"
#include "compute/kernels/layer_norm.h"
#include "compute/kernels/loss_head.h"
#include "compute/kernels/pooling.h"
#include "compute/kernels/recurrent.h"
#include "compute/kernels/regularizer.h"
#include "compute/kernels/rescaling.h"
#include "compute/kernels/reshaping.h"
#include "compute/kernels/softmax.h"
#include "compute/kernels/window.h"

namespace pscluster {

using kernels::CpuDevice;

namespace {

// One slice's gradients through one op other than BatchNormalization: its
// `n` examples; `gy`, the gradient at the op's output with the op's
// activation's gradient applied; `gx`, where the gradient at its input goes,
// written only when `dx_wanted` (some op below has parameters); `pg`, the
// slice's gradient of the whole flat parameter vector.
struct SliceGrads {
  int n;
  const float* gy;
  float* gx;
  bool dx_wanted;
  float* pg;
};

// `x`: the op's input in the forward; `scratch`: ConvScratchFloats floats.
void BackwardConv2D(const GraphOp& op, const float* params, const float* x, float* scratch,
                    const SliceGrads& g) {
  kernels::WindowShape w = op.win;
  w.batch = g.n;
  kernels::ConvBackward(w, x, params + op.kernel, g.gy, /*accumulate=*/op.accumulate_params,
                        g.pg + op.kernel, op.bias >= 0 ? g.pg + op.bias : nullptr, scratch,
                        g.dx_wanted ? g.gx : nullptr);
}

// `argmax`: where the forward found each output's maximum.
void BackwardMaxPool2D(const GraphOp& op, const int64_t* argmax, const SliceGrads& g) {
  if (g.dx_wanted) {
    kernels::WindowShape w = op.win;
    w.batch = g.n;
    kernels::MaxPoolGeneralBackward(w, g.gy, argmax, g.gx);
  }
}

void BackwardAvgPool2D(const GraphOp& op, const SliceGrads& g) {
  if (g.dx_wanted) {
    kernels::WindowShape w = op.win;
    w.batch = g.n;
    kernels::AvgPoolGeneralBackward(w, g.gy, g.gx);
  }
}

// Dense over `n` examples' dense_rows rows each: y = x kernel + bias.
void ForwardDense(const GraphOp& op, const float* params, const float* x, int n, float* y) {
  const int rows = n * op.dense_rows;
  kernels::CpuGemm(false, false, rows, op.dense_out, op.dense_in, 1.0f, x, op.dense_in,
                   params + op.kernel, op.dense_out, 0.0f, y, op.dense_out);
  if (op.bias < 0) return;
  for (int r = 0; r < rows; ++r) {
    float* row = y + int64_t{r} * op.dense_out;
    for (int o = 0; o < op.dense_out; ++o) row[o] += params[op.bias + o];
  }
}

// `x`: the slice's input to the layer.
void BackwardDense(const GraphOp& op, const float* params, const float* x,
                   const SliceGrads& g) {
  const int n = g.n * op.dense_rows;
  kernels::CpuGemm(true, false, op.dense_in, op.dense_out, n, 1.0f, x, op.dense_in, g.gy,
                   op.dense_out, op.accumulate_params ? 1.0f : 0.0f, g.pg + op.kernel,
                   op.dense_out);
  if (op.bias >= 0) {
    float* db = g.pg + op.bias;
    for (int r = 0; r < n; ++r) {
      const float* row = g.gy + int64_t{r} * op.dense_out;
      for (int o = 0; o < op.dense_out; ++o) db[o] += row[o];
    }
  }
  if (g.dx_wanted) {
    kernels::CpuGemm(false, true, n, op.dense_in, op.dense_out, 1.0f, g.gy, op.dense_out,
                     params + op.kernel, op.dense_out, 0.0f, g.gx, op.dense_in);
  }
}

// `first`: the slice's first example in the batch; `key`: the op's masks'.
void BackwardDropout(const GraphOp& op, int first, uint64_t key, const SliceGrads& g) {
  const CpuDevice d;
  if (g.dx_wanted && op.rate > 0.0f) {
    kernels::DropoutBackward<CpuDevice>()(
        d, {first * op.out_size, g.n * op.out_size, op.rate, key}, g.gy, g.gx);
  } else if (g.dx_wanted) {
    std::copy(g.gy, g.gy + g.n * op.out_size, g.gx);
  }
}

// to[e] += from[e], e < n.
void AddTo(int64_t n, const float* from, float* to) {
  for (int64_t e = 0; e < n; ++e) to[e] += from[e];
}

// An Activation layer: its activation's gradient is all it adds.
void BackwardActivationLayer(const GraphOp& op, const SliceGrads& g) {
  if (g.dx_wanted) std::copy(g.gy, g.gy + g.n * op.out_size, g.gx);
}

// DepthwiseConv2D. The kernel overwrites its gradients: they go through
// the scratch and are added to the slice's (a shared layer's other uses).
void BackwardDepthwiseConv2D(const GraphOp& op, const float* params, const float* x,
                             float* scratch, const SliceGrads& g) {
  kernels::WindowShape w = op.win;
  w.batch = g.n;
  const int64_t kernel = int64_t{w.window_h} * w.window_w * w.out_c;
  float* dw = scratch;
  float* db = op.bias >= 0 ? dw + kernel : nullptr;
  kernels::DepthwiseConvBackward(w, x, params + op.kernel, g.gy, dw, db, g.gx);
  AddTo(kernel, dw, g.pg + op.kernel);
  if (db != nullptr) AddTo(w.out_c, db, g.pg + op.bias);
}

// The floats of an LSTM's or GRU's variables: kernel, recurrent kernel, bias.
int64_t RecurrentParams(const kernels::RecurrentShape& r) {
  const int64_t gates = int64_t{kernels::RecurrentGates(r)} * r.units;
  return (r.in + r.units) * gates + (r.use_bias ? kernels::RecurrentBiasSize(r) : 0);
}

// An LSTM's or GRU's gradients, made in `scratch` (RecurrentParams floats)
// and added to the slice's: a shared layer's ops each add theirs.
void BackwardRecurrent(const GraphOp& op, const float* params, const float* x,
                       kernels::StepMask mask, const float* saved, float* scratch,
                       const SliceGrads& g) {
  const kernels::RecurrentShape& r = op.recurrent;
  const int64_t gates = int64_t{kernels::RecurrentGates(r)} * r.units;
  float* gkernel = scratch;
  float* grecurrent = gkernel + r.in * gates;
  float* gbias = op.bias >= 0 ? grecurrent + r.units * gates : nullptr;
  kernels::RecurrentBackward(g.n, r, x, params + op.kernel, params + op.recurrent_kernel,
                             op.bias >= 0 ? params + op.bias : nullptr, mask, saved, g.gy,
                             g.dx_wanted ? g.gx : nullptr, gkernel, grecurrent, gbias);
  AddTo(r.in * gates, gkernel, g.pg + op.kernel);
  AddTo(r.units * gates, grecurrent, g.pg + op.recurrent_kernel);
  if (gbias != nullptr) AddTo(kernels::RecurrentBiasSize(r), gbias, g.pg + op.bias);
}

// LayerNormalization, from the forward's row means and 1/std (`norms`):
// gamma's and beta's gradients through the scratch, as DepthwiseConv2D's.
void BackwardLayerNorm(const GraphOp& op, const float* params, const float* x,
                       const float* norms, float* scratch, const SliceGrads& g) {
  const int64_t rows = int64_t{g.n} * op.pixels;
  float* dgamma = op.gamma >= 0 ? scratch : nullptr;
  float* dbeta = op.beta >= 0 ? scratch + op.channels : nullptr;
  kernels::LayerNormBackward(rows, op.channels, x, g.gy, norms, norms + rows,
                             op.gamma >= 0 ? params + op.gamma : nullptr, dgamma, dbeta, g.gx);
  if (dgamma != nullptr) AddTo(op.channels, dgamma, g.pg + op.gamma);
  if (dbeta != nullptr) AddTo(op.channels, dbeta, g.pg + op.beta);
}

}  // namespace

// A planned op and, for BatchNormalization, this step's statistics and, in
// training, the backward's sums.
struct GraphCpuEngine::Op : GraphOp {
  std::vector<float> batch_mean, batch_var;
  std::vector<double> sum_dy, sum_dy_xhat;
  // A convolution read by a BatchNormalization: that op, whose training
  // sums the convolution adds up as it writes its output (-1: none); the
  // BatchNormalization: whether its input's op does so.
  int sums_for = -1;
  bool sums_from_input = false;
};

// One thread's share of the batch and its buffers.
struct GraphCpuEngine::Slice {
  int first = 0, count = 0;            // examples of the batch
  std::vector<std::vector<float>> acts;  // output of op i, count * out_size
  std::vector<std::vector<int64_t>> argmax;  // max pooling ops
  std::vector<std::vector<float>> counts;    // global max pooling: ties per channel
  std::vector<std::vector<float>> norms;     // LayerNormalization: rows' means, then 1/std
  std::vector<std::vector<float>> saved;     // LSTM, GRU: what the forward keeps
  // A DepthwiseConv2D's, LayerNormalization's, LSTM's or GRU's gradient.
  std::vector<float> param_scratch;
  std::vector<std::vector<float>> grad_slots;  // GradSlotSizes, count * size
  std::vector<float> scratch;       // an input gradient to add
  std::vector<float> conv_scratch;  // a convolution's tile of columns
  std::vector<float> grads;  // slices after the first: their own
  std::vector<std::vector<double>> sums;  // BN partial sums (2 * channels)
  double loss = 0;
  int correct = 0;
  int64_t bad_id = -1;  // an Embedding's forward: the slice's first id out of range
};


absl::StatusOr<std::unique_ptr<GraphCpuEngine>> GraphCpuEngine::Create(
    const ModelSpec& spec, int max_batch, int num_threads, uint64_t seed,
    std::function<void(int, const std::function<void(int)>&)> run_on_threads) {
  absl::StatusOr<std::vector<GraphOp>> planned = PlanGraphOps(spec);
  if (!planned.ok()) return planned.status();
  const std::vector<int64_t> slot_sizes = GradSlotSizes(*planned);
  std::unique_ptr<GraphCpuEngine> net(new GraphCpuEngine);
  for (GraphOp& planned_op : *planned) {
    Op op;
    static_cast<GraphOp&>(op) = std::move(planned_op);
    op.batch_mean.resize(op.channels);
    op.batch_var.resize(op.channels);
    op.sum_dy.resize(op.channels);
    op.sum_dy_xhat.resize(op.channels);
    net->ops_.push_back(std::move(op));
  }
  for (size_t j = 0; j < net->ops_.size(); ++j) {
    Op& bn = net->ops_[j];
    if (bn.kind != LayerKind::kBatchNorm || bn.inputs[0] == kModelInput) continue;
    Op& conv = net->ops_[bn.inputs[0]];
    if (conv.kind == LayerKind::kConv2D && !conv.has_act && conv.sums_for < 0) {
      conv.sums_for = static_cast<int>(j);
      bn.sums_from_input = true;
    }
  }
  // A shared layer's variables are finished by its first op (the last
  // whose backward runs): only that op lists them.
  std::vector<std::vector<int64_t>> offsets;
  for (const Op& op : net->ops_) {
    offsets.push_back(op.owns_variables
                          ? std::vector<int64_t>{op.kernel, op.recurrent_kernel, op.bias, op.gamma,
                                                 op.beta, op.mean, op.var}
                          : std::vector<int64_t>{});
  }
  net->layout_ = PlanGradientLayout(spec, offsets);
  net->spec_ = spec;
  net->max_batch_ = max_batch;
  net->threads_ = std::max(1, std::min(num_threads, max_batch));
  net->seed_ = seed;
  net->run_ = std::move(run_on_threads);
  const int share = (max_batch + net->threads_ - 1) / net->threads_;
  int64_t widest = spec.num_classes;
  for (const Op& op : net->ops_) widest = std::max({widest, op.in_size, op.out_size});
  for (int t = 0; t < net->threads_; ++t) {
    auto s = std::make_unique<Slice>();
    for (const Op& op : net->ops_) {
      s->acts.emplace_back(share * op.out_size);
      s->argmax.emplace_back(op.kind == LayerKind::kMaxPool2D ? share * op.out_size : 0);
      s->counts.emplace_back(op.kind == LayerKind::kGlobalMaxPool2D ? share * op.channels : 0);
      s->norms.emplace_back(op.kind == LayerKind::kLayerNorm ? 2 * share * op.pixels : 0);
      s->saved.emplace_back(
          IsRecurrent(op.kind) ? share * kernels::RecurrentSavedPerExample(op.recurrent) : 0);
      s->sums.emplace_back(2 * op.channels);
    }
    int64_t cols = 0, params = 0;
    for (const Op& op : net->ops_) {
      if (op.kind == LayerKind::kConv2D) {
        kernels::WindowShape w = op.win;
        w.batch = share;
        cols = std::max(cols, kernels::ConvScratchFloats(w));
      }
      if (op.kind == LayerKind::kDepthwiseConv2D) {
        params = std::max(params, op.win.window_h * op.win.window_w * op.win.out_c +
                                      int64_t{op.win.out_c});
      }
      if (op.kind == LayerKind::kLayerNorm) params = std::max(params, 2 * int64_t{op.channels});
      if (IsRecurrent(op.kind)) params = std::max(params, RecurrentParams(op.recurrent));
    }
    s->param_scratch.resize(params);
    s->conv_scratch.resize(cols);
    for (int64_t size : slot_sizes) s->grad_slots.emplace_back(share * size);
    s->scratch.resize(share * widest);
    if (t > 0) s->grads.resize(spec.num_parameters);
    net->slices_.push_back(std::move(s));
  }
  return net;
}

GraphCpuEngine::~GraphCpuEngine() = default;

void GraphCpuEngine::SplitBatch(int batch, int threads) {
  for (int t = 0; t < threads; ++t) {
    const int base = batch / threads, extra = batch % threads;
    slices_[t]->first = t * base + std::min(t, extra);
    slices_[t]->count = base + (t < extra ? 1 : 0);
  }
}

const float* GraphCpuEngine::OpInput(int i, const Slice& s, const float* images,
                                     size_t k) const {
  const int j = ops_[i].inputs[k];
  const int64_t pixels = int64_t{spec_.input_height} * spec_.input_width * spec_.input_channels;
  return j == kModelInput ? images + s.first * pixels : s.acts[j].data();
}

kernels::StepMask GraphCpuEngine::StepMaskOf(int op, const Slice& s, const float* images) const {
  if (op < 0) return kernels::StepMask();
  return kernels::StepMask{OpInput(op, s, images), ops_[op].padding_id};
}

absl::Status GraphCpuEngine::Forward(const float* params, const float* images, int batch,
                                     bool training, uint64_t step_key, float* grads) {
  const int threads = std::min(threads_, batch);
  SplitBatch(batch, threads);
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (training && params_wait_ && !layout_.ranges[i].empty()) params_wait_(layout_.params_to[i]);
    if (ops_[i].kind == LayerKind::kBatchNorm) {
      ForwardBatchNorm(i, params, images, batch, threads, training, grads);
    } else {
      ForwardOp(i, params, images, threads, training, step_key);
    }
    if (ops_[i].kind == LayerKind::kEmbedding) {
      if (absl::Status s = CheckIds(i, images, threads); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status GraphCpuEngine::CheckIds(int i, const float* images, int threads) const {
  const Op& op = ops_[i];
  for (int t = 0; t < threads; ++t) {
    const Slice& s = *slices_[t];
    if (s.bad_id < 0) continue;
    const int64_t example = s.first + s.bad_id / op.pixels;
    const float id = OpInput(i, s, images)[s.bad_id];
    // DataLoss: the data does not fit the model, and the worker exits
    // kExitBadData (a restart changes nothing).
    return absl::DataLossError(absl::StrCat(
        "layer '", op.name, "' (Embedding): id ", id, " (position ", s.bad_id % op.pixels,
        " of example ", example, " of the batch) is outside [0, input_dim = ", op.dense_in,
        ")"));
  }
  return absl::OkStatus();
}

void GraphCpuEngine::ForwardBatchNorm(int i, const float* params, const float* images,
                                      int batch, int threads, bool training, float* grads) {
  const CpuDevice d;
  Op& op = ops_[i];
  const int c = op.channels;
  const float* mean = params + op.mean;
  const float* var = params + op.var;
  if (training && !op.sums_from_input) {
    run_(threads, [&](int t) {
      Slice& s = *slices_[t];
      std::fill(s.sums[i].begin(), s.sums[i].end(), 0.0);
      kernels::BatchNormSums<CpuDevice>()(d, {int64_t{s.count} * op.pixels, c},
                                          OpInput(i, s, images), s.sums[i].data(),
                                          s.sums[i].data() + c);
    });
  }
  if (training) {
    const double rows = static_cast<double>(batch) * op.pixels;
    for (int ch = 0; ch < c; ++ch) {
      double sum = 0, sq = 0;
      for (int t = 0; t < threads; ++t) {
        sum += slices_[t]->sums[i][ch];
        sq += slices_[t]->sums[i][c + ch];
      }
      const double m = sum / rows;
      op.batch_mean[ch] = static_cast<float>(m);
      op.batch_var[ch] = static_cast<float>(std::max(sq / rows - m * m, 0.0));
    }
    mean = op.batch_mean.data();
    var = op.batch_var.data();
    if (grads != nullptr) {
      std::copy(op.batch_mean.begin(), op.batch_mean.end(), grads + op.mean);
      std::copy(op.batch_var.begin(), op.batch_var.end(), grads + op.var);
    }
  }
  // A ReLU fused into the layer (graph_plan.h) runs in its passes.
  const float* gamma = op.gamma >= 0 ? params + op.gamma : nullptr;
  const float* beta = op.beta >= 0 ? params + op.beta : nullptr;
  run_(threads, [&](int t) {
    Slice& s = *slices_[t];
    const kernels::BatchNormShape shape{int64_t{s.count} * op.pixels, c};
    float* y = s.acts[i].data();
    if (op.has_act && op.act == kernels::ActivationFn::kRelu) {
      kernels::BatchNormReluForward(shape, OpInput(i, s, images), mean, var, gamma, beta,
                                    op.epsilon, y);
      return;
    }
    kernels::BatchNormForward<CpuDevice>()(d, shape, OpInput(i, s, images), mean, var, gamma,
                                           beta, op.epsilon, y);
    if (op.has_act) {
      kernels::ActivationForward<CpuDevice>()(d, int64_t{s.count} * op.out_size, op.act, y);
    }
  });
}

void GraphCpuEngine::ForwardWindowed(int i, const float* params, bool training, const float* x,
                                     Slice& s) {
  const Op& op = ops_[i];
  float* y = s.acts[i].data();
  kernels::WindowShape w = op.win;
  w.batch = s.count;
  switch (op.kind) {
    case LayerKind::kConv2D: {
      double* sums = nullptr;  // the next BatchNormalization's, in training
      if (training && op.sums_for >= 0) {
        std::vector<double>& bn_sums = s.sums[op.sums_for];
        std::fill(bn_sums.begin(), bn_sums.end(), 0.0);
        sums = bn_sums.data();
      }
      kernels::ConvForward(w, x, params + op.kernel, op.bias >= 0 ? params + op.bias : nullptr,
                           s.conv_scratch.data(), y, sums);
      break;
    }
    case LayerKind::kMaxPool2D:
      kernels::MaxPoolGeneralForward(w, x, y, s.argmax[i].data());
      break;
    case LayerKind::kAvgPool2D:
      kernels::AvgPoolGeneralForward(w, x, y);
      break;
    default:  // kDepthwiseConv2D
      kernels::DepthwiseConvForward(w, x, params + op.kernel,
                                    op.bias >= 0 ? params + op.bias : nullptr, y);
      break;
  }
}

void GraphCpuEngine::ForwardOp(int i, const float* params, const float* images, int threads,
                               bool training, uint64_t step_key) {
  const CpuDevice d;
  const Op& op = ops_[i];
  run_(threads, [&](int t) {
    Slice& s = *slices_[t];
    const float* x = OpInput(i, s, images);
    float* y = s.acts[i].data();
    const int n = s.count;
    switch (op.kind) {
      case LayerKind::kConv2D:
      case LayerKind::kMaxPool2D:
      case LayerKind::kAvgPool2D:
      case LayerKind::kDepthwiseConv2D:
        ForwardWindowed(i, params, training, x, s);
        break;
      case LayerKind::kGlobalAvgPool2D:
        if (op.mask_from < 0) {
          kernels::GlobalAvgPoolForward(n, op.pixels, op.channels, x, y);
        } else {
          kernels::MaskedGlobalAvgPoolForward(n, op.pixels, op.channels,
                                              OpInput(op.mask_from, s, images),
                                              ops_[op.mask_from].padding_id, x, y);
        }
        break;
      case LayerKind::kEmbedding: {
        // Out-of-range ids are an error (CheckIds), never clamped.
        const int64_t ids = int64_t{n} * op.pixels;
        const bool padding = op.padding_id < 0;  // a window's: -(row + 1)
        s.bad_id = kernels::FirstBadId(ids, x, op.dense_in, padding);
        if (s.bad_id < 0) {
          kernels::EmbeddingForward(ids, x, params + op.kernel, op.dense_out, y, padding);
        }
        break;
      }
      case LayerKind::kDense:
        ForwardDense(op, params, x, n, y);
        break;
      case LayerKind::kDropout:
        if (training && op.rate > 0.0f) {
          kernels::DropoutForward<CpuDevice>()(
              d, {s.first * op.out_size, n * op.out_size, op.rate,
                  DropoutKey(seed_, step_key, op.key_index)},
              x, y);
        } else {
          std::copy(x, x + n * op.out_size, y);
        }
        break;
      case LayerKind::kActivation:
        if (op.act_xy) {
          kernels::ActivationForwardX(n * op.out_size, op.act, op.alpha, x, y);
        } else {
          std::copy(x, x + n * op.out_size, y);
        }
        break;
      case LayerKind::kZeroPadding2D: {
        kernels::PaddingShape p = op.pad;
        p.batch = n;
        kernels::ZeroPad2DForward(p, x, y);
        break;
      }
      case LayerKind::kGlobalMaxPool2D:
        kernels::GlobalMaxPoolForward(n, op.pixels, op.channels, x, y, s.counts[i].data());
        break;
      case LayerKind::kRescaling:
        kernels::RescaleForward(n * op.out_size, op.rescale, op.reshift, x, y);
        break;
      case LayerKind::kInputSlice:
        for (int r = 0; r < n; ++r) {
          const float* from = x + r * op.in_size + op.slice_at;
          std::copy(from, from + op.out_size, y + r * op.out_size);
        }
        break;
      case LayerKind::kSoftmax:
        kernels::SoftmaxRowsForward(int64_t{n} * op.pixels, op.channels, x, y);
        break;
      case LayerKind::kLstm:
      case LayerKind::kGru:
        kernels::RecurrentForward(n, op.recurrent, x, params + op.kernel,
                                  params + op.recurrent_kernel,
                                  op.bias >= 0 ? params + op.bias : nullptr,
                                  StepMaskOf(op.mask_from, s, images), y, s.saved[i].data());
        break;
      case LayerKind::kLayerNorm: {
        const int64_t rows = int64_t{n} * op.pixels;
        kernels::LayerNormForward(rows, op.channels, x,
                                  op.gamma >= 0 ? params + op.gamma : nullptr,
                                  op.beta >= 0 ? params + op.beta : nullptr, op.epsilon,
                                  s.norms[i].data(), s.norms[i].data() + rows, y);
        break;
      }
      default:
        if (IsMerge(op.kind)) {
          std::vector<const float*> xs;
          for (size_t k = 0; k < op.inputs.size(); ++k) xs.push_back(OpInput(i, s, images, k));
          if (op.kind == LayerKind::kAttention) {
            kernels::AttentionForward(n, op.attention, xs[0], xs.back(), xs[1],
                                      StepMaskOf(op.query_mask_from, s, images),
                                      StepMaskOf(op.mask_from, s, images), y);
          } else {
            ForwardMerge(op, xs, n, y);
          }
        }
        break;
    }
    if (op.has_act && !op.act_xy) {
      kernels::ActivationForward<CpuDevice>()(d, n * op.out_size, op.act, y);
    }
  });
}

void GraphCpuEngine::Loss(const float* params, const float* targets, int batch,
                          bool want_grad, double* loss_sum, int* correct, float* outputs) {
  const int threads = std::min(threads_, batch);
  const int classes = spec_.num_classes;
  const LossSpec head = LossSpecOf(spec_);
  const int per = TargetsPerExample(head, classes);
  const size_t last = ops_.size() - 1;
  run_(threads, [&](int t) {
    Slice& s = *slices_[t];
    s.loss = 0;
    s.correct = 0;
    kernels::CpuLossHead(
        head, s.count, classes, s.acts[last].data(), targets + int64_t{s.first} * per, 1.0f / batch,
        want_grad ? s.grad_slots[ops_[last].grad_slot].data() : nullptr,
        outputs == nullptr ? nullptr : outputs + int64_t{s.first} * classes, &s.loss, &s.correct);
  });
  double loss = 0;
  int right = 0;
  for (int t = 0; t < threads; ++t) {
    loss += slices_[t]->loss;
    right += slices_[t]->correct;
  }
  for (const Op& op : ops_) {
    for (const GraphOp::Penalty& p : op.penalties) {
      loss += batch * kernels::RegularizerLoss(p.size, p.l1, p.l2, params + p.offset);
    }
  }
  *loss_sum = loss;
  *correct = right;
}

void GraphCpuEngine::Backward(const float* params, const float* images, int batch,
                              uint64_t step_key, float* grads) {
  const int threads = std::min(threads_, batch);
  // Slice t's gradient of the parameters goes to grads (t = 0) or its own.
  run_(threads, [&](int t) {
    Slice& s = *slices_[t];
    float* g = t == 0 ? grads : s.grads.data();
    std::fill(g, g + spec_.num_parameters, 0.0f);
  });
  // written[i]: op i's gradient slot holds this step's gradient at its
  // output (the first op reading it wrote it; the others add to it).
  std::vector<bool> written(ops_.size(), false);
  written.back() = true;  // the loss's
  for (int i = static_cast<int>(ops_.size()) - 1; i >= 0; --i) {
    if (ops_[i].grad_slot >= 0 && written[i]) {
      if (ops_[i].kind == LayerKind::kBatchNorm) {
        BackwardBatchNorm(i, params, images, batch, threads, &written);
      } else {
        BackwardOp(i, params, images, threads, step_key, grads, &written);
      }
    }
    // Ops whose gradient nothing wants have nothing to train, but a BN
    // layer's batch statistics still go to its moving statistics.
    FinishOp(i, params, threads, grads);
  }
}

float* GraphCpuEngine::GradOf(int i, Slice& s) {
  return s.grad_slots[ops_[i].grad_slot].data();
}

float* GraphCpuEngine::InputGradTarget(int i, size_t k, Slice& s,
                                       const std::vector<bool>& written) {
  const int j = ops_[i].inputs[k];
  if (!ops_[i].input_wants_grad[k]) return nullptr;
  return written[j] ? s.scratch.data() : GradOf(j, s);
}

void GraphCpuEngine::AddInputGrad(int i, size_t k, Slice& s,
                                  const std::vector<bool>& written) {
  const int j = ops_[i].inputs[k];
  if (!ops_[i].input_wants_grad[k] || !written[j]) return;
  float* to = GradOf(j, s);
  const float* from = s.scratch.data();
  const int64_t size = int64_t{s.count} * ops_[j].out_size;
  for (int64_t e = 0; e < size; ++e) to[e] += from[e];
}

void GraphCpuEngine::MarkInputsWritten(int i, std::vector<bool>* written) const {
  for (size_t k = 0; k < ops_[i].inputs.size(); ++k) {
    if (ops_[i].input_wants_grad[k]) (*written)[ops_[i].inputs[k]] = true;
  }
}

void GraphCpuEngine::BackwardBatchNorm(int i, const float* params, const float* images,
                                       int batch, int threads, std::vector<bool>* written) {
  const CpuDevice d;
  Op& op = ops_[i];
  const int c = op.channels;
  // A fused ReLU's gradient runs in the passes (its output is the op's);
  // another fused activation's is applied to the slot first.
  const bool relu = op.has_act && op.act == kernels::ActivationFn::kRelu;
  run_(threads, [&](int t) {
    Slice& s = *slices_[t];
    std::fill(s.sums[i].begin(), s.sums[i].end(), 0.0);
    const kernels::BatchNormShape shape{int64_t{s.count} * op.pixels, c};
    if (relu) {
      kernels::BatchNormReluGradSums(shape, OpInput(i, s, images), s.acts[i].data(),
                                     GradOf(i, s), op.batch_mean.data(), op.batch_var.data(),
                                     op.epsilon, s.sums[i].data(), s.sums[i].data() + c);
      return;
    }
    if (op.has_act) {
      kernels::ActivationGrad<CpuDevice>()(d, int64_t{s.count} * op.out_size, op.act,
                                           s.acts[i].data(), GradOf(i, s));
    }
    kernels::BatchNormGradSums<CpuDevice>()(
        d, shape, OpInput(i, s, images), GradOf(i, s), op.batch_mean.data(),
        op.batch_var.data(), op.epsilon, s.sums[i].data(), s.sums[i].data() + c);
  });
  for (int ch = 0; ch < c; ++ch) {
    double dy = 0, dyx = 0;
    for (int t = 0; t < threads; ++t) {
      dy += slices_[t]->sums[i][ch];
      dyx += slices_[t]->sums[i][c + ch];
    }
    op.sum_dy[ch] = dy;
    op.sum_dy_xhat[ch] = dyx;
  }
  if (op.needs_input_grad) {
    run_(threads, [&](int t) {
      Slice& s = *slices_[t];
      const kernels::BatchNormShape shape{int64_t{s.count} * op.pixels, c};
      const float* gamma = op.gamma >= 0 ? params + op.gamma : nullptr;
      if (relu) {
        kernels::BatchNormReluBackwardInput(
            shape, OpInput(i, s, images), s.acts[i].data(), GradOf(i, s),
            op.batch_mean.data(), op.batch_var.data(), gamma, op.epsilon, op.sum_dy.data(),
            op.sum_dy_xhat.data(), int64_t{batch} * op.pixels, InputGradTarget(i, 0, s, *written));
      } else {
        kernels::BatchNormBackwardInput<CpuDevice>()(
            d, shape, OpInput(i, s, images), GradOf(i, s), op.batch_mean.data(),
            op.batch_var.data(), gamma, op.epsilon, op.sum_dy.data(), op.sum_dy_xhat.data(),
            int64_t{batch} * op.pixels, InputGradTarget(i, 0, s, *written));
      }
      AddInputGrad(i, 0, s, *written);
    });
    MarkInputsWritten(i, written);
  }
}

void GraphCpuEngine::BackwardMergeOp(int i, const float* images, Slice& s, const float* gy,
                                     const std::vector<bool>& written) {
  const Op& op = ops_[i];
  std::vector<const float*> xs;
  for (size_t k = 0; k < op.inputs.size(); ++k) xs.push_back(OpInput(i, s, images, k));
  // Input k's gradient must be added before input k + 1's is made in
  // the scratch: one input at a time (an op may read one input twice).
  std::vector<bool> done = written;
  for (size_t k = 0; k < op.inputs.size(); ++k) {
    float* gx = InputGradTarget(i, k, s, done);
    if (gx == nullptr) continue;
    if (op.kind == LayerKind::kAttention) {
      // Inputs [query, value, key]; without a key the value is the key,
      // and its gradient both (gk == gv).
      const bool has_key = op.inputs.size() == 3;
      float* gq = k == 0 ? gx : nullptr;
      float* gv = k == 1 ? gx : nullptr;
      float* gk = k == 2 || (k == 1 && !has_key) ? gx : nullptr;
      kernels::AttentionBackward(s.count, op.attention, xs[0], xs.back(), xs[1],
                                 StepMaskOf(op.query_mask_from, s, images),
                                 StepMaskOf(op.mask_from, s, images), gy, gq, gk, gv);
    } else {
      BackwardMerge(op, xs, k, s.count, gy, gx);
    }
    AddInputGrad(i, k, s, done);
    done[op.inputs[k]] = true;
  }
}

void GraphCpuEngine::BackwardOp(int i, const float* params, const float* images, int threads,
                                uint64_t step_key, float* grads, std::vector<bool>* written) {
  const CpuDevice d;
  const Op& op = ops_[i];
  run_(threads, [&](int t) {
    Slice& s = *slices_[t];
    const int n = s.count;
    float* gy = GradOf(i, s);
    if (op.act_xy) {  // an Activation op: its gradient is all it adds
      float* gx = InputGradTarget(i, 0, s, *written);
      if (gx != nullptr) {
        kernels::ActivationGradXY(n * op.out_size, op.act, op.alpha, OpInput(i, s, images),
                                  s.acts[i].data(), gy, gx);
        AddInputGrad(i, 0, s, *written);
      }
      return;
    }
    if (op.has_act) {
      kernels::ActivationGrad<CpuDevice>()(d, n * op.out_size, op.act, s.acts[i].data(), gy);
    }
    if (IsMerge(op.kind)) {
      BackwardMergeOp(i, images, s, gy, *written);
      return;
    }
    float* gx = InputGradTarget(i, 0, s, *written);
    const SliceGrads g = {n, gy, gx, gx != nullptr, t == 0 ? grads : s.grads.data()};
    switch (op.kind) {
      case LayerKind::kConv2D:
        BackwardConv2D(op, params, OpInput(i, s, images), s.conv_scratch.data(), g);
        break;
      case LayerKind::kMaxPool2D:
        BackwardMaxPool2D(op, s.argmax[i].data(), g);
        break;
      case LayerKind::kAvgPool2D:
        BackwardAvgPool2D(op, g);
        break;
      case LayerKind::kGlobalAvgPool2D:
        if (!g.dx_wanted) break;
        if (op.mask_from < 0) {
          kernels::GlobalAvgPoolBackward(n, op.pixels, op.channels, gy, gx);
        } else {
          kernels::MaskedGlobalAvgPoolBackward(n, op.pixels, op.channels,
                                               OpInput(op.mask_from, s, images),
                                               ops_[op.mask_from].padding_id, gy, gx);
        }
        break;
      case LayerKind::kDense:
        BackwardDense(op, params, OpInput(i, s, images), g);
        break;
      case LayerKind::kEmbedding:  // a scatter-add into the slice's zeroed gradient
        kernels::EmbeddingBackward(int64_t{n} * op.pixels, OpInput(i, s, images), gy, op.dense_out,
                                   g.pg + op.kernel, op.padding_id < 0);
        break;
      case LayerKind::kDropout:
        BackwardDropout(op, s.first, DropoutKey(seed_, step_key, op.key_index), g);
        break;
      case LayerKind::kActivation:
        BackwardActivationLayer(op, g);
        break;
      case LayerKind::kZeroPadding2D:
        if (gx != nullptr) {
          kernels::PaddingShape p = op.pad;
          p.batch = n;
          kernels::ZeroPad2DBackward(p, gy, gx);
        }
        break;
      case LayerKind::kGlobalMaxPool2D:
        if (gx != nullptr) {
          kernels::GlobalMaxPoolBackward(n, op.pixels, op.channels, OpInput(i, s, images),
                                         s.acts[i].data(), s.counts[i].data(), gy, gx);
        }
        break;
      case LayerKind::kRescaling:
        if (gx != nullptr) kernels::RescaleBackward(n * op.out_size, op.rescale, gy, gx);
        break;
      case LayerKind::kDepthwiseConv2D:
        BackwardDepthwiseConv2D(op, params, OpInput(i, s, images), s.param_scratch.data(), g);
        break;
      case LayerKind::kLayerNorm:
        BackwardLayerNorm(op, params, OpInput(i, s, images), s.norms[i].data(),
                          s.param_scratch.data(), g);
        break;
      case LayerKind::kLstm:
      case LayerKind::kGru:
        BackwardRecurrent(op, params, OpInput(i, s, images), StepMaskOf(op.mask_from, s, images),
                          s.saved[i].data(), s.param_scratch.data(), g);
        break;
      case LayerKind::kSoftmax:
        if (g.dx_wanted) {
          kernels::SoftmaxRowsBackward(int64_t{n} * op.pixels, op.channels, s.acts[i].data(), gy,
                                       gx);
        }
        break;
      default:
        break;
    }
    AddInputGrad(i, 0, s, *written);
  });
  MarkInputsWritten(i, written);
}

void GraphCpuEngine::FinishOp(int i, const float* params, int threads, float* grads) {
  const Op& op = ops_[i];
  for (const auto& [begin, end] : layout_.ranges[i]) {
    for (int t = 1; t < threads; ++t) {
      const float* part = slices_[t]->grads.data();
      for (int64_t j = begin; j < end; ++j) grads[j] += part[j];
    }
  }
  if (op.kind == LayerKind::kBatchNorm) {
    // Whole-batch quantities, written once: gamma's and beta's gradients
    // and the batch statistics in the moving statistics' slots.
    for (int ch = 0; ch < op.channels; ++ch) {
      if (op.gamma >= 0) grads[op.gamma + ch] = static_cast<float>(op.sum_dy_xhat[ch]);
      if (op.beta >= 0) grads[op.beta + ch] = static_cast<float>(op.sum_dy[ch]);
      grads[op.mean + ch] = op.batch_mean[ch];
      grads[op.var + ch] = op.batch_var[ch];
    }
  }
  for (const GraphOp::Penalty& p : op.penalties) {
    kernels::RegularizerGrad(p.size, p.l1, p.l2, params + p.offset, grads + p.offset);
  }
  if (listener_) listener_(layout_.final_from[i]);
}

absl::Status GraphCpuEngine::TrainStep(const float* params, const float* images,
                                       const float* targets, int batch, uint64_t step_key,
                                       float* grads, double* loss_sum, int* correct) {
  absl::Status s = Forward(params, images, batch, /*training=*/true, step_key, nullptr);
  if (!s.ok()) return s;
  Loss(params, targets, batch, /*want_grad=*/true, loss_sum, correct);
  Backward(params, images, batch, step_key, grads);
  return absl::OkStatus();
}

absl::Status GraphCpuEngine::Evaluate(const float* params, const float* images,
                                      const float* targets, int batch, double* loss_sum,
                                      int* correct, float* outputs) {
  absl::Status s = Forward(params, images, batch, /*training=*/false, 0, nullptr);
  if (!s.ok()) return s;
  Loss(params, targets, batch, /*want_grad=*/false, loss_sum, correct, outputs);
  return absl::OkStatus();
}

}  // namespace pscluster
