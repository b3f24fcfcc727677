#include "compute/kernels/softmax_xent.h"

#include <cmath>

namespace pscluster {
namespace kernels {

void SoftmaxCrossEntropy<CpuDevice>::operator()(
    const CpuDevice&, int batch, int classes, const float* logits,
    const float* labels, float grad_scale, float* dlogits, double* loss_sum,
    int* correct) const {
  double total = 0.0;
  int right = 0;
  for (int r = 0; r < batch; ++r) {
    const float* z = logits + static_cast<int64_t>(r) * classes;
    const int label = static_cast<int>(labels[r]);
    int best = 0;
    for (int j = 1; j < classes; ++j) {
      if (z[j] > z[best]) best = j;
    }
    if (best == label) ++right;
    // Shifted by the max so exp() cannot overflow.
    const float zmax = z[best];
    double sum = 0.0;
    for (int j = 0; j < classes; ++j) sum += std::exp(double{z[j]} - zmax);
    total += std::log(sum) - (double{z[label]} - zmax);
    if (dlogits != nullptr) {
      float* g = dlogits + static_cast<int64_t>(r) * classes;
      const double inv = 1.0 / sum;
      for (int j = 0; j < classes; ++j) {
        const double p = std::exp(double{z[j]} - zmax) * inv;
        g[j] = static_cast<float>(grad_scale * (p - (j == label ? 1.0 : 0.0)));
      }
    }
  }
  *loss_sum = total;
  *correct = right;
}

}  // namespace kernels
}  // namespace pscluster
