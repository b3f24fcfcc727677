// The normalization layers as data-parallel algorithms over
// parallel_kernels.h's executors: batch_norm.h's BatchNormalization (the
// batch's mean and biased variance in training, the moving statistics in
// inference) and layer_norm.h's LayerNormalization. The same code runs on
// CUDA (gpu_kernels.cu) and on the host (emulated_device.cc). Per-channel
// reductions are summed in fixed groups of rows, then the groups level by
// level in order, in double, and a LayerNormalization row functor writes
// only its own row: no atomics, the same bits every run, the CPU's to
// rounding. Workspaces are the caller's.
// Stateless templates: thread-safety is the executor's.
#ifndef PSCLUSTER_COMPUTE_KERNELS_PARALLEL_NORMALIZATION_H_
#define PSCLUSTER_COMPUTE_KERNELS_PARALLEL_NORMALIZATION_H_

#include <math.h>

#include <cstdint>

#include "compute/kernels/parallel_kernels.h"

namespace pscluster {
namespace kernels {
namespace parallel {

// ---- Element functors ------------------------------------------------------

// Rows per group of a per-channel reduction.
constexpr int64_t kChannelGroup = 256;

inline int64_t ChannelGroups(int64_t rows) {
  return (rows + kChannelGroup - 1) / kChannelGroup;
}

// Per (group g, channel c), over the group's rows r of [rows, channels]:
// out_a[g, c] = sum of x[r, c] and out_b[g, c] = sum of x[r, c]^2 (the
// batch statistics), or, with dy, sum of dy[r, c] and of dy[r, c] *
// (x[r, c] - mean[c]) * inv_std[c] (the backward's sums). In double.
struct ChannelSumsFn {
  int64_t rows;
  int channels;
  const float* x;
  const float* dy;    // null: the statistics
  const float* mean;  // with dy
  const float* var;   // with dy
  float epsilon;
  double* out_a;
  double* out_b;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const int64_t g = i / static_cast<I>(channels);
    const int64_t end =
        (g + 1) * kChannelGroup < rows ? (g + 1) * kChannelGroup : rows;
    double a = 0.0, b = 0.0;
    if (dy == nullptr) {
      for (int64_t r = g * kChannelGroup; r < end; ++r) {
        const double v = x[r * channels + c];
        a += v;
        b += v * v;
      }
    } else {
      const float inv = 1.0f / sqrtf(var[c] + epsilon);
      for (int64_t r = g * kChannelGroup; r < end; ++r) {
        const float d = dy[r * channels + c];
        a += d;
        b += static_cast<double>(d) * ((x[r * channels + c] - mean[c]) * inv);
      }
    }
    out_a[i] = a;
    out_b[i] = b;
  }
};

// Per channel: the groups' sums in order. With `statistics`, mean[c] and
// the biased variance var[c] (floats) from the sums of x and x^2 over
// `rows`; else sum_a[c], sum_b[c] (double) and, where not null, dgamma =
// sum_b and dbeta = sum_a as floats. One call per channel.
struct ChannelTotalsFn {
  int64_t groups;
  int channels;
  double rows;
  bool statistics;
  const double* part_a;
  const double* part_b;
  float* mean;     // statistics
  float* var;      // statistics
  double* sum_a;   // gradient sums
  double* sum_b;   // gradient sums
  float* dgamma;   // may be null
  float* dbeta;    // may be null
  template <typename I>
  PSCLUSTER_HD void operator()(I c) const {
    double a = 0.0, b = 0.0;
    for (int64_t g = 0; g < groups; ++g) {
      a += part_a[g * channels + c];
      b += part_b[g * channels + c];
    }
    if (statistics) {
      const double m = a / rows;
      const double v = b / rows - m * m;
      mean[c] = static_cast<float>(m);
      var[c] = static_cast<float>(v > 0.0 ? v : 0.0);
    } else {
      sum_a[c] = a;
      sum_b[c] = b;
      if (dgamma != nullptr) dgamma[c] = static_cast<float>(b);
      if (dbeta != nullptr) dbeta[c] = static_cast<float>(a);
    }
  }
};

// Per-group partial sums, fewer groups: out_a[h, c] = the sum of in_a[g, c]
// over g in [h * 64, min(groups, (h + 1) * 64)), in order, and the same for
// b (in double). One call per (h, c), c fastest. A channel's thousands of
// groups are summed by many threads, a level at a time, rather than by one
// (which took a third of a batch-8192 vgg_fashion step on an H100). 64
// (kSumFan) groups per call.
struct GroupSumsFn {
  int64_t groups;
  int channels;
  const double* in_a;
  const double* in_b;
  double* out_a;
  double* out_b;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const int64_t h = i / static_cast<I>(channels);
    const int64_t end = (h + 1) * kSumFan < groups ? (h + 1) * kSumFan : groups;
    double a = 0.0, b = 0.0;
    for (int64_t g = h * kSumFan; g < end; ++g) {
      a += in_a[g * channels + c];
      b += in_b[g * channels + c];
    }
    out_a[i] = a;
    out_b[i] = b;
  }
};

// y = gamma * (x - mean) / sqrt(var + eps) + beta, computed as x * a + b
// like the CPU kernel. y may equal x.
struct BatchNormForwardFn {
  int channels;
  const float* x;
  const float* mean;
  const float* var;
  const float* gamma;  // may be null: 1
  const float* beta;   // may be null: 0
  float epsilon;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const float inv = 1.0f / sqrtf(var[c] + epsilon);
    const float a = (gamma != nullptr ? gamma[c] : 1.0f) * inv;
    const float b = (beta != nullptr ? beta[c] : 0.0f) - mean[c] * a;
    y[i] = x[i] * a + b;
  }
};

// BatchNormBackwardInput<CpuDevice>'s formula, per element.
struct BatchNormBackwardInputFn {
  int channels;
  const float* x;
  const float* dy;
  const float* mean;
  const float* var;
  const float* gamma;  // may be null
  float epsilon;
  const double* sum_dy;
  const double* sum_dy_xhat;
  double inv_n;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const float inv = 1.0f / sqrtf(var[c] + epsilon);
    const float xhat = (x[i] - mean[c]) * inv;
    const float scale = (gamma != nullptr ? gamma[c] : 1.0f) * inv;
    dx[i] = scale * (dy[i] - static_cast<float>(sum_dy[c] * inv_n) -
                     xhat * static_cast<float>(sum_dy_xhat[c] * inv_n));
  }
};

// A row's mean and 1 / sqrt(biased variance + epsilon), in double as the
// CPU's. One call per row.
struct LayerNormStatsFn {
  int channels;
  float epsilon;
  const float* x;
  float* mean;
  float* rstd;
  template <typename I>
  PSCLUSTER_HD void operator()(I r) const {
    const float* in = x + static_cast<int64_t>(r) * channels;
    double sum = 0.0;
    for (int k = 0; k < channels; ++k) sum += in[k];
    const double m = sum / channels;
    double sq = 0.0;
    for (int k = 0; k < channels; ++k) sq += (in[k] - m) * (in[k] - m);
    mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(1.0 / sqrt(sq / channels + epsilon));
  }
};

// y = (x - mean) rstd gamma + beta (gamma, beta may be null). Per element.
struct LayerNormApplyFn {
  int channels;
  const float* x;
  const float* mean;
  const float* rstd;
  const float* gamma;
  const float* beta;
  float* y;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int c = static_cast<int>(i % static_cast<I>(channels));
    const int64_t r = i / static_cast<I>(channels);
    const float xhat = (x[i] - mean[r]) * rstd[r];
    y[i] = xhat * (gamma != nullptr ? gamma[c] : 1.0f) + (beta != nullptr ? beta[c] : 0.0f);
  }
};

// t = dy * xhat, the summands of dgamma. Per element.
struct LayerNormGammaTermsFn {
  int channels;
  const float* x;
  const float* dy;
  const float* mean;
  const float* rstd;
  float* t;
  template <typename I>
  PSCLUSTER_HD void operator()(I i) const {
    const int64_t r = i / static_cast<I>(channels);
    t[i] = dy[i] * ((x[i] - mean[r]) * rstd[r]);
  }
};

// dx of one row: rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma,
// the row's sums in double. One call per row; writes that row of dx.
struct LayerNormBackwardRowFn {
  int channels;
  const float* x;
  const float* dy;
  const float* mean;
  const float* rstd;
  const float* gamma;
  float* dx;
  template <typename I>
  PSCLUSTER_HD void operator()(I r) const {
    const int64_t base = static_cast<int64_t>(r) * channels;
    const float m = mean[r], inv = rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int k = 0; k < channels; ++k) {
      const float g = dy[base + k] * (gamma != nullptr ? gamma[k] : 1.0f);
      sum_g += g;
      sum_gx += static_cast<double>(g) * ((x[base + k] - m) * inv);
    }
    const float mean_g = static_cast<float>(sum_g / channels);
    const float mean_gx = static_cast<float>(sum_gx / channels);
    for (int k = 0; k < channels; ++k) {
      const float g = dy[base + k] * (gamma != nullptr ? gamma[k] : 1.0f);
      dx[base + k] = inv * (g - mean_g - ((x[base + k] - m) * inv) * mean_gx);
    }
  }
};

// ---- Layer algorithms ------------------------------------------------------

// Bytes of workspace of the batch-normalization passes over `rows` rows:
// the groups' partial sums, the per-channel totals, then the levels of
// partial sums (double).
inline int64_t BatchNormWorkspaceBytes(int64_t rows, int channels) {
  const int64_t groups = ChannelGroups(rows);
  return (2 * groups + 2 + 2 * PartialSumsSize(groups)) * channels *
         static_cast<int64_t>(sizeof(double));
}

inline int64_t LayerNormBackwardWorkspace(int64_t rows, int channels) {
  return rows * channels + BiasGradWorkspace(rows, channels);
}

// Sums [groups, channels] partial pairs (*a, *b) level by level into
// `scratch` (2 * PartialSumsSize(groups) * channels doubles) until at most
// kSumFan groups are left; points *a and *b at them and returns how many.
template <typename Exec>
int64_t ReduceGroups(const Exec& e, int64_t groups, int channels,
                     const double** a, const double** b, double* scratch) {
  while (groups > kSumFan) {
    const int64_t fewer = (groups + kSumFan - 1) / kSumFan;
    double* out_a = scratch;
    double* out_b = scratch + fewer * channels;
    e.ForEach("BatchNormGroupSums", fewer * channels,
              GroupSumsFn{groups, channels, *a, *b, out_a, out_b});
    *a = out_a;
    *b = out_b;
    scratch = out_b + fewer * channels;
    groups = fewer;
  }
  return groups;
}

// Training-mode batch normalization over [rows, channels]: the batch's
// mean and biased variance into batch_mean / batch_var (device floats),
// then y (may equal x). `workspace`: BatchNormWorkspaceBytes bytes.
template <typename Exec>
void BatchNormTraining(const Exec& e, int64_t rows, int channels,
                       const float* x, const float* gamma, const float* beta,
                       float epsilon, float* batch_mean, float* batch_var,
                       float* y, void* workspace) {
  const int64_t groups = ChannelGroups(rows);
  double* part_a = static_cast<double*>(workspace);
  double* part_b = part_a + groups * channels;
  double* scratch = part_b + groups * channels + 2 * channels;
  e.ForEach("BatchNormSums", groups * channels,
            ChannelSumsFn{rows, channels, x, nullptr, nullptr, nullptr, 0.0f,
                          part_a, part_b});
  const double* a = part_a;
  const double* b = part_b;
  const int64_t left = ReduceGroups(e, groups, channels, &a, &b, scratch);
  e.ForEach("BatchNormStatistics", channels,
            ChannelTotalsFn{left, channels, static_cast<double>(rows), true, a,
                            b, batch_mean, batch_var, nullptr, nullptr, nullptr,
                            nullptr});
  e.ForEach("BatchNorm", rows * channels,
            BatchNormForwardFn{channels, x, batch_mean, batch_var, gamma, beta,
                               epsilon, y});
}

// Inference-mode batch normalization with the given (moving) statistics.
template <typename Exec>
void BatchNormInference(const Exec& e, int64_t rows, int channels,
                        const float* x, const float* mean, const float* var,
                        const float* gamma, const float* beta, float epsilon,
                        float* y) {
  e.ForEach("BatchNorm", rows * channels,
            BatchNormForwardFn{channels, x, mean, var, gamma, beta, epsilon,
                               y});
}

// The training-mode backward: dgamma and dbeta (either may be null), and dx
// when not null, from the forward's input x and its batch statistics.
template <typename Exec>
void BatchNormBackward(const Exec& e, int64_t rows, int channels,
                       const float* x, const float* dy, const float* mean,
                       const float* var, const float* gamma, float epsilon,
                       float* dgamma, float* dbeta, float* dx,
                       void* workspace) {
  const int64_t groups = ChannelGroups(rows);
  double* part_a = static_cast<double*>(workspace);
  double* part_b = part_a + groups * channels;
  double* sum_dy = part_b + groups * channels;
  double* sum_dy_xhat = sum_dy + channels;
  double* scratch = sum_dy_xhat + channels;
  e.ForEach("BatchNormGradSums", groups * channels,
            ChannelSumsFn{rows, channels, x, dy, mean, var, epsilon, part_a,
                          part_b});
  const double* a = part_a;
  const double* b = part_b;
  const int64_t left = ReduceGroups(e, groups, channels, &a, &b, scratch);
  e.ForEach("BatchNormGradTotals", channels,
            ChannelTotalsFn{left, channels, static_cast<double>(rows), false,
                            a, b, nullptr, nullptr, sum_dy, sum_dy_xhat,
                            dgamma, dbeta});
  if (dx != nullptr) {
    e.ForEach("BatchNormBackwardInput", rows * channels,
              BatchNormBackwardInputFn{channels, x, dy, mean, var, gamma,
                                       epsilon, sum_dy, sum_dy_xhat,
                                       1.0 / static_cast<double>(rows), dx});
  }
}

template <typename Exec>
void LayerNormForward(const Exec& e, int64_t rows, int channels, const float* x, const float* gamma,
                      const float* beta, float epsilon, float* mean, float* rstd, float* y) {
  e.ForEach("LayerNormStats", rows, LayerNormStatsFn{channels, epsilon, x, mean, rstd});
  e.ForEach("LayerNorm", rows * channels,
            LayerNormApplyFn{channels, x, mean, rstd, gamma, beta, y});
}

// `workspace`: LayerNormBackwardWorkspace(rows, channels) floats.
template <typename Exec>
void LayerNormBackward(const Exec& e, int64_t rows, int channels, const float* x, const float* dy,
                       const float* mean, const float* rstd, const float* gamma, float* dgamma,
                       float* dbeta, float* dx, float* workspace) {
  float* terms = workspace;
  float* sums = workspace + rows * channels;
  if (dgamma != nullptr) {
    e.ForEach("LayerNormGammaTerms", rows * channels,
              LayerNormGammaTermsFn{channels, x, dy, mean, rstd, terms});
    BiasGrad(e, rows, channels, terms, false, dgamma, sums);
  }
  if (dbeta != nullptr) BiasGrad(e, rows, channels, dy, false, dbeta, sums);
  if (dx != nullptr) {
    e.ForEach("LayerNormBackwardInput", rows,
              LayerNormBackwardRowFn{channels, x, dy, mean, rstd, gamma, dx});
  }
}

}  // namespace parallel
}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_PARALLEL_NORMALIZATION_H_
