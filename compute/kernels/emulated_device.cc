#include "compute/kernels/emulated_device.h"

#include <algorithm>
#include <string>

#include "compute/kernels/parallel_graph_kernels.h"
#include "compute/kernels/parallel_kernels.h"

namespace pscluster {
namespace kernels {
namespace {

using parallel::ColumnMajorGemm;

// parallel_kernels.h's executor on the host; holds a copy of the device.
class HostExec {
 public:
  explicit HostExec(const EmulatedGpuDevice& d) : d_(d) {}

  // Backwards, so that a kernel relying on the order of its calls fails
  // here too; with the GPU's index type (parallel::NarrowIndex).
  template <typename F>
  void ForEach(const char*, int64_t n, const F& f) const {
    if (parallel::NarrowIndex(n)) {
      for (uint32_t i = static_cast<uint32_t>(n); i-- > 0;) f(i);
    } else {
      for (int64_t i = n - 1; i >= 0; --i) f(i);
    }
  }

  void Gemm(const ColumnMajorGemm& g) const {
    // cuBLAS's argument checks (CUBLAS_STATUS_INVALID_VALUE).
    const int a_rows = g.trans_a ? g.k : g.m;
    const int b_rows = g.trans_b ? g.n : g.k;
    if (g.m < 0 || g.n < 0 || g.k < 0 || g.lda < std::max(1, a_rows) ||
        g.ldb < std::max(1, b_rows) || g.ldc < std::max(1, g.m)) {
      d_.errors->Record(
          "cublasSgemm (emulated): invalid value: m=" + std::to_string(g.m) +
          " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
          " lda=" + std::to_string(g.lda) + " ldb=" + std::to_string(g.ldb) +
          " ldc=" + std::to_string(g.ldc));
      return;
    }
    for (int j = 0; j < g.n; ++j) {
      for (int i = 0; i < g.m; ++i) {
        float acc = 0.0f;
        for (int l = 0; l < g.k; ++l) {
          const float a = g.trans_a ? g.a[l + int64_t{i} * g.lda]
                                    : g.a[i + int64_t{l} * g.lda];
          const float b = g.trans_b ? g.b[j + int64_t{l} * g.ldb]
                                    : g.b[l + int64_t{j} * g.ldb];
          acc += a * b;
        }
        float& c = g.c[i + int64_t{j} * g.ldc];
        // As cuBLAS: with beta == 0, C is not read (it may hold NaN).
        c = g.beta == 0.0f ? g.alpha * acc : g.alpha * acc + g.beta * c;
      }
    }
  }

 private:
  const EmulatedGpuDevice d_;
};

}  // namespace

void BiasActivationForward<EmulatedGpuDevice>::operator()(
    const EmulatedGpuDevice& d, int64_t rows, int cols, const float* bias,
    bool relu, float* y) const {
  parallel::BiasActivationForward(HostExec(d), rows, cols, bias, relu, y);
}

int64_t BiasGrad<EmulatedGpuDevice>::WorkspaceSize(int64_t rows, int cols) {
  return parallel::BiasGradWorkspace(rows, cols);
}

void BiasGrad<EmulatedGpuDevice>::operator()(const EmulatedGpuDevice& d,
                                             int64_t rows, int cols,
                                             const float* dy, bool accumulate,
                                             float* db,
                                             float* workspace) const {
  parallel::BiasGrad(HostExec(d), rows, cols, dy, accumulate, db, workspace);
}

void ReluGrad<EmulatedGpuDevice>::operator()(const EmulatedGpuDevice& d,
                                             int64_t n, const float* y,
                                             float* dy) const {
  parallel::ReluGrad(HostExec(d), n, y, dy);
}

void DenseForward<EmulatedGpuDevice>::operator()(const EmulatedGpuDevice& d,
                                                 const DenseShape& s,
                                                 const float* x, const float* w,
                                                 const float* b, bool relu,
                                                 float* y) const {
  parallel::DenseForward(HostExec(d), s, x, w, b, relu, y);
}

int64_t DenseBackward<EmulatedGpuDevice>::WorkspaceSize(const DenseShape& s) {
  return parallel::DenseBackwardWorkspace(s);
}

void DenseBackward<EmulatedGpuDevice>::operator()(
    const EmulatedGpuDevice& d, const DenseShape& s, const float* x,
    const float* w, const float* dy, bool accumulate, float* dw, float* db,
    float* dx, float* workspace) const {
  parallel::DenseBackward(HostExec(d), s, x, w, dy, accumulate, dw, db, dx,
                          workspace);
}

int64_t Conv2DForward<EmulatedGpuDevice>::WorkspaceSize(const Conv2DShape& s) {
  return parallel::Conv2DForwardWorkspace(s);
}

void Conv2DForward<EmulatedGpuDevice>::operator()(
    const EmulatedGpuDevice& d, const Conv2DShape& s, const float* x,
    const float* w, const float* b, bool relu, float* y,
    float* workspace) const {
  parallel::Conv2DForward(HostExec(d), s, x, w, b, relu, y, workspace);
}

int64_t Conv2DBackwardFilter<EmulatedGpuDevice>::WorkspaceSize(
    const Conv2DShape& s) {
  return parallel::Conv2DBackwardFilterWorkspace(s);
}

void Conv2DBackwardFilter<EmulatedGpuDevice>::operator()(
    const EmulatedGpuDevice& d, const Conv2DShape& s, const float* x,
    const float* dy, bool accumulate, bool columns_ready, float* dw, float* db,
    float* workspace) const {
  parallel::Conv2DBackwardFilter(HostExec(d), s, x, dy, accumulate,
                                 columns_ready, dw, db, workspace);
}

int64_t Conv2DBackwardInput<EmulatedGpuDevice>::WorkspaceSize(
    const Conv2DShape& s) {
  return parallel::Conv2DBackwardInputWorkspace(s);
}

void Conv2DBackwardInput<EmulatedGpuDevice>::operator()(
    const EmulatedGpuDevice& d, const Conv2DShape& s, const float* w,
    const float* dy, float* dx, float* workspace) const {
  parallel::Conv2DBackwardInput(HostExec(d), s, w, dy, dx, workspace);
}

void MaxPool2DForward<EmulatedGpuDevice>::operator()(const EmulatedGpuDevice& d,
                                                     const MaxPool2DShape& s,
                                                     const float* x, float* y,
                                                     int32_t* argmax) const {
  parallel::MaxPool2DForward(HostExec(d), s, x, y, argmax);
}

void MaxPool2DBackward<EmulatedGpuDevice>::operator()(
    const EmulatedGpuDevice& d, const MaxPool2DShape& s, const float* dy,
    const int32_t* argmax, float* dx, const float* relu_y) const {
  parallel::MaxPool2DBackward(HostExec(d), s, dy, argmax, relu_y, dx);
}

int64_t SoftmaxCrossEntropy<EmulatedGpuDevice>::WorkspaceBytes(int batch) {
  return parallel::SoftmaxWorkspaceBytes(batch);
}

void SoftmaxCrossEntropy<EmulatedGpuDevice>::operator()(
    const EmulatedGpuDevice& d, int batch, int classes, const float* logits,
    const float* labels, float grad_scale, float* dlogits, double* loss_sum,
    int* correct, void* workspace) const {
  parallel::SoftmaxCrossEntropy(HostExec(d), batch, classes, logits, labels,
                                grad_scale, dlogits, loss_sum, correct,
                                workspace);
}

std::unique_ptr<GraphKernels> MakeEmulatedGraphKernels(
    const EmulatedGpuDevice& d) {
  return std::make_unique<parallel::ExecGraphKernels<HostExec>>(HostExec(d));
}

}  // namespace kernels
}  // namespace pscluster
