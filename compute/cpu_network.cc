#include "compute/cpu_network.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "model/dataset.h"
#include "compute/fused_plan.h"
#include "compute/kernels/bias_activation.h"
#include "compute/kernels/conv2d.h"
#include "compute/kernels/conv2d_maxpool.h"
#include "compute/kernels/cpu_blas.h"
#include "compute/kernels/dense.h"
#include "compute/kernels/device.h"
#include "compute/kernels/maxpool2d.h"
#include "compute/kernels/softmax_xent.h"

namespace pscluster {
namespace {

using kernels::CpuDevice;

// Images per forward/backward pass inside a replica. Small enough that a
// pass's activations stay in cache, large enough that the GEMMs stay
// efficient. Weight gradients are summed over the micro-batches.
constexpr int kMicroBatch = 8;
// Every micro-batch reads the weights and reads and writes their
// gradients. While they fit in cache that costs little (the built-in CNN:
// 3,900 images/s in micro-batches of 8, 3,000 in one of 64); beyond, that
// memory traffic is the step (mlp_large, 80 MB, one thread: 273 images/s
// in micro-batches of 8, 1,244 in one of 128), and a replica runs its
// whole share of the batch in one pass.
constexpr int64_t kCachedWeightBytes = 4 << 20;
constexpr int kMaxThreads = 256;

// A zero-filled, 64-byte aligned array, allocated once. Zero-filling touches
// every page up front, so the first step does not pay the page faults.
template <typename T>
class AlignedArray {
 public:
  AlignedArray() = default;
  explicit AlignedArray(int64_t n)
      : data_(static_cast<T*>(::operator new[](
            std::max<int64_t>(n, 1) * sizeof(T), std::align_val_t{64}))) {
    std::memset(data_.get(), 0, std::max<int64_t>(n, 1) * sizeof(T));
  }
  T* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(T* p) const {
      ::operator delete[](p, std::align_val_t{64});
    }
  };
  std::unique_ptr<T, Free> data_;
};

}  // namespace

// One layer as run (compute/fused_plan.h), plus this backend's fusion.
struct CpuNetwork::Op : FusedLayer {
  bool has_parameters() const {
    return kind == LayerKind::kConv2D || kind == LayerKind::kDense;
  }
  // A conv whose output only feeds the next op, a max pool, and that needs
  // no input gradient: both run as one fused kernel and this op's own
  // output is never materialised.
  bool fused_with_pool = false;
};

// Per TrainStep: which ops' gradients are complete, summed over the
// replicas, and how far down that reaches.
struct CpuNetwork::Progress {
  explicit Progress(size_t ops) : remaining(new std::atomic<int>[ops]), reduced(ops) {}
  std::unique_ptr<std::atomic<int>[]> remaining;  // replicas still in op i
  std::mutex mu;
  std::vector<bool> reduced ABSL_GUARDED_BY(mu);
  size_t mark ABSL_GUARDED_BY(mu) = 0;  // ops >= mark are done
};

// Runs a persistent group of threads in lock step: Run(task) calls task(i)
// for every i in [0, n), task(0) on the caller's thread, and returns when all
// calls have returned. Run is called by one thread at a time.
class CpuNetwork::ThreadGang {
 public:
  explicit ThreadGang(int n) {
    for (int i = 1; i < n; ++i) threads_.emplace_back([this, i] { Loop(i); });
  }

  ~ThreadGang() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void Run(const std::function<void(int)>& task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    start_.notify_all();
    task(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void Loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        task = task_;
      }
      (*task)(index);
      bool last;
      {
        std::lock_guard<std::mutex> lock(mu_);
        last = --pending_ == 0;
      }
      if (last) done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable
      start_;  // signalled when generation_ or stopping_ change
  std::condition_variable done_;  // signalled when pending_ reaches 0
  const std::function<void(int)>* task_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // one per Run
  int pending_ ABSL_GUARDED_BY(mu_) = 0;  // threads still in the current task
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // const after construction
};

// The buffers and passes of one thread: runs a contiguous slice of a batch in
// micro-batches of up to `chunk` examples.
class CpuNetwork::SliceRunner {
 public:
  SliceRunner(const std::vector<Op>& ops, int64_t num_parameters, int chunk,
          bool owns_grads)
      : ops_(ops), chunk_(chunk) {
    int64_t widest = 0;
    for (const Op& op : ops_) {
      acts_.emplace_back(op.fused_with_pool ? 0 : chunk * op.out_size);
      argmax_.emplace_back(
          op.kind == LayerKind::kMaxPool2D ? chunk * op.out_size : 0);
      int64_t ws = 0;
      if (op.kind == LayerKind::kConv2D) {
        kernels::Conv2DShape s = op.conv;
        s.batch = chunk;
        ws = kernels::Conv2DForward<CpuDevice>::WorkspaceSize(s);
        if (op.needs_input_grad) {
          ws = std::max(
              ws, kernels::Conv2DBackwardInput<CpuDevice>::WorkspaceSize(s));
        }
      }
      workspace_.emplace_back(ws);
      widest = std::max({widest, op.in_size, op.out_size});
    }
    grad_a_ = AlignedArray<float>(chunk * widest);
    grad_b_ = AlignedArray<float>(chunk * widest);
    if (owns_grads) own_grads_ = AlignedArray<float>(num_parameters);
  }

  float* own_grads() const { return own_grads_.data(); }
  double loss_sum() const { return loss_sum_; }
  int correct() const { return correct_; }

  // Runs examples [0, count) of `images`/`targets` (class indices: the
  // fused engine trains on sparse categorical cross-entropy only). With `grads` non-null,
  // writes there the gradient of grad_scale * (sum of their losses), and
  // calls op_done(i) once op i's part of it is complete (ops with
  // parameters, last op first). Afterwards loss_sum() and correct()
  // describe these examples.
  // With `wait` set, the first pass calls (*wait)(params_to[i]) before op
  // i reads its weights (they may still be arriving).
  void Run(const float* params, const float* images, const float* targets,
           int count, float grad_scale, float* grads,
           const std::function<void(int)>& op_done,
           const std::function<void(int64_t)>* wait,
           const std::vector<int64_t>& params_to) {
    const CpuDevice d;
    const int64_t in_size = ops_.front().in_size;
    const int classes = static_cast<int>(ops_.back().out_size);
    loss_sum_ = 0.0;
    correct_ = 0;
    for (int first = 0; first < count; first += chunk_) {
      const int n = std::min(chunk_, count - first);
      const float* x = images + first * in_size;
      Forward(params, x, n, first == 0 ? wait : nullptr, params_to);
      double loss = 0.0;
      int right = 0;
      kernels::SoftmaxCrossEntropy<CpuDevice>()(
          d, n, classes, acts_.back().data(), targets + first, grad_scale,
          grads != nullptr ? grad_a_.data() : nullptr, &loss, &right);
      loss_sum_ += loss;
      correct_ += right;
      if (grads != nullptr) {
        const bool last = first + n >= count;
        Backward(params, x, n, /*accumulate=*/first > 0, grads,
                 last ? &op_done : nullptr);
      }
    }
  }

 private:
  void Forward(const float* params, const float* x, int n,
               const std::function<void(int64_t)>* wait,
               const std::vector<int64_t>& params_to) {
    const CpuDevice d;
    const float* in = x;
    for (size_t i = 0; i < ops_.size(); ++i) {
      const Op& op = ops_[i];
      if (wait != nullptr && op.has_parameters()) (*wait)(params_to[i]);
      float* out = acts_[i].data();
      if (op.fused_with_pool) {
        kernels::Conv2DShape s = op.conv;
        s.batch = n;
        ++i;  // the pool
        out = acts_[i].data();
        kernels::Conv2DMaxPoolForward<CpuDevice>()(
            d, s, ops_[i].pool.pool, in, params + op.kernel_offset,
            params + op.bias_offset, op.relu, out, argmax_[i].data());
        in = out;
        continue;
      }
      switch (op.kind) {
        case LayerKind::kConv2D: {
          kernels::Conv2DShape s = op.conv;
          s.batch = n;
          kernels::Conv2DForward<CpuDevice>()(
              d, s, in, params + op.kernel_offset, params + op.bias_offset,
              op.relu, out, workspace_[i].data());
          break;
        }
        case LayerKind::kMaxPool2D: {
          kernels::MaxPool2DShape s = op.pool;
          s.batch = n;
          kernels::MaxPool2DForward<CpuDevice>()(d, s, in, out,
                                                 argmax_[i].data());
          break;
        }
        case LayerKind::kDense: {
          kernels::DenseShape s = op.dense;
          s.batch = n;
          kernels::DenseForward<CpuDevice>()(
              d, s, in, params + op.kernel_offset, params + op.bias_offset,
              op.relu, out);
          break;
        }
        default:
          break;  // PlanFusedLayers plans only Conv2D, MaxPool2D and Dense
      }
      in = out;
    }
  }

  // Expects dLoss/dlogits in grad_a_. Writes (or with `accumulate` adds)
  // the parameter gradients into `grads`; calls (*op_done)(i), when set,
  // after each op with parameters.
  void Backward(const float* params, const float* x, int n, bool accumulate,
                float* grads, const std::function<void(int)>* op_done) {
    const CpuDevice d;
    float* g = grad_a_.data();     // dLoss/d(output of op i)
    float* next = grad_b_.data();  // becomes dLoss/d(input of op i)
    bool relu_applied = false;     // g already has op i's ReLU gradient
    for (int i = static_cast<int>(ops_.size()) - 1; i >= 0; --i) {
      const Op& op = ops_[i];
      const float* in = i == 0 ? x : acts_[i - 1].data();
      const float* out = acts_[i].data();
      float* dx = op.needs_input_grad ? next : nullptr;
      if (op.relu && !relu_applied) {
        kernels::ReluGrad<CpuDevice>()(d, n * op.out_size, out, g);
      }
      relu_applied = false;
      switch (op.kind) {
        case LayerKind::kConv2D: {
          kernels::Conv2DShape s = op.conv;
          s.batch = n;
          kernels::Conv2DBackwardFilter<CpuDevice>()(
              d, s, in, g, accumulate, /*columns_ready=*/true,
              grads + op.kernel_offset, grads + op.bias_offset,
              workspace_[i].data());
          if (dx != nullptr) {
            kernels::Conv2DBackwardInput<CpuDevice>()(
                d, s, params + op.kernel_offset, g, dx, workspace_[i].data());
          }
          break;
        }
        case LayerKind::kMaxPool2D: {
          if (dx == nullptr) break;
          // max and ReLU commute, and only a window's winner gets gradient,
          // so the ReLU below can be applied to the 4x smaller pooled
          // output: winner > 0 exactly when the pooled value is.
          if (i > 0 && ops_[i - 1].relu) {
            kernels::ReluGrad<CpuDevice>()(d, n * op.out_size, out, g);
            relu_applied = true;
          }
          if (ops_[i - 1].fused_with_pool) {
            const Op& conv = ops_[i - 1];
            kernels::Conv2DShape s = conv.conv;
            s.batch = n;
            kernels::Conv2DMaxPoolBackwardFilter<CpuDevice>()(
                d, s, op.pool.pool, i == 1 ? x : acts_[i - 2].data(), g,
                argmax_[i].data(), accumulate, grads + conv.kernel_offset,
                grads + conv.bias_offset);
            if (op_done != nullptr) (*op_done)(i - 1);
            return;  // the conv needs no input gradient
          }
          kernels::MaxPool2DShape s = op.pool;
          s.batch = n;
          kernels::MaxPool2DBackward<CpuDevice>()(d, s, g, argmax_[i].data(),
                                                  dx);
          break;
        }
        case LayerKind::kDense: {
          kernels::DenseShape s = op.dense;
          s.batch = n;
          kernels::DenseBackward<CpuDevice>()(
              d, s, in, params + op.kernel_offset, g, accumulate,
              grads + op.kernel_offset, grads + op.bias_offset, dx);
          break;
        }
        default:
          break;  // PlanFusedLayers plans only Conv2D, MaxPool2D and Dense
      }
      if (op_done != nullptr && op.has_parameters()) (*op_done)(i);
      if (dx == nullptr) break;  // nothing below has parameters
      std::swap(g, next);
    }
  }

  const std::vector<Op>& ops_;  // owned by the CpuNetwork, outlives this
  const int chunk_;
  std::vector<AlignedArray<float>> acts_;       // output of op i
  std::vector<AlignedArray<int32_t>> argmax_;   // pooling ops only
  std::vector<AlignedArray<float>> workspace_;  // conv ops only
  AlignedArray<float> grad_a_, grad_b_;
  AlignedArray<float> own_grads_;  // replicas after the first
  double loss_sum_ = 0.0;
  int correct_ = 0;
};

absl::StatusOr<std::vector<CpuNetwork::Op>> CpuNetwork::Plan(const ModelSpec& spec) {
  absl::StatusOr<std::vector<FusedLayer>> layers = PlanFusedLayers(spec);
  if (!layers.ok()) return layers.status();
  std::vector<Op> ops;
  for (const FusedLayer& layer : *layers) {
    Op op;
    static_cast<FusedLayer&>(op) = layer;
    ops.push_back(op);
  }
  for (size_t i = 0; i + 1 < ops.size(); ++i) {
    ops[i].fused_with_pool = ops[i].kind == LayerKind::kConv2D &&
                             !ops[i].needs_input_grad &&
                             ops[i + 1].kind == LayerKind::kMaxPool2D &&
                             kernels::Conv2DMaxPoolForward<CpuDevice>::Supports(
                                 ops[i].conv, ops[i + 1].pool.pool);
  }
  return ops;
}

absl::StatusOr<std::unique_ptr<CpuNetwork>> CpuNetwork::Create(
    const ModelSpec& spec, const CpuNetworkOptions& options) {
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CpuNetworkOptions.max_batch ", options.max_batch, " must be at least 1"));
  }
  if (options.num_threads < 1 || options.num_threads > kMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("CpuNetworkOptions.num_threads ", options.num_threads,
                     " is not in [1, ", kMaxThreads, "]"));
  }
  // The batch is split across our threads; BLAS must not add its own.
  kernels::UseSingleThreadedBlas();
  absl::StatusOr<std::vector<Op>> ops = Plan(spec);
  if (ops.ok()) return std::unique_ptr<CpuNetwork>(new CpuNetwork(spec, options, *std::move(ops)));
  // Not a model of the fused engine's layers: the graph engine, on the same threads.
  std::unique_ptr<CpuNetwork> net(new CpuNetwork(spec, options, {}));
  const int threads = std::min(options.num_threads, options.max_batch);
  if (threads > 1) net->gang_ = std::make_unique<ThreadGang>(threads);
  CpuNetwork* self = net.get();
  absl::StatusOr<std::unique_ptr<GraphCpuEngine>> graph = GraphCpuEngine::Create(
      spec, options.max_batch, threads, options.seed,
      [self](int n, const std::function<void(int)>& task) {
        if (self->gang_ == nullptr || n == 1) {
          for (int i = 0; i < n; ++i) task(i);
          return;
        }
        self->gang_->Run([&](int t) {
          if (t < n) task(t);
        });
      });
  if (!graph.ok()) return graph.status();
  net->graph_ = *std::move(graph);
  return net;
}

CpuNetwork::CpuNetwork(const ModelSpec& spec, const CpuNetworkOptions& options,
                 std::vector<Op> ops)
    : spec_(spec), options_(options), ops_(std::move(ops)) {
  if (ops_.empty()) return;  // the graph engine: Create sets it up
  // Each replica gets at most its share of max_batch, in micro-batches
  // (one, when the weights do not fit in cache).
  const int threads = std::min(options_.num_threads, options_.max_batch);
  const int share = (options_.max_batch + threads - 1) / threads;
  const bool weights_cached = spec_.num_parameters * int64_t{sizeof(float)} <= kCachedWeightBytes;
  const int chunk = weights_cached ? std::min(kMicroBatch, share) : share;
  micro_batch_ = chunk;
  for (int t = 0; t < threads; ++t) {
    runners_.push_back(std::make_unique<SliceRunner>(ops_, spec_.num_parameters,
                                                  chunk, /*owns_grads=*/t > 0));
  }
  if (threads > 1) gang_ = std::make_unique<ThreadGang>(threads);
  progress_ = std::make_unique<Progress>(ops_.size());
  std::vector<std::vector<int64_t>> offsets;
  for (const Op& op : ops_) {
    offsets.push_back(op.has_parameters() ? std::vector<int64_t>{op.kernel_offset, op.bias_offset}
                                          : std::vector<int64_t>{});
  }
  layout_ = PlanGradientLayout(spec_, offsets);
}

CpuNetwork::~CpuNetwork() = default;

void CpuNetwork::set_gradient_listener(std::function<void(int64_t)> listener) {
  listener_ = listener;
  if (graph_ != nullptr) graph_->set_gradient_listener(std::move(listener));
}

void CpuNetwork::set_params_wait(std::function<void(int64_t)> wait) {
  params_wait_ = wait;
  if (graph_ != nullptr) graph_->set_params_wait(std::move(wait));
}

absl::Status CpuNetwork::CheckArguments(const void* params, const void* images,
                                     const float* targets, int batch,
                                     const void* out1, const void* out2) const {
  if (params == nullptr || images == nullptr || targets == nullptr ||
      out1 == nullptr || out2 == nullptr) {
    return absl::InvalidArgumentError("CpuNetwork: a required pointer is null");
  }
  if (batch < 1 || batch > options_.max_batch) {
    return absl::InvalidArgumentError(absl::StrCat("CpuNetwork: batch ", batch,
                                                   " is not in [1, max_batch ",
                                                   options_.max_batch, "]"));
  }
  const int per = TargetsOf(spec_);
  for (int64_t i = 0; i < int64_t{batch} * per; ++i) {
    if (absl::Status s = CheckTarget(spec_, targets[i], static_cast<int>(i % per)); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("CpuNetwork: label ", targets[i],
                                                     " of example ", i / per, " ", s.message()));
    }
  }
  return absl::OkStatus();
}

void CpuNetwork::Run(const float* params, const float* images,
                  const float* targets, int batch, float* grads,
                  double* loss_sum, int* correct) {
  const int threads = std::min(static_cast<int>(runners_.size()), batch);
  const float grad_scale = 1.0f / static_cast<float>(batch);
  const int64_t in_size = ops_.front().in_size;
  // SliceRunner t takes a contiguous slice; the first batch % threads get one
  // more example. SliceRunner 0 writes straight into `grads`; the replica that
  // finishes an op last adds the others' parts of its gradient to it, in
  // replica order (deterministic), and tells the listener.
  if (grads != nullptr) {
    std::lock_guard<std::mutex> lock(progress_->mu);
    for (size_t i = 0; i < ops_.size(); ++i) {
      progress_->remaining[i] = threads;
      progress_->reduced[i] = false;
    }
    progress_->mark = ops_.size();
  }
  const std::function<void(int)> op_done = [&](int i) {
    if (progress_->remaining[i].fetch_sub(1) != 1) return;
    for (const auto& [begin, end] : layout_.ranges[i]) {
      for (int t = 1; t < threads; ++t) {
        const float* part = runners_[t]->own_grads();
        for (int64_t j = begin; j < end; ++j) grads[j] += part[j];
      }
    }
    std::lock_guard<std::mutex> lock(progress_->mu);
    progress_->reduced[i] = true;
    size_t& mark = progress_->mark;
    const size_t before = mark;
    while (mark > 0 && (!ops_[mark - 1].has_parameters() || progress_->reduced[mark - 1])) --mark;
    if (mark < before && listener_) listener_(mark == 0 ? 0 : layout_.final_from[mark]);
  };
  auto task = [&](int t) {
    if (t >= threads) return;
    const int base = batch / threads, extra = batch % threads;
    const int first = t * base + std::min(t, extra);
    const int count = base + (t < extra ? 1 : 0);
    float* out = grads == nullptr ? nullptr
                 : t == 0         ? grads
                                  : runners_[t]->own_grads();
    runners_[t]->Run(params, images + first * in_size, targets + first, count,
                      grad_scale, out, op_done,
                      grads != nullptr && params_wait_ ? &params_wait_ : nullptr,
                      layout_.params_to);
  };
  if (gang_ != nullptr && threads > 1) {
    gang_->Run(task);
  } else {
    task(0);
  }
  double loss = 0.0;
  int right = 0;
  for (int t = 0; t < threads; ++t) {
    loss += runners_[t]->loss_sum();
    right += runners_[t]->correct();
  }
  *loss_sum = loss;
  *correct = right;
}

absl::Status CpuNetwork::TrainStep(const float* params, const float* images,
                                const float* targets, int batch, float* grads,
                                float* loss, int* correct, uint64_t step_key) {
  absl::Status st = CheckArguments(params, images, targets, batch, grads, loss);
  if (st.ok() && correct == nullptr) {
    st = absl::InvalidArgumentError("CpuNetwork: `correct` is null");
  }
  if (!st.ok()) return st;
  double loss_sum = 0.0;
  if (graph_ != nullptr) {
    st = graph_->TrainStep(params, images, targets, batch, step_key, grads, &loss_sum,
                           correct);
    if (!st.ok()) return st;
  } else {
    Run(params, images, targets, batch, grads, &loss_sum, correct);
  }
  *loss = static_cast<float>(loss_sum / batch);
  return absl::OkStatus();
}

absl::Status CpuNetwork::Evaluate(const float* params, const float* images,
                               const float* targets, int batch,
                               double* loss_sum, int* correct, float* outputs) {
  absl::Status st =
      CheckArguments(params, images, targets, batch, loss_sum, correct);
  if (!st.ok()) return st;
  if (outputs != nullptr && graph_ == nullptr) {
    return absl::InvalidArgumentError(
        "CpuNetwork: the fast path does not give the outputs' probabilities");
  }
  if (graph_ != nullptr) {
    return graph_->Evaluate(params, images, targets, batch, loss_sum, correct, outputs);
  } else {
    Run(params, images, targets, batch, /*grads=*/nullptr, loss_sum, correct);
  }
  return absl::OkStatus();
}

}  // namespace pscluster
