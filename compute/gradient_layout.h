// Where each op's variables lie in the flat gradient and parameter vectors,
// op by op: what the gradient listener and the wait for arriving weights
// of both CPU engines (compute/cpu_network.h, compute/graph_cpu_engine.h)
// are told. Plain values: safe to share between threads.
#ifndef PSCLUSTER_COMPUTE_GRADIENT_LAYOUT_H_
#define PSCLUSTER_COMPUTE_GRADIENT_LAYOUT_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "model/model_spec.h"

namespace pscluster {

// Where a step's gradient becomes final, op by op, for sending it while
// backprop runs (compute/cpu_network.h's gradient listener): ranges[i], the
// [begin, end) ranges of op i's variables in the flat vector, and
// final_from[i], where the suffix of the gradient that holds only
// variables of ops >= i starts (the end of the variables of the ops below
// it).
//
// The same layout tells the forward pass which weights to wait for when
// they are still arriving (model/params_watermark.h): params_to[i], where
// the prefix of the flat vector that holds every variable of ops <= i ends.
struct GradientLayout {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges;
  std::vector<int64_t> final_from;
  std::vector<int64_t> params_to;
};
// `variable_offsets[i]`: the first offsets of op i's variables (-1: none);
// their sizes come from the spec.
GradientLayout PlanGradientLayout(const ModelSpec& spec,
                                  const std::vector<std::vector<int64_t>>& variable_offsets);

}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_GRADIENT_LAYOUT_H_
