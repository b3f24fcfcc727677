// The CPU graph engine's merges (compute/graph_cpu_engine.h): Add,
// Subtract, Multiply, Average, Concatenate (on the channels, or an
// example's steps) and Dot (of flat vectors, or of sequences), forward and
// each input's gradient, over one thread's slice of examples. Stateless.
#ifndef PSCLUSTER_COMPUTE_GRAPH_MERGES_H_
#define PSCLUSTER_COMPUTE_GRAPH_MERGES_H_

#include <cstddef>
#include <vector>

#include "compute/graph_plan.h"

namespace pscluster {

// Merge op `op`'s output over `n` examples from its inputs `x`.
void ForwardMerge(const GraphOp& op, const std::vector<const float*>& x, int n, float* y);

// The gradient gx at merge op `op`'s input k from gy at its output.
void BackwardMerge(const GraphOp& op, const std::vector<const float*>& x, size_t k, int n,
                   const float* gy, float* gx);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_GRAPH_MERGES_H_
