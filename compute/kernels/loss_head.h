// The loss head of every model: per example, the loss model/model_spec.h's
// LossKind names, its gradient at the model's output and what the metrics
// need, written once for the CPU and the data-parallel device
// (parallel_kernels.h's executors): LossRowFn computes one example and
// writes only its own outputs, and the sums over the batch are taken in
// example order (in double), so a result does not depend on the device or
// the thread count beyond float rounding of the outputs themselves.
//
// Targets are floats, TargetsPerExample(loss, outputs) per example: a class
// index for sparse categorical cross-entropy (exact below 2^24 classes),
// else one value per output.
#ifndef PSCLUSTER_COMPUTE_KERNELS_LOSS_HEAD_H_
#define PSCLUSTER_COMPUTE_KERNELS_LOSS_HEAD_H_

#include <math.h>

#include <cstdint>

#include "compute/kernels/parallel_kernels.h"
#include "model/loss.h"

namespace pscluster {
namespace kernels {

// Example r of a batch: its loss, its count of right answers (classification:
// 1 when the first largest output is the target class; binary: outputs on
// the right side of 0.5; regression: 0), and, unless `grad` is null, its row
// of the gradient of grad_scale * loss at the outputs. `probability`, when
// not null, gets the example's predicted probability of each output
// (softmax or sigmoid; the output itself for regression), for metrics such
// as AUC.
struct LossRowFn {
  LossKind loss;
  int outputs;
  const float* out;      // [batch, outputs]: logits, or regression outputs
  const float* targets;  // [batch, TargetsPerExample]
  float grad_scale;
  float* grad;           // [batch, outputs] or null
  float* probability;    // [batch, outputs] or null
  double* row_loss;
  int32_t* row_right;

  template <typename I>
  PSCLUSTER_HD void operator()(I r) const {
    const float* z = out + r * outputs;
    float* g = grad == nullptr ? nullptr : grad + r * outputs;
    float* p = probability == nullptr ? nullptr : probability + r * outputs;
    switch (loss) {
      case LossKind::kSparseCategoricalCrossentropy:
      case LossKind::kCategoricalCrossentropy:
        Softmax(r, z, g, p);
        return;
      case LossKind::kBinaryCrossentropy:
        Binary(r, z, g, p);
        return;
      default:
        Regression(r, z, g, p);
        return;
    }
  }

  template <typename I>
  PSCLUSTER_HD void Softmax(I r, const float* z, float* g, float* p) const {
    const bool sparse = loss == LossKind::kSparseCategoricalCrossentropy;
    const float* t = targets + r * (sparse ? 1 : outputs);
    int best = 0, want = sparse ? static_cast<int>(t[0]) : 0;
    double weight = sparse ? 1.0 : 0.0;  // the sum of the target weights
    for (int j = 1; j < outputs; ++j) {
      if (z[j] > z[best]) best = j;
      if (!sparse && t[j] > t[want]) want = j;
    }
    if (!sparse) {
      for (int j = 0; j < outputs; ++j) weight += t[j];
    }
    row_right[r] = best == want ? 1 : 0;
    const float zmax = z[best];
    double sum = 0.0;
    for (int j = 0; j < outputs; ++j) sum += ::exp(double{z[j]} - zmax);
    const double log_sum = ::log(sum);
    double l = 0.0;
    if (sparse) {
      l = log_sum - (double{z[want]} - zmax);
    } else {
      for (int j = 0; j < outputs; ++j) l += t[j] * (log_sum - (double{z[j]} - zmax));
    }
    row_loss[r] = l;
    for (int j = 0; j < outputs; ++j) {
      const double q = ::exp(double{z[j]} - zmax) / sum;
      if (p != nullptr) p[j] = static_cast<float>(q);
      if (g != nullptr) {
        const double tj = sparse ? (j == want ? 1.0 : 0.0) : t[j];
        g[j] = static_cast<float>(grad_scale * (q * weight - tj));
      }
    }
  }

  template <typename I>
  PSCLUSTER_HD void Binary(I r, const float* z, float* g, float* p) const {
    const float* t = targets + r * outputs;
    double l = 0.0;
    int right = 0;
    for (int j = 0; j < outputs; ++j) {
      const double x = z[j];
      const double s = x >= 0 ? 1.0 / (1.0 + ::exp(-x)) : ::exp(x) / (1.0 + ::exp(x));
      l += (x > 0 ? x : 0.0) - x * t[j] + ::log1p(::exp(-(x < 0 ? -x : x)));
      right += (s > 0.5) == (t[j] > 0.5f) ? 1 : 0;
      if (p != nullptr) p[j] = static_cast<float>(s);
      if (g != nullptr) g[j] = static_cast<float>(grad_scale * (s - t[j]) / outputs);
    }
    row_loss[r] = l / outputs;
    row_right[r] = right;
  }

  template <typename I>
  PSCLUSTER_HD void Regression(I r, const float* y, float* g, float* p) const {
    const float* t = targets + r * outputs;
    const bool squared = loss == LossKind::kMeanSquaredError;
    double l = 0.0;
    for (int j = 0; j < outputs; ++j) {
      const double d = double{y[j]} - t[j];
      l += squared ? d * d : (d < 0 ? -d : d);
      if (p != nullptr) p[j] = y[j];
      if (g != nullptr) {
        const double dl = squared ? 2.0 * d : (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0);
        g[j] = static_cast<float>(grad_scale * dl / outputs);
      }
    }
    row_loss[r] = l / outputs;
    row_right[r] = 0;
  }
};

// Bytes of workspace LossHead needs on a device: per-example and per-group
// losses (double) and counts (int32), as SoftmaxWorkspaceBytes.
inline int64_t LossWorkspaceBytes(int batch) {
  return parallel::SoftmaxWorkspaceBytes(batch);
}

// The loss head over a batch on executor `e`: *loss_sum = the sum of the
// examples' losses, *right = the sum of their right answers (both in the
// executor's memory), `grad` and `probability` as LossRowFn. `workspace`:
// LossWorkspaceBytes(batch) bytes, aligned for double.
template <typename Exec>
void LossHead(const Exec& e, LossKind loss, int batch, int outputs, const float* out,
              const float* targets, float grad_scale, float* grad, float* probability,
              double* loss_sum, int* right, void* workspace) {
  const int64_t groups = parallel::SoftmaxGroups(batch);
  double* row_loss = static_cast<double*>(workspace);
  double* group_loss = row_loss + batch;
  int32_t* row_right = reinterpret_cast<int32_t*>(group_loss + groups);
  int32_t* group_right = row_right + batch;
  e.ForEach("LossRows", batch,
            LossRowFn{loss, outputs, out, targets, grad_scale, grad, probability, row_loss,
                      row_right});
  e.ForEach("LossGroupSums", groups,
            parallel::SoftmaxSumFn{batch, parallel::kSoftmaxGroup, row_loss, row_right,
                                   group_loss, group_right});
  static_assert(sizeof(int) == sizeof(int32_t), "int is 32 bits");
  e.ForEach("LossTotals", 1,
            parallel::SoftmaxSumFn{groups, groups, group_loss, group_right, loss_sum,
                                   reinterpret_cast<int32_t*>(right)});
}

// The same on the CPU, for `batch` examples of one thread's slice.
void CpuLossHead(LossKind loss, int batch, int outputs, const float* out, const float* targets,
                 float grad_scale, float* grad, float* probability, double* loss_sum,
                 int* right);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_LOSS_HEAD_H_
