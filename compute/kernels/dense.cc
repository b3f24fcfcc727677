#include "compute/kernels/dense.h"

#include "compute/kernels/bias_activation.h"
#include "compute/kernels/cpu_blas.h"

namespace pscluster {
namespace kernels {

void DenseForward<CpuDevice>::operator()(const CpuDevice& d,
                                         const DenseShape& s, const float* x,
                                         const float* w, const float* b,
                                         bool relu, float* y) const {
  CpuGemm(false, false, s.batch, s.out, s.in, 1.0f, x, s.in, w, s.out, 0.0f, y,
          s.out);
  BiasActivationForward<CpuDevice>()(d, s.batch, s.out, b, relu, y);
}

void DenseBackward<CpuDevice>::operator()(const CpuDevice& d,
                                          const DenseShape& s, const float* x,
                                          const float* w, const float* dy,
                                          bool accumulate, float* dw, float* db,
                                          float* dx) const {
  // dw[in, out] (+)= x^T[in, batch] * dy[batch, out].
  CpuGemm(true, false, s.in, s.out, s.batch, 1.0f, x, s.in, dy, s.out,
          accumulate ? 1.0f : 0.0f, dw, s.out);
  BiasGrad<CpuDevice>()(d, s.batch, s.out, dy, accumulate, db);
  if (dx != nullptr) {
    // dx[batch, in] = dy[batch, out] * w^T[out, in].
    CpuGemm(false, true, s.batch, s.in, s.out, 1.0f, dy, s.out, w, s.out, 0.0f,
            dx, s.in);
  }
}

}  // namespace kernels
}  // namespace pscluster
