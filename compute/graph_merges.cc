#include "compute/graph_merges.h"

#include <algorithm>
#include <cstdint>

#include "compute/kernels/dot.h"

namespace pscluster {

// A merge's output over `n` examples from its inputs `x`.
void ForwardMerge(const GraphOp& op, const std::vector<const float*>& x, int n, float* y) {
  const int64_t size = n * op.out_size;
  const size_t inputs = x.size();
  switch (op.kind) {
    case LayerKind::kConcatenate: {
      int width = 0, at = 0;
      for (int c : op.input_channels) width += c;
      const int64_t rows = size / width;
      for (size_t k = 0; k < inputs; ++k) {
        const int c = op.input_channels[k];
        for (int64_t r = 0; r < rows; ++r) {
          std::copy(x[k] + r * c, x[k] + (r + 1) * c, y + r * width + at);
        }
        at += c;
      }
      return;
    }
    case LayerKind::kSubtract:
      for (int64_t e = 0; e < size; ++e) y[e] = x[0][e] - x[1][e];
      return;
    case LayerKind::kDot:
      if (op.batched_dot.rows_x > 0) {
        kernels::BatchedDotForward(n, op.batched_dot, x[0], x[1], y);
      } else {
        kernels::DotForward(n, static_cast<int>(op.in_size), op.normalize, x[0], x[1], y);
      }
      return;
    case LayerKind::kMultiply:
      std::copy(x[0], x[0] + size, y);
      for (size_t k = 1; k < inputs; ++k) {
        for (int64_t e = 0; e < size; ++e) y[e] *= x[k][e];
      }
      return;
    default: {  // Add, Average: x[0] + x[1] in one pass, then the others
      if (inputs == 1) std::copy(x[0], x[0] + size, y);
      for (int64_t e = 0; inputs > 1 && e < size; ++e) y[e] = x[0][e] + x[1][e];
      for (size_t k = 2; k < inputs; ++k) {
        for (int64_t e = 0; e < size; ++e) y[e] += x[k][e];
      }
      if (op.kind == LayerKind::kAverage) {
        const float scale = 1.0f / static_cast<float>(inputs);
        for (int64_t e = 0; e < size; ++e) y[e] *= scale;
      }
      return;
    }
  }
}

// The gradient gx at a merge's input k from gy at its output.
void BackwardMerge(const GraphOp& op, const std::vector<const float*>& x, size_t k, int n,
                   const float* gy, float* gx) {
  const int64_t size = n * int64_t{op.in_size};
  switch (op.kind) {
    case LayerKind::kConcatenate: {
      int total = 0, at = 0;
      for (size_t m = 0; m < op.input_channels.size(); ++m) {
        if (m < k) at += op.input_channels[m];
        total += op.input_channels[m];
      }
      const int c = op.input_channels[k];
      const int64_t rows = n * op.out_size / total;
      for (int64_t r = 0; r < rows; ++r) {
        std::copy(gy + r * total + at, gy + r * total + at + c, gx + r * c);
      }
      return;
    }
    case LayerKind::kSubtract:
      for (int64_t e = 0; e < size; ++e) gx[e] = k == 0 ? gy[e] : -gy[e];
      return;
    case LayerKind::kDot:
      if (op.batched_dot.rows_x > 0) {
        kernels::BatchedDotBackward(n, op.batched_dot, static_cast<int>(k), x[0], x[1], gy, gx);
      } else {
        kernels::DotBackward(n, static_cast<int>(op.in_size), op.normalize, x[k], x[1 - k], gy, gx);
      }
      return;
    case LayerKind::kMultiply:
      std::copy(gy, gy + size, gx);
      for (size_t m = 0; m < x.size(); ++m) {
        if (m == k) continue;
        for (int64_t e = 0; e < size; ++e) gx[e] *= x[m][e];
      }
      return;
    case LayerKind::kAverage: {
      const float scale = 1.0f / static_cast<float>(x.size());
      for (int64_t e = 0; e < size; ++e) gx[e] = gy[e] * scale;
      return;
    }
    default:  // Add
      std::copy(gy, gy + size, gx);
      return;
  }
}

}  // namespace pscluster
