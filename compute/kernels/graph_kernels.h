// The kernels the graph engine (compute/graph_device_engine.h) calls on a
// data-parallel device: convolutions and pooling with any window, stride
// and padding, DepthwiseConv2D, BatchNormalization, LayerNormalization,
// activations, Dropout, ZeroPadding2D, Rescaling, Embedding, the
// regularizers, the graph's merges, Dense and the loss head. Implemented once, over an
// executor, by parallel_graph_kernels.h: on the CUDA GPU
// (MakeGpuGraphKernels, gpu_kernels.h) or its host emulation for tests
// (MakeEmulatedGraphKernels, emulated_device.h). One interface instead of a
// template specialisation per kernel and device.
//
// Pointers are the device's memory; the work is queued on the device and
// failures are recorded in its KernelErrors, as for the fused engine's
// kernels (gpu_kernels.h). Each method's contract, and its workspace size,
// is that of the parallel:: function it calls (parallel_graph_kernels.h).
// Implementations are const and hold only their executor: as thread-safe as
// the device they queue on.
#ifndef PSCLUSTER_COMPUTE_KERNELS_GRAPH_KERNELS_H_
#define PSCLUSTER_COMPUTE_KERNELS_GRAPH_KERNELS_H_

#include <cstdint>

#include "compute/kernels/activation.h"
#include "compute/kernels/dropout.h"
#include "compute/kernels/reshaping.h"
#include "compute/kernels/window.h"
#include "model/loss.h"

namespace pscluster {
namespace kernels {

class GraphKernels {
 public:
  virtual ~GraphKernels() = default;

  virtual void ConvForward(const WindowShape& s, const float* x,
                           const float* w, const float* b, float* columns,
                           float* y) const = 0;
  virtual void ConvBackward(const WindowShape& s, const float* columns,
                            const float* w, const float* dy, float* dw,
                            float* db, float* dx, float* workspace) const = 0;
  virtual void DenseForward(int batch, int in, int out, const float* x,
                            const float* w, const float* b,
                            float* y) const = 0;
  virtual void DenseBackward(int batch, int in, int out, const float* x,
                             const float* w, const float* dy, float* dw,
                             float* db, float* dx,
                             float* workspace) const = 0;
  virtual void MaxPoolForward(const WindowShape& s, const float* x, float* y,
                              int32_t* argmax) const = 0;
  virtual void MaxPoolBackward(const WindowShape& s, const float* dy,
                               const int32_t* argmax, float* dx) const = 0;
  virtual void AvgPoolForward(const WindowShape& s, const float* x,
                              float* y) const = 0;
  virtual void AvgPoolBackward(const WindowShape& s, const float* dy,
                               float* dx) const = 0;
  virtual void GlobalAvgPoolForward(int batch, int pixels, int channels,
                                    const float* x, float* y) const = 0;
  virtual void GlobalAvgPoolBackward(int batch, int pixels, int channels,
                                     const float* dy, float* dx) const = 0;
  // y = f(x); x may equal y.
  virtual void ActivationForward(int64_t n, ActivationFn f, const float* x,
                                 float* y) const = 0;
  // dx = dy * f'(z) in terms of y = f(z); dx may equal dy.
  virtual void ActivationGrad(int64_t n, ActivationFn f, const float* y,
                              const float* dy, float* dx) const = 0;
  virtual void Copy(int64_t n, const float* x, float* y) const = 0;
  // The graph's merges: y += alpha x; y = alpha x (x may equal y);
  // y = a * b element-wise; dst[r, c] = src[r, c] for c < width, r < rows.
  virtual void Axpy(int64_t n, float alpha, const float* x, float* y) const = 0;
  virtual void Scale(int64_t n, float alpha, const float* x, float* y) const = 0;
  virtual void Multiply(int64_t n, const float* a, const float* b, float* y) const = 0;
  virtual void CopyColumns(int64_t rows, int width, const float* src, int src_stride,
                           float* dst, int dst_stride) const = 0;
  virtual void Dropout(const DropoutShape& s, const float* x,
                       float* y) const = 0;
  virtual void BatchNormTraining(int64_t rows, int channels, const float* x,
                                 const float* gamma, const float* beta,
                                 float epsilon, float* batch_mean,
                                 float* batch_var, float* y,
                                 void* workspace) const = 0;
  virtual void BatchNormInference(int64_t rows, int channels, const float* x,
                                  const float* mean, const float* var,
                                  const float* gamma, const float* beta,
                                  float epsilon, float* y) const = 0;
  virtual void BatchNormBackward(int64_t rows, int channels, const float* x,
                                 const float* dy, const float* mean,
                                 const float* var, const float* gamma,
                                 float epsilon, float* dgamma, float* dbeta,
                                 float* dx, void* workspace) const = 0;
  // The layers of modern CNNs. Every
  // ActivationFn with its alpha; the gradient from the forward's x and y.
  virtual void ActivationForwardX(int64_t n, ActivationFn f, float alpha, const float* x,
                                  float* y) const = 0;
  virtual void ActivationGradXY(int64_t n, ActivationFn f, float alpha, const float* x,
                                const float* y, const float* dy, float* dx) const = 0;
  virtual void ZeroPad2DForward(const PaddingShape& s, const float* x, float* y) const = 0;
  virtual void ZeroPad2DBackward(const PaddingShape& s, const float* dy, float* dx) const = 0;
  virtual void DepthwiseConvForward(const WindowShape& s, const float* x, const float* w,
                                    const float* b, float* y) const = 0;
  // `workspace`: DepthwiseBackwardWorkspace(s) floats; db, dx may be null.
  virtual void DepthwiseConvBackward(const WindowShape& s, const float* x, const float* w,
                                     const float* dy, float* dw, float* db, float* dx,
                                     float* workspace) const = 0;
  virtual void GlobalMaxPoolForward(int batch, int pixels, int channels, const float* x,
                                    float* y, float* count) const = 0;
  virtual void GlobalMaxPoolBackward(int batch, int pixels, int channels, const float* x,
                                     const float* y, const float* count, const float* dy,
                                     float* dx) const = 0;
  virtual void LayerNormForward(int64_t rows, int channels, const float* x, const float* gamma,
                                const float* beta, float epsilon, float* mean, float* rstd,
                                float* y) const = 0;
  // `workspace`: LayerNormBackwardWorkspace(rows, channels) floats.
  virtual void LayerNormBackward(int64_t rows, int channels, const float* x, const float* dy,
                                 const float* mean, const float* rstd, const float* gamma,
                                 float* dgamma, float* dbeta, float* dx,
                                 float* workspace) const = 0;
  virtual void Rescale(int64_t n, float scale, float offset, const float* x,
                       float* y) const = 0;
  // *loss is device memory (float); `workspace`: RegularizerLossWorkspace(n)
  // floats. RegularizerGrad adds to dw.
  virtual void RegularizerLoss(int64_t n, float l1, float l2, const float* w, float* loss,
                               float* workspace) const = 0;
  virtual void RegularizerGrad(int64_t n, float l1, float l2, const float* w,
                               float* dw) const = 0;
  // embedding.h's Embedding: y = the rows of `ids` (checked on the host,
  // IndexEmbeddingIds); backward, dtable's rows += the gradients of their
  // positions in order, `index` (device memory) laid out as
  // EmbeddingIdIndex::ints for `uniques` rows.
  virtual void EmbeddingForward(int64_t count, int dim, bool padding, const float* ids,
                                const float* table, float* y) const = 0;
  virtual void EmbeddingBackward(int64_t uniques, int dim, const int32_t* index, const float* dy,
                                 float* dtable) const = 0;
  // y[i] = value for i < n.
  virtual void Fill(int64_t n, float value, float* y) const = 0;
  // loss_head.h's LossHead: *loss_sum and *right are device memory;
  // `workspace`: LossWorkspaceBytes(batch) bytes.
  virtual void LossHead(LossKind loss, int batch, int outputs, const float* out,
                        const float* targets, float grad_scale, float* grad,
                        float* probability, double* loss_sum, int* right,
                        void* workspace) const = 0;
};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_GRAPH_KERNELS_H_
