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
// (softmax or sigmoid; the output itself for regression and for binary
// cross-entropy on probabilities), for metrics such as AUC. With several
// outputs (loss.num_groups > 0) each group's columns are computed as a
// model of their own and the example's loss is the groups' losses times
// their weights; its right answers are the groups' summed.
struct LossRowFn {
  LossSpec loss;
  int outputs;
  int targets_per_example;  // TargetsPerExample(loss, outputs)
  const float* out;         // [batch, outputs]: logits, or regression outputs
  const float* targets;     // [batch, targets_per_example]
  float grad_scale;
  float* grad;           // [batch, outputs] or null
  float* probability;    // [batch, outputs] or null
  double* row_loss;
  int32_t* row_right;

  template <typename I>
  PSCLUSTER_HD void operator()(I r) const {
    const float* z = out + r * outputs;
    const float* t = targets + r * targets_per_example;
    float* g = grad == nullptr ? nullptr : grad + r * outputs;
    float* p = probability == nullptr ? nullptr : probability + r * outputs;
    if (loss.num_groups == 0) {
      int right = 0;
      row_loss[r] = Head(loss.kind, false, outputs, z, t, grad_scale, g, p, &right);
      row_right[r] = right;
      return;
    }
    double l = 0.0;
    int right_sum = 0;
    for (int k = 0; k < loss.num_groups; ++k) {
      const LossGroup& h = loss.groups[k];
      int right = 0;
      l += h.weight * Head(h.loss, h.probabilities, h.width, z + h.first, t + h.targets_at,
                           grad_scale * h.weight, g == nullptr ? nullptr : g + h.first,
                           p == nullptr ? nullptr : p + h.first, &right);
      right_sum += right;
    }
    row_loss[r] = l;
    row_right[r] = right_sum;
  }

  // One loss over `n` outputs z (targets t): returns the loss, sets
  // *right; gradient (times `scale`) and probabilities unless null.
  PSCLUSTER_HD static double Head(LossKind kind, bool probabilities, int n, const float* z,
                                  const float* t, float scale, float* g, float* p, int* right) {
    switch (kind) {
      case LossKind::kSparseCategoricalCrossentropy:
      case LossKind::kCategoricalCrossentropy:
        return Softmax(kind == LossKind::kSparseCategoricalCrossentropy, n, z, t, scale, g, p,
                       right);
      case LossKind::kBinaryCrossentropy:
        return probabilities ? BinaryOfProbabilities(n, z, t, scale, g, p, right)
                             : Binary(n, z, t, scale, g, p, right);
      default:
        return Regression(kind == LossKind::kMeanSquaredError, n, z, t, scale, g, p, right);
    }
  }

  PSCLUSTER_HD static double Softmax(bool sparse, int n, const float* z, const float* t,
                                     float scale, float* g, float* p, int* right) {
    int best = 0, want = sparse ? static_cast<int>(t[0]) : 0;
    double weight = sparse ? 1.0 : 0.0;  // the sum of the target weights
    for (int j = 1; j < n; ++j) {
      if (z[j] > z[best]) best = j;
      if (!sparse && t[j] > t[want]) want = j;
    }
    if (!sparse) {
      for (int j = 0; j < n; ++j) weight += t[j];
    }
    *right = best == want ? 1 : 0;
    const float zmax = z[best];
    double sum = 0.0;
    for (int j = 0; j < n; ++j) sum += ::exp(double{z[j]} - zmax);
    const double log_sum = ::log(sum);
    double l = 0.0;
    if (sparse) {
      l = log_sum - (double{z[want]} - zmax);
    } else {
      for (int j = 0; j < n; ++j) l += t[j] * (log_sum - (double{z[j]} - zmax));
    }
    for (int j = 0; j < n; ++j) {
      const double q = ::exp(double{z[j]} - zmax) / sum;
      if (p != nullptr) p[j] = static_cast<float>(q);
      if (g != nullptr) {
        const double tj = sparse ? (j == want ? 1.0 : 0.0) : t[j];
        g[j] = static_cast<float>(scale * (q * weight - tj));
      }
    }
    return l;
  }

  PSCLUSTER_HD static double Binary(int n, const float* z, const float* t, float scale, float* g,
                                    float* p, int* right) {
    double l = 0.0;
    int ok = 0;
    for (int j = 0; j < n; ++j) {
      const double x = z[j];
      const double s = x >= 0 ? 1.0 / (1.0 + ::exp(-x)) : ::exp(x) / (1.0 + ::exp(x));
      l += (x > 0 ? x : 0.0) - x * t[j] + ::log1p(::exp(-(x < 0 ? -x : x)));
      ok += (s > 0.5) == (t[j] > 0.5f) ? 1 : 0;
      if (p != nullptr) p[j] = static_cast<float>(s);
      if (g != nullptr) g[j] = static_cast<float>(scale * (s - t[j]) / n);
    }
    *right = ok;
    return l / n;
  }

  // Keras's binary cross-entropy of probabilities y: y clipped to
  // [1e-7, 1 - 1e-7] (float32's), -(t log y + (1 - t) log(1 - y)); no
  // gradient where the clip holds y.
  PSCLUSTER_HD static double BinaryOfProbabilities(int n, const float* y, const float* t,
                                                   float scale, float* g, float* p, int* right) {
    const float lo = 1e-7f, hi = 1.0f - 1e-7f;
    double l = 0.0;
    int ok = 0;
    for (int j = 0; j < n; ++j) {
      const bool inside = y[j] >= lo && y[j] <= hi;
      const double c = y[j] < lo ? lo : y[j] > hi ? hi : y[j];
      l -= t[j] * ::log(c) + (1.0 - t[j]) * ::log(1.0 - c);
      ok += (y[j] > 0.5f) == (t[j] > 0.5f) ? 1 : 0;
      if (p != nullptr) p[j] = y[j];
      if (g != nullptr) {
        const double d = inside ? (1.0 - t[j]) / (1.0 - c) - t[j] / c : 0.0;
        g[j] = static_cast<float>(scale * d / n);
      }
    }
    *right = ok;
    return l / n;
  }

  PSCLUSTER_HD static double Regression(bool squared, int n, const float* y, const float* t,
                                        float scale, float* g, float* p, int* right) {
    double l = 0.0;
    for (int j = 0; j < n; ++j) {
      const double d = double{y[j]} - t[j];
      l += squared ? d * d : (d < 0 ? -d : d);
      if (p != nullptr) p[j] = y[j];
      if (g != nullptr) {
        const double dl = squared ? 2.0 * d : (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0);
        g[j] = static_cast<float>(scale * dl / n);
      }
    }
    *right = 0;
    return l / n;
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
void LossHead(const Exec& e, const LossSpec& loss, int batch, int outputs, const float* out,
              const float* targets, float grad_scale, float* grad, float* probability,
              double* loss_sum, int* right, void* workspace) {
  const int64_t groups = parallel::SoftmaxGroups(batch);
  double* row_loss = static_cast<double*>(workspace);
  double* group_loss = row_loss + batch;
  int32_t* row_right = reinterpret_cast<int32_t*>(group_loss + groups);
  int32_t* group_right = row_right + batch;
  e.ForEach("LossRows", batch,
            LossRowFn{loss, outputs, TargetsPerExample(loss, outputs), out, targets, grad_scale,
                      grad, probability, row_loss, row_right});
  e.ForEach("LossGroupSums", groups,
            parallel::SoftmaxSumFn{batch, parallel::kSoftmaxGroup, row_loss, row_right,
                                   group_loss, group_right});
  static_assert(sizeof(int) == sizeof(int32_t), "int is 32 bits");
  e.ForEach("LossTotals", 1,
            parallel::SoftmaxSumFn{groups, groups, group_loss, group_right, loss_sum,
                                   reinterpret_cast<int32_t*>(right)});
}

// The same on the CPU, for `batch` examples of one thread's slice.
void CpuLossHead(const LossSpec& loss, int batch, int outputs, const float* out,
                 const float* targets, float grad_scale, float* grad, float* probability,
                 double* loss_sum, int* right);

// A model with one output's.
inline void CpuLossHead(LossKind kind, int batch, int outputs, const float* out,
                        const float* targets, float grad_scale, float* grad, float* probability,
                        double* loss_sum, int* right) {
  LossSpec loss;
  loss.kind = kind;
  CpuLossHead(loss, batch, outputs, out, targets, grad_scale, grad, probability, loss_sum, right);
}

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_LOSS_HEAD_H_
