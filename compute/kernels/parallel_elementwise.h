// Element-wise layers and the graph's merges as data-parallel algorithms
// over parallel_kernels.h's executors: activation.h's activations (from
// the output, or with alpha from the input and output), dropout.h's
// masks, rescaling.h's Rescaling, regularizer.h's L1/L2 terms, and the
// copies and sums that Add, Subtract, Average, Multiply and Concatenate
// become. The same code runs on CUDA (gpu_kernels.cu) and on the host
// (emulated_device.cc). Each call writes only its own output element; the
// regularizers' loss is summed in BiasGrad's fixed order.
// Stateless templates: thread-safety is the executor's.
#ifndef PSCLUSTER_COMPUTE_KERNELS_PARALLEL_ELEMENTWISE_H_
#define PSCLUSTER_COMPUTE_KERNELS_PARALLEL_ELEMENTWISE_H_

#include <math.h>

#include <cstdint>

#include "compute/kernels/activation.h"
#include "compute/kernels/activation_math.h"
#include "compute/kernels/dropout.h"
#include "compute/kernels/parallel_kernels.h"

namespace pscluster {
namespace kernels {
namespace parallel {

// ---- Element functors ------------------------------------------------------

struct CopyFn {
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = x[i];
  }
};

// y[i] += alpha * x[i]: a graph's sums (Add, Subtract, Average) and a
// gradient added to one another consumer already wrote.
struct AxpyFn {
  float alpha;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] += alpha * x[i];
  }
};

// y[i] = alpha * x[i]; x may equal y.
struct ScaleFn {
  float alpha;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = alpha * x[i];
  }
};

// y[i] = a[i] * b[i] (Multiply); any of them may alias.
struct MultiplyFn {
  const float* a;
  const float* b;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = a[i] * b[i];
  }
};

// dst[r, c] = src[r, c] for c < width over rows of the given strides:
// Concatenate's channel blocks, forward and back.
struct CopyColumnsFn {
  int width;
  const float* src;
  int src_stride;
  float* dst;
  int dst_stride;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const I r = i / static_cast<I>(width), c = i % static_cast<I>(width);
    dst[int64_t{r} * dst_stride + c] = src[int64_t{r} * src_stride + c];
  }
};

// y = f(x); x may equal y.
struct ActivationForwardFn {
  ActivationFn f;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const float v = x[i];
    switch (f) {
      case ActivationFn::kRelu:
        y[i] = v > 0.0f ? v : 0.0f;
        break;
      case ActivationFn::kSigmoid:
        y[i] = 1.0f / (1.0f + expf(-v));
        break;
      case ActivationFn::kTanh:
        y[i] = tanhf(v);
        break;
      default:  // ActivationForwardX's (activation.h)
        y[i] = NAN;
        break;
    }
  }
};

// dx = dy * f'(z) in terms of y = f(z), as activation.h; dx may equal dy.
struct ActivationGradFn {
  ActivationFn f;
  const float* y;
  const float* dy;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const float v = y[i];
    switch (f) {
      case ActivationFn::kRelu:
        dx[i] = v > 0.0f ? dy[i] : 0.0f;
        break;
      case ActivationFn::kSigmoid:
        dx[i] = dy[i] * (v * (1.0f - v));
        break;
      case ActivationFn::kTanh:
        dx[i] = dy[i] * (1.0f - v * v);
        break;
      default:  // ActivationGradXY's (activation.h)
        dx[i] = NAN;
        break;
    }
  }
};

// y = f(x) with alpha; x may equal y.
struct ActivationForwardXFn {
  ActivationFn f;
  float alpha;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = ActivationValue(f, alpha, x[i]);
  }
};

// dx = dy * f'(x) from x and y = f(x); dx may equal dy.
struct ActivationGradXYFn {
  ActivationFn f;
  float alpha;
  const float* x;
  const float* y;
  const float* dy;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    dx[i] = dy[i] * ActivationSlope(f, alpha, x[i], y[i]);
  }
};

// y[i] = keeps(first + i) ? x[i] * scale : 0 (dropout.h's mask).
struct DropoutFn {
  int64_t first;
  uint64_t key;
  uint32_t threshold;
  float scale;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = DropoutKeeps(key, first + i, threshold) ? x[i] * scale : 0.0f;
  }
};

// y = x * scale + offset; x may equal y.
struct RescaleFn {
  float scale, offset;
  const float* x;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    y[i] = x[i] * scale + offset;
  }
};

// t = l1 |w| + l2 w^2 (the loss's summands), or, with `grad`, dw += l1
// sign(w) + 2 l2 w.
struct RegularizerFn {
  float l1, l2;
  bool grad;
  const float* w;
  float* out;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const float v = w[i];
    if (grad) {
      const float sign = v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : 0.0f;
      out[i] += l1 * sign + 2.0f * l2 * v;
    } else {
      out[i] = l1 * fabsf(v) + l2 * (v * v);
    }
  }
};

// ---- Layer algorithms ------------------------------------------------------

// Floats of workspace.
inline int64_t RegularizerLossWorkspace(int64_t n) { return n + BiasGradWorkspace(n, 1); }

template <typename Exec>
void ActivationForward(const Exec& e, int64_t n, ActivationFn f,
                       const float* x, float* y) {
  e.ForEach("Activation", n, ActivationForwardFn{f, x, y});
}

template <typename Exec>
void ActivationGrad(const Exec& e, int64_t n, ActivationFn f, const float* y,
                    const float* dy, float* dx) {
  e.ForEach("ActivationGrad", n, ActivationGradFn{f, y, dy, dx});
}

template <typename Exec>
void ActivationForwardX(const Exec& e, int64_t n, ActivationFn f, float alpha, const float* x,
                        float* y) {
  e.ForEach("ActivationX", n, ActivationForwardXFn{f, alpha, x, y});
}

template <typename Exec>
void ActivationGradXY(const Exec& e, int64_t n, ActivationFn f, float alpha, const float* x,
                      const float* y, const float* dy, float* dx) {
  e.ForEach("ActivationGradXY", n, ActivationGradXYFn{f, alpha, x, y, dy, dx});
}

template <typename Exec>
void Copy(const Exec& e, int64_t n, const float* x, float* y) {
  e.ForEach("Copy", n, CopyFn{x, y});
}

template <typename Exec>
void Axpy(const Exec& e, int64_t n, float alpha, const float* x, float* y) {
  e.ForEach("Axpy", n, AxpyFn{alpha, x, y});
}

template <typename Exec>
void Scale(const Exec& e, int64_t n, float alpha, const float* x, float* y) {
  e.ForEach("Scale", n, ScaleFn{alpha, x, y});
}

template <typename Exec>
void Multiply(const Exec& e, int64_t n, const float* a, const float* b, float* y) {
  e.ForEach("Multiply", n, MultiplyFn{a, b, y});
}

template <typename Exec>
void CopyColumns(const Exec& e, int64_t rows, int width, const float* src, int src_stride,
                 float* dst, int dst_stride) {
  e.ForEach("CopyColumns", rows * width, CopyColumnsFn{width, src, src_stride, dst, dst_stride});
}

// DropoutForward/Backward's contract (the same function both ways).
template <typename Exec>
void Dropout(const Exec& e, const DropoutShape& s, const float* x, float* y) {
  e.ForEach("Dropout", s.n,
            DropoutFn{s.first, s.key, DropoutThreshold(s.rate),
                      1.0f / (1.0f - s.rate), x, y});
}

template <typename Exec>
void Rescale(const Exec& e, int64_t n, float scale, float offset, const float* x, float* y) {
  e.ForEach("Rescale", n, RescaleFn{scale, offset, x, y});
}

// *loss (device memory) = l1 sum |w| + l2 sum w^2, summed in BiasGrad's
// fixed order (float). `workspace`: RegularizerLossWorkspace(n) floats.
template <typename Exec>
void RegularizerLoss(const Exec& e, int64_t n, float l1, float l2, const float* w, float* loss,
                     float* workspace) {
  e.ForEach("RegularizerTerms", n, RegularizerFn{l1, l2, false, w, workspace});
  BiasGrad(e, n, 1, workspace, false, loss, workspace + n);
}

template <typename Exec>
void RegularizerGrad(const Exec& e, int64_t n, float l1, float l2, const float* w, float* dw) {
  e.ForEach("RegularizerGrad", n, RegularizerFn{l1, l2, true, w, dw});
}

}  // namespace parallel
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_PARALLEL_ELEMENTWISE_H_
