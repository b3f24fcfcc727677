#include "compute/kernels/loss_head.h"

#include <vector>

namespace pscluster {
namespace kernels {

void CpuLossHead(const LossSpec& loss, int batch, int outputs, const float* out,
                 const float* targets, float grad_scale, float* grad, float* probability,
                 double* loss_sum, int* right) {
  std::vector<double> row_loss(batch);
  std::vector<int32_t> row_right(batch);
  const LossRowFn fn{loss,
                     outputs,
                     TargetsPerExample(loss, outputs),
                     out,
                     targets,
                     grad_scale,
                     grad,
                     probability,
                     row_loss.data(),
                     row_right.data()};
  double l = 0.0;
  int n = 0;
  for (int64_t r = 0; r < batch; ++r) {
    fn(r);
    l += row_loss[r];
    n += row_right[r];
  }
  *loss_sum = l;
  *right = n;
}

}  // namespace kernels
}  // namespace pscluster
