// graph_kernels.h's interface on an executor (parallel_kernels.h): each
// method calls the algorithm of the same name in parallel_convolution.h,
// parallel_pooling.h, parallel_normalization.h, parallel_elementwise.h,
// parallel_reshaping.h, parallel_kernels.h (Dense) or loss_head.h. What
// MakeGpuGraphKernels (gpu_kernels.cu) and MakeEmulatedGraphKernels
// (emulated_device.cc) return. Thread-safety is the executor's: the class
// holds it by value and nothing else.
#ifndef PSCLUSTER_COMPUTE_KERNELS_PARALLEL_GRAPH_KERNELS_H_
#define PSCLUSTER_COMPUTE_KERNELS_PARALLEL_GRAPH_KERNELS_H_

#include <cstdint>

#include "compute/kernels/activation.h"
#include "compute/kernels/dropout.h"
#include "compute/kernels/graph_kernels.h"
#include "compute/kernels/loss_head.h"
#include "compute/kernels/parallel_convolution.h"
#include "compute/kernels/parallel_elementwise.h"
#include "compute/kernels/parallel_kernels.h"
#include "compute/kernels/parallel_normalization.h"
#include "compute/kernels/parallel_pooling.h"
#include "compute/kernels/parallel_reshaping.h"
#include "compute/kernels/reshaping.h"
#include "compute/kernels/window.h"

namespace pscluster {
namespace kernels {
namespace parallel {

// ---- Layer algorithms ------------------------------------------------------

// GraphKernels on an executor: what MakeGpuGraphKernels and
// MakeEmulatedGraphKernels return. Holds the executor by value.
template <typename Exec>
class ExecGraphKernels final : public GraphKernels {
 public:
  explicit ExecGraphKernels(const Exec& e) : e_(e) {}

  void ConvForward(const WindowShape& s, const float* x, const float* w,
                   const float* b, float* columns, float* y) const override {
    parallel::ConvGeneralForward(e_, s, x, w, b, columns, y);
  }
  void ConvBackward(const WindowShape& s, const float* columns, const float* w,
                    const float* dy, float* dw, float* db, float* dx,
                    float* workspace) const override {
    parallel::ConvGeneralBackward(e_, s, columns, w, dy, dw, db, dx, workspace);
  }
  void DenseForward(int batch, int in, int out, const float* x, const float* w,
                    const float* b, float* y) const override {
    parallel::DenseGeneralForward(e_, batch, in, out, x, w, b, y);
  }
  void DenseBackward(int batch, int in, int out, const float* x,
                     const float* w, const float* dy, float* dw, float* db,
                     float* dx, float* workspace) const override {
    parallel::DenseGeneralBackward(e_, batch, in, out, x, w, dy, dw, db, dx, workspace);
  }
  void MaxPoolForward(const WindowShape& s, const float* x, float* y,
                      int32_t* argmax) const override {
    parallel::MaxPoolGeneralForward(e_, s, x, y, argmax);
  }
  void MaxPoolBackward(const WindowShape& s, const float* dy,
                       const int32_t* argmax, float* dx) const override {
    parallel::MaxPoolGeneralBackward(e_, s, dy, argmax, dx);
  }
  void AvgPoolForward(const WindowShape& s, const float* x,
                      float* y) const override {
    parallel::AvgPoolGeneralForward(e_, s, x, y);
  }
  void AvgPoolBackward(const WindowShape& s, const float* dy,
                       float* dx) const override {
    parallel::AvgPoolGeneralBackward(e_, s, dy, dx);
  }
  void GlobalAvgPoolForward(int batch, int pixels, int channels,
                            const float* x, float* y) const override {
    parallel::GlobalAvgPoolForward(e_, batch, pixels, channels, x, y);
  }
  void GlobalAvgPoolBackward(int batch, int pixels, int channels,
                             const float* dy, float* dx) const override {
    parallel::GlobalAvgPoolBackward(e_, batch, pixels, channels, dy, dx);
  }
  void ActivationForward(int64_t n, ActivationFn f, const float* x,
                         float* y) const override {
    parallel::ActivationForward(e_, n, f, x, y);
  }
  void ActivationGrad(int64_t n, ActivationFn f, const float* y,
                      const float* dy, float* dx) const override {
    parallel::ActivationGrad(e_, n, f, y, dy, dx);
  }
  void Copy(int64_t n, const float* x, float* y) const override {
    parallel::Copy(e_, n, x, y);
  }
  void Axpy(int64_t n, float alpha, const float* x, float* y) const override {
    parallel::Axpy(e_, n, alpha, x, y);
  }
  void Scale(int64_t n, float alpha, const float* x, float* y) const override {
    parallel::Scale(e_, n, alpha, x, y);
  }
  void Multiply(int64_t n, const float* a, const float* b, float* y) const override {
    parallel::Multiply(e_, n, a, b, y);
  }
  void CopyColumns(int64_t rows, int width, const float* src, int src_stride, float* dst,
                   int dst_stride) const override {
    parallel::CopyColumns(e_, rows, width, src, src_stride, dst, dst_stride);
  }
  void Dropout(const DropoutShape& s, const float* x, float* y) const override {
    parallel::Dropout(e_, s, x, y);
  }
  void BatchNormTraining(int64_t rows, int channels, const float* x,
                         const float* gamma, const float* beta, float epsilon,
                         float* batch_mean, float* batch_var, float* y,
                         void* workspace) const override {
    parallel::BatchNormTraining(e_, rows, channels, x, gamma, beta, epsilon,
                                batch_mean, batch_var, y, workspace);
  }
  void BatchNormInference(int64_t rows, int channels, const float* x,
                          const float* mean, const float* var,
                          const float* gamma, const float* beta, float epsilon,
                          float* y) const override {
    parallel::BatchNormInference(e_, rows, channels, x, mean, var, gamma, beta,
                                 epsilon, y);
  }
  void BatchNormBackward(int64_t rows, int channels, const float* x,
                         const float* dy, const float* mean, const float* var,
                         const float* gamma, float epsilon, float* dgamma,
                         float* dbeta, float* dx,
                         void* workspace) const override {
    parallel::BatchNormBackward(e_, rows, channels, x, dy, mean, var, gamma,
                                epsilon, dgamma, dbeta, dx, workspace);
  }
  void ActivationForwardX(int64_t n, ActivationFn f, float alpha, const float* x,
                          float* y) const override {
    parallel::ActivationForwardX(e_, n, f, alpha, x, y);
  }
  void ActivationGradXY(int64_t n, ActivationFn f, float alpha, const float* x, const float* y,
                        const float* dy, float* dx) const override {
    parallel::ActivationGradXY(e_, n, f, alpha, x, y, dy, dx);
  }
  void ZeroPad2DForward(const PaddingShape& s, const float* x, float* y) const override {
    parallel::ZeroPad2DForward(e_, s, x, y);
  }
  void ZeroPad2DBackward(const PaddingShape& s, const float* dy, float* dx) const override {
    parallel::ZeroPad2DBackward(e_, s, dy, dx);
  }
  void DepthwiseConvForward(const WindowShape& s, const float* x, const float* w,
                            const float* b, float* y) const override {
    parallel::DepthwiseConvForward(e_, s, x, w, b, y);
  }
  void DepthwiseConvBackward(const WindowShape& s, const float* x, const float* w,
                             const float* dy, float* dw, float* db, float* dx,
                             float* workspace) const override {
    parallel::DepthwiseConvBackward(e_, s, x, w, dy, dw, db, dx, workspace);
  }
  void GlobalMaxPoolForward(int batch, int pixels, int channels, const float* x, float* y,
                            float* count) const override {
    parallel::GlobalMaxPoolForward(e_, batch, pixels, channels, x, y, count);
  }
  void GlobalMaxPoolBackward(int batch, int pixels, int channels, const float* x,
                             const float* y, const float* count, const float* dy,
                             float* dx) const override {
    parallel::GlobalMaxPoolBackward(e_, batch, pixels, channels, x, y, count, dy, dx);
  }
  void LayerNormForward(int64_t rows, int channels, const float* x, const float* gamma,
                        const float* beta, float epsilon, float* mean, float* rstd,
                        float* y) const override {
    parallel::LayerNormForward(e_, rows, channels, x, gamma, beta, epsilon, mean, rstd, y);
  }
  void LayerNormBackward(int64_t rows, int channels, const float* x, const float* dy,
                         const float* mean, const float* rstd, const float* gamma, float* dgamma,
                         float* dbeta, float* dx, float* workspace) const override {
    parallel::LayerNormBackward(e_, rows, channels, x, dy, mean, rstd, gamma, dgamma, dbeta, dx,
                                workspace);
  }
  void Rescale(int64_t n, float scale, float offset, const float* x, float* y) const override {
    parallel::Rescale(e_, n, scale, offset, x, y);
  }
  void RegularizerLoss(int64_t n, float l1, float l2, const float* w, float* loss,
                       float* workspace) const override {
    parallel::RegularizerLoss(e_, n, l1, l2, w, loss, workspace);
  }
  void RegularizerGrad(int64_t n, float l1, float l2, const float* w,
                       float* dw) const override {
    parallel::RegularizerGrad(e_, n, l1, l2, w, dw);
  }
  void EmbeddingForward(int64_t count, int dim, bool padding, const float* ids, const float* table,
                        float* y) const override {
    parallel::EmbeddingForward(e_, count, dim, padding, ids, table, y);
  }
  void EmbeddingBackward(int64_t uniques, int dim, const int32_t* index, const float* dy,
                         float* dtable) const override {
    parallel::EmbeddingBackward(e_, uniques, dim, index, dy, dtable);
  }
  void Fill(int64_t n, float value, float* y) const override { parallel::Fill(e_, n, value, y); }
  void LossHead(LossKind loss, int batch, int outputs, const float* out, const float* targets,
                float grad_scale, float* grad, float* probability, double* loss_sum, int* right,
                void* workspace) const override {
    LossSpec one;  // the device graph refuses several outputs
    one.kind = loss;
    kernels::LossHead(e_, one, batch, outputs, out, targets, grad_scale, grad, probability,
                      loss_sum, right, workspace);
  }

 private:
  const Exec e_;
};

}  // namespace parallel
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_PARALLEL_GRAPH_KERNELS_H_
